"""Rule 12 of the watcher's decision: before a rollout starts, wait for Argo CD to compare the fleet.

The Workflow's shape (parallelism, batches, deadline) is sized from the plan, and the plan from what
Argo CD last compared. So before a new rollout the watcher asks Argo CD to compare every owned
Application against the release (`RequestCompare`: the refresh annotation) and waits,
`fleet_compare_seconds` at most (`FleetCompared=False`, reason `AwaitingFleetComparison`; the wait's
start is that condition's lastTransitionTime, so a restarted watcher goes on with the same wait); at
the deadline it starts with what is known and says so (`FleetComparisonTimedOut`). Which
Applications are answered is `orchestrator.watcher.fleet_compare` (pure).

Callers: `orchestrator.watcher.decide_release` (and `decide`, for `wait_over` on adoption); tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from orchestrator.api.conditions import ConditionType
from orchestrator.api.models import Condition, ConditionStatus, ProgressiveSyncStatus, RolloutPhase
from orchestrator.api.reasons import Reason
from orchestrator.core.clock import format_time
from orchestrator.watcher.decision import (
    Action,
    ConditionPatch,
    Context,
    Decision,
    ReconcilePolicy,
    RecordEvent,
    RequestCompare,
    RequeueAfter,
    StatusPatch,
    UpdateStatus,
)
from orchestrator.watcher.fleet_compare import fleet_comparison
from orchestrator.watcher.status_patch import condition, running_conditions


def await_fleet(
    ctx: Context,
    policy: ReconcilePolicy,
    *,
    release: str,
    why: str,
    conditions: tuple[ConditionPatch, ...],
) -> Decision | tuple[ConditionPatch, tuple[Action, ...], str]:
    """Rule 12: wait (a Decision) until Argo CD compared every owned Application against the
    release, or the wait's deadline passed; then (the FleetCompared condition, Events, a note for
    the rollout's message) for `decide_release` to create the Workflow with."""
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
        message = Reason.FLEET_COMPARED.say(owned=comparison.owned, app_set=app_set, release=release)
        return _fleet(ConditionStatus.TRUE, Reason.FLEET_COMPARED, message), (), ""
    waited = (obs.now - since).total_seconds()
    left = comparison.unanswered
    if waited >= limit:
        message = Reason.FLEET_COMPARISON_TIMED_OUT.say(
            left=len(left), owned=comparison.owned, release=release, limit=limit, names=_listed(left)
        )
        note = f"; started with what was known: Argo CD did not compare {len(left)} Application(s) in time"
        event = RecordEvent("Warning", Reason.FLEET_COMPARISON_TIMED_OUT, message)
        timed_out = _fleet(ConditionStatus.TRUE, Reason.FLEET_COMPARISON_TIMED_OUT, message)
        return timed_out, (event,), note
    deadline = since + timedelta(seconds=limit)
    message = Reason.AWAITING_FLEET_COMPARISON.say(
        why=why, deadline=format_time(deadline), limit=limit, app_set=app_set
    )
    # A False left behind by an earlier wait is flipped first, so that its lastTransitionTime, the
    # start of this wait, is now.
    stale = fleet_condition(obs.status)
    flip = (
        (_wait_ended("an earlier wait ended"),)
        if began is None and stale is not None and stale.status == ConditionStatus.FALSE
        else ()
    )
    patch = StatusPatch(
        observed_generation=obs.generation,
        phase=RolloutPhase.PENDING if obs.status.rollout is None else None,
        message=message,
        lifecycle=running_conditions(message, reason=Reason.AWAITING_FLEET_COMPARISON),
        force_lifecycle=True,
        conditions=(
            *conditions,
            *flip,
            _fleet(ConditionStatus.FALSE, Reason.AWAITING_FLEET_COMPARISON, message),
        ),
    )
    actions: list[Action] = [UpdateStatus(patch)]
    if began is None:
        actions.append(
            RecordEvent(
                "Normal",
                Reason.AWAITING_FLEET_COMPARISON,
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


def _fleet(status: ConditionStatus, reason: Reason, message: str) -> ConditionPatch:
    return condition(ConditionType.FLEET_COMPARED, status, reason, message)


def fleet_condition(status: ProgressiveSyncStatus) -> Condition | None:
    """The stored FleetCompared condition, or None."""
    return next((c for c in status.conditions or [] if c.type == ConditionType.FLEET_COMPARED), None)


def wait_began(status: ProgressiveSyncStatus) -> datetime | None:
    """When the watcher began waiting for Argo CD to compare the fleet (rule 12), or None.

    `FleetCompared=False` with reason AwaitingFleetComparison; its lastTransitionTime is the start.
    One no later than the recorded rollout's start is left from a wait that ended in that rollout
    (a watcher that died between creating the Workflow and recording it adopts it: rule 4).
    """
    stored = fleet_condition(status)
    if stored is None or stored.status != ConditionStatus.FALSE:
        return None
    if stored.reason != Reason.AWAITING_FLEET_COMPARISON:
        return None
    began = stored.last_transition_time
    rollout = status.rollout
    if rollout is not None and rollout.started_at is not None and began <= rollout.started_at:
        return None
    return began


def wait_over(status: ProgressiveSyncStatus, why: str) -> tuple[ConditionPatch, ...]:
    """FleetCompared back to True when a wait ended without a rollout of its own; () when none ran."""
    stored = fleet_condition(status)
    if stored is None or stored.status != ConditionStatus.FALSE:
        return ()
    return (_wait_ended(why),)


def _wait_ended(why: str) -> ConditionPatch:
    """FleetCompared True again, applied only where the status still has it False (see
    `ConditionPatch.only_from`): decided on the cached status, it never overwrites the end of the
    wait a fresher status recorded (FleetCompared, or FleetComparisonTimedOut)."""
    return replace(
        _fleet(ConditionStatus.TRUE, Reason.NO_COMPARISON_AWAITED, why), only_from=ConditionStatus.FALSE
    )


def _listed(names: Sequence[str], limit: int = 10) -> str:
    shown = ", ".join(names[:limit])
    return f"{shown} and {len(names) - limit} more" if len(names) > limit else shown
