"""Typed, read-only views of the fleet: Argo CD clusters, Applications and ApplicationSets.

The planner, the steps and the watcher decide on these views, never on raw API dicts, so every
reading of an Argo CD field lives here once: `app_view_from_object` turns an Application as the
API server returns it into an `AppView`, `cluster_from_secret` turns the adapter's `ClusterSecret`
into a `Cluster`, and `load_fleet` reads a multi-document YAML file (what `kubectl get -o yaml`
prints, `kind: List` included) into a `Fleet`.

Everything here is pure: no client, no clock, no environment. Cluster Secrets are read only
through `orchestrator.kube.cluster_secrets.cluster_secret_from_object`, which takes `metadata`,
`data.name` and `data.server` and never decodes `data.config` (the credentials).

Callers: `orchestrator.planning.planner`, `progressive-sync plan`, the steps (select, sync, wait-healthy)
and the watcher.
"""

from __future__ import annotations

import binascii
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from types import MappingProxyType
from typing import Any

import yaml

from orchestrator.api.metadata import (
    ALLOWED_NAMESPACES_ANNOTATION,
    ANY_NAMESPACE,
    INFO_ROLLOUT_ID,
    INFO_STAGE,
    SKIP_ANNOTATION,
    parse_allowed_namespaces,
)
from orchestrator.api.release import revision_key
from orchestrator.argocd.appsync import REFRESH_ANNOTATION
from orchestrator.core import yamlio
from orchestrator.kube.cluster_secrets import (
    CLUSTER_SECRET_TYPE,
    CLUSTER_SECRET_TYPE_LABEL,
    ClusterSecret,
    cluster_secret_from_object,
)

APPLICATION_SET_KIND = "ApplicationSet"
ARGOPROJ_GROUP = "argoproj.io"

_EMPTY: Mapping[str, str] = MappingProxyType({})


class FleetError(ValueError):
    """A fleet document cannot be read (bad YAML, a malformed object); the message says which."""


# --- states ----------------------------------------------------------------------------------


class SyncStatus(StrEnum):
    """`status.sync.status` of an Application; anything else (or nothing) reads as Unknown."""

    SYNCED = "Synced"
    OUT_OF_SYNC = "OutOfSync"
    UNKNOWN = "Unknown"


class HealthStatus(StrEnum):
    """`status.health.status` of an Application; anything else (or nothing) reads as Unknown."""

    HEALTHY = "Healthy"
    PROGRESSING = "Progressing"
    DEGRADED = "Degraded"
    SUSPENDED = "Suspended"
    MISSING = "Missing"
    UNKNOWN = "Unknown"


class OperationPhase(StrEnum):
    """`status.operationState.phase` of an Application."""

    RUNNING = "Running"
    TERMINATING = "Terminating"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    ERROR = "Error"

    @property
    def is_terminal(self) -> bool:
        """Succeeded, Failed and Error end an operation; Running and Terminating do not."""
        return self in (OperationPhase.SUCCEEDED, OperationPhase.FAILED, OperationPhase.ERROR)


# Wire value -> member, for reading thousands of Applications without an exception per odd value.
_SYNC_STATUSES: Mapping[str, SyncStatus] = MappingProxyType({m.value: m for m in SyncStatus})
_HEALTH_STATUSES: Mapping[str, HealthStatus] = MappingProxyType({m.value: m for m in HealthStatus})
_OPERATION_PHASES: Mapping[str, OperationPhase] = MappingProxyType({m.value: m for m in OperationPhase})


# --- views -----------------------------------------------------------------------------------


def normalize_server(server: str) -> str:
    """The form in which cluster API URLs are compared: surrounding blanks and trailing '/' removed.

    `https://10.0.0.1:6443/` and `https://10.0.0.1:6443` name the same API server; we decided to
    treat them as equal rather than report an Application as pointing at a missing cluster.
    """
    return server.strip().rstrip("/")


@dataclass(frozen=True, slots=True)
class Cluster:
    """An Argo CD cluster, as a stage selector sees it.

    `name` is the Secret's `data.name` (what `spec.destination.name` refers to and what status,
    step options and the Workflow call the cluster); a Secret without one is named after the
    Secret itself. `server` is `data.server`, normalized by `normalize_server`. `labels` are the
    Secret's `metadata.labels`, the only thing stage selectors match.
    """

    name: str
    server: str
    labels: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}), hash=False)
    secret_name: str = ""


def cluster_from_secret(secret: ClusterSecret) -> Cluster:
    """The `Cluster` of a cluster Secret the adapter read (`Kube.list_cluster_secrets`)."""
    return Cluster(
        name=secret.name or secret.secret_name,
        server=normalize_server(secret.server),
        labels=MappingProxyType(dict(secret.labels)),
        secret_name=secret.secret_name,
    )


@dataclass(frozen=True, slots=True)
class OwnerRef:
    """One `metadata.ownerReferences` entry."""

    api_version: str
    kind: str
    name: str
    uid: str = ""
    controller: bool = False


@dataclass(frozen=True, slots=True)
class AppSetView:
    """An ApplicationSet: what identifies it as the owner of Applications, its own rollout strategy,
    and who may roll it out.

    `allowed_namespaces` are the namespaces its annotation `progressivesync.io/allowed-namespaces`
    names (besides its own, whose ProgressiveSyncs may always roll it out).
    """

    name: str
    namespace: str = ""
    uid: str = ""
    # `spec.strategy.type` ("" when absent): RollingSync means Argo CD's own progressive sync.
    strategy: str = ""
    allowed_namespaces: tuple[str, ...] = ()

    def admits(self, namespace: str) -> bool:
        """True when ProgressiveSyncs of `namespace` may roll this ApplicationSet out."""
        return namespace == self.namespace or bool({namespace, ANY_NAMESPACE} & set(self.allowed_namespaces))


def app_set_view_from_object(obj: Mapping[str, Any]) -> AppSetView:
    """The `AppSetView` of an ApplicationSet object."""
    metadata = _mapping(obj.get("metadata"))
    strategy = _mapping(_mapping(obj.get("spec")).get("strategy"))
    annotations = _mapping(metadata.get("annotations"))
    return AppSetView(
        name=_text(metadata.get("name")),
        namespace=_text(metadata.get("namespace")),
        uid=_text(metadata.get("uid")),
        strategy=_text(strategy.get("type")),
        allowed_namespaces=parse_allowed_namespaces(_text(annotations.get(ALLOWED_NAMESPACES_ANNOTATION))),
    )


@dataclass(frozen=True, slots=True)
class AppView:
    """An Argo CD Application, as the planner, the steps and the watcher read it.

    Revisions: for a single-source Application `sync_revisions` is `(status.sync.revision,)` and
    `operation_revisions` is `(status.operationState.syncResult.revision,)`; for a multi-source one
    (`spec.sources`) they are the `revisions` lists, one per source, in source order. Empty strings
    and empty tuples mean "not known yet". Timestamps are timezone-aware, or None when absent or
    unreadable. `rollout_id` and `rollout_stage` are the `info` entries of the Application's current
    operation (`.operation`, else `status.operationState.operation`) when progress-sync started it.
    """

    name: str
    namespace: str = ""
    uid: str = ""
    owner_references: tuple[OwnerRef, ...] = ()
    destination_server: str = ""
    destination_name: str = ""
    multi_source: bool = False
    automated_sync: bool = False
    sync_status: SyncStatus = SyncStatus.UNKNOWN
    sync_revisions: tuple[str, ...] = ()
    health_status: HealthStatus = HealthStatus.UNKNOWN
    operation_in_progress: bool = False
    operation_phase: OperationPhase | None = None
    operation_revisions: tuple[str, ...] = ()
    operation_started_at: datetime | None = None
    operation_finished_at: datetime | None = None
    operation_message: str = ""
    reconciled_at: datetime | None = None
    rollout_id: str = ""
    rollout_stage: str = ""
    # `argocd.argoproj.io/refresh` is set: a comparison was asked for and Argo CD has not answered yet.
    refresh_pending: bool = False
    # Its labels (what `spec.skip.applications.selector` matches) and its `progressivesync.io/skip`
    # annotation's value ("" when absent): orchestrator.planning.skip.
    labels: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}), hash=False)
    skip_mark: str | None = None

    @property
    def sync_revision(self) -> str:
        """The revision Argo CD compared against, as one string (see `revision_key`)."""
        return revision_key(self.sync_revisions)

    @property
    def health_is_stale(self) -> bool:
        """True when health was last computed before the last operation finished.

        Such a Healthy may describe the previous revision, so it proves nothing about this one.
        Unknown timestamps cannot show staleness and read as fresh.
        """
        if self.reconciled_at is None or self.operation_finished_at is None:
            return False
        return self.reconciled_at < self.operation_finished_at

    def is_owned_by(self, app_set_name: str, app_set_uid: str = "") -> bool:
        """True when an ownerReference names the ApplicationSet: kind, name, and uid when both know it."""
        for ref in self.owner_references:
            if ref.kind != APPLICATION_SET_KIND or ref.name != app_set_name:
                continue
            if ref.api_version and ref.api_version.split("/", 1)[0] != ARGOPROJ_GROUP:
                continue
            # A uid on both sides tells a re-created ApplicationSet of the same name apart.
            if app_set_uid and ref.uid and ref.uid != app_set_uid:
                continue
            return True
        return False


@dataclass(frozen=True, slots=True)
class ClusterIndex:
    """The clusters by name and by server: which cluster an Application deploys to.

    Built by `index_clusters`; `cluster_of` is the one rule (the planner's, the steps' and so the
    watcher's), Argo CD's own: `spec.destination.server` names the cluster with that API server;
    without one, or when no cluster has it, `spec.destination.name` names it.
    """

    by_name: Mapping[str, Cluster]
    by_server: Mapping[str, Cluster]

    def destinations_of(self, app: AppView) -> tuple[Cluster | None, Cluster | None]:
        """(the cluster of its destination.server, the cluster of its destination.name)."""
        server = normalize_server(app.destination_server)
        via_server = self.by_server.get(server) if server else None
        via_name = self.by_name.get(app.destination_name) if app.destination_name else None
        return via_server, via_name

    def cluster_of(self, app: AppView) -> Cluster | None:
        """The cluster `app` deploys to: by destination.server first, else destination.name; None."""
        via_server, via_name = self.destinations_of(app)
        return via_server or via_name


def index_clusters(clusters: Iterable[Cluster]) -> ClusterIndex:
    """Index clusters in Secret-name order: the first Secret wins a name or a server others share.

    The choice does not depend on the order of `clusters`; the planner reports the losers.
    """
    by_name: dict[str, Cluster] = {}
    for cluster in sorted(clusters, key=lambda c: (c.secret_name, c.name)):
        by_name.setdefault(cluster.name, cluster)
    by_server: dict[str, Cluster] = {}
    for cluster in by_name.values():
        server = normalize_server(cluster.server)
        if server:
            by_server.setdefault(server, cluster)
    return ClusterIndex(MappingProxyType(by_name), MappingProxyType(by_server))


def app_view_from_object(obj: Mapping[str, Any]) -> AppView:
    """Read an Application object (as the API server or `kubectl get -o yaml` gives it) into an `AppView`.

    Missing or malformed fields read as their empty value; only the absence of `metadata.name`
    is an error, because nothing can refer to such an Application.
    """
    metadata = _mapping(obj.get("metadata"))
    name = _text(metadata.get("name"))
    if not name:
        raise FleetError("an Application without metadata.name")
    spec = _mapping(obj.get("spec"))
    status = _mapping(obj.get("status"))
    destination = _mapping(spec.get("destination"))
    sync = _mapping(status.get("sync"))
    operation_state = _mapping(status.get("operationState"))
    sync_result = _mapping(operation_state.get("syncResult"))
    current_operation = _mapping(obj.get("operation")) or _mapping(operation_state.get("operation"))
    entries = _mappings(current_operation.get("info")) if current_operation else []
    info = {_text(entry.get("name")): _text(entry.get("value")) for entry in entries}
    multi_source = bool(spec.get("sources"))
    return AppView(
        name=name,
        namespace=_text(metadata.get("namespace")),
        uid=_text(metadata.get("uid")),
        owner_references=tuple(
            OwnerRef(
                api_version=_text(ref.get("apiVersion")),
                kind=_text(ref.get("kind")),
                name=_text(ref.get("name")),
                uid=_text(ref.get("uid")),
                controller=ref.get("controller") is True,
            )
            for ref in _mappings(metadata.get("ownerReferences"))
        ),
        destination_server=normalize_server(_text(destination.get("server"))),
        destination_name=_text(destination.get("name")),
        multi_source=multi_source,
        automated_sync=_automated_sync_on(spec),
        sync_status=_SYNC_STATUSES.get(_text(sync.get("status")), SyncStatus.UNKNOWN),
        sync_revisions=_revisions(sync, multi_source),
        health_status=_HEALTH_STATUSES.get(
            _text(_mapping(status.get("health")).get("status")), HealthStatus.UNKNOWN
        ),
        operation_in_progress=bool(obj.get("operation")),
        operation_phase=_OPERATION_PHASES.get(_text(operation_state.get("phase"))),
        operation_revisions=_revisions(sync_result, multi_source),
        operation_started_at=_timestamp(operation_state.get("startedAt")),
        operation_finished_at=_timestamp(operation_state.get("finishedAt")),
        operation_message=_text(operation_state.get("message")),
        reconciled_at=_timestamp(status.get("reconciledAt")),
        rollout_id=info.get(INFO_ROLLOUT_ID, ""),
        rollout_stage=info.get(INFO_STAGE, ""),
        refresh_pending=REFRESH_ANNOTATION in _mapping(metadata.get("annotations")),
        labels=MappingProxyType({str(k): _text(v) for k, v in _mapping(metadata.get("labels")).items()}),
        skip_mark=_skip_mark(_mapping(metadata.get("annotations"))),
    )


def _skip_mark(annotations: Mapping[str, Any]) -> str | None:
    """The `progressivesync.io/skip` annotation's value, None when absent (an empty value still marks)."""
    if SKIP_ANNOTATION not in annotations:
        return None
    return _text(annotations[SKIP_ANNOTATION]).strip()


def _automated_sync_on(spec: Mapping[str, Any]) -> bool:
    # `automated: {}` is on; Argo CD 3.x added `automated.enabled: false` to switch it off in place.
    policy = _mapping(spec.get("syncPolicy"))
    if "automated" not in policy or policy["automated"] is None:
        return False
    automated = policy["automated"]
    return not (isinstance(automated, Mapping) and automated.get("enabled") is False)


def _revisions(holder: Mapping[str, Any], multi_source: bool) -> tuple[str, ...]:
    if multi_source:
        revisions = holder.get("revisions")
        return tuple(_text(r) for r in revisions) if isinstance(revisions, list) else ()
    revision = _text(holder.get("revision"))
    return (revision,) if revision else ()


# --- the fleet file --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Fleet:
    """What a fleet file (or a live listing) holds: clusters, Applications and ApplicationSets.

    `clusters` and `apps` are what `plan_rollout` takes; `app_sets` lets the caller find the
    ApplicationSet a ProgressiveSync names (and its uid); `ignored` counts documents of other kinds
    (other Secrets, ConfigMaps, ...), which a fleet file may well contain.
    """

    clusters: tuple[Cluster, ...] = ()
    apps: tuple[AppView, ...] = ()
    app_sets: tuple[AppSetView, ...] = ()
    ignored: int = 0

    def app_set(self, name: str) -> AppSetView | None:
        """The ApplicationSet of that name, or None when the fleet does not hold it."""
        return next((a for a in self.app_sets if a.name == name), None)


def load_fleet(text: str) -> Fleet:
    """Read a multi-document YAML fleet file into a `Fleet`.

    Documents may be single objects or lists (`kind: List`, `kind: SecretList`, ... with `items`),
    as `kubectl get -o yaml` prints them. Secrets count as clusters only with the label
    `argocd.argoproj.io/secret-type: cluster`; of those only `metadata`, `data.name` and
    `data.server` are read. Raises FleetError on YAML that does not parse or malformed objects.
    """
    try:
        documents = [doc for doc in yamlio.safe_load_all(text) if doc is not None]
    except yaml.YAMLError as exc:
        raise FleetError(f"not valid YAML: {exc}") from exc
    return fleet_from_objects(documents)


def fleet_from_objects(objects: Iterable[Any]) -> Fleet:
    """Sort API objects (and lists of them) into clusters, Applications and ApplicationSets."""
    clusters: list[Cluster] = []
    apps: list[AppView] = []
    app_sets: list[AppSetView] = []
    ignored = 0
    for obj in _flatten(objects):
        kind = obj.get("kind")
        if kind == "Secret" and _is_cluster_secret(obj):
            clusters.append(cluster_from_secret(_read_cluster_secret(obj)))
        elif kind == "Application":
            apps.append(app_view_from_object(obj))
        elif kind == APPLICATION_SET_KIND:
            app_sets.append(app_set_view_from_object(obj))
        else:
            ignored += 1
    return Fleet(clusters=tuple(clusters), apps=tuple(apps), app_sets=tuple(app_sets), ignored=ignored)


def _flatten(objects: Iterable[Any]) -> Iterator[Mapping[str, Any]]:
    for obj in objects:
        if type(obj) is not dict and not isinstance(obj, Mapping):
            raise FleetError(f"a document is a {type(obj).__name__}, not a Kubernetes object")
        if isinstance(obj.get("items"), list) and str(obj.get("kind", "")).endswith("List"):
            yield from _flatten(obj["items"])
        else:
            yield obj


def _is_cluster_secret(obj: Mapping[str, Any]) -> bool:
    labels = _mapping(_mapping(obj.get("metadata")).get("labels"))
    return labels.get(CLUSTER_SECRET_TYPE_LABEL) == CLUSTER_SECRET_TYPE


def _read_cluster_secret(obj: Mapping[str, Any]) -> ClusterSecret:
    try:
        return cluster_secret_from_object(obj)
    except (binascii.Error, ValueError, TypeError) as exc:
        # Name the Secret, never its content: the error text must not carry any of its data.
        secret_name = _text(_mapping(obj.get("metadata")).get("name"))
        raise FleetError(f"cluster Secret {secret_name!r}: data.name or data.server is not base64") from exc


# --- small readers ---------------------------------------------------------------------------


def _mapping(value: Any) -> Mapping[str, Any]:
    # dict (what JSON and YAML give) and None (a field left out) first: the Mapping ABC's check
    # costs ten times as much, and 10,000 Applications make 130,000 of these calls.
    if type(value) is dict:
        return value
    if value is None:
        return _EMPTY
    return value if isinstance(value, Mapping) else _EMPTY


def _mappings(value: Any) -> list[Mapping[str, Any]]:
    if not isinstance(value, list):
        return []
    return [v for v in value if type(v) is dict or isinstance(v, Mapping)]


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ("" if value is None else str(value))


def _timestamp(value: Any) -> datetime | None:
    # metav1.Time is always UTC ("...Z"); a timestamp without a zone is read as UTC too.
    if isinstance(value, datetime):  # YAML loaders turn unquoted timestamps into datetimes
        parsed = value
    elif isinstance(value, str) and value:
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            return None
    else:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
