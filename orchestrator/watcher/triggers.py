"""Triggers: which ProgressiveSyncs a change to a watched object concerns (their work-queue keys).

- a ProgressiveSync → itself, and the others naming the same ApplicationSet before or after the
  change (ownership of an ApplicationSet can move when one comes, goes or changes its ref);
- a Workflow → its `progressivesync.io/name` label;
- an ApplicationSet → the ProgressiveSyncs naming it;
- an Application → the ProgressiveSyncs naming its ApplicationSet owners (before and after);
- a cluster Secret → every ProgressiveSync of that Argo CD namespace;
- a ProgressiveSyncStage record → its ProgressiveSync (`spec.progressiveSync`: the live summary).

Each function only reads the caches; the loop queues the keys.

Callers: `orchestrator.watcher.loop` (its informer handlers).
"""

from __future__ import annotations

from orchestrator.argocd.fleet import AppSetView, AppView, Cluster
from orchestrator.kube.informer import Change
from orchestrator.watcher.caches import CachedPS, CachedRecord, Caches, Key, app_owner_names
from orchestrator.watcher.settings import Settings
from orchestrator.workflows.view import WorkflowView


def progressive_sync_keys(change: Change[CachedPS], caches: Caches) -> list[Key]:
    """The ProgressiveSync itself first, then the others sharing its ApplicationSet (old or new ref)."""
    ps = change.current
    if ps is None:
        return []
    keys = [ps.key]
    appsets = {p.app_set_key for p in (change.old, change.new) if p is not None}
    for appset in appsets:
        keys.extend(other.key for other in caches.ps_by_appset(appset) if other.key != ps.key)
    return keys


def workflow_keys(change: Change[WorkflowView]) -> list[Key]:
    """The ProgressiveSync named by the Workflow's label."""
    wf = change.current
    return [(wf.namespace, wf.ps_name)] if wf is not None and wf.ps_name else []


def appset_keys(change: Change[AppSetView], caches: Caches) -> list[Key]:
    """The ProgressiveSyncs naming the ApplicationSet."""
    appset = change.current
    if appset is None:
        return []
    return [ps.key for ps in caches.ps_by_appset(f"{appset.namespace}/{appset.name}")]


def app_keys(change: Change[AppView], caches: Caches) -> list[Key]:
    """The ProgressiveSyncs naming an ApplicationSet that owns the Application, before or after."""
    owners: set[str] = set()
    for app in (change.old, change.new):
        if app is not None:
            owners.update(app_owner_names(app))
    namespace = change.key[0]
    return [ps.key for owner in owners for ps in caches.ps_by_appset(f"{namespace}/{owner}")]


def cluster_keys(change: Change[Cluster], caches: Caches, settings: Settings) -> list[Key]:
    """Every ProgressiveSync whose Argo CD namespace is the cluster Secret's."""
    namespace = change.key[0]
    return [
        ps.key for ps in caches.progressive_syncs() if settings.argocd_namespace_for(ps.key[0]) == namespace
    ]


def record_keys(change: Change[CachedRecord]) -> list[Key]:
    """The ProgressiveSync a record belongs to (same namespace)."""
    record = change.current
    return [(record.namespace, record.progressive_sync)] if record is not None else []
