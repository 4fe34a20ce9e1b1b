"""The watcher: turns ProgressiveSyncs into rollout Workflows and follows them.

`loop` wires informers → work queue → decision → actions; `decide` is the pure decision;
`workqueue` de-duplicates keys with rate-limited retries; `settings` is its one typed configuration.

May import: everything below it (`core`, `api`, `kube`, `argocd`, `planning`, `workflows`,
`workflow_templates`, and `engine` for `--engine local`). Never `ops`, `devenv` or `cli`.
"""
