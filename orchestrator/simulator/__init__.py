"""The fleet simulator: plays Argo CD's application controller against the API server,
for the demo and the fast test tier.

May import: `orchestrator.core`, `orchestrator.api`, `orchestrator.kube`, `orchestrator.argocd`.
"""
