"""The operator commands (`status`, `cancel`, `pause`, `resume`, `approve`, `retry`): pure
decisions and views (`decisions`), how they are drawn with rich (`tables`, and `live` for a
rollout followed as it happens) and the API side that reads, decides and writes once (`actions`).

May import: everything below it, the watcher's pure decision included. Never `devenv` or `cli`.
"""
