"""The watcher's decision: what to do about one ProgressiveSync, as a pure function.

`decide(observed, policy) -> Decision` reads everything the watcher knows about one
ProgressiveSync (its spec and status, its ApplicationSet, the plan of its fleet, its Workflows, the
time) and returns the actions that move the world toward the spec, in order, with the reason. It is
level-triggered: it never asks *which* event woke it, so a duplicated, late or missed event leads
to the same answer. It is an ordered list of early returns:

1. being deleted → stop live Workflows, give them `deletion_grace_seconds` to run their exit
   handler, end our syncs still in flight, then drop our finalizer (also when the Workflow is long
   gone or the watcher was down);
2. no finalizer yet → add it (and carry on);
3. a spec the models reject → `Valid=False`, nothing else;
4. a live Workflow the status does not name (created just before a crash) → adopt it;
5. the live rollout: a new spec (the spec hash, which ignores `paused`, changed) → stop it;
   being stopped → wait; `paused` → suspend, and resume only a suspend we made; else follow it
   (current stage, what it waits for);
6. the rollout's Workflow finished but its exit handler recorded nothing (`argo terminate`, an exit
   handler that failed) → wait `finalize_grace_seconds`, then end the rollout's syncs still in
   flight and record the end ourselves;
7. the rollout's Workflow vanished while the status says it runs → end its syncs still in flight,
   report it, never re-create;
8. the ApplicationSet is missing, owned by another ProgressiveSync or rolled out by Argo CD's own
   RollingSync (`spec.strategy`), or the plan has errors →
   `Valid=False` with the reason, nothing started;
9. nothing out of date → up to date;
10. the release due was rolled out already (whatever the outcome: a failed rollout is never
    re-created) → nothing, unless a new `progressivesync.io/retry` token asks for another attempt;
11. a new release, paused → wait and say so;
12. Argo CD has not compared every owned Application since the release (refresh lag) → ask it to
    (`RequestCompare`: the refresh annotation) and wait, `fleet_compare_seconds` at most
    (`FleetCompared=False`, reason `AwaitingFleetComparison`; the wait's start is that condition's
    lastTransitionTime, so a restarted watcher goes on with the same wait), because the Workflow's
    shape (parallelism, batches, deadline) is sized from the plan (`fleet_compare`); at the
    deadline, start with what is known and say so (`FleetComparisonTimedOut`);
13. a Workflow that cannot be built (too many nodes) → `Valid=False` with the builder's reason,
    nothing started; else create the Workflow (built here, identity annotations included) and
    record the rollout (`FleetCompared=True`).

Before rules 3-13 (after the finalizer): a live Workflow of a rollout older than the recorded one
(an `argo retry` or resubmit of an old Workflow, `orchestrator.api.succession`) is stopped, never
adopted; and a rollout that ended Failed or Cancelled with no live Workflow left while Applications
still run syncs of it gets those syncs ended (`EndSyncs`, at most `end_syncs_per_reconcile` at a
time), so a watcher restarted at any moment still ends them.

A release is (spec generation, revisions of the out-of-date Applications), its id the planner's
`release_id`. The generation in it is the one of the last *real* spec change: toggling `paused`
bumps `metadata.generation` but is not a new release (`rollout.specHash` tells them apart).

Status: the decision returns a `StatusPatch` of the fields the watcher owns (docs/
status-ownership.md); `apply_patch` applies it to a fresh status as a re-appliable function for
the optimistic-concurrency writer, and never overwrites the steps' fields.

Callers: `orchestrator.watcher.loop` (`observe` builds the `Observed`, `act` executes the actions);
tests (table-driven, no API server).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from orchestrator.api.metadata import (
    ALLOWED_NAMESPACES_ANNOTATION,
    rollout_workflow_name,
    workflow_name,
)
from orchestrator.api.models import (
    Condition,
    ConditionStatus,
    ObjectMeta,
    ProgressiveSync,
    ProgressiveSyncSpec,
    ProgressiveSyncStatus,
    RolloutPhase,
    RolloutStatus,
)
from orchestrator.api.release import Release, release_id, release_of, revision_key, spec_hash
from orchestrator.api.rollout_status import set_condition, start_rollout
from orchestrator.api.succession import Succession, succession
from orchestrator.argocd.fleet import AppSetView, AppView, OperationPhase
from orchestrator.core.clock import format_time, parse_time
from orchestrator.planning.planner import RolloutPlan
from orchestrator.watcher.fleet_compare import fleet_comparison
from orchestrator.workflows.view import WorkflowView
from workflow_templates.builder import WorkflowBuildError, build_workflow, workflow_object
from workflow_templates.settings import WorkflowSettings

VALID = "Valid"
# ApplicationSet `spec.strategy.type` of Argo CD's own progressive sync, which we refuse to fight.
ROLLING_SYNC = "RollingSync"
READY = "Ready"
PROGRESSING = "Progressing"
PAUSED = "Paused"

# The reason of `Paused=True` when the watcher suspended the Workflow for `spec.paused`: only such
# a suspend is lifted by the watcher (an `argo suspend` by a person is theirs to lift).
PAUSED_BY_SPEC = "SpecPaused"

# Before a rollout starts, Argo CD compares the whole fleet against the release (rule 12).
FLEET_COMPARED = "FleetCompared"
# FleetCompared=False while the watcher waits; its lastTransitionTime is when the wait began.
AWAITING_FLEET_COMPARISON = "AwaitingFleetComparison"
# FleetCompared=True: every owned Application was compared when the Workflow was sized.
FLEET_COMPARED_REASON = "FleetCompared"
# FleetCompared=True: the wait ended at its deadline; the rollout started with what was known.
FLEET_COMPARISON_TIMED_OUT = "FleetComparisonTimedOut"
# FleetCompared=True: a wait ended without a rollout (nothing due any more, or started already).
FLEET_COMPARISON_NOT_NEEDED = "NoComparisonAwaited"

RUNNING_PHASES = (RolloutPhase.PENDING, RolloutPhase.PROGRESSING, RolloutPhase.PAUSED)
TERMINAL_PHASES = (RolloutPhase.SUCCEEDED, RolloutPhase.FAILED, RolloutPhase.CANCELLED)


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
    """Waiting times of the decision, how it builds Workflows and what ProgressiveSyncs may ask for
    (from the watcher's settings)."""

    # After a Workflow ends, its exit handler records the outcome; past this the watcher does.
    finalize_grace_seconds: float = 30.0
    # A deleted ProgressiveSync waits this long for its stopped Workflow before letting go.
    deletion_grace_seconds: float = 30.0
    # The step image, service account, retries and budgets of the Workflows it creates.
    workflow: WorkflowSettings = field(default_factory=WorkflowSettings)
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


# --- outputs ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AddFinalizer:
    """Add `progressivesync.io/workflow` to the ProgressiveSync."""


@dataclass(frozen=True)
class RemoveFinalizer:
    """Remove `progressivesync.io/workflow`: the object may go."""


@dataclass(frozen=True)
class CreateWorkflow:
    """Create `workflow`, the Workflow of one attempt of one release (AlreadyExists: adopt it)."""

    name: str
    release: Release
    # The whole object to create, built by `decide` (its identity annotations included).
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
    """A Kubernetes Event on the ProgressiveSync, for `kubectl describe` (only on transitions)."""

    type: str  # Normal | Warning
    reason: str
    message: str


@dataclass(frozen=True)
class RequeueAfter:
    """Look again after `seconds` even when no event comes (a grace period is running out)."""

    seconds: float


@dataclass(frozen=True)
class ConditionPatch:
    """One condition the watcher sets."""

    type: str
    status: ConditionStatus
    reason: str
    message: str


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


# --- helpers ------------------------------------------------------------------------------------


def _cond(type_: str, status: ConditionStatus, reason: str, message: str) -> ConditionPatch:
    return ConditionPatch(type_, status, reason, message)


def _paused_condition(*, by_spec: bool, message: str = "") -> ConditionPatch:
    if by_spec:
        return _cond(
            PAUSED, ConditionStatus.TRUE, PAUSED_BY_SPEC, message or "spec.paused is true: no new step starts"
        )
    return _cond(PAUSED, ConditionStatus.FALSE, "NotPaused", "spec.paused is false")


def _decision(step: str, reason: str, *actions: Action) -> Decision:
    return Decision(tuple(actions), reason, step)


@dataclass(frozen=True)
class _Context:
    """What every rule after the first few reads: the parsed inputs, computed once."""

    obs: Observed
    spec: ProgressiveSyncSpec
    spec_hash: str
    head: tuple[Action, ...]  # before anything else: AddFinalizer, stale Workflows stopped, syncs ended
    current: WorkflowView | None  # the Workflow of the recorded rollout, when it exists
    live: tuple[WorkflowView, ...]
    base_conditions: tuple[ConditionPatch, ...]  # Valid=False for a refused reference or option
    refusal: tuple[str, str] | None  # (reason, message) why no new rollout may start

    def decision(self, step: str, reason: str, *actions: Action) -> Decision:
        return _decision(step, reason, *self.head, *actions)


# --- the decision -------------------------------------------------------------------------------


def decide(obs: Observed, policy: ReconcilePolicy | None = None) -> Decision:
    """What to do about one ProgressiveSync; see the module docstring for the order of the rules."""
    policy = policy or ReconcilePolicy()
    if obs.deleting:
        return _decide_deletion(obs, policy)
    rollout = obs.status.rollout
    by_name = {wf.name: wf for wf in obs.workflows}
    current_wf = by_name.get(rollout_workflow_name(obs.name, rollout)) if rollout else None
    live = live_workflows(obs.workflows)
    stale = {wf.name: why for wf in live if wf is not current_wf and (why := _stale(obs, wf, current_wf))}
    head: tuple[Action, ...] = (
        *(() if obs.has_finalizer else (AddFinalizer(),)),
        *_stop_stale(obs, live, stale),
        *_end_ended_rollout(obs, live, policy),
    )
    if obs.spec is None:
        patch = StatusPatch(
            observed_generation=obs.generation,
            conditions=(_cond(VALID, ConditionStatus.FALSE, "InvalidSpec", obs.spec_error),),
        )
        return _decision("invalid-spec", f"the spec is invalid: {obs.spec_error}", *head, UpdateStatus(patch))
    refusal = _refusal(obs, policy)
    ctx = _Context(
        obs=obs,
        spec=obs.spec,
        spec_hash=spec_hash(obs.spec),
        head=head,
        current=current_wf,
        live=tuple(wf for wf in live if wf.name not in stale),
        base_conditions=((_cond(VALID, ConditionStatus.FALSE, *refusal),) if refusal is not None else ()),
        refusal=refusal,
    )
    current = ctx.current
    if ctx.live and (current is None or current not in ctx.live):
        return _adopt(ctx)
    if current is not None and current in ctx.live:
        return _decide_live(ctx, current)
    if current is not None and current.is_finished and obs.status.phase not in TERMINAL_PHASES:
        return _record_end(ctx, current, policy)
    if rollout is not None and current is None and obs.status.phase in RUNNING_PHASES:
        return _workflow_deleted(ctx, rollout, policy)
    return _decide_release(ctx, policy)


def _stale(obs: Observed, workflow: WorkflowView, recorded_wf: WorkflowView | None) -> str:
    """Why a live Workflow the status does not name must not be adopted ("" when it may be).

    A Workflow the watcher created and had no time to record is newer than the recorded rollout
    and has the name of its rollout; an old one brought back (`argo retry` keeps the object,
    `argo resubmit` copies it under another name) is older, or a copy: adopting it would roll an
    older release out again and pin the Applications back to its commit.
    """
    if workflow.rollout_id and workflow.name != workflow_name(obs.name, workflow.rollout_id):
        return (
            f"its name is not the one of rollout {workflow.rollout_id}'s Workflow "
            f"({workflow_name(obs.name, workflow.rollout_id)}): a copy (argo resubmit?)"
        )
    verdict, why = succession(
        parse_time(workflow.created),
        recorded=obs.status.rollout,
        recorded_workflow_created=parse_time(recorded_wf.created) if recorded_wf else None,
    )
    return why if verdict == Succession.OLDER else ""


def _stop_stale(obs: Observed, live: Sequence[WorkflowView], stale: Mapping[str, str]) -> tuple[Action, ...]:
    actions: list[Action] = []
    recorded = obs.status.rollout.id if obs.status.rollout else ""
    for wf in live:
        if wf.name not in stale or wf.shutdown:
            continue
        message = (
            f"Workflow {wf.name} of rollout {wf.rollout_id} runs again but is not adopted: {stale[wf.name]}; "
            f"an old Workflow brought back (argo retry) would roll an older release out over rollout "
            f"{recorded}: stopping it"
        )
        actions += [StopWorkflow(wf.name, message), RecordEvent("Warning", "StaleWorkflowStopped", message)]
    return tuple(actions)


def _end_ended_rollout(
    obs: Observed, live: Sequence[WorkflowView], policy: ReconcilePolicy
) -> tuple[Action, ...]:
    """The recorded rollout ended and none of its Workflows runs: end its syncs still in flight.

    Level-triggered, so it holds whoever recorded the end and whenever the watcher restarted: the
    exit handler normally ended them already (then there is nothing left to end), the watcher's own
    end records (rules 6 and 7) end them first, and what one reconcile left over (the bound) or a
    restart interrupted is ended here.
    """
    rollout = obs.status.rollout
    # A rollout that succeeded was never told to stop (the exit handler ends syncs only then too).
    if rollout is None or obs.status.phase not in (RolloutPhase.FAILED, RolloutPhase.CANCELLED):
        return ()
    if any(wf.rollout_id == rollout.id for wf in live):
        return ()
    actions, _ = _end_syncs(obs, {rollout.id}, policy)
    return actions


def _end_syncs(
    obs: Observed, rollout_ids: Collection[str], policy: ReconcilePolicy
) -> tuple[tuple[Action, ...], str]:
    """EndSyncs for the syncs of `rollout_ids` still in flight that need a write (Terminating ones are
    being ended by Argo CD), at most `end_syncs_per_reconcile` (then a requeue for the rest), and a
    clause for messages ("" when there is nothing to end)."""
    pending = [s for s in obs.in_flight if s.rollout_id in rollout_ids and s.phase != "Terminating"]
    if not pending:
        return (), ""
    batch = pending[: max(1, policy.end_syncs_per_reconcile)]
    grouped: dict[tuple[str, str], list[str]] = {}
    for sync in batch:
        namespace = sync.namespace or obs.appset_namespace or obs.namespace
        grouped.setdefault((namespace, sync.rollout_id), []).append(sync.app)
    actions: list[Action] = [EndSyncs(ns, rid, tuple(apps)) for (ns, rid), apps in grouped.items()]
    names = [sync.app for sync in pending]
    shown = ", ".join(names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")
    clause = (
        f"ending the {len(names)} sync(s) of it still in flight ({shown}): a request Argo CD has not "
        "taken up is withdrawn, a running sync is set Terminating"
    )
    if len(pending) > len(batch):
        actions.append(RequeueAfter(1.0))
    return tuple(actions), clause


def _decide_deletion(obs: Observed, policy: ReconcilePolicy) -> Decision:
    if not obs.has_finalizer:
        return _decision("deleted", "being deleted; our finalizer is already gone")
    live = [wf for wf in obs.workflows if wf.is_live]
    stops: list[Action] = [
        StopWorkflow(wf.name, "the ProgressiveSync is being deleted") for wf in live if not wf.shutdown
    ]
    if live:
        started = obs.deletion_started or obs.now
        waited = (obs.now - started).total_seconds()
        if waited < policy.deletion_grace_seconds:
            listed = ", ".join(wf.name for wf in live)
            return _decision(
                "deleting-await-stop",
                f"being deleted: stopping Workflow(s) {listed} and waiting for them to end",
                *stops,
                RequeueAfter(max(0.5, min(5.0, policy.deletion_grace_seconds - waited))),
            )
    gone = (
        "no live Workflow"
        if not live
        else f"Workflow(s) still live after {policy.deletion_grace_seconds:.0f}s"
    )
    # Nothing we started may apply once the object is gone: no exit handler can end it then.
    ours = {wf.rollout_id for wf in obs.workflows if wf.rollout_id}
    if obs.status.rollout is not None:
        ours.add(obs.status.rollout.id)
    ending, clause = _end_syncs(obs, ours, policy)
    if any(isinstance(action, RequeueAfter) for action in ending):
        return _decision("deleting-end-syncs", f"being deleted: {gone}; {clause}", *stops, *ending)
    if ending:
        return _decision(
            "deleting-release",
            f"being deleted: {gone}; {clause}; removing our finalizer",
            *stops,
            *ending,
            RemoveFinalizer(),
        )
    return _decision(
        "deleting-release", f"being deleted: {gone}; removing our finalizer", *stops, RemoveFinalizer()
    )


def _adopt(ctx: _Context) -> Decision:
    """A live Workflow the status does not name: we created it and crashed before recording it."""
    obs = ctx.obs
    adopted = max(ctx.live, key=lambda wf: (wf.generation or 0, wf.attempt, wf.started_at, wf.name))
    stop_others = [
        StopWorkflow(wf.name, f"superseded by Workflow {adopted.name}")
        for wf in ctx.live
        if wf is not adopted and not wf.shutdown
    ]
    message = f"rollout {adopted.rollout_id} runs in Workflow {adopted.name}"
    patch = StatusPatch(
        observed_generation=obs.generation,
        start=_rollout_from_workflow(adopted, obs),
        stage_names=tuple(stage.name for stage in ctx.spec.stages),
        phase=RolloutPhase.PROGRESSING,
        message=message,
        lifecycle=_running_conditions(message),
        force_lifecycle=True,
        conditions=(*ctx.base_conditions, *_wait_over(obs.status, f"rollout {adopted.rollout_id} started")),
    )
    return ctx.decision(
        "adopt",
        f"adopting live Workflow {adopted.name} (rollout {adopted.rollout_id}) the status did not record",
        *stop_others,
        UpdateStatus(patch),
    )


def _decide_live(ctx: _Context, current: WorkflowView) -> Decision:
    """The rollout runs: stop it for a new spec, pause or resume it, or follow it."""
    obs = ctx.obs
    rid = current.rollout_id
    if current.spec_hash and current.spec_hash != ctx.spec_hash:
        message = (
            f"the spec changed (generation {obs.generation}): stopping rollout {rid} before a rollout of "
            "the new spec starts"
        )
        stop: list[Action] = (
            [StopWorkflow(current.name, message), RecordEvent("Normal", "SpecChanged", message)]
            if not current.shutdown
            else []
        )
        patch = StatusPatch(
            observed_generation=obs.generation, message=message, conditions=ctx.base_conditions
        )
        return ctx.decision("stop-for-new-spec", message, *stop, UpdateStatus(patch))
    if current.shutdown:
        message = f"Workflow {current.name} is stopping (shutdown: {current.shutdown})"
        patch = StatusPatch(
            observed_generation=obs.generation, message=message, conditions=ctx.base_conditions
        )
        return ctx.decision("stopping", message, UpdateStatus(patch))

    stage = current.current_stage
    where = f" in stage {stage!r}" if stage else ""
    if ctx.spec.paused:
        message = f"rollout {rid} is paused{where}: running steps finish, no new step starts"
        actions: list[Action] = []
        if not current.suspended:
            actions = [SuspendWorkflow(current.name), RecordEvent("Normal", "Paused", message)]
        patch = StatusPatch(
            observed_generation=obs.generation,
            phase=RolloutPhase.PAUSED,
            message=message,
            current_stage=stage or None,
            lifecycle=_running_conditions(message, reason="RolloutPaused"),
            conditions=(*ctx.base_conditions, _paused_condition(by_spec=True, message=message)),
        )
        return ctx.decision("pause", message, *actions, UpdateStatus(patch))
    if current.suspended and not current.suspended_by_us:
        message = (
            f"rollout {rid} is suspended{where} outside progressive-sync (argo suspend); "
            "`argo resume` continues it"
        )
        patch = StatusPatch(
            observed_generation=obs.generation,
            phase=RolloutPhase.PAUSED,
            message=message,
            current_stage=stage or None,
            lifecycle=_running_conditions(message, reason="WorkflowSuspended"),
            conditions=(
                *ctx.base_conditions,
                _cond(PAUSED, ConditionStatus.TRUE, "WorkflowSuspended", message),
            ),
        )
        return ctx.decision("suspended-by-someone", message, UpdateStatus(patch))

    resume: list[Action] = []
    if current.suspended:  # we suspended it for spec.paused, which is false now
        resume = [ResumeWorkflow(current.name), RecordEvent("Normal", "Resumed", f"rollout {rid} resumed")]
    waiting = {
        "approval": " (waiting for approval: `progressive-sync approve` or `argo resume`)",
        "bake": " (baking)",
    }.get(current.waiting, "")
    message = f"rollout {rid} is progressing{where}{waiting}"
    patch = StatusPatch(
        observed_generation=obs.generation,
        phase=RolloutPhase.PROGRESSING,
        message=message,
        current_stage=stage or None,
        lifecycle=_running_conditions(message),
        conditions=(*ctx.base_conditions, _paused_condition(by_spec=False)),
    )
    return ctx.decision("resume" if resume else "follow", message, *resume, UpdateStatus(patch))


def _record_end(ctx: _Context, current: WorkflowView, policy: ReconcilePolicy) -> Decision:
    """The Workflow ended; its exit handler records the outcome, or we do after a grace period."""
    obs = ctx.obs
    finished = parse_time(current.finished_at) or obs.now
    waited = (obs.now - finished).total_seconds()
    if waited < policy.finalize_grace_seconds:
        patch = StatusPatch(observed_generation=obs.generation, conditions=ctx.base_conditions)
        return ctx.decision(
            "await-exit-handler",
            f"Workflow {current.name} ended {current.phase}; waiting for its exit handler to record it",
            UpdateStatus(patch),
            RequeueAfter(max(0.5, policy.finalize_grace_seconds - waited)),
        )
    phase = _end_phase(current)
    ending, clause = (
        _end_syncs(obs, {current.rollout_id}, policy)
        if current.rollout_id and phase != RolloutPhase.SUCCEEDED
        else ((), "")
    )
    message = (
        f"Workflow {current.name} ended {current.phase}"
        + (f" (shutdown {current.shutdown})" if current.shutdown else "")
        + f" and its exit handler recorded nothing within {policy.finalize_grace_seconds:.0f}s"
        + (f": {current.message}" if current.message else "")
        + (f"; {clause}" if clause else "")
    )
    # Not forced: an end phase the exit handler records meanwhile wins over ours.
    patch = StatusPatch(
        observed_generation=obs.generation,
        finish_rollout=True,
        phase=phase,
        message=message,
        lifecycle=_ended_conditions(phase, f"Rollout{phase.value}", message),
        conditions=ctx.base_conditions,
    )
    return ctx.decision("record-end", message, *ending, UpdateStatus(patch))


def _workflow_deleted(ctx: _Context, rollout: RolloutStatus, policy: ReconcilePolicy) -> Decision:
    """The Workflow vanished while the status says the rollout runs: report it, never re-create it."""
    obs = ctx.obs
    name = rollout_workflow_name(obs.name, rollout)
    ending, clause = _end_syncs(obs, {rollout.id}, policy)
    message = (
        f"Workflow {name} of rollout {rollout.id} was deleted outside progressive-sync"
        + (f"; {clause}" if clause else "")
        + "; it is not re-created (`progressive-sync retry` starts a new attempt)"
    )
    patch = StatusPatch(
        observed_generation=obs.generation,
        finish_rollout=True,
        phase=RolloutPhase.CANCELLED,
        message=message,
        lifecycle=_ended_conditions(RolloutPhase.CANCELLED, "WorkflowDeleted", message),
        conditions=ctx.base_conditions,
    )
    return ctx.decision(
        "workflow-deleted",
        message,
        *ending,
        UpdateStatus(patch),
        RecordEvent("Warning", "WorkflowDeleted", message),
    )


def _decide_release(ctx: _Context, policy: ReconcilePolicy) -> Decision:
    """No rollout runs: is the reference valid, is a release due, was it rolled out already?"""
    obs = ctx.obs
    rollout = obs.status.rollout
    paused = _paused_condition(by_spec=ctx.spec.paused)
    if ctx.refusal is not None:
        message = ctx.refusal[1]
        patch = StatusPatch(
            observed_generation=obs.generation,
            phase=RolloutPhase.PENDING if rollout is None else None,
            message=message if rollout is None else None,
            conditions=(*ctx.base_conditions, paused),
        )
        return ctx.decision("invalid-reference", message, UpdateStatus(patch))
    plan = obs.plan
    if plan is None:
        return ctx.decision("no-plan", "no plan of the fleet at hand; nothing decided")
    if plan.has_errors:
        errors = "; ".join(issue.message for issue in plan.errors)
        patch = StatusPatch(
            observed_generation=obs.generation,
            phase=RolloutPhase.PENDING if rollout is None else None,
            message=f"the plan has errors: {errors}" if rollout is None else None,
            conditions=(_cond(VALID, ConditionStatus.FALSE, "PlanInvalid", errors), paused),
        )
        return ctx.decision("invalid-plan", f"the plan has errors: {errors}", UpdateStatus(patch))
    valid = _cond(
        VALID,
        ConditionStatus.TRUE,
        "Valid",
        f"ApplicationSet {ctx.spec.app_set_ref.name} found; the plan has no errors",
    )
    token_is_new = bool(obs.retry_token) and (
        rollout is None or obs.retry_token != (rollout.retry_token or "")
    )

    if not plan.revisions:
        message = "every cluster is up to date; waiting for a release"
        up_to_date = (
            _cond(READY, ConditionStatus.TRUE, "UpToDate", message),
            _cond(PROGRESSING, ConditionStatus.FALSE, "UpToDate", message),
        )
        wait_over = _wait_over(obs.status, "no release is due any more: nothing to compare")
        if rollout is None:
            patch = StatusPatch(
                observed_generation=obs.generation,
                phase=RolloutPhase.PENDING,
                message=message,
                lifecycle=up_to_date,
                conditions=(valid, paused, *wait_over),
            )
        else:
            # A retry of a release with nothing left to do is handled by doing nothing. A wait for
            # Argo CD's comparison that the release outlived gives the status back its words.
            patch = StatusPatch(
                observed_generation=obs.generation,
                retry_token=obs.retry_token if token_is_new else None,
                message=message if wait_over else None,
                lifecycle=up_to_date if wait_over else (),
                force_lifecycle=bool(wait_over),
                conditions=(valid, paused, *wait_over),
            )
        return ctx.decision("up-to-date", "no Application is out of date", UpdateStatus(patch))

    # The generation in the release id is the one of the last real spec change (not a pause toggle).
    same_spec = rollout is not None and rollout.spec_hash == ctx.spec_hash and rollout.generation is not None
    generation = (
        rollout.generation if same_spec and rollout and rollout.generation is not None else obs.generation
    )
    release = release_id(generation, plan.revisions)
    revision = " ".join(revision_key(r) for r in plan.revisions)
    if rollout is not None and release_of(rollout.id) == release:
        if not token_is_new:
            wait_over = _wait_over(obs.status, f"release {release} was rolled out already")
            patch = StatusPatch(observed_generation=obs.generation, conditions=(valid, paused, *wait_over))
            outcome = obs.status.phase.value if obs.status.phase else "unknown outcome"
            return ctx.decision(
                "already-rolled-out",
                f"release {release} was rolled out already ({outcome}); it is not re-created without a retry",
                UpdateStatus(patch),
            )
        attempt = rollout.attempt + 1
        why = f"retry requested (token {obs.retry_token!r}): attempt {attempt} of release {release}"
    else:
        attempt = 1
        why = f"new release {release} (generation {generation}, revision {revision})"
    if ctx.spec.paused:
        message = f"{why} is due; waiting: spec.paused is true"
        patch = StatusPatch(
            observed_generation=obs.generation,
            phase=RolloutPhase.PAUSED,
            message=message,
            force_lifecycle=True,
            conditions=(valid, _paused_condition(by_spec=True, message=message)),
        )
        return ctx.decision("due-but-paused", message, UpdateStatus(patch))
    compared = _await_fleet(ctx, policy, release=release, why=why, conditions=(valid, paused))
    if isinstance(compared, Decision):
        return compared
    condition, notices, note = compared
    return _create(
        ctx,
        policy,
        release=Release.of(
            generation=generation,
            spec_hash=ctx.spec_hash,
            revisions=plan.revisions,
            attempt=attempt,
            retry_token=obs.retry_token,
        ),
        why=why + note,
        conditions=(valid, paused, condition),
        notices=notices,
    )


def _await_fleet(
    ctx: _Context,
    policy: ReconcilePolicy,
    *,
    release: str,
    why: str,
    conditions: tuple[ConditionPatch, ...],
) -> Decision | tuple[ConditionPatch, tuple[Action, ...], str]:
    """Rule 12: wait (a Decision) until Argo CD compared every owned Application against the
    release, or the wait's deadline passed; then (the FleetCompared condition, Events, a note for
    the rollout's message) for `_create`."""
    obs = ctx.obs
    assert obs.plan is not None
    app_set = ctx.spec.app_set_ref.name
    began = wait_began(obs.status)
    since = began or obs.now
    comparison = fleet_comparison(
        obs.apps,
        app_set_name=app_set,
        app_set_uid=obs.appset.uid if obs.appset else "",
        release=obs.plan.revisions,
        since=since,
    )
    limit = policy.fleet_compare_seconds
    if comparison.complete:
        message = (
            f"Argo CD had compared all {comparison.owned} Application(s) of ApplicationSet {app_set} "
            f"against release {release} when its Workflow was sized"
        )
        return _cond(FLEET_COMPARED, ConditionStatus.TRUE, FLEET_COMPARED_REASON, message), (), ""
    waited = (obs.now - since).total_seconds()
    left = comparison.unanswered
    if waited >= limit:
        message = (
            f"Argo CD did not compare {len(left)} of {comparison.owned} Application(s) against release "
            f"{release} within {limit:g} s: {_listed(left)}; the rollout started with what was known: "
            "their clusters were sized by their last comparison (a later stage's select asks Argo CD "
            "again and takes them if they are behind the release)"
        )
        note = f"; started with what was known: Argo CD did not compare {len(left)} Application(s) in time"
        event = RecordEvent("Warning", FLEET_COMPARISON_TIMED_OUT, message)
        timed_out = _cond(FLEET_COMPARED, ConditionStatus.TRUE, FLEET_COMPARISON_TIMED_OUT, message)
        return timed_out, (event,), note
    deadline = since + timedelta(seconds=limit)
    message = (
        f"{why} is due: waiting until {format_time(deadline)} (at most {limit:g} s) for Argo CD to "
        f"compare every Application of ApplicationSet {app_set} against it, so that the Workflow is "
        "sized for the clusters each stage really has; at the deadline the rollout starts with what "
        "is known"
    )
    # A False left behind by an earlier wait is flipped first, so that its lastTransitionTime, the
    # start of this wait, is now.
    stale = _fleet_condition(obs.status)
    flip = (
        (_cond(FLEET_COMPARED, ConditionStatus.TRUE, FLEET_COMPARISON_NOT_NEEDED, "an earlier wait ended"),)
        if began is None and stale is not None and stale.status == ConditionStatus.FALSE
        else ()
    )
    patch = StatusPatch(
        observed_generation=obs.generation,
        phase=RolloutPhase.PENDING if obs.status.rollout is None else None,
        message=message,
        lifecycle=_running_conditions(message, reason=AWAITING_FLEET_COMPARISON),
        force_lifecycle=True,
        conditions=(
            *conditions,
            *flip,
            _cond(FLEET_COMPARED, ConditionStatus.FALSE, AWAITING_FLEET_COMPARISON, message),
        ),
    )
    actions: list[Action] = [UpdateStatus(patch)]
    if began is None:
        actions.append(
            RecordEvent(
                "Normal",
                AWAITING_FLEET_COMPARISON,
                f"{message} ({len(left)} of {comparison.owned} Application(s) not compared yet)",
            )
        )
    if comparison.to_ask:
        actions.append(RequestCompare(obs.appset_namespace or obs.namespace, comparison.to_ask, release))
    remaining = limit - waited
    actions.append(RequeueAfter(max(0.5, min(5.0, remaining))))
    return ctx.decision(
        "await-fleet-comparison",
        f"{why}: waiting for Argo CD to compare {len(left)} of {comparison.owned} Application(s) "
        f"({len(comparison.to_ask)} asked now, {len(comparison.pending)} pending), {remaining:.0f} s left",
        *actions,
    )


def _fleet_condition(status: ProgressiveSyncStatus) -> Condition | None:
    return next((c for c in status.conditions or [] if c.type == FLEET_COMPARED), None)


def wait_began(status: ProgressiveSyncStatus) -> datetime | None:
    """When the watcher began waiting for Argo CD to compare the fleet (rule 12), or None.

    `FleetCompared=False` with reason AwaitingFleetComparison; its lastTransitionTime is the start.
    One no later than the recorded rollout's start is left from a wait that ended in that rollout
    (a watcher that died between creating the Workflow and recording it adopts it: rule 4).
    """
    condition = _fleet_condition(status)
    if condition is None or condition.status != ConditionStatus.FALSE:
        return None
    if condition.reason != AWAITING_FLEET_COMPARISON:
        return None
    began = condition.last_transition_time
    rollout = status.rollout
    if rollout is not None and rollout.started_at is not None and began <= rollout.started_at:
        return None
    return began


def _wait_over(status: ProgressiveSyncStatus, why: str) -> tuple[ConditionPatch, ...]:
    """FleetCompared back to True when a wait ended without a rollout of its own; () when none ran."""
    condition = _fleet_condition(status)
    if condition is None or condition.status != ConditionStatus.FALSE:
        return ()
    return (_cond(FLEET_COMPARED, ConditionStatus.TRUE, FLEET_COMPARISON_NOT_NEEDED, why),)


def _listed(names: Sequence[str], limit: int = 10) -> str:
    shown = ", ".join(names[:limit])
    return f"{shown} and {len(names) - limit} more" if len(names) > limit else shown


def _create(
    ctx: _Context,
    policy: ReconcilePolicy,
    *,
    release: Release,
    why: str,
    conditions: tuple[ConditionPatch, ...],
    notices: tuple[Action, ...] = (),
) -> Decision:
    obs = ctx.obs
    assert obs.plan is not None
    rollout_id = release.rollout_id
    workflow = workflow_name(obs.name, rollout_id)
    ps = ProgressiveSync(
        metadata=ObjectMeta(name=obs.name, namespace=obs.namespace, uid=obs.uid or None),
        spec=ctx.spec,
    )
    try:
        body = workflow_object(build_workflow(ps, release=release, plan=obs.plan, settings=policy.workflow))
    except WorkflowBuildError as exc:
        # Nothing starts and nothing else changes: the spec must change (or the limit be raised).
        patch = StatusPatch(
            observed_generation=obs.generation,
            conditions=(_cond(VALID, ConditionStatus.FALSE, "WorkflowInvalid", str(exc)),),
        )
        return ctx.decision("workflow-invalid", f"cannot build the Workflow: {exc}", UpdateStatus(patch))
    create = CreateWorkflow(name=workflow, release=release, workflow=body)
    message = f"rollout {rollout_id} started in Workflow {workflow}: {why}"
    patch = StatusPatch(
        observed_generation=obs.generation,
        start=_rollout_status(create, obs.now),
        stage_names=tuple(stage.name for stage in ctx.spec.stages),
        progress_total=sum(len(stage.targets) for stage in obs.plan.stages),
        phase=RolloutPhase.PROGRESSING,
        message=message,
        lifecycle=_running_conditions(message),
        force_lifecycle=True,
        conditions=conditions,
    )
    return ctx.decision(
        "create", why, create, UpdateStatus(patch), RecordEvent("Normal", "RolloutStarted", message), *notices
    )


def _refusal(obs: Observed, policy: ReconcilePolicy) -> tuple[str, str] | None:
    """Why this ProgressiveSync may not start a rollout (reason, message), or None.

    In order: sync options the installation does not allow; then who may roll out what (the
    ApplicationSet is looked up where the spec says: `appSetRef.namespace`, else the
    ProgressiveSync's own namespace; it must be in a namespace the watcher reads, exist, admit the
    ProgressiveSync's namespace, and not be rolled out by another admitted ProgressiveSync).
    """
    if obs.spec is None:
        return None
    options = _sync_options_refusal(obs.spec, policy)
    if options is not None:
        return options
    name = obs.spec.app_set_ref.name
    appset_namespace = obs.appset_namespace or obs.namespace
    if not obs.appset_watched:
        watched = ", ".join(obs.watched_appset_namespaces) or "none"
        return (
            "ApplicationSetNamespaceNotWatched",
            f"ApplicationSet {appset_namespace}/{name}: this installation reads ApplicationSets only in "
            f"namespace(s) {watched}; set spec.appSetRef.namespace to one of them",
        )
    if obs.appset is None:
        message = f"ApplicationSet {name} in namespace {appset_namespace} does not exist"
        return "ApplicationSetNotFound", message
    if not obs.appset.admits(obs.namespace):
        allowed = ", ".join(obs.appset.allowed_namespaces) or "none"
        return (
            "NamespaceNotAllowed",
            f"ApplicationSet {appset_namespace}/{name} may be rolled out only by ProgressiveSyncs of its "
            f"own namespace or of the namespaces its annotation {ALLOWED_NAMESPACES_ANNOTATION} lists "
            f"({allowed}), not of namespace {obs.namespace}; its owner can add {obs.namespace} there",
        )
    if obs.claimed_by:
        return (
            "ApplicationSetClaimed",
            f"ApplicationSet {name} is already rolled out by ProgressiveSync {obs.claimed_by}; "
            "one ApplicationSet has one ProgressiveSync",
        )
    if obs.appset.strategy == ROLLING_SYNC:
        # Argo CD's own progressive sync (applicationset/controllers/progressive_sync.go) syncs the
        # same Applications step by step: two orchestrators would race over every sync.
        return (
            "ApplicationSetRollingSync",
            f"ApplicationSet {name} uses Argo CD's RollingSync (spec.strategy.type: RollingSync), which "
            "syncs its Applications itself; remove spec.strategy (or set type AllAtOnce) to roll it out "
            "with this ProgressiveSync",
        )
    return None


def _sync_options_refusal(spec: ProgressiveSyncSpec, policy: ReconcilePolicy) -> tuple[str, str] | None:
    """The first sync option of the spec the installation does not allow, as (reason, message)."""
    if spec.sync_options.prune and not policy.allow_prune:
        return (
            "SyncOptionNotAllowed",
            "spec.syncOptions.prune: true is not allowed by this installation (the chart's "
            "policy.allowPrune, the watcher's --allow-prune); set it to false or ask the operators",
        )
    if ANY_SYNC_OPTION in policy.allowed_sync_options:
        return None
    for index, option in enumerate(spec.sync_options.options or []):
        if option not in policy.allowed_sync_options:
            allowed = ", ".join(policy.allowed_sync_options) or "none"
            return (
                "SyncOptionNotAllowed",
                f"spec.syncOptions.options[{index}]: {option} is not allowed by this installation "
                f"(allowed: {allowed}; the chart's policy.allowedSyncOptions, the watcher's "
                "--allowed-sync-option)",
            )
    return None


def _end_phase(workflow: WorkflowView) -> RolloutPhase:
    if workflow.shutdown:
        return RolloutPhase.CANCELLED
    if workflow.phase == "Succeeded":
        return RolloutPhase.SUCCEEDED
    return RolloutPhase.FAILED


def _running_conditions(message: str, reason: str = "RolloutProgressing") -> tuple[ConditionPatch, ...]:
    return (
        _cond(READY, ConditionStatus.FALSE, reason, message),
        _cond(PROGRESSING, ConditionStatus.TRUE, reason, message),
    )


def _ended_conditions(phase: RolloutPhase, reason: str, message: str) -> tuple[ConditionPatch, ...]:
    ready = ConditionStatus.TRUE if phase == RolloutPhase.SUCCEEDED else ConditionStatus.FALSE
    return (_cond(READY, ready, reason, message), _cond(PROGRESSING, ConditionStatus.FALSE, reason, message))


def _rollout_status(create: CreateWorkflow, now: datetime) -> RolloutStatus:
    release = create.release
    return RolloutStatus(
        id=release.rollout_id,
        revision=release.display,
        workflow=create.name,
        attempt=release.attempt,
        started_at=now,
        generation=release.generation,
        spec_hash=release.spec_hash,
        retry_token=release.retry_token or None,
    )


def _rollout_from_workflow(workflow: WorkflowView, obs: Observed) -> RolloutStatus:
    return RolloutStatus(
        id=workflow.rollout_id or workflow.name,
        revision=workflow.revision,
        workflow=workflow.name,
        attempt=workflow.attempt,
        started_at=parse_time(workflow.started_at) or obs.now,
        generation=workflow.generation,
        spec_hash=workflow.spec_hash or None,
        retry_token=workflow.retry_token or None,
    )


# --- applying the patch -------------------------------------------------------------------------


def apply_patch(status: ProgressiveSyncStatus, patch: StatusPatch, now: datetime) -> ProgressiveSyncStatus:
    """Set the watcher's fields of `status` from `patch` (a copy the caller may change).

    Safe to re-apply to a fresher status after a conflict: it states end values, keeps the
    steps' fields (stages, their clusters, finishedAt once set, an end phase they recorded) and
    moves a condition's lastTransitionTime only when its status flips.
    """
    generation = patch.observed_generation
    status.observed_generation = generation
    if patch.start is not None:
        start = patch.start
        # The steps' own start (select) resets the stages for a new rollout id; same function here.
        start_rollout(
            status,
            rollout_id=start.id,
            stage_names=patch.stage_names,
            now=start.started_at or now,
            revision=start.revision,
            generation=generation,
        )
        assert status.rollout is not None
        status.rollout.workflow = start.workflow
        status.rollout.attempt = start.attempt
        status.rollout.generation = start.generation
        status.rollout.spec_hash = start.spec_hash
        status.rollout.retry_token = start.retry_token
        if start.started_at is not None and status.rollout.started_at is None:
            status.rollout.started_at = start.started_at
        if patch.progress_total is not None and status.progress is None:
            status.progress = f"0/{patch.progress_total}"
    if patch.retry_token is not None and status.rollout is not None:
        status.rollout.retry_token = patch.retry_token
    if patch.finish_rollout and status.rollout is not None and status.rollout.finished_at is None:
        status.rollout.finished_at = now
    lifecycle_open = patch.force_lifecycle or status.phase not in TERMINAL_PHASES
    if lifecycle_open:
        if patch.phase is not None:
            status.phase = patch.phase
        if patch.message is not None:
            status.message = patch.message
        if patch.current_stage is not None:
            status.current_stage = patch.current_stage
        for condition in patch.lifecycle:
            _set(status, condition, now, generation)
    for condition in patch.conditions:
        _set(status, condition, now, generation)
    return status


def live_workflows(workflows: Sequence[WorkflowView]) -> list[WorkflowView]:
    """The Workflows that may still run steps (the watcher plans a new rollout only without them)."""
    return [wf for wf in workflows if wf.is_live and not wf.deleting]


def _set(status: ProgressiveSyncStatus, condition: ConditionPatch, now: datetime, generation: int) -> None:
    set_condition(
        status,
        condition.type,
        value=condition.status,
        reason=condition.reason,
        message=condition.message,
        now=now,
        generation=generation,
    )
