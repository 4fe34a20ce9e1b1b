"""Argo CD as progressive-sync sees it: typed views of clusters, Applications and
ApplicationSets (`fleet`), the sync operation we write (`appsync`), the pure health decisions
(`assess`) and following a few Applications (`appwatch`).

May import: `orchestrator.core`, `orchestrator.api`, `orchestrator.kube`.
"""
