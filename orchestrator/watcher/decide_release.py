"""Rules 8-13 of the watcher's decision: no rollout runs; may one start, and which?

`decide_release(ctx, policy)` is what `decide` returns when no Workflow of the recorded rollout is
live and nothing is left to record. In order:

8. a refusal (`orchestrator.watcher.refusal`: ApplicationSet missing, in a namespace not read, not
   admitting us, claimed, on RollingSync; a sync option not allowed) or a plan with errors →
   `Valid=False` with the reason, nothing started (and, once a release is due, a stage's analysis
   that cannot run: a template missing, an argument without a value; see rule 11);
9. nothing out of date → up to date (`UpToDate`);
10. the release due was rolled out already (whatever the outcome: a failed rollout is never
    re-created) → nothing, unless a new `progressivesync.io/retry` token asks for another attempt;
11. a new release (or a retry) whose analysis cannot run (`Observed.analysis_blocker`:
    AnalysisTemplateNotFound, AnalysisArgMissing, AnalysisMetricDuplicate) → `Valid=False`, nothing
    started; looked at again every `ANALYSIS_RECHECK_SECONDS` (no informer watches templates); a new
    release, paused → wait and say so;
12. Argo CD has not compared the fleet against the release → wait (`orchestrator.watcher.fleet_wait`);
13. else create the Workflow and record the rollout: `CreateWorkflow` says what to create (the
    ProgressiveSync, the release, the plan) as data; `orchestrator.watcher.build` builds the object
    outside this pure decision (a Workflow that cannot be built becomes `Valid=False`,
    `WorkflowInvalid`, there).

A release is (spec generation, revisions of the out-of-date Applications), its id the planner's
`release_id`. The generation in it is the one of the last *real* spec change: toggling `paused`
bumps `metadata.generation` but is not a new release (`rollout.specHash` tells them apart).

Callers: `orchestrator.watcher.decide`; tests through `decide`.
"""

from __future__ import annotations

from datetime import datetime

from orchestrator.api.conditions import ConditionType
from orchestrator.api.metadata import workflow_name
from orchestrator.api.models import (
    ConditionStatus,
    ObjectMeta,
    ProgressiveSync,
    RolloutPhase,
    RolloutStatus,
)
from orchestrator.api.reasons import Reason
from orchestrator.api.release import Release, release_id, release_of, revision_key
from orchestrator.watcher.decision import (
    Action,
    ConditionPatch,
    Context,
    CreateWorkflow,
    Decision,
    ReconcilePolicy,
    RecordEvent,
    RequeueAfter,
    StatusPatch,
    UpdateStatus,
)
from orchestrator.watcher.fleet_wait import await_fleet, wait_over
from orchestrator.watcher.status_patch import condition, paused_condition, running_conditions
from orchestrator.watcher.transitions import TransitionKind, transition_identity

# A template created or fixed is seen this soon (the watcher has no informer of templates).
ANALYSIS_RECHECK_SECONDS = 15.0


def decide_release(ctx: Context, policy: ReconcilePolicy) -> Decision:
    """No rollout runs: is the reference valid, is a release due, was it rolled out already?"""
    obs = ctx.obs
    rollout = obs.status.rollout
    paused = paused_condition(by_spec=ctx.spec.paused)
    if ctx.refusal is not None:
        message = ctx.refusal.message
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
            conditions=(
                condition(ConditionType.VALID, ConditionStatus.FALSE, Reason.PLAN_INVALID, errors),
                paused,
            ),
        )
        return ctx.decision("invalid-plan", f"the plan has errors: {errors}", UpdateStatus(patch))
    valid = condition(
        ConditionType.VALID,
        ConditionStatus.TRUE,
        Reason.VALID,
        Reason.VALID.say(app_set=ctx.spec.app_set_ref.name),
    )
    token_is_new = bool(obs.retry_token) and (
        rollout is None or obs.retry_token != (rollout.retry_token or "")
    )

    if not plan.revisions:
        message = Reason.UP_TO_DATE.say()
        up_to_date = (
            condition(ConditionType.READY, ConditionStatus.TRUE, Reason.UP_TO_DATE, message),
            condition(ConditionType.PROGRESSING, ConditionStatus.FALSE, Reason.UP_TO_DATE, message),
        )
        ended_wait = wait_over(obs.status, "no release is due any more: nothing to compare")
        if rollout is None:
            patch = StatusPatch(
                observed_generation=obs.generation,
                phase=RolloutPhase.PENDING,
                message=message,
                lifecycle=up_to_date,
                conditions=(valid, paused, *ended_wait),
            )
        else:
            # A retry of a release with nothing left to do is handled by doing nothing. A wait for
            # Argo CD's comparison that the release outlived gives the status back its words.
            patch = StatusPatch(
                observed_generation=obs.generation,
                retry_token=obs.retry_token if token_is_new else None,
                message=message if ended_wait else None,
                lifecycle=up_to_date if ended_wait else (),
                force_lifecycle=bool(ended_wait),
                conditions=(valid, paused, *ended_wait),
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
            ended_wait = wait_over(obs.status, f"release {release} was rolled out already")
            patch = StatusPatch(observed_generation=obs.generation, conditions=(valid, paused, *ended_wait))
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
    if obs.analysis_blocker is not None:
        blocker = obs.analysis_blocker
        message = f"{why} is due, but its analysis cannot run: {blocker.message}"
        patch = StatusPatch(
            observed_generation=obs.generation,
            phase=RolloutPhase.PENDING if rollout is None else None,
            message=message if rollout is None else None,
            conditions=(
                condition(ConditionType.VALID, ConditionStatus.FALSE, blocker.reason, blocker.message),
                paused,
            ),
        )
        return ctx.decision(
            "invalid-analysis", message, UpdateStatus(patch), RequeueAfter(ANALYSIS_RECHECK_SECONDS)
        )
    if ctx.spec.paused:
        message = f"{why} is due; waiting: spec.paused is true"
        patch = StatusPatch(
            observed_generation=obs.generation,
            phase=RolloutPhase.PAUSED,
            message=message,
            force_lifecycle=True,
            conditions=(valid, paused_condition(by_spec=True, message=message)),
        )
        return ctx.decision("due-but-paused", message, UpdateStatus(patch))
    compared = await_fleet(ctx, policy, release=release, why=why, conditions=(valid, paused))
    if isinstance(compared, Decision):
        return compared
    fleet_compared, notices, note = compared
    return _create(
        ctx,
        release=Release.of(
            generation=generation,
            spec_hash=ctx.spec_hash,
            revisions=plan.revisions,
            attempt=attempt,
            retry_token=obs.retry_token,
        ),
        why=why + note,
        conditions=(valid, paused, fleet_compared),
        notices=notices,
    )


def _create(
    ctx: Context,
    *,
    release: Release,
    why: str,
    conditions: tuple[ConditionPatch, ...],
    notices: tuple[Action, ...] = (),
) -> Decision:
    """Rule 13: create the Workflow of `release` (as data: `build` makes the object) and record the
    rollout as started."""
    obs = ctx.obs
    assert obs.plan is not None
    rollout_id = release.rollout_id
    workflow = workflow_name(obs.name, rollout_id)
    ps = ProgressiveSync(
        metadata=ObjectMeta(name=obs.name, namespace=obs.namespace, uid=obs.uid or None),
        spec=ctx.spec,
    )
    create = CreateWorkflow(name=workflow, release=release, ps=ps, plan=obs.plan)
    message = Reason.ROLLOUT_STARTED.say(rollout=rollout_id, workflow=workflow, why=why)
    patch = StatusPatch(
        observed_generation=obs.generation,
        start=_rollout_status(create, obs.now),
        # With spec.groupBy, every group's "<group>/<stage>" (the plan's), as the Workflow runs them.
        stage_names=tuple(
            stage.name for stage in (obs.plan.stages if ctx.spec.group_by else ctx.spec.stages)
        ),
        progress_total=sum(len(stage.targets) for stage in obs.plan.stages),
        phase=RolloutPhase.PROGRESSING,
        message=message,
        lifecycle=running_conditions(message),
        force_lifecycle=True,
        conditions=conditions,
    )
    # Named as a watcher that takes over replays it (`replayed_transitions`): recorded once.
    identity = transition_identity(obs.uid or "", rollout_id, release.attempt, TransitionKind.ROLLOUT_STARTED)
    started = RecordEvent("Normal", Reason.ROLLOUT_STARTED, message, identity=identity)
    return ctx.decision("create", why, create, UpdateStatus(patch), started, *notices)


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
