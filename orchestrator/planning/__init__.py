"""The pure rollout planner: which clusters each stage takes, in which order, how many at once
(`planner`), and the one sizing rule of a stage the Workflow builder uses too (`sizing`).

May import: `orchestrator.core`, `orchestrator.api`, `orchestrator.argocd` (its views, never a client).
"""
