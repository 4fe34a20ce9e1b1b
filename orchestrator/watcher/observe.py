"""Observe: everything `decide` needs about one ProgressiveSync, gathered from the watcher's caches.

`observe(cached, caches, settings, now) -> Observed` parses the spec and status (a spec that does not
parse becomes `spec_error`, a status that does not parse reads as empty), finds the ApplicationSet,
the Workflows (`Caches.workflows_of` reads the one the status names when the cache lacks it: the only
request), the operations of its Applications that carry a rollout id and have not ended
(`syncs_in_flight`), who owns the ApplicationSet when several ProgressiveSyncs name it, a cycle of
`spec.dependsOn` through it over the cached ProgressiveSyncs (`dependency_cycle`), and — only
when no Workflow is live and the object is not being deleted — the rollout plan (`plan_rollout`,
pure) and the Applications it was made from (whose comparison `decide` may wait for); with a release
due and analysis in the spec, what would stop a stage's analysis (`analysis_blocker`: its templates
read through `Caches.analysis_template`, a template that cannot be read is left to the step).
It decides nothing and writes nothing; the time is passed in.

Callers: `orchestrator.watcher.loop` (one reconcile: observe → decide → act).
"""

from __future__ import annotations

import logging
from datetime import datetime

import pydantic

from orchestrator.analysis.check import AnalysisBlocker, analysis_blocker, has_analysis
from orchestrator.api.depends import find_cycle
from orchestrator.api.metadata import FINALIZER, RETRY_ANNOTATION, rollout_workflow_name
from orchestrator.api.models import ProgressiveSync, ProgressiveSyncSpec, ProgressiveSyncStatus
from orchestrator.argocd.fleet import AppSetView, AppView
from orchestrator.core.clock import parse_time
from orchestrator.planning.planner import RolloutPlan, plan_rollout
from orchestrator.watcher.caches import CachedPS, Caches, TemplateUnreadable
from orchestrator.watcher.decision import Observed, live_workflows, syncs_in_flight
from orchestrator.watcher.settings import Settings

log = logging.getLogger(__name__)


def observe(cached: CachedPS, caches: Caches, settings: Settings, now: datetime) -> Observed:
    """Everything `decide` needs about one ProgressiveSync, from the caches (and one read at most)."""
    obj = cached.obj
    namespace, name = cached.key
    meta = obj.get("metadata") or {}
    spec: ProgressiveSyncSpec | None = None
    spec_error = ""
    try:
        spec = ProgressiveSync.model_validate(obj).spec
    except pydantic.ValidationError as exc:
        spec_error = short_validation_error(exc)
    try:
        status = ProgressiveSyncStatus.model_validate(obj.get("status") or {})
    except pydantic.ValidationError as exc:
        log.warning("%s/%s: status does not parse (%s); reading it as empty", namespace, name, exc)
        status = ProgressiveSyncStatus()
    argocd_namespace = settings.argocd_namespace_for(namespace)
    appset_namespace = cached.app_set_namespace
    appset_watched = caches.reads_appsets_in(appset_namespace)
    appset = (
        caches.appset(appset_namespace, cached.app_set_name)
        if cached.app_set_name and appset_watched
        else None
    )
    expected = rollout_workflow_name(name, status.rollout) if status.rollout is not None else None
    workflows = caches.workflows_of(namespace, name, expected)
    # The ApplicationSet controller creates its Applications in the ApplicationSet's namespace.
    owned = (
        caches.apps_of(appset_namespace, cached.app_set_name)
        if cached.app_set_name and appset_watched
        else []
    )
    plan: RolloutPlan | None = None
    apps: tuple[AppView, ...] = ()
    if spec is not None and not cached.deleting and not live_workflows(workflows):
        # The ApplicationSet controller creates its Applications in the ApplicationSet's namespace.
        apps = tuple(caches.apps_of(appset_namespace, spec.app_set_ref.name))
        plan = plan_rollout(
            spec,
            ps_name=name,
            appset=appset,
            clusters=caches.clusters_in(argocd_namespace),
            apps=apps,
        )
    blocker = None
    if spec is not None and plan is not None and plan.revisions and has_analysis(spec):
        blocker = _analysis_blocker(spec, namespace, caches)
    return Observed(
        namespace=namespace,
        name=name,
        generation=int(meta.get("generation") or 0),
        spec=spec,
        status=status,
        now=now,
        spec_error=spec_error,
        deleting=cached.deleting,
        deletion_started=parse_time(meta.get("deletionTimestamp")),
        has_finalizer=FINALIZER in (meta.get("finalizers") or []),
        retry_token=str((meta.get("annotations") or {}).get(RETRY_ANNOTATION) or ""),
        appset=appset,
        appset_namespace=appset_namespace,
        appset_watched=appset_watched,
        watched_appset_namespaces=tuple(ns for ns in caches.app_namespaces if ns is not None),
        claimed_by=claimed_by(cached, appset, caches.ps_by_appset(cached.app_set_key)),
        plan=plan,
        apps=apps,
        workflows=tuple(workflows),
        in_flight=syncs_in_flight(owned),
        uid=str(meta.get("uid") or ""),
        analysis_blocker=blocker,
        dependency_cycle=dependency_cycle(cached, caches),
    )


def dependency_cycle(cached: CachedPS, caches: Caches) -> tuple[str, ...]:
    """A cycle of `spec.dependsOn` through this ProgressiveSync over the cached ones of its namespace
    (`orchestrator.api.depends.find_cycle`), or () when there is none. Only those reachable from it
    are looked at; one being deleted, or not cached, depends on nothing."""
    if not cached.depends_on_names:
        return ()
    namespace, name = cached.key
    graph: dict[str, tuple[str, ...]] = {}
    todo = [name]
    while todo:
        node = todo.pop()
        if node in graph:
            continue
        other = cached if node == name else caches.progressive_sync((namespace, node))
        graph[node] = other.depends_on_names if other is not None and not other.deleting else ()
        todo.extend(graph[node])
    return find_cycle(graph, name) or ()


def _analysis_blocker(spec: ProgressiveSyncSpec, namespace: str, caches: Caches) -> AnalysisBlocker | None:
    """What stops a stage's analysis, from its templates as they are now; None when unknown."""
    try:
        return analysis_blocker(
            spec, namespace, lambda name, scope: caches.analysis_template(namespace, name, scope)
        )
    except TemplateUnreadable as exc:  # the step reads them again, and says why it cannot
        log.info("%s: analysis templates not checked: %s", namespace, exc)
        return None


def claimed_by(cached: CachedPS, appset: AppSetView | None, naming_it: list[CachedPS]) -> str:
    """The ProgressiveSync that owns this one's ApplicationSet, when it is another one.

    `naming_it`: the cached ProgressiveSyncs whose `spec.appSetRef` names the same ApplicationSet.
    Only those of namespaces the ApplicationSet admits are claimants (a squatter in another namespace
    cannot block its owner). Of those, the oldest (creationTimestamp, then namespace/name) live one
    owns it, so the answer is the same whichever one is reconciled first, and ownership passes on
    when it goes.
    """
    if not cached.app_set_name or appset is None:
        return ""
    claimants = [ps for ps in naming_it if not ps.deleting and appset.admits(ps.key[0])]
    if cached not in claimants:
        claimants.append(cached)
    owner = min(claimants, key=lambda ps: (ps.created, ps.key))
    return "" if owner.key == cached.key else f"{owner.key[0]}/{owner.key[1]}"


def short_validation_error(exc: pydantic.ValidationError) -> str:
    """The first five problems of a spec that does not parse, one `where: what` each."""
    parts = []
    for error in exc.errors()[:5]:
        where = ".".join(str(p) for p in error.get("loc", ()))
        parts.append(f"{where}: {error.get('msg', '')}")
    more = f" (and {exc.error_count() - 5} more)" if exc.error_count() > 5 else ""
    return "; ".join(parts) + more
