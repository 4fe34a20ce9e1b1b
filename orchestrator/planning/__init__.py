"""The pure rollout planner: which clusters each stage takes, in which order, how many at once.

May import: `orchestrator.core`, `orchestrator.api`, `orchestrator.argocd` (its views, never a client).
"""
