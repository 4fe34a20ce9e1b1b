"""The watcher's decision as data: what `decide` reads (`Observed`, `ReconcilePolicy`) and what it
returns (`Decision`: actions in order, with the reason and the rule that decided).

Every action is a frozen dataclass that says what to do, never how: `act` carries them out, and
`CreateWorkflow` names the rollout to start (the ProgressiveSync, the release and the plan) without
the Workflow object, which `orchestrator.watcher.build` makes outside the pure decision. Conditions
and Events carry a `Reason` of the catalog (`orchestrator.api.reasons`), never a free string.

Callers: `orchestrator.watcher.decide` and its rule modules (which build these), `build`, `act`,
`observe`, `loop`, `holdback`, `settings`; tests.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from orchestrator.analysis.check import AnalysisBlocker
from orchestrator.api.conditions import ConditionType
from orchestrator.api.models import (
    ConditionStatus,
    ProgressiveSync,
    ProgressiveSyncSpec,
    ProgressiveSyncStatus,
    RolloutPhase,
    RolloutStatus,
)
from orchestrator.api.reasons import Reason
from orchestrator.api.release import Release
from orchestrator.argocd.fleet import AppSetView, AppView, OperationPhase
from orchestrator.planning.planner import RolloutPlan
from orchestrator.workflows.view import WorkflowView

# --- inputs -------------------------------------------------------------------------------------


# The sync options a ProgressiveSync may ask for unless the installation says otherwise: the ones
# that change how Argo CD applies, never what it may destroy or skip (Replace=true, Force=true,
# Validate=false are left out). The chart's policy.allowedSyncOptions replaces this list.
DEFAULT_ALLOWED_SYNC_OPTIONS = (
    "ApplyOutOfSyncOnly=true",
    "FailOnSharedResource=true",
    "PruneLast=true",
    "RespectIgnoreDifferences=true",
    "ServerSideApply=true",
)
ANY_SYNC_OPTION = "*"


@dataclass(frozen=True)
class ReconcilePolicy:
    """Waiting times of the decision and what ProgressiveSyncs may ask for (from the watcher's
    settings; how Workflows are built is `Settings.workflow_settings`, read by `build`)."""

    # After a Workflow ends, its exit handler records the outcome; past this the watcher does.
    finalize_grace_seconds: float = 30.0
    # A deleted ProgressiveSync waits this long for its stopped Workflow before letting go.
    deletion_grace_seconds: float = 30.0
    # `spec.syncOptions.prune: true` is refused unless the installation allows it.
    allow_prune: bool = False
    # `spec.syncOptions.options` entries allowed ("*": any); anything else is refused.
    allowed_sync_options: tuple[str, ...] = DEFAULT_ALLOWED_SYNC_OPTIONS
    # Before a new rollout: how long to wait for Argo CD to compare every owned Application against
    # the release (the Workflow is sized from that plan); then it starts with what is known.
    fleet_compare_seconds: float = 120.0
    # At most this many Applications get their sync ended per reconcile (the rest on the next one).
    end_syncs_per_reconcile: int = 100


@dataclass(frozen=True)
class InFlightSync:
    """An Application whose current operation carries a rollout id of ours and has not ended."""

    app: str
    namespace: str
    rollout_id: str
    phase: str  # "" (requested, Argo CD has not taken it up), Running, Terminating


def syncs_in_flight(apps: Iterable[AppView]) -> tuple[InFlightSync, ...]:
    """The Applications running (or asked to run) an operation that carries a rollout id.

    `AppView.rollout_id` is that of `.operation`, else of `status.operationState.operation`; the
    operation is in flight while `.operation` is set or the state is Running/Terminating (Argo CD
    removes `.operation` when it ends one). `EndSyncs` decides again on each Application read fresh.
    """
    found = []
    for app in apps:
        if not app.rollout_id:
            continue
        phase = app.operation_phase
        running = phase in (OperationPhase.RUNNING, OperationPhase.TERMINATING)
        if app.operation_in_progress or running:
            state = phase.value if running and phase is not None else ""
            found.append(InFlightSync(app.name, app.namespace, app.rollout_id, state))
    return tuple(sorted(found, key=lambda sync: (sync.rollout_id, sync.namespace, sync.app)))


@dataclass(frozen=True)
class Observed:
    """Everything `decide` reads about one ProgressiveSync, gathered by the watcher."""

    namespace: str
    name: str
    generation: int
    spec: ProgressiveSyncSpec | None
    status: ProgressiveSyncStatus
    now: datetime
    spec_error: str = ""
    deleting: bool = False
    deletion_started: datetime | None = None
    has_finalizer: bool = True
    retry_token: str = ""
    appset: AppSetView | None = None
    appset_namespace: str = ""  # where the ApplicationSet was looked up (spec, else our namespace)
    appset_watched: bool = True  # False: the watcher reads no ApplicationSets in that namespace
    watched_appset_namespaces: tuple[str, ...] = ()  # for the message when it does not
    claimed_by: str = ""  # "namespace/name" of the ProgressiveSync that owns the ApplicationSet
    plan: RolloutPlan | None = None  # the plan of a new rollout; None while a rollout is live
    apps: tuple[AppView, ...] = ()  # the Applications the plan was made from (with the plan only)
    workflows: tuple[WorkflowView, ...] = ()
    in_flight: tuple[InFlightSync, ...] = ()  # its Applications' operations of a rollout (syncs_in_flight)
    uid: str = ""  # the ProgressiveSync's, for the Workflow's ownerReference
    analysis_blocker: AnalysisBlocker | None = None  # with a release due: a stage's analysis cannot run
    dependency_cycle: tuple[str, ...] = ()  # spec.dependsOn: a cycle through this one (name, ..., name)


# --- outputs ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AddFinalizer:
    """Add `progressivesync.io/workflow` to the ProgressiveSync."""


@dataclass(frozen=True)
class RemoveFinalizer:
    """Remove `progressivesync.io/workflow`: the object may go."""


@dataclass(frozen=True)
class CreateWorkflow:
    """Create the Workflow `name` of one attempt of one release (AlreadyExists: adopt it).

    What to create, as data: the ProgressiveSync it belongs to (name, namespace, uid, spec), the
    release and the plan its shape is sized from. `orchestrator.watcher.build` builds the object
    (`workflow`, its identity annotations included) before `act` creates it.
    """

    name: str
    release: Release
    ps: ProgressiveSync = field(compare=False, repr=False)
    plan: RolloutPlan = field(compare=False, repr=False)
    # The whole object to create: empty until `build` fills it in.
    workflow: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def rollout_id(self) -> str:
        """The rollout the Workflow runs."""
        return self.release.rollout_id

    @property
    def release_id(self) -> str:
        """The release it rolls out."""
        return self.release.id

    @property
    def attempt(self) -> int:
        """Which attempt of the release."""
        return self.release.attempt

    @property
    def retry_token(self) -> str:
        """The retry token the attempt consumed ("" when none)."""
        return self.release.retry_token


@dataclass(frozen=True)
class RequestCompare:
    """Ask Argo CD to compare these Applications (in `namespace`) again: the refresh annotation."""

    namespace: str
    names: tuple[str, ...]
    release: str  # the release id they are compared for (the log)


@dataclass(frozen=True)
class StopWorkflow:
    """`spec.shutdown: Stop` (running steps end, the exit handler runs)."""

    name: str
    reason: str


@dataclass(frozen=True)
class EndSyncs:
    """End the sync operations of `rollout_id` still in flight on `apps` (in `namespace`), as the
    steps do (`steps/terminate.py`): each Application read again and decided by
    `appsync.decide_terminate` (a request Argo CD did not take up withdrawn, a running sync set
    Terminating, anything else left alone)."""

    namespace: str
    rollout_id: str
    apps: tuple[str, ...]


@dataclass(frozen=True)
class SuspendWorkflow:
    """`spec.suspend: true` (no new step starts; running ones finish)."""

    name: str


@dataclass(frozen=True)
class ResumeWorkflow:
    """`spec.suspend` removed."""

    name: str


@dataclass(frozen=True)
class RecordEvent:
    """A Kubernetes Event on the ProgressiveSync, for `kubectl describe` (only on transitions).

    `identity`, when set, names the Event (`<name>.<identity>`): recording it again is a no-op
    (a status transition replayed by a new leader); unset, every record is a new Event. `at` is
    when it happened (unset: now). `replayed` marks a transition seen again on a watcher's first
    look rather than as it happened: its Event is looked up (a read) before it is created, so a
    watcher started on a converged fleet writes nothing.
    """

    type: str  # Normal | Warning
    reason: Reason
    message: str
    identity: str = ""
    at: datetime | None = None
    replayed: bool = False


@dataclass(frozen=True)
class RequeueAfter:
    """Look again after `seconds` even when no event comes (a grace period is running out)."""

    seconds: float


@dataclass(frozen=True)
class ConditionPatch:
    """One condition the watcher sets.

    `only_from`: set it only while the stored condition has this status. A flip decided on the
    watcher's cached status (FleetCompared back to True when a wait ended) must not overwrite what
    a fresher status already says (the True with its own reason the same wait's end wrote).
    """

    type: ConditionType
    status: ConditionStatus
    reason: Reason
    message: str
    only_from: ConditionStatus | None = None


@dataclass(frozen=True)
class StatusPatch:
    """The watcher-owned status fields one decision sets; None leaves a field as it is.

    `phase`, `message` and the Ready/Progressing conditions in `lifecycle` describe the rollout's
    life; they are applied only while the stored phase is not an end phase the steps recorded,
    unless `force_lifecycle` (the watcher itself records an end, or a new rollout starts).
    """

    observed_generation: int
    start: RolloutStatus | None = None  # a new rollout (or an adopted one): id, workflow, attempt, ...
    stage_names: tuple[str, ...] = ()
    progress_total: int | None = None
    retry_token: str | None = None  # a token handled without a new attempt
    finish_rollout: bool = False  # fill rollout.finishedAt when no step did
    phase: RolloutPhase | None = None
    message: str | None = None
    current_stage: str | None = None
    lifecycle: tuple[ConditionPatch, ...] = ()
    force_lifecycle: bool = False
    conditions: tuple[ConditionPatch, ...] = ()  # Valid and Paused: always applied


@dataclass(frozen=True)
class UpdateStatus:
    """Write the patch (through the optimistic-concurrency writer; no change, no write)."""

    patch: StatusPatch


Action = (
    AddFinalizer
    | RemoveFinalizer
    | CreateWorkflow
    | RequestCompare
    | StopWorkflow
    | EndSyncs
    | SuspendWorkflow
    | ResumeWorkflow
    | RecordEvent
    | RequeueAfter
    | UpdateStatus
)


@dataclass(frozen=True)
class Decision:
    """The actions, in the order to run them, and why (for the log)."""

    actions: tuple[Action, ...]
    reason: str
    step: str  # which rule decided, e.g. "deleting", "follow" (tests and debug logs)


def live_workflows(workflows: Sequence[WorkflowView]) -> list[WorkflowView]:
    """The Workflows that may still run steps (the watcher plans a new rollout only without them)."""
    return [wf for wf in workflows if wf.is_live and not wf.deleting]


@dataclass(frozen=True)
class Refusal:
    """Why no new rollout may start (`Valid=False` with this reason and message)."""

    reason: Reason
    message: str


@dataclass(frozen=True)
class Context:
    """What every rule after the first few reads: the parsed inputs, computed once by `decide`."""

    obs: Observed
    spec: ProgressiveSyncSpec
    spec_hash: str
    head: tuple[Action, ...]  # before anything else: AddFinalizer, stale Workflows stopped, syncs ended
    current: WorkflowView | None  # the Workflow of the recorded rollout, when it exists
    live: tuple[WorkflowView, ...]
    base_conditions: tuple[ConditionPatch, ...]  # Valid=False for a refused reference or option
    refusal: Refusal | None  # why no new rollout may start

    def decision(self, step: str, reason: str, *actions: Action) -> Decision:
        """A decision of rule `step`: the head actions first, then `actions`."""
        return Decision((*self.head, *actions), reason, step)
