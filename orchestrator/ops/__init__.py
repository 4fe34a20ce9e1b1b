"""The operator commands (`status`, `cancel`, `pause`, `unpause`, `approve`, `retry`): what they
read and show (`view`: a ProgressiveSync, its Workflow and its records as rows and data, pure), what
they decide (`decisions`: the cancel, pause, unpause, approve and retry rules, pure), how the view
is drawn with rich (`tables`, and `live` for a rollout followed as it happens) and the API side
that reads, decides and writes once (`actions`). The import contract in pyproject.toml keeps
`view` at the bottom and `view` and `decisions` off the adapter.

May import: everything below it, the watcher's pure decision included. Never `devenv` or `cli`.
"""
