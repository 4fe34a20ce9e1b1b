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
3. a spec the models reject → `Valid=False` (`InvalidSpec`), nothing else;
4. a live Workflow the status does not name (created just before a crash) → adopt it;
5. the live rollout: its end recorded already (a success its last cluster recorded,
   steps/rollout_end.py) → let its Workflow finish its last steps (no stop, no suspend; a suspend
   we made is resumed); a new spec (the spec hash, which ignores `paused`, changed) → stop it;
   being stopped → wait; `paused` → suspend, and resume only a suspend we made; else follow it
   (current stage, what it waits for);
6. the rollout's Workflow finished but its exit handler recorded nothing (`argo terminate`, an exit
   handler that failed) → wait `finalize_grace_seconds`, then end the rollout's syncs still in
   flight and record the end ourselves;
7. the rollout's Workflow vanished while the status says it runs → end its syncs still in flight,
   report it (`WorkflowDeleted`), never re-create;
8-13. no rollout runs → `orchestrator.watcher.decide_release`: refused (`orchestrator.watcher.
   refusal`) or a plan with errors, up to date, rolled out already, due but paused, waiting for
   Argo CD's comparison (`orchestrator.watcher.fleet_wait`), or create the Workflow.

Before rules 3-13 (after the finalizer): a live Workflow of a rollout older than the recorded one
(an `argo retry` or resubmit of an old Workflow, `orchestrator.api.succession`) is stopped, never
adopted; and a rollout that ended Failed or Cancelled with no live Workflow left while Applications
still run syncs of it gets those syncs ended (`EndSyncs`, at most `end_syncs_per_reconcile` at a
time), so a watcher restarted at any moment still ends them.

The inputs and actions are data (`orchestrator.watcher.decision`); every condition and Event carries
a `Reason` of the catalog (`orchestrator.api.reasons`); the status patch is applied by
`orchestrator.watcher.status_patch.apply_patch`. Nothing here builds the Workflow object or calls an
adapter: `CreateWorkflow` is built by `orchestrator.watcher.build`, then `act` carries it out.

Callers: `orchestrator.watcher.loop` (`observe` builds the `Observed`, `build` then `act` carry the
decision out); tests (table-driven, no API server).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from orchestrator.api.conditions import ConditionType
from orchestrator.api.metadata import rollout_workflow_name, workflow_name
from orchestrator.api.models import ConditionStatus, RolloutPhase, RolloutStatus
from orchestrator.api.phases import FINISHED_ROLLOUT_PHASES, STOPPED_ROLLOUT_PHASES, UNFINISHED_ROLLOUT_PHASES
from orchestrator.api.reasons import ROLLOUT_ENDED, Reason
from orchestrator.api.release import spec_hash
from orchestrator.api.rollout_status import is_finalized
from orchestrator.api.succession import Succession, succession
from orchestrator.core.clock import parse_time
from orchestrator.watcher.decide_release import decide_release
from orchestrator.watcher.decision import (
    Action,
    AddFinalizer,
    Context,
    Decision,
    EndSyncs,
    Observed,
    ReconcilePolicy,
    RecordEvent,
    RemoveFinalizer,
    RequeueAfter,
    ResumeWorkflow,
    StatusPatch,
    StopWorkflow,
    SuspendWorkflow,
    UpdateStatus,
    live_workflows,
)
from orchestrator.watcher.fleet_wait import wait_over
from orchestrator.watcher.refusal import refusal_of
from orchestrator.watcher.status_patch import (
    condition,
    ended_conditions,
    paused_condition,
    running_conditions,
)
from orchestrator.workflows.view import WorkflowView


def _decision(step: str, reason: str, *actions: Action) -> Decision:
    return Decision(tuple(actions), reason, step)


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
            conditions=(
                condition(ConditionType.VALID, ConditionStatus.FALSE, Reason.INVALID_SPEC, obs.spec_error),
            ),
        )
        return _decision("invalid-spec", f"the spec is invalid: {obs.spec_error}", *head, UpdateStatus(patch))
    refusal = refusal_of(obs, policy)
    ctx = Context(
        obs=obs,
        spec=obs.spec,
        spec_hash=spec_hash(obs.spec),
        head=head,
        current=current_wf,
        live=tuple(wf for wf in live if wf.name not in stale),
        base_conditions=(
            (condition(ConditionType.VALID, ConditionStatus.FALSE, refusal.reason, refusal.message),)
            if refusal is not None
            else ()
        ),
        refusal=refusal,
    )
    current = ctx.current
    if ctx.live and (current is None or current not in ctx.live):
        return _adopt(ctx)
    if current is not None and current in ctx.live:
        return _decide_live(ctx, current)
    if current is not None and current.is_finished and obs.status.phase not in FINISHED_ROLLOUT_PHASES:
        return _record_end(ctx, current, policy)
    if rollout is not None and current is None and obs.status.phase in UNFINISHED_ROLLOUT_PHASES:
        return _workflow_deleted(ctx, rollout, policy)
    return decide_release(ctx, policy)


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
        message = Reason.STALE_WORKFLOW_STOPPED.say(
            workflow=wf.name, rollout=wf.rollout_id, why=stale[wf.name], recorded=recorded
        )
        actions += [
            StopWorkflow(wf.name, message),
            RecordEvent("Warning", Reason.STALE_WORKFLOW_STOPPED, message),
        ]
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
    if rollout is None or obs.status.phase not in STOPPED_ROLLOUT_PHASES:
        return ()
    if any(wf.rollout_id == rollout.id for wf in live):
        return ()
    actions, _ = end_syncs(obs, {rollout.id}, policy)
    return actions


def end_syncs(
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
    ending, clause = end_syncs(obs, ours, policy)
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


def _adopt(ctx: Context) -> Decision:
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
        # With spec.groupBy the stages are the Workflow's "<group>/<stage>" ones, which the watcher
        # does not know here: each step's status write adds its own (`rollout_status.stage_of`).
        stage_names=() if ctx.spec.group_by else tuple(stage.name for stage in ctx.spec.stages),
        phase=RolloutPhase.PROGRESSING,
        message=message,
        lifecycle=running_conditions(message),
        force_lifecycle=True,
        conditions=(*ctx.base_conditions, *wait_over(obs.status, f"rollout {adopted.rollout_id} started")),
    )
    return ctx.decision(
        "adopt",
        f"adopting live Workflow {adopted.name} (rollout {adopted.rollout_id}) the status did not record",
        *stop_others,
        UpdateStatus(patch),
    )


def _decide_live(ctx: Context, current: WorkflowView) -> Decision:
    """The rollout runs: stop it for a new spec, pause or resume it, or follow it."""
    obs = ctx.obs
    rid = current.rollout_id
    if is_finalized(obs.status) and obs.status.rollout is not None and obs.status.rollout.id == rid:
        # Its last cluster recorded the end (steps/rollout_end.py) and the Workflow runs its last
        # steps, which write nothing: neither stopped for a new spec nor suspended for a pause (a
        # stop would only show it Failed in Argo); the next release waits for it to end.
        message = f"rollout {rid} ended {obs.status.phase}; Workflow {current.name} finishes its last steps"
        ending: list[Action] = []
        if current.suspended and current.suspended_by_us:  # paused while its end was being recorded
            ending = [ResumeWorkflow(current.name)]
        patch = StatusPatch(observed_generation=obs.generation, conditions=ctx.base_conditions)
        return ctx.decision("await-workflow-end", message, *ending, UpdateStatus(patch))
    if current.spec_hash and current.spec_hash != ctx.spec_hash:
        message = Reason.SPEC_CHANGED.say(generation=obs.generation, rollout=rid)
        stop: list[Action] = (
            [StopWorkflow(current.name, message), RecordEvent("Normal", Reason.SPEC_CHANGED, message)]
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
        message = Reason.ROLLOUT_PAUSED.say(rollout=rid, where=where)
        actions: list[Action] = []
        if not current.suspended:
            actions = [SuspendWorkflow(current.name), RecordEvent("Normal", Reason.PAUSED, message)]
        patch = StatusPatch(
            observed_generation=obs.generation,
            phase=RolloutPhase.PAUSED,
            message=message,
            current_stage=stage or None,
            lifecycle=running_conditions(message, reason=Reason.ROLLOUT_PAUSED),
            conditions=(*ctx.base_conditions, paused_condition(by_spec=True, message=message)),
        )
        return ctx.decision("pause", message, *actions, UpdateStatus(patch))
    if current.suspended and not current.suspended_by_us:
        message = Reason.WORKFLOW_SUSPENDED.say(rollout=rid, where=where)
        patch = StatusPatch(
            observed_generation=obs.generation,
            phase=RolloutPhase.PAUSED,
            message=message,
            current_stage=stage or None,
            lifecycle=running_conditions(message, reason=Reason.WORKFLOW_SUSPENDED),
            conditions=(
                *ctx.base_conditions,
                condition(ConditionType.PAUSED, ConditionStatus.TRUE, Reason.WORKFLOW_SUSPENDED, message),
            ),
        )
        return ctx.decision("suspended-by-someone", message, UpdateStatus(patch))

    resume: list[Action] = []
    if current.suspended:  # we suspended it for spec.paused, which is false now
        resume = [
            ResumeWorkflow(current.name),
            RecordEvent("Normal", Reason.RESUMED, Reason.RESUMED.say(rollout=rid)),
        ]
    waiting = {
        "approval": " (waiting for approval: `progressive-sync approve` or `argo resume`)",
        "bake": " (baking)",
    }.get(current.waiting, "")
    message = Reason.ROLLOUT_PROGRESSING.say(rollout=rid, where=where, waiting=waiting)
    patch = StatusPatch(
        observed_generation=obs.generation,
        phase=RolloutPhase.PROGRESSING,
        message=message,
        current_stage=stage or None,
        lifecycle=running_conditions(message),
        conditions=(*ctx.base_conditions, paused_condition(by_spec=False)),
    )
    return ctx.decision("resume" if resume else "follow", message, *resume, UpdateStatus(patch))


def _record_end(ctx: Context, current: WorkflowView, policy: ReconcilePolicy) -> Decision:
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
        end_syncs(obs, {current.rollout_id}, policy)
        if current.rollout_id and phase != RolloutPhase.SUCCEEDED
        else ((), "")
    )
    message = (
        f"Workflow {current.name} ended {current.phase}"
        + (f" (shutdown {current.shutdown})" if current.shutdown else "")
        + f" and its exit handler recorded nothing within {policy.finalize_grace_seconds:.0f}s"
        + (f": {current.message}" if current.message else "")
        + (f"; {clause}" if clause else "")
        + (ROLLBACK_STOPPED if obs.status.phase == RolloutPhase.ROLLING_BACK else "")
    )
    # Not forced: an end phase the exit handler records meanwhile wins over ours.
    patch = StatusPatch(
        observed_generation=obs.generation,
        finish_rollout=True,
        phase=phase,
        message=message,
        lifecycle=ended_conditions(phase, ROLLOUT_ENDED[phase], message),
        conditions=ctx.base_conditions,
    )
    return ctx.decision("record-end", message, *ending, UpdateStatus(patch))


def _workflow_deleted(ctx: Context, rollout: RolloutStatus, policy: ReconcilePolicy) -> Decision:
    """The Workflow vanished while the status says the rollout runs: report it, never re-create it."""
    obs = ctx.obs
    name = rollout_workflow_name(obs.name, rollout)
    ending, clause = end_syncs(obs, {rollout.id}, policy)
    message = (
        f"Workflow {name} of rollout {rollout.id} was deleted outside progressive-sync"
        + (f"; {clause}" if clause else "")
        + (ROLLBACK_STOPPED if obs.status.phase == RolloutPhase.ROLLING_BACK else "")
        + "; it is not re-created (`progressive-sync retry` starts a new attempt)"
    )
    patch = StatusPatch(
        observed_generation=obs.generation,
        finish_rollout=True,
        phase=RolloutPhase.CANCELLED,
        message=message,
        lifecycle=ended_conditions(RolloutPhase.CANCELLED, Reason.WORKFLOW_DELETED, message),
        conditions=ctx.base_conditions,
    )
    return ctx.decision(
        "workflow-deleted",
        message,
        *ending,
        UpdateStatus(patch),
        RecordEvent("Warning", Reason.WORKFLOW_DELETED, message),
    )


# Said when a rollout ends while its rollback ran (a Workflow terminated or deleted meanwhile).
ROLLBACK_STOPPED = (
    "; its rollback was stopped before it finished: the clusters it restored stay restored, the "
    "others keep the release (each cluster's rollback: `progressive-sync status NAME -o wide`)"
)


def _end_phase(workflow: WorkflowView) -> RolloutPhase:
    if workflow.shutdown:
        return RolloutPhase.CANCELLED
    if workflow.phase == "Succeeded":
        return RolloutPhase.SUCCEEDED
    return RolloutPhase.FAILED


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
