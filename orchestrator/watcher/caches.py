"""The watcher's caches: one informer per resource and namespace, the slim values they keep, lookups.

`Caches(kube, settings, handlers, on_blocked)` builds the informers (orchestrator.kube.informer) for
ProgressiveSyncs, their Workflows and their ProgressiveSyncStage records (each watched namespace, or
all), and for ApplicationSets, Applications and Argo CD cluster Secrets (each Argo CD namespace).
They keep slim values only: a ProgressiveSync without managedFields (`CachedPS`), an `AppView` per
Application owned by an ApplicationSet, a `WorkflowView`, a `Cluster`, a `CachedRecord` (what a
stage's summary is made of: its targets and each cluster's state, reason, note and finish time).
The lookups answer what `observe`, `triggers`, `holdback`, the live summary (`records_of`) and
rollout history (`all_records_of`) ask of them; the one read that goes past the caches is
`workflows_of`, which reads the Workflow a status names when the cache lacks it (a lagging cache
must never read as "deleted").

Callers: `orchestrator.watcher.loop` (builds it, hands each change to its handlers),
`orchestrator.watcher.observe`, `orchestrator.watcher.triggers`, `orchestrator.watcher.holdback`.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, TypeVar

import pydantic

from orchestrator.api.metadata import NAME_LABEL
from orchestrator.api.models import ObjectMeta
from orchestrator.api.stage_records import (
    ClusterRecord,
    ClusterState,
    ProgressiveSyncStage,
    StageRecordSpec,
    StageRecordStatus,
)
from orchestrator.argocd.fleet import (
    APPLICATION_SET_KIND,
    AppSetView,
    AppView,
    Cluster,
    app_set_view_from_object,
    app_view_from_object,
    cluster_from_secret,
)
from orchestrator.core.clock import parse_time
from orchestrator.kube.client import (
    ANALYSIS_TEMPLATES,
    APPLICATION_SETS,
    APPLICATIONS,
    CLUSTER_ANALYSIS_TEMPLATES,
    PROGRESSIVE_SYNC_STAGES,
    PROGRESSIVE_SYNCS,
    SECRETS,
    WORKFLOWS,
    Kube,
    KubeError,
    NotFound,
    Resource,
)
from orchestrator.kube.cluster_secrets import CLUSTER_SECRET_LABEL, cluster_secret_from_object
from orchestrator.kube.informer import Change, Informer
from orchestrator.kube.watchloop import Blocked
from orchestrator.watcher.settings import Settings
from orchestrator.workflows.view import WorkflowView, workflow_view_from_object

Key = tuple[str, str]
T = TypeVar("T")

# Index names of the informers.
BY_APPSET = "appset"  # ProgressiveSyncs by "appset namespace/appset", Applications by owner name
BY_OWNER = "owner"  # Workflows and records by "namespace/progressive-sync name"


# --- slim cache values ------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class CachedPS:
    """A ProgressiveSync as the informer keeps it: the object without managedFields."""

    obj: dict[str, Any]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CachedPS) and self.obj == other.obj

    __hash__ = None  # type: ignore[assignment]

    @property
    def key(self) -> Key:
        """(namespace, name)."""
        meta = self.obj.get("metadata") or {}
        return str(meta.get("namespace", "")), str(meta.get("name", ""))

    @property
    def app_set_name(self) -> str:
        """`spec.appSetRef.name` as written (even when the spec is otherwise invalid)."""
        return str(((self.obj.get("spec") or {}).get("appSetRef") or {}).get("name") or "")

    @property
    def app_set_namespace(self) -> str:
        """Where the ApplicationSet is: `spec.appSetRef.namespace`, else this object's namespace."""
        ref = (self.obj.get("spec") or {}).get("appSetRef") or {}
        return str(ref.get("namespace") or self.key[0])

    @property
    def app_set_key(self) -> str:
        """`namespace/name` of the ApplicationSet (the index value)."""
        return f"{self.app_set_namespace}/{self.app_set_name}"

    @property
    def depends_on_names(self) -> tuple[str, ...]:
        """The names `spec.dependsOn` lists, as written (even when the spec is otherwise invalid)."""
        entries = (self.obj.get("spec") or {}).get("dependsOn") or []
        if not isinstance(entries, list):
            return ()
        return tuple(str(entry["name"]) for entry in entries if isinstance(entry, dict) and entry.get("name"))

    @property
    def deleting(self) -> bool:
        """True once `metadata.deletionTimestamp` is set."""
        return bool((self.obj.get("metadata") or {}).get("deletionTimestamp"))

    @property
    def created(self) -> str:
        """`metadata.creationTimestamp` (RFC 3339 sorts as text)."""
        return str((self.obj.get("metadata") or {}).get("creationTimestamp") or "")


def slim_progressive_sync(obj: dict[str, Any]) -> CachedPS:
    """Drop managedFields (the largest part, and noise to compare)."""
    metadata = dict(obj.get("metadata") or {})
    metadata.pop("managedFields", None)
    return CachedPS({**obj, "metadata": metadata})


def slim_application(obj: dict[str, Any]) -> AppView | None:
    """The `AppView` of an Application owned by some ApplicationSet; None for any other.

    The free-text operation message is dropped: the planner does not read it, and at 10,000
    Applications it is most of what would stay in memory.
    """
    owners = (obj.get("metadata") or {}).get("ownerReferences") or []
    if not any(ref.get("kind") == APPLICATION_SET_KIND for ref in owners if isinstance(ref, Mapping)):
        return None
    view = app_view_from_object(obj)
    owners_ = tuple(
        replace(
            ref,
            api_version=sys.intern(ref.api_version),
            kind=sys.intern(ref.kind),
            name=sys.intern(ref.name),
            uid=sys.intern(ref.uid),
        )
        for ref in view.owner_references
    )
    return replace(
        view,
        owner_references=owners_,
        name=sys.intern(view.name),
        namespace=sys.intern(view.namespace),
        destination_server=sys.intern(view.destination_server),
        destination_name=sys.intern(view.destination_name),
        sync_revisions=tuple(sys.intern(r) for r in view.sync_revisions),
        operation_revisions=tuple(sys.intern(r) for r in view.operation_revisions),
        rollout_id=sys.intern(view.rollout_id),
        rollout_stage=sys.intern(view.rollout_stage),
        operation_message="",
        uid="",
    )


def slim_cluster(obj: dict[str, Any]) -> Cluster:
    """The `Cluster` of a cluster Secret: labels, name and server, never credentials."""
    return cluster_from_secret(cluster_secret_from_object(obj))


# One cluster of a cached record: (name, state, reason, note, finishedAt).
RecordEntry = tuple[str, ClusterState, str, str, datetime | None]


@dataclass(frozen=True)
class CachedRecord:
    """A ProgressiveSyncStage as the watcher keeps it: what its stage's summary is made of.

    Each cluster is a tuple (its revisions and start time are left out: the summary does not read
    them), names interned: ~200 bytes a cluster, so 10,000 clusters cost about 2 MB."""

    namespace: str
    name: str
    progressive_sync: str
    rollout_id: str
    stage: str
    stage_index: int
    part: int
    parts: int
    targets: tuple[str, ...]
    clusters: tuple[RecordEntry, ...]
    # What rollout history reads (orchestrator/watcher/history.py): which object, how old, whose.
    uid: str = ""
    created: datetime | None = None
    owner_uids: tuple[str, ...] = ()

    def to_record(self) -> ProgressiveSyncStage:
        """The record as the model `stage_records.outcomes_of` reads (built without validation: it
        was validated when cached)."""
        clusters = {
            name: ClusterRecord.model_construct(state=state, reason=reason, note=note, finished_at=finished)
            for name, state, reason, note, finished in self.clusters
        }
        return ProgressiveSyncStage.model_construct(
            metadata=ObjectMeta.model_construct(name=self.name, namespace=self.namespace),
            spec=StageRecordSpec.model_construct(
                progressive_sync=self.progressive_sync,
                rollout_id=self.rollout_id,
                stage=self.stage,
                stage_index=self.stage_index,
                part=self.part,
                parts=self.parts,
                targets=list(self.targets),
            ),
            status=StageRecordStatus.model_construct(clusters=clusters),
        )


def slim_record(obj: dict[str, Any]) -> CachedRecord | None:
    """The `CachedRecord` of a ProgressiveSyncStage; None for one that does not parse (the steps
    that write it would have failed on it: nothing to summarize)."""
    try:
        record = ProgressiveSyncStage.model_validate(
            {
                **obj,
                "metadata": {k: v for k, v in (obj.get("metadata") or {}).items() if k != "managedFields"},
            }
        )
    except pydantic.ValidationError:
        return None
    spec = record.spec
    return CachedRecord(
        namespace=sys.intern(record.metadata.namespace or ""),
        name=record.metadata.name,
        progressive_sync=sys.intern(spec.progressive_sync),
        rollout_id=sys.intern(spec.rollout_id),
        stage=sys.intern(spec.stage),
        stage_index=spec.stage_index,
        part=spec.part,
        parts=spec.parts,
        targets=tuple(sys.intern(name) for name in spec.targets),
        clusters=tuple(
            (sys.intern(name), entry.state, entry.reason, entry.note, entry.finished_at)
            for name, entry in record.clusters.items()
        ),
        uid=record.metadata.uid or "",
        created=parse_time((obj.get("metadata") or {}).get("creationTimestamp")),
        owner_uids=tuple(
            str(ref.get("uid") or "")
            for ref in (obj.get("metadata") or {}).get("ownerReferences") or []
            if isinstance(ref, Mapping)
        ),
    )


def app_owner_names(app: AppView) -> list[str]:
    """The names of the ApplicationSets that own this Application."""
    return [ref.name for ref in app.owner_references if ref.kind == APPLICATION_SET_KIND]


# --- the informers ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Handlers:
    """What to call on each change, per resource (the loop's event handlers; they must stay quick)."""

    progressive_sync: Callable[[Change[CachedPS]], None]
    workflow: Callable[[Change[WorkflowView]], None]
    appset: Callable[[Change[AppSetView]], None]
    app: Callable[[Change[AppView]], None]
    cluster: Callable[[Change[Cluster]], None]
    record: Callable[[Change[CachedRecord]], None]


class TemplateUnreadable(Exception):
    """An analysis template could not be read (no permission, the API unreachable): not known."""


class Caches:
    """The watcher's informers and the lookups over their caches. Thread-safe (each informer is)."""

    def __init__(
        self,
        kube: Kube,
        settings: Settings,
        handlers: Handlers,
        on_blocked: Callable[[Informer[Any], Blocked | None], None],
    ) -> None:
        self._kube = kube
        self.settings = settings
        watched: list[str | None] = list(settings.namespaces) or [None]
        if settings.argocd_namespace:
            argocd: list[str | None] = [settings.argocd_namespace]
        else:
            argocd = watched
        # ApplicationSets (and the Applications they generate, in their own namespace) are read in
        # the watched namespaces and the Argo CD namespace: where `spec.appSetRef` may point.
        app_namespaces: list[str | None] = (
            [None] if None in watched else list(dict.fromkeys([*watched, *argocd]))
        )
        self.app_namespaces = app_namespaces
        self._on_blocked = on_blocked
        self.ps_informers = self._watch(
            PROGRESSIVE_SYNCS,
            watched,
            slim_progressive_sync,
            handlers.progressive_sync,
            indexers={BY_APPSET: lambda ps: [ps.app_set_key]},
        )
        workflow_namespaces: list[str | None] = (
            [settings.workflow_namespace] if settings.workflow_namespace else watched
        )
        self.workflow_informers = self._watch(
            WORKFLOWS,
            workflow_namespaces,
            workflow_view_from_object,
            handlers.workflow,
            label_selector=NAME_LABEL,
            indexers={BY_OWNER: lambda wf: [f"{wf.namespace}/{wf.ps_name}"]},
        )
        self.appset_informers = self._watch(
            APPLICATION_SETS, app_namespaces, app_set_view_from_object, handlers.appset
        )
        self.app_informers = self._watch(
            APPLICATIONS,
            app_namespaces,
            slim_application,
            handlers.app,
            indexers={BY_APPSET: app_owner_names},
        )
        self.cluster_informers = self._watch(
            SECRETS, argocd, slim_cluster, handlers.cluster, label_selector=CLUSTER_SECRET_LABEL
        )
        # The records live next to their ProgressiveSync; only the live summary reads them.
        self.record_informers = self._watch(
            PROGRESSIVE_SYNC_STAGES,
            watched,
            slim_record,
            handlers.record,
            label_selector=NAME_LABEL,
            indexers={BY_OWNER: lambda record: [f"{record.namespace}/{record.progressive_sync}"]},
        )

    def _watch(
        self,
        resource: Resource,
        namespaces: list[str | None],
        slim: Callable[[dict[str, Any]], T | None],
        handler: Callable[[Change[T]], None],
        *,
        label_selector: str | None = None,
        indexers: Mapping[str, Callable[[T], Iterable[str]]] | None = None,
    ) -> list[Informer[T]]:
        """One informer of `resource` per namespace (None: every namespace)."""
        return [
            Informer(
                self._kube,
                resource,
                namespace,
                slim=slim,
                handler=handler,
                settings=self.settings.informer,
                on_blocked=self._on_blocked,
                label_selector=label_selector,
                indexers=indexers,
            )
            for namespace in namespaces
        ]

    @property
    def informers(self) -> list[Informer[Any]]:
        """Every informer, ProgressiveSyncs last (so their first reconcile sees the rest listed)."""
        return [*self.record_informers, *self.decision_informers]

    @property
    def decision_informers(self) -> list[Informer[Any]]:
        """The informers `decide` reads (a ProgressiveSync waits while one it needs cannot list);
        the records' are not among them: only the live summary reads those, and it waits alone."""
        return [
            *self.workflow_informers,
            *self.appset_informers,
            *self.app_informers,
            *self.cluster_informers,
            *self.ps_informers,
        ]

    # -- ProgressiveSyncs ------------------------------------------------------------------

    def progressive_sync(self, key: Key) -> CachedPS | None:
        """The cached ProgressiveSync `key`; None when it is not (or no longer) there."""
        for informer in self.ps_informers:
            if informer.namespace in (None, key[0]):
                found = informer.get(key)
                if found is not None:
                    return found
        return None

    def progressive_syncs(self) -> list[CachedPS]:
        """Every cached ProgressiveSync (a snapshot)."""
        return [ps for informer in self.ps_informers for ps in informer.values()]

    def progressive_sync_keys(self) -> list[Key]:
        """The key of every cached ProgressiveSync (a snapshot)."""
        return [key for informer in self.ps_informers for key, _ in informer.items()]

    def ps_by_appset(self, appset_key: str) -> list[CachedPS]:
        """ProgressiveSyncs whose `spec.appSetRef` names the ApplicationSet `namespace/name`."""
        found: list[CachedPS] = []
        for informer in self.ps_informers:
            found.extend(informer.by_index(BY_APPSET, appset_key))
        return found

    # -- what a ProgressiveSync's decision reads -------------------------------------------

    def reads_appsets_in(self, namespace: str) -> bool:
        """True when some informer watches the ApplicationSets of `namespace`."""
        return any(informer.namespace in (None, namespace) for informer in self.appset_informers)

    def appset(self, namespace: str, name: str) -> AppSetView | None:
        """The cached ApplicationSet `namespace/name`; None when it is not there."""
        for informer in self.appset_informers:
            if informer.namespace in (None, namespace):
                found = informer.get((namespace, name))
                if found is not None:
                    return found
        return None

    def apps_of(self, appset_namespace: str, appset_name: str) -> list[AppView]:
        """The Applications the ApplicationSet generated (in its own namespace, as its controller does)."""
        apps: list[AppView] = []
        for informer in self.app_informers:
            if informer.namespace in (None, appset_namespace):
                apps.extend(
                    app
                    for app in informer.by_index(BY_APPSET, appset_name)
                    if app.namespace == appset_namespace
                )
        return apps

    def clusters_in(self, argocd_namespace: str) -> list[Cluster]:
        """The clusters registered in one Argo CD namespace."""
        clusters: list[Cluster] = []
        for cluster_informer in self.cluster_informers:
            if cluster_informer.namespace in (None, argocd_namespace):
                clusters.extend(c for key, c in cluster_informer.items() if key[0] == argocd_namespace)
        return clusters

    def workflows_of(self, namespace: str, name: str, expected: str | None) -> list[WorkflowView]:
        """The Workflows of ProgressiveSync `namespace/name`; `expected` (the one its status names) is
        read directly when the cache lacks it: just created (the cache lags) or really gone? Ask."""
        found: list[WorkflowView] = []
        for informer in self.workflow_informers:
            found.extend(informer.by_index(BY_OWNER, f"{namespace}/{name}"))
        if expected is not None and all(wf.name != expected for wf in found):
            with contextlib.suppress(NotFound):
                found.append(workflow_view_from_object(self._kube.get(WORKFLOWS, namespace, expected)))
        return found

    def analysis_template(self, namespace: str, name: str, cluster_scope: bool) -> dict[str, Any] | None:
        """An AnalysisTemplate of `namespace` (a ClusterAnalysisTemplate with `cluster_scope`), read
        directly (no informer: read only when a release is due, a few objects); None when it does not
        exist (or Argo Rollouts' CRDs are not installed); TemplateUnreadable when it cannot be read."""
        resource = CLUSTER_ANALYSIS_TEMPLATES if cluster_scope else ANALYSIS_TEMPLATES
        try:
            return self._kube.get(resource, None if cluster_scope else namespace, name)
        except NotFound:
            return None
        except KubeError as exc:
            raise TemplateUnreadable(f"{resource.kind} {name}: {exc}") from exc

    def records_of(self, namespace: str, name: str, rollout_id: str) -> list[ProgressiveSyncStage] | None:
        """The cached records of rollout `rollout_id` of ProgressiveSync `namespace/name`; None while
        an informer of them cannot be trusted (not listed yet, or waiting on a permission or the CRD)."""
        found: list[ProgressiveSyncStage] = []
        for informer in self.record_informers:
            if informer.namespace in (None, namespace):
                if not informer.usable:
                    return None
                found.extend(
                    cached.to_record()
                    for cached in informer.by_index(BY_OWNER, f"{namespace}/{name}")
                    if cached.rollout_id == rollout_id
                )
        return found

    def all_records_of(self, namespace: str, name: str) -> list[CachedRecord] | None:
        """Every cached record of ProgressiveSync `namespace/name`, of any rollout; None while an
        informer of them cannot be trusted (what rollout history deletes from)."""
        found: list[CachedRecord] = []
        for informer in self.record_informers:
            if informer.namespace in (None, namespace):
                if not informer.usable:
                    return None
                found.extend(informer.by_index(BY_OWNER, f"{namespace}/{name}"))
        return found

    # -- the process around ----------------------------------------------------------------

    def inventory_namespaces(self) -> list[str]:
        """The Argo CD namespaces whose cluster inventory the watcher publishes."""
        if self.settings.argocd_namespace:
            return [self.settings.argocd_namespace]
        found = set(self.settings.namespaces)
        for cluster_informer in self.cluster_informers:
            cluster_keys = cluster_informer.keys()  # a snapshot (ruff's SIM118 takes it for a dict)
            found.update(namespace for namespace, _ in cluster_keys)
        for ps_informer in self.ps_informers:
            ps_keys = ps_informer.keys()
            found.update(self.settings.argocd_namespace_for(namespace) for namespace, _ in ps_keys)
        return sorted(found)

    def phases(self) -> list[str]:
        """`status.phase` of every cached ProgressiveSync (a metrics source)."""
        return [str((ps.obj.get("status") or {}).get("phase") or "") for ps in self.progressive_syncs()]

    def watch_restarts(self) -> dict[str, int]:
        """Per resource: streams opened after the first one, and failed list/watch attempts."""
        counts: dict[str, int] = {}
        for informer in self.informers:
            stats = informer.stats
            resource = informer.resource.plural
            counts[resource] = counts.get(resource, 0) + max(0, stats.watches - 1) + stats.failures
        return counts
