"""The watcher: turns ProgressiveSyncs into rollout Workflows and follows them.

One reconcile is `observe` → `decide` → `act`:

- `loop`: the `Watcher`: threads, work queue, resync and the wiring below (it decides nothing);
- `caches`: the informers, the slim values they keep and the lookups over them;
- `triggers`: which ProgressiveSyncs a change concerns (the keys to queue);
- `holdback`: which ProgressiveSyncs wait while an informer they need waits on a permission or a CRD;
- `observe`: everything `decide` needs about one ProgressiveSync, from the caches;
- `decide`: the pure decision, which also builds the Workflow a rollout creates;
- `act`: the decision's actions carried out through the adapter (Workflows, status, Events);
- `summaries`: the live summary of running stages (which to write, when), pure, written by `act`;
- `workqueue`, `settings`, `transitions`, `metrics`, `publisher`, `leader`, `endpoints`, `process`:
  the de-duplicating queue, the one typed configuration, status changes as Events and metrics, the
  Prometheus metrics, the cluster inventory, the Lease, the HTTP endpoints, the whole process.

Inside, `process` > `loop` > `act | observe | triggers | holdback` > `caches` > `decide |
summaries`, and `observe`, `decide` and `summaries` never call the adapter (the import contracts
in pyproject.toml).

May import: everything below it (`core`, `api`, `kube`, `argocd`, `planning`, `workflows`,
`workflow_templates`, and `engine` for `--engine local`). Never `ops`, `devenv` or `cli`.
"""
