"""The `wait-for-dependencies` step: a stage waits for other ProgressiveSyncs (spec.dependsOn).

The Workflow runs it first in each stage that waits (the first stage, or a dependency's
`beforeStage`; with spec.groupBy that stage of each group, each waiting on its own;
docs/depends-on.md), with that stage's dependencies from the rollout contract
(`RolloutContract.dependencies_before`). It polls each dependency's ProgressiveSync (same
namespace, one GET each, every `poll_seconds` at most) and decides with the pure rules of
`orchestrator.api.depends`:

- every dependency Satisfied: the stage's message says what satisfied them, exit 0 (the stage's
  `select` runs next);
- one not satisfied past its deadline (its `timeoutSeconds` from the end of the stage before, else
  from the rollout's start): the stage is closed Failed with the reason, exit 1 (the rollout fails
  as for any failed stage; the exit handler records it);
- else it waits. A dependency that failed holds the stage ("held: <name> failed at stage <x>")
  until its timeout: a `progressive-sync retry` of the dependency may still pass the stage.

The status is written when the wait starts ("waiting for <name> to pass stage <stage>: ..."), when
what it says of a dependency changes (it appeared, its rollout moved to another stage, it failed),
and once when satisfied, never on every poll: the stage's `message` while it is Pending (a field
the steps own, docs/design/status-ownership.md). Nothing is written while the status is on
another rollout (the watcher has not recorded this one yet). Idempotent: a rerun (a retry, a
deleted pod) decides again from the API, with the same deadline (it comes from the status, not
from when the pod started).

Caller: `python -m steps wait-for-dependencies` (steps.cli); tests call `wait_for_dependencies`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

import pydantic

from orchestrator.api.depends import (
    DependencyState,
    DependencyVerdict,
    WaitDecision,
    WaitOutcome,
    deadline_of,
    decide_wait,
    judge,
    waiting_for,
)
from orchestrator.api.groups import split_stage_name
from orchestrator.api.models import ProgressiveSync, ProgressiveSyncStatus, StagePhase
from orchestrator.api.rollout_status import close_stage, find_stage
from orchestrator.kube.client import PROGRESSIVE_SYNCS, Kube, NotFound
from orchestrator.kube.status_writer import update_status
from orchestrator.planning.contract import DependencyContract
from steps.context import StepContext

log = logging.getLogger(__name__)

# How often the step reads its dependencies again while it waits (bounded by the deadline).
DEFAULT_POLL_SECONDS = 5.0


@dataclass(frozen=True)
class WaitResult:
    """How the stage's wait ended."""

    stage: str
    outcome: WaitOutcome
    message: str

    @property
    def failed(self) -> bool:
        """True when a dependency timed out (exit 1: the stage failed)."""
        return self.outcome is WaitOutcome.TIMED_OUT

    @property
    def summary(self) -> str:
        """One line for people."""
        return f"wait-for-dependencies: stage {self.stage!r}: {self.outcome.value}: {self.message}"


def verdict_of(
    kube: Kube,
    namespace: str,
    dependency: DependencyContract,
    *,
    group: str | None = None,
    group_by: str | None = None,
) -> DependencyVerdict:
    """The dependency's state as its ProgressiveSync reads now (`judge`; `group`, `group_by`: the
    waiting stage's group and the waiting spec's groupBy, None without groups). One whose status
    does not parse is judged without it; one whose spec does not parse is waited for (its own
    watcher says what is wrong with it: `Valid=False`, InvalidSpec)."""
    try:
        obj = kube.get(PROGRESSIVE_SYNCS, namespace, dependency.name)
    except NotFound:
        return judge(dependency.name, dependency.stage, None)
    for candidate in (obj, {**obj, "status": None}):
        try:
            return judge(
                dependency.name,
                dependency.stage,
                ProgressiveSync.model_validate(candidate),
                group=group,
                group_by=group_by,
            )
        except pydantic.ValidationError:
            continue
    log.warning("ProgressiveSync %s/%s does not parse: waiting for it", namespace, dependency.name)
    return DependencyVerdict(
        dependency.name,
        DependencyState.WAITING,
        f"{waiting_for(dependency.name, dependency.stage)}: its spec does not parse"
        " (its Valid condition says why)",
    )


def stage_deadline(ctx: StepContext, dependency: DependencyContract, now: datetime) -> datetime:
    """When waiting for `dependency` ends, from the status as the step read it (`deadline_of`). With
    spec.groupBy the stage before is the one of the same group (none for a group's first stage)."""
    status = ctx.ps.status or ProgressiveSyncStatus()
    names = [stage.name for stage in ctx.ps.spec.stages]
    index = names.index(ctx.stage_name)
    same_group = index and split_stage_name(names[index - 1])[0] == split_stage_name(ctx.stage_name)[0]
    before = find_stage(status, names[index - 1]) if same_group else None
    started = (
        status.rollout.started_at if status.rollout and status.rollout.id == ctx.rollout.rollout_id else None
    )
    return deadline_of(
        dependency.timeout_seconds,
        stage_before_finished=before.finished_at if before is not None else None,
        rollout_started=started,
        now=now,
    )


def wait_for_dependencies(
    kube: Kube, ctx: StepContext, *, poll_seconds: float = DEFAULT_POLL_SECONDS
) -> WaitResult:
    """Wait until the stage's dependencies passed (see the module); `ctx`: the step's opening."""
    stage, clock = ctx.stage_name, ctx.clock
    dependencies = ctx.contract.dependencies_before(stage)
    if not dependencies:
        return WaitResult(stage, WaitOutcome.DONE, "the stage waits for no other ProgressiveSync")
    first = clock.now()
    deadlines = {dependency.name: stage_deadline(ctx, dependency, first) for dependency in dependencies}
    namespace = ctx.ps.metadata.namespace or ctx.rollout.namespace
    group, group_by = split_stage_name(stage)[0], ctx.ps.spec.group_by
    written: tuple[tuple[str, str], ...] | None = None
    while True:
        now = clock.now()
        verdicts: list[tuple[DependencyVerdict, datetime]] = [
            (verdict_of(kube, namespace, d, group=group, group_by=group_by), deadlines[d.name])
            for d in dependencies
        ]
        decision = decide_wait(verdicts, now)
        states = tuple((verdict.name, verdict.message) for verdict, _ in verdicts)
        if decision.outcome is WaitOutcome.TIMED_OUT:
            _close_failed(kube, ctx, decision, now)
            return WaitResult(stage, decision.outcome, decision.message)
        if decision.outcome is WaitOutcome.DONE or states != written:
            _note(kube, ctx, decision.message)
            written = states
            log.info("stage %r: %s", stage, decision.message)
        if decision.outcome is WaitOutcome.DONE:
            return WaitResult(stage, decision.outcome, decision.message)
        # Every dependency not satisfied is before its deadline here (else it timed out above).
        open_deadlines = [
            deadline for verdict, deadline in verdicts if verdict.state is not DependencyState.SATISFIED
        ]
        left = (min(open_deadlines) - now).total_seconds()
        clock.sleep(max(0.05, min(poll_seconds, left)))


def _on_this_rollout(ctx: StepContext, status: ProgressiveSyncStatus) -> bool:
    return status.rollout is not None and status.rollout.id == ctx.rollout.rollout_id


def _note(kube: Kube, ctx: StepContext, message: str) -> None:
    """The waiting stage's message, while it is Pending and the status is on this rollout."""
    stage = ctx.stage_name

    def note(status: ProgressiveSyncStatus) -> ProgressiveSyncStatus:
        entry = find_stage(status, stage)
        if _on_this_rollout(ctx, status) and entry is not None and entry.phase == StagePhase.PENDING:
            entry.message = message
        return status

    update_status(
        kube,
        ctx.rollout.namespace,
        ctx.rollout.name,
        note,
        what=f"note stage {stage!r}",
        settings=ctx.tuning.status,
    )


def _close_failed(kube: Kube, ctx: StepContext, decision: WaitDecision, now: datetime) -> None:
    """Close the waiting stage Failed with the timeout's reason (the rollout fails with it)."""
    stage = ctx.stage_name

    def close(status: ProgressiveSyncStatus) -> ProgressiveSyncStatus:
        if not _on_this_rollout(ctx, status):
            return status
        return close_stage(status, stage=stage, phase=StagePhase.FAILED, message=decision.message, now=now)

    update_status(
        kube,
        ctx.rollout.namespace,
        ctx.rollout.name,
        close,
        what=f"close stage {stage!r}",
        settings=ctx.tuning.status,
    )
