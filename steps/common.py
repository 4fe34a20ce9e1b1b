"""What every step shares: the rollout it works for, its outcomes, and reading the live fleet.

A step is a typed function `(kube, rollout: RolloutRef, ..., clock, tuning) -> Result`. It raises
`UsageProblem` (a `PermanentError`) for bad options or configuration (exit 2), a `TemporaryError`
when trying again later may work (exit 75), and returns a result whose `failed` says whether the
rollout failed (exit 1); the entrypoint (`steps.cli`) maps adapter errors to one of the two through
the adapter's `temporary_or_permanent`. Reading goes through `orchestrator.kube.client` and the typed views of
`orchestrator.argocd.fleet`; writing the ProgressiveSync status goes through
`orchestrator.kube.status_writer`, and each cluster's record in the stage's ProgressiveSyncStage
objects through `orchestrator.kube.stage_records` (`steps.status_sink`).

Callers: the step modules in this package.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, TypeVar

from orchestrator.api.metadata import rollout_workflow_name, workflow_name
from orchestrator.api.models import ProgressiveSync, ProgressiveSyncSpec, Stage
from orchestrator.api.phases import FINISHED_ROLLOUT_PHASES, STOPPED_ROLLOUT_PHASES
from orchestrator.api.stage_records import StageOutcomes, outcomes_of
from orchestrator.api.succession import Succession, succession
from orchestrator.argocd import appsync
from orchestrator.argocd.assess import first_few
from orchestrator.argocd.fleet import (
    AppSetView,
    Cluster,
    ClusterIndex,
    app_set_view_from_object,
    app_view_from_object,
    index_clusters,
)
from orchestrator.argocd.inventory import INVENTORY_NAME, InventoryError, clusters_from_configmap
from orchestrator.core.clock import Clock, parse_time
from orchestrator.core.errors import PermanentError, TemporaryError
from orchestrator.kube.client import (
    APPLICATION_SETS,
    APPLICATIONS,
    CONFIG_MAPS,
    PROGRESSIVE_SYNCS,
    WORKFLOWS,
    Kube,
    NotFound,
)
from orchestrator.kube.stage_records import list_records, read_outcomes
from orchestrator.kube.status_writer import StatusWriterSettings
from orchestrator.planning.groups import with_run_stages
from orchestrator.planning.plan import split_stage_name

# An Application object as read or listed (a dict, or a read-only Mapping of one).
AppObject = TypeVar("AppObject", bound=Mapping[str, Any])

log = logging.getLogger(__name__)


class UsageProblem(PermanentError):
    """A bad option or configuration: the message says which option or object (permanent: exit 2)."""


class Superseded(Exception):
    """The ProgressiveSync's status describes another rollout: this Workflow's rollout is stale."""


@dataclass(frozen=True)
class RolloutRef:
    """Which rollout of which ProgressiveSync a step works for, and where Argo CD's objects live.

    `argocd_namespace` holds the cluster inventory; the Applications are in their ApplicationSet's
    namespace, known once the ProgressiveSync is read (`with_applications_of`).
    """

    namespace: str
    name: str
    rollout_id: str
    argocd_namespace: str
    app_namespace: str = ""
    # The rollout contract's stage names: with spec.groupBy, the "<group>/<stage>" stages the
    # rollout runs, which `load_progressive_sync` puts in place of the spec's (docs/groups.md).
    stage_names: tuple[str, ...] = ()

    @property
    def display(self) -> str:
        """`namespace/name` for messages."""
        return f"{self.namespace}/{self.name}"

    @property
    def applications_namespace(self) -> str:
        """Where the ApplicationSet and its Applications are (see `with_applications_of`)."""
        return self.app_namespace or self.namespace

    def with_applications_of(self, ps: ProgressiveSync) -> RolloutRef:
        """This reference with the namespace of the ProgressiveSync's ApplicationSet."""
        return replace(self, app_namespace=app_namespace(ps))


@dataclass(frozen=True)
class Tuning:
    """Timings of the steps; defaults suit production, tests shrink the watch window."""

    # How long one watch request may stay quiet before the step looks at its clock and at the
    # cluster Secret again (the deadline itself also ends a window).
    watch_window_seconds: int = 30
    # One sleep per retry of an Application update that lost a race (409).
    app_conflict_backoffs: tuple[float, ...] = (0.05, 0.1, 0.2, 0.5, 1.0, 2.0)
    # How long a refresh we asked Argo CD for may stay unanswered before we ask again.
    refresh_again_seconds: float = 10.0
    # The `select` step: how long it waits for Argo CD to answer the refreshes it asked for (and the
    # pending ones) before planning without those answers (steps.select_stage).
    compare_wait_seconds: float = 30.0
    # The `select` step: how long it waits for the cluster inventory to list the cluster of an
    # out-of-date Application whose destination it does not know yet (a cluster whose Secret and
    # Application appeared together: the watcher publishes it within seconds; steps.select_stage).
    inventory_wait_seconds: float = 60.0
    # The `batch` step: waits before running one cluster again after a temporary error (then exit 75).
    batch_retry_backoffs: tuple[float, ...] = (5.0, 10.0, 20.0, 40.0)
    # The `batch` step: how often it writes the status changes its clusters gathered (a failure at
    # once; steps.status_sink).
    batch_flush_seconds: float = 5.0
    # A step sent SIGTERM: how long it may take to write the status changes it gathered before it
    # exits 75 (within the pod's termination grace period, 30 s by default; steps.status_sink).
    stop_flush_seconds: float = 10.0
    # The `batch` step while the ProgressiveSync is paused: how often it looks whether the pause
    # was lifted, and how long it holds a cluster back before it exits 75 (Argo retries the batch).
    pause_poll_seconds: float = 2.0
    pause_hold_seconds: int = 7 * 24 * 3600
    # After asking Argo CD to terminate our syncs, how long to wait for them to end before going on.
    terminate_wait_seconds: float = 60.0
    # While the windows are closed (steps.window_gate): how often the AppProjects and the stage are
    # read again before the moment the windows open.
    window_recheck_seconds: float = 30.0
    # How often `wait-healthy` looks whether a sibling's failure has failed the stage meanwhile.
    stage_check_seconds: float = 5.0
    # The `analyze` step and the exit handler: how long they wait for a run they terminated
    # (spec.terminate) to end before they go on (steps.analyze follows its runs with a watch).
    analysis_terminate_wait_seconds: float = 20.0
    # The `batch` step: how long the cluster inventory and which Applications deploy to which cluster,
    # read once, serve the batch's clusters before they are read again (`FleetLookup`). The
    # Applications themselves are always read fresh.
    fleet_lookup_seconds: float = 30.0
    status: StatusWriterSettings = field(default_factory=StatusWriterSettings)

    def watch_window_for(self, seconds_left: float) -> int:
        """Seconds the next watch request may stay quiet when the step's next look at its clock is
        `seconds_left` away: rounded up (the look after it finds the moment passed), at most
        `watch_window_seconds`, at least 1 (the API's timeoutSeconds is whole seconds)."""
        return max(1, min(self.watch_window_seconds, math.ceil(seconds_left)))


def load_progressive_sync(kube: Kube, rollout: RolloutRef) -> ProgressiveSync:
    """Read and parse the ProgressiveSync; UsageProblem when it does not exist.

    With spec.groupBy its spec lists the rollout's "<group>/<stage>" stages (the contract's,
    `rollout.stage_names`) in place of its own, so every step finds, indexes and records a group's
    stage as any other (`orchestrator.planning.groups`); `select` plans with the spec's own
    (`planning_spec`)."""
    try:
        obj = kube.get(PROGRESSIVE_SYNCS, rollout.namespace, rollout.name)
    except NotFound as exc:
        raise UsageProblem(
            f"ProgressiveSync {rollout.display} not found (check --namespace and --name)"
        ) from exc
    return run_view(ProgressiveSync.model_validate(obj), rollout)


def run_view(ps: ProgressiveSync, rollout: RolloutRef) -> ProgressiveSync:
    """`ps` as the rollout runs it: with spec.groupBy, its spec lists the contract's
    "<group>/<stage>" stages (`rollout.stage_names`); else `ps` itself. UsageProblem when the
    contract names a stage the spec does not have."""
    if ps.spec.group_by is None or not rollout.stage_names:
        return ps
    try:
        return with_run_stages(ps, rollout.stage_names)
    except KeyError as exc:
        raise UsageProblem(
            f"the rollout contract's stage {exc.args[0]!r} is not a stage of {rollout.display} "
            "(spec.groupBy): the contract was made for another spec"
        ) from exc


def planning_spec(ps: ProgressiveSync) -> ProgressiveSyncSpec:
    """The spec as the planner takes it: its own stages, not the rollout's "<group>/<stage>" ones
    `load_progressive_sync` lists with spec.groupBy (each spec stage once, in order)."""
    spec = ps.spec
    if spec.group_by is None:
        return spec
    stages: dict[str, Stage] = {}
    for stage in spec.stages:
        name = split_stage_name(stage.name)[1]
        stages.setdefault(name, stage if stage.name == name else stage.model_copy(update={"name": name}))
    return spec.model_copy(update={"stages": list(stages.values())})


def check_rollout(ps: ProgressiveSync, rollout_id: str) -> None:
    """Raise Superseded when the status belongs to another rollout (none recorded yet is fine)."""
    current = ps.status.rollout.id if ps.status and ps.status.rollout else None
    if current is not None and current != rollout_id:
        raise Superseded(
            f"ProgressiveSync {ps.metadata.namespace}/{ps.metadata.name} is on rollout {current}, "
            f"not {rollout_id}: this Workflow was superseded"
        )


def check_succession(kube: Kube, ps: ProgressiveSync, rollout_id: str) -> str | None:
    """For `select`, the one step that starts its rollout in the status: Superseded unless the status
    records no rollout, this one, or an older one (`orchestrator.api.succession`); the older one's
    id, which this rollout may replace (None: none recorded, or this one).

    The others refuse any other rollout (`check_rollout`); `select` may meet the newer rollout before
    the watcher recorded it (a crash between creating the Workflow and recording it), and must then
    take over, but never for an old Workflow brought back (`argo retry`): its release is older, and
    its status would send the later steps to pin the Applications back to it. The order comes from
    the two Workflows' creation times (read here; the steps may get Workflows); when its own Workflow
    cannot be read (a step run by hand), only a rollout that has ended is taken over.
    """
    status = ps.status
    recorded = status.rollout if status is not None else None
    if status is None or recorded is None or recorded.id == rollout_id:
        return None
    namespace, name = ps.metadata.namespace or "", ps.metadata.name
    own = _workflow_created(kube, namespace, workflow_name(name, rollout_id))
    theirs = _workflow_created(kube, namespace, rollout_workflow_name(name, recorded))
    verdict, why = succession(own, recorded=recorded, recorded_workflow_created=theirs)
    if verdict == Succession.NEWER or (
        verdict == Succession.UNKNOWN and status.phase in FINISHED_ROLLOUT_PHASES
    ):
        return recorded.id
    raise Superseded(
        f"ProgressiveSync {namespace}/{name} is on rollout {recorded.id}, not {rollout_id}, and {why}: "
        "this Workflow was superseded"
    )


def _workflow_created(kube: Kube, namespace: str, name: str) -> datetime | None:
    """`metadata.creationTimestamp` of a Workflow, None when it does not exist."""
    try:
        workflow = kube.get(WORKFLOWS, namespace, name)
    except NotFound:
        return None
    return parse_time((workflow.get("metadata") or {}).get("creationTimestamp"))


def rollout_ended(ps: ProgressiveSync) -> str:
    """Why no new cluster starts because the recorded rollout (the caller's: `check_rollout` passed) has
    ended Failed or Cancelled already, or "" while it has not.

    A step still running when the watcher recorded the end (its Workflow deleted, or ended without
    its exit handler) must not start a sync after we said stop (DESIGN.md §3).
    """
    status = ps.status
    rollout = status.rollout if status is not None else None
    if status is None or rollout is None or rollout.finished_at is None:
        return ""
    if status.phase not in STOPPED_ROLLOUT_PHASES:
        return ""
    return f"rollout {rollout.id} ended {status.phase.value} already; no new cluster starts"


def stage_failure(ps: ProgressiveSync, stage: str, outcomes: StageOutcomes) -> str:
    """Why no new cluster of the stage starts: the rollout ended (`rollout_ended`) or the stage has failed
    already (its failures, read from its records as `outcomes`, exceed maxFailedClusters); "" when
    neither."""
    ended = rollout_ended(ps)
    if ended:
        return ended
    failures = outcomes.failed
    tolerated = ps.spec.failure_policy.max_failed_clusters
    if len(failures) <= tolerated:
        return ""
    return (
        f"stage {stage!r} has failed already ({len(failures)} failed cluster(s), at most {tolerated} "
        f"tolerated: {first_few(list(failures))}); no new cluster starts"
    )


def stage_index(ps: ProgressiveSync, stage: str) -> int:
    """The stage's position in `spec.stages` (its records carry it as a label); UsageProblem when
    the spec has no stage of that name."""
    check_stage(ps, stage)
    return [s.name for s in ps.spec.stages].index(stage)


def read_stage_outcomes(kube: Kube, rollout: RolloutRef, ps: ProgressiveSync, stage: str) -> StageOutcomes:
    """The stage's clusters as its records tell them (no record yet: no target, nothing recorded)."""
    found = read_outcomes(
        kube, rollout.namespace, rollout.name, rollout.rollout_id, stage_index=stage_index(ps, stage)
    )
    return next(iter(found.values()), StageOutcomes(stage=stage, targets=(), clusters={}))


def read_stage_failures(kube: Kube, rollout: RolloutRef, ps: ProgressiveSync, stage: str) -> StageOutcomes:
    """The stage's failures, read fresh for `stage_failure`: only the stage's records labelled as
    holding a Failed cluster (`orchestrator.api.stage_records.FAILED_LABEL`, set by the write that
    records the failure), one list request that usually answers none. Only those parts' targets
    and clusters are in it: enough to count the failures, not to tell a cluster's own record (a
    batch knows its clusters' records: `steps.status_sink.BatchedSink.outcomes`). Every check of a
    stage's failures right before a cluster starts or while it waits reads them here."""
    parts = list_records(
        kube,
        rollout.namespace,
        rollout.name,
        rollout.rollout_id,
        stage_index=stage_index(ps, stage),
        failed=True,
    )
    return outcomes_of(stage, parts)


def stopped_reason(cluster: str, stage_failure_reason: str) -> str:
    """Why a cluster in flight is stopped: its stage failed (DESIGN.md §3: the rollout is Failed)."""
    reason = f"cluster {cluster}: stopped before it finished: {stage_failure_reason}"
    log.info("%s", reason)
    return reason


def stage_failed_meanwhile(kube: Kube, rollout: RolloutRef, *, stage: str, cluster: str) -> str:
    """Why the cluster stops because its stage failed since the caller read it ("" while it has
    not): one read of the ProgressiveSync and one of the stage's failed records
    (`read_stage_failures`). Raises Superseded when a newer rollout took over."""
    current = load_progressive_sync(kube, rollout)
    check_rollout(current, rollout.rollout_id)
    failed = stage_failure(current, stage, read_stage_failures(kube, rollout, current, stage))
    return stopped_reason(cluster, failed) if failed else ""


def written_by_rollout(apps: Sequence[Mapping[str, Any]], ps: ProgressiveSync, rollout_id: str) -> list[str]:
    """The Applications among `apps` that carry a sync this rollout wrote (requested, running or
    finished: `appsync.synced_by_rollout`), whatever the stage's records say.

    The Applications are what says what we wrote: a first-wave write whose Syncing record was
    lost (a crash between the writes and the list, an error while listing, a lost answer to the
    write) is still ours, and must be ended, not reported "not started" (issue 29, point 5).
    """
    since = ps.status.rollout.started_at if ps.status and ps.status.rollout else None
    return [appsync.app_name(app) for app in apps if appsync.synced_by_rollout(app, rollout_id, since=since)]


def check_stage(ps: ProgressiveSync, stage: str) -> None:
    """UsageProblem when the spec has no stage of that name."""
    names = [s.name for s in ps.spec.stages]
    if stage not in names:
        raise UsageProblem(
            f"--stage {stage!r} is not a stage of {ps.metadata.name} (stages: {', '.join(names)})"
        )


def list_clusters(kube: Kube, argocd_namespace: str) -> list[Cluster]:
    """The Argo CD clusters, from the inventory the watcher publishes (the steps read no Secret).

    A missing inventory is temporary (exit 75: the watcher publishes it when it starts); a
    malformed one is a configuration problem (exit 2).
    """
    try:
        obj = kube.get(CONFIG_MAPS, argocd_namespace, INVENTORY_NAME)
    except NotFound as exc:
        raise TemporaryError(
            f"the cluster inventory ConfigMap {argocd_namespace}/{INVENTORY_NAME} does not exist (yet): "
            "the watcher publishes it from the Argo CD cluster Secrets; is the watcher running and "
            "is --argocd-namespace right?"
        ) from exc
    try:
        return clusters_from_configmap(obj)
    except InventoryError as exc:
        raise UsageProblem(str(exc)) from exc


def find_cluster(clusters: Sequence[Cluster], name: str) -> Cluster | None:
    """The cluster of that name (its Secret's `data.name`, or the Secret's name)."""
    return next((c for c in clusters if c.name == name), None) or next(
        (c for c in clusters if c.secret_name == name), None
    )


def get_app_set(kube: Kube, namespace: str, name: str) -> AppSetView | None:
    """The ApplicationSet (for its uid), or None when it does not exist."""
    try:
        return app_set_view_from_object(kube.get(APPLICATION_SETS, namespace, name))
    except NotFound:
        return None


def app_namespace(ps: ProgressiveSync) -> str:
    """Where the ApplicationSet and the Applications it generates live: `spec.appSetRef.namespace`,
    else the ProgressiveSync's own namespace (the watcher admitted the reference before it created
    the Workflow). Cluster inventory: `RolloutRef.argocd_namespace`."""
    return ps.spec.app_set_ref.namespace or ps.metadata.namespace or ""


def owned_apps(kube: Kube, ps: ProgressiveSync) -> list[dict[str, Any]]:
    """The Applications of the ProgressiveSync's ApplicationSet (ownerReference, uid when known)."""
    app_set = get_app_set(kube, app_namespace(ps), ps.spec.app_set_ref.name)
    items, _ = kube.list(APPLICATIONS, app_namespace(ps))
    return owned_by(items, ps.spec.app_set_ref.name, app_set)


def owned_by(items: Sequence[AppObject], app_set_name: str, app_set: AppSetView | None) -> list[AppObject]:
    """The Applications among `items` that the ApplicationSet owns (ownerReference, uid when known)."""
    uid = app_set.uid if app_set else ""
    return [item for item in items if app_view_from_object(item).is_owned_by(app_set_name, uid)]


def apps_by_cluster(
    items: Sequence[AppObject], app_set_name: str, app_set: AppSetView | None, index: ClusterIndex
) -> dict[str, list[AppObject]]:
    """The ApplicationSet's Applications among `items` by the name of the cluster they deploy to,
    each cluster's sorted by name (the planner's rule, `ClusterIndex.cluster_of`; Applications that
    deploy to no known cluster are left out)."""
    grouped: dict[str, list[AppObject]] = {}
    for app in owned_by(items, app_set_name, app_set):
        owner = index.cluster_of(app_view_from_object(app))
        if owner is not None:
            grouped.setdefault(owner.name, []).append(app)
    return {name: sorted(apps, key=lambda app: app["metadata"]["name"]) for name, apps in grouped.items()}


def apps_of_cluster(
    kube: Kube,
    rollout: RolloutRef,
    ps: ProgressiveSync,
    cluster: Cluster,
    clusters: Sequence[Cluster],
    *,
    planned: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """The ApplicationSet's Applications that deploy to `cluster`, sorted by name.

    Which cluster an Application deploys to is the planner's rule (`ClusterIndex.cluster_of`), so
    `sync` and `wait-healthy` act on exactly the Applications `select` planned for the cluster.
    `planned`: their names as the stage's records give them (`targetApps`): each is read by name
    (one GET) and kept while it is still owned and still deploys to `cluster`; one the
    ApplicationSet generated for the cluster since is left to the next rollout. Without names, or
    when none of them is found, every Application of the namespace is listed (a record written
    before the field, a step run outside a rollout).
    """
    app_set = get_app_set(kube, app_namespace(ps), ps.spec.app_set_ref.name)
    index = index_clusters(clusters)
    if planned:
        uid = app_set.uid if app_set else ""
        named = read_named_apps(
            kube,
            app_namespace(ps),
            planned,
            app_set_name=ps.spec.app_set_ref.name,
            app_set_uid=uid,
            index=index,
            cluster=cluster.name,
        )
        if named:
            return named
        log.info("cluster %s: none of its planned Applications found; listing the namespace", cluster.name)
    items, _ = kube.list(APPLICATIONS, app_namespace(ps))
    return apps_by_cluster(items, ps.spec.app_set_ref.name, app_set, index).get(cluster.name, [])


def read_named_apps(
    kube: Kube,
    namespace: str,
    names: Sequence[str],
    *,
    app_set_name: str,
    app_set_uid: str,
    index: ClusterIndex,
    cluster: str,
) -> list[dict[str, Any]]:
    """Each Application of `names` read now (one GET each; one not found is left out), kept when
    the ApplicationSet still owns it (uid when known) and it still deploys to `cluster` by the
    planner's rule; sorted by name."""
    apps = []
    for name in dict.fromkeys(names):
        try:
            app = kube.get(APPLICATIONS, namespace, name)
        except NotFound:
            continue
        view = app_view_from_object(app)
        owner = index.cluster_of(view)
        if view.is_owned_by(app_set_name, app_set_uid) and owner is not None and owner.name == cluster:
            apps.append(app)
    return sorted(apps, key=lambda app: app["metadata"]["name"])


class FleetLookup:
    """The Argo CD clusters, and which of the ApplicationSet's Applications deploy to each cluster.

    `sync` and `wait-healthy` need both for every cluster. A cluster's Applications are named by
    its stage's records when `select` recorded them (`targetApps`, handed in by `planned` or
    `plan`: `steps.context.Shared.fleet_for` hands in the stage's): each is then read by name (a
    GET), and the namespace is not listed. Without names (records written before the field, a step
    run outside a rollout), or when none of the named ones is found, the lookup lists every
    Application of the namespace, as before: ~15 MB per list at 10,000 clusters. Read fresh for each
    call (`max_age_seconds` 0, what `sync` and `wait-healthy` run alone do): the inventory
    ConfigMap, the ApplicationSet, and the names or the list. A `cluster` pod shares one lookup
    between its sync and its wait, a `batch` pod between all its clusters (issue 15): the
    inventory, the ApplicationSet and the list's names by cluster are read at most once per
    `max_age_seconds`, and the Applications a cluster acts on are then read one by one (a GET each),
    so every sync decision is taken on the Application as it is now and the cache can never cause
    a second sync write (our rollout id in the operation is seen on the fresh object). What a cached
    read can miss is only an Application or a cluster added since it was read: a cluster not
    found, or found without Applications, is looked up again at once before it is failed.
    Thread-safe (a batch's clusters run in threads).
    """

    def __init__(
        self,
        kube: Kube,
        rollout: RolloutRef,
        ps: ProgressiveSync,
        *,
        clock: Clock,
        max_age_seconds: float = 0.0,
        planned: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        self.kube = kube
        self.rollout = rollout.with_applications_of(ps)
        self.ps = ps
        self.clock = clock
        self.max_age_seconds = max_age_seconds
        self._lock = threading.Lock()
        self._read_at: datetime | None = None
        self._clusters: list[Cluster] = []
        self._index = index_clusters([])  # of `_clusters`, built once per read
        self._looked: list[Cluster] = []  # the inventory as `still_exists` last read it
        self._looked_at: datetime | None = None
        self._names: dict[str, list[str]] = {}  # cluster name -> its Applications' names, sorted
        self._listed = False  # whether `_names` is from a list made since the last read
        self._app_set: AppSetView | None = None
        self._planned: dict[str, tuple[str, ...]] = {}
        self.plan(planned or {})
        self.reads = 0  # how many times a cached lookup listed the Applications (for tests, logs)

    def plan(self, planned: Mapping[str, Sequence[str]]) -> None:
        """Name the Applications `select` planned for each cluster (the stage's records'
        `targetApps`): their clusters' Applications are then read by name (see the class)."""
        with self._lock:
            self._planned.update((name, tuple(names)) for name, names in planned.items() if names)

    @property
    def cached(self) -> bool:
        """True when reads are shared between calls (a batch)."""
        return self.max_age_seconds > 0

    def clusters(self) -> list[Cluster]:
        """The Argo CD clusters (the inventory), at most `max_age_seconds` old."""
        if not self.cached:
            return list_clusters(self.kube, self.rollout.argocd_namespace)
        with self._lock:
            self._refresh_locked(force=False, listing=False)
            return list(self._clusters)

    def find(self, name: str) -> tuple[Cluster | None, list[Cluster]]:
        """The cluster of that name and the clusters it was found among; a miss is read again once."""
        clusters = self.clusters()
        found = find_cluster(clusters, name)
        if found is None and self.cached:
            with self._lock:
                self._refresh_locked(force=True, listing=False)
                clusters = list(self._clusters)
            found = find_cluster(clusters, name)
        return found, clusters

    def still_exists(self, name: str, *, max_age_seconds: float) -> bool:
        """Whether the inventory still has the cluster `name`: read now, or in a batch from a read its
        clusters share, at most `max_age_seconds` old (each cluster of a batch looks every few
        seconds while it waits: one read per look made the inventory, megabytes at 10,000 clusters,
        the batch's biggest read)."""
        if not self.cached:
            return find_cluster(list_clusters(self.kube, self.rollout.argocd_namespace), name) is not None
        with self._lock:
            now = self.clock.now()
            if self._looked_at is None or (now - self._looked_at).total_seconds() >= max_age_seconds:
                self._looked = list_clusters(self.kube, self.rollout.argocd_namespace)
                self._looked_at = now
            clusters = self._looked
        return find_cluster(clusters, name) is not None

    def apps_of(self, cluster: Cluster, clusters: Sequence[Cluster]) -> list[dict[str, Any]]:
        """The ApplicationSet's Applications that deploy to `cluster`, sorted by name, as they are
        now: the planned ones by name when the stage's records name them, else (or when none of
        them is found) from a list of the namespace (see the class)."""
        with self._lock:
            planned = self._planned.get(cluster.name, ())
        if not self.cached:
            return apps_of_cluster(self.kube, self.rollout, self.ps, cluster, clusters, planned=planned)
        if planned:
            with self._lock:
                self._refresh_locked(force=False, listing=False)
                index, uid = self._index, self._app_set.uid if self._app_set else ""
            named = self._read_named(cluster, planned, index, uid)
            if named:
                return named
            log.info(
                "cluster %s: none of its planned Applications found; listing the namespace", cluster.name
            )
        apps = self._read_apps(cluster, force=False)
        return apps or self._read_apps(cluster, force=True)

    def _read_apps(self, cluster: Cluster, *, force: bool) -> list[dict[str, Any]]:
        """Each Application the lookup's list has for `cluster`, read now; kept when it still belongs
        to the ApplicationSet and deploys to the cluster."""
        with self._lock:
            self._refresh_locked(force=force, listing=True)
            names = list(self._names.get(cluster.name, ()))
            index = self._index
            uid = self._app_set.uid if self._app_set else ""
        return self._read_named(cluster, names, index, uid)

    def _read_named(
        self, cluster: Cluster, names: Sequence[str], index: ClusterIndex, uid: str
    ) -> list[dict[str, Any]]:
        """`read_named_apps` for `cluster` in this lookup's namespace and ApplicationSet."""
        return read_named_apps(
            self.kube,
            self.rollout.applications_namespace,
            names,
            app_set_name=self.ps.spec.app_set_ref.name,
            app_set_uid=uid,
            index=index,
            cluster=cluster.name,
        )

    def _refresh_locked(self, *, force: bool, listing: bool) -> None:
        """The inventory and the ApplicationSet read again when older than `max_age_seconds` (or
        `force`); with `listing`, the Applications listed too when not listed since."""
        now = self.clock.now()
        if force or self._read_at is None or (now - self._read_at).total_seconds() >= self.max_age_seconds:
            self._clusters = list_clusters(self.kube, self.rollout.argocd_namespace)
            self._index = index_clusters(self._clusters)
            self._app_set = get_app_set(self.kube, app_namespace(self.ps), self.ps.spec.app_set_ref.name)
            self._read_at = now
            self._listed = False
        if listing and not self._listed:
            items, _ = self.kube.list(APPLICATIONS, app_namespace(self.ps))
            by_cluster = apps_by_cluster(items, self.ps.spec.app_set_ref.name, self._app_set, self._index)
            self._names = {
                name: [app["metadata"]["name"] for app in apps] for name, apps in by_cluster.items()
            }
            self._listed = True
            self.reads += 1
