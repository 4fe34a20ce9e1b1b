"""The watcher: turns ProgressiveSyncs into rollout Workflows and follows them.

`loop` wires informers → work queue → decision → actions (it decides nothing itself); `decide` is
the pure decision, which also builds the Workflow a rollout creates;
`workqueue` de-duplicates keys with rate-limited retries; `settings` is its one typed configuration.

May import: everything below it (`core`, `api`, `kube`, `argocd`, `planning`, `workflows`,
`workflow_templates`, and `engine` for `--engine local`). Never `ops`, `devenv` or `cli`.
"""
