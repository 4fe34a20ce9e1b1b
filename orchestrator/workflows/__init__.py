"""Argo Workflows as progressive-sync sees it: the vocabulary of phases and node types
(`phases`), the small view of a rollout Workflow the watcher and the operator commands read
(`view`), and what `argo stop`/`terminate`/`suspend`/`resume` do (`control`).

May import: `orchestrator.core`, `orchestrator.api`, `orchestrator.kube`, `workflow_templates`.
"""
