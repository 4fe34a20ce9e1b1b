"""The `wait-for-dependencies` step: a stage waits for other ProgressiveSyncs (spec.dependsOn).

The Workflow runs it first in each stage that waits (the first stage, or a dependency's
`beforeStage`; with spec.groupBy that stage of each group, each waiting on its own;
docs/depends-on.md), with that stage's dependencies from the rollout contract
(`RolloutContract.dependencies_before`). It follows the dependencies' ProgressiveSyncs (same
namespace) with one watch (`orchestrator.kube.follow.follow_objects`: list, then watch, never a
poll), and decides on the first listing, on each change of one of them and when a quiet watch
window ends (at the nearest deadline, at most `Tuning.watch_window_seconds`) by `DependencyWait`,
with the pure rules of `orchestrator.api.depends`:

- every dependency Satisfied: the stage's message says what satisfied them, exit 0 (the stage's
  `select` runs next);
- one not satisfied past its deadline (its `timeoutSeconds` from the end of the stage before, else
  from the rollout's start): the stage is closed Failed with the reason, exit 1 (the rollout fails
  as for any failed stage; the exit handler records it);
- else it waits. A dependency that failed holds the stage ("held: <name> failed at stage <x>")
  until its timeout: a `progressive-sync retry` of the dependency may still pass the stage.

The status is written when the wait starts ("waiting for <name> to pass stage <stage>: ..."), when
what it says of a dependency changes (it appeared, its rollout moved to another stage, it failed),
and once when satisfied, never on every change seen: the stage's `message` while it is Pending (a
field the steps own, docs/design/status-ownership.md). Nothing is written while the status is on
another rollout (the watcher has not recorded this one yet). Idempotent: a rerun (a retry, a
deleted pod) decides again from the API, with the same deadline (it comes from the status, not
from when the pod started). A watch that keeps failing (about half a minute without progress) ends
the step with a temporary error, which the Workflow retries.

Caller: `python -m steps wait-for-dependencies` (steps.cli); tests call `wait_for_dependencies`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

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
from orchestrator.core.errors import TemporaryError
from orchestrator.kube.client import PROGRESSIVE_SYNCS, Kube
from orchestrator.kube.follow import follow_objects
from orchestrator.kube.status_writer import update_status
from orchestrator.planning.contract import DependencyContract
from steps.common import Tuning
from steps.context import StepContext

log = logging.getLogger(__name__)


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


def verdict_from(
    dependency: DependencyContract,
    obj: Mapping[str, Any] | None,
    *,
    group: str | None = None,
    group_by: str | None = None,
) -> DependencyVerdict:
    """The dependency's state as its ProgressiveSync `obj` reads (None: it does not exist; `judge`;
    `group`, `group_by`: the waiting stage's group and the waiting spec's groupBy, None without
    groups). One whose status does not parse is judged without it; one whose spec does not parse is
    waited for (its own watcher says what is wrong with it: `Valid=False`, InvalidSpec)."""
    if obj is None:
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
    log.warning("ProgressiveSync %s does not parse: waiting for it", dependency.name)
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


@dataclass(frozen=True)
class Look:
    """One look at the dependencies: the decision, whether the stage's message must be written
    (what it says of them changed, or they passed), and the nearest deadline still open (None once
    they passed or one timed out)."""

    decision: WaitDecision
    write_note: bool
    next_deadline: datetime | None


@dataclass
class DependencyWait:
    """The wait's decisions, without I/O: `look` at the dependencies' objects as last seen."""

    dependencies: Sequence[DependencyContract]
    deadlines: Mapping[str, datetime]
    group: str | None = None
    group_by: str | None = None
    # What the stage's message last said of each dependency: (name, message) pairs.
    written: tuple[tuple[str, str], ...] | None = None

    def look(self, objects: Mapping[str, Mapping[str, Any] | None], now: datetime) -> Look:
        """Decide on `objects` (name -> ProgressiveSync, None: missing) at `now`; remembers what it
        asked to write, so an unchanged state is never written twice."""
        verdicts = [
            (
                verdict_from(d, objects.get(d.name), group=self.group, group_by=self.group_by),
                self.deadlines[d.name],
            )
            for d in self.dependencies
        ]
        decision = decide_wait(verdicts, now)
        if decision.outcome is WaitOutcome.TIMED_OUT:
            return Look(decision, write_note=False, next_deadline=None)
        states = tuple((verdict.name, verdict.message) for verdict, _ in verdicts)
        write_note = decision.outcome is WaitOutcome.DONE or states != self.written
        if write_note:
            self.written = states
        # Every dependency not satisfied is before its deadline here (else it timed out above).
        open_deadlines = [
            deadline for verdict, deadline in verdicts if verdict.state is not DependencyState.SATISFIED
        ]
        return Look(decision, write_note, min(open_deadlines) if open_deadlines else None)


def watch_window(now: datetime, deadline: datetime | None, tuning: Tuning) -> int:
    """Seconds the next watch request may stay quiet: until the nearest deadline (rounded up, so the
    look after it times the dependency out), at most `tuning.watch_window_seconds`, at least 1."""
    if deadline is None:
        return tuning.watch_window_seconds
    return tuning.watch_window_for((deadline - now).total_seconds())


def wait_for_dependencies(kube: Kube, ctx: StepContext) -> WaitResult:
    """Wait until the stage's dependencies passed (see the module); `ctx`: the step's opening."""
    stage, clock = ctx.stage_name, ctx.clock
    dependencies = ctx.contract.dependencies_before(stage)
    if not dependencies:
        return WaitResult(stage, WaitOutcome.DONE, "the stage waits for no other ProgressiveSync")
    first = clock.now()
    wait = DependencyWait(
        dependencies,
        {dependency.name: stage_deadline(ctx, dependency, first) for dependency in dependencies},
        group=split_stage_name(stage)[0],
        group_by=ctx.ps.spec.group_by,
    )
    namespace = ctx.ps.metadata.namespace or ctx.rollout.namespace
    next_deadline: datetime | None = min(wait.deadlines.values())
    snapshots = follow_objects(
        kube,
        PROGRESSIVE_SYNCS,
        namespace,
        [dependency.name for dependency in dependencies],
        window_seconds=lambda: watch_window(clock.now(), next_deadline, ctx.tuning),
    )
    try:
        for snapshot in snapshots:
            now = clock.now()
            look = wait.look(snapshot.objects, now)
            decision = look.decision
            if decision.outcome is WaitOutcome.TIMED_OUT:
                _close_failed(kube, ctx, decision, now)
                return WaitResult(stage, decision.outcome, decision.message)
            if look.write_note:
                _note(kube, ctx, decision.message)
                log.info("stage %r: %s", stage, decision.message)
            if decision.outcome is WaitOutcome.DONE:
                return WaitResult(stage, decision.outcome, decision.message)
            next_deadline = look.next_deadline
    finally:
        snapshots.close()
    raise TemporaryError("the watch on the dependencies' ProgressiveSyncs ended")  # it never ends by itself


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
