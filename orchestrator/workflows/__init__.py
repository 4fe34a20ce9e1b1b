"""Argo Workflows as progressive-sync sees it: the vocabulary of phases and node types
(`phases`), the small view of a rollout Workflow the watcher and the operator commands read
(`view`), and the Workflow writes of `argo stop` and of the watcher's suspend and resume (`control`).

May import: `orchestrator.core`, `orchestrator.api`, `orchestrator.kube`, `workflow_templates`.
"""
