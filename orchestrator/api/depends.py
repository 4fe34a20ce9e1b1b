"""Ordering between services (`spec.dependsOn`, docs/depends-on.md): the pure decisions.

A ProgressiveSync may list others of its namespace it depends on; a stage of its rollout (the
entry's `beforeStage`, else the first) waits until each of them has passed a stage (`stage`) in
its newest rollout, or finished that rollout Succeeded. Everything here is a pure function of
what the caller read:

- `judge`: one dependency's state from that ProgressiveSync as read now (None: it does not exist):
  Satisfied, Waiting (not there yet, or running), Held (its rollout failed, was cancelled or rolled
  back before passing the stage, or it has no such stage). "Its newest rollout" is the one its
  `status.rollout` records: a release its watcher has not started yet is not seen, and a rollout
  that ended Succeeded satisfies every stage of it;
- `decide_wait`: the waiting stage's verdict over all of its dependencies at `now`: Done, Wait, or
  TimedOut once one not satisfied is past its deadline (`deadline_of`: its `timeoutSeconds` from
  the stage before's end, else the rollout's start). A Held dependency is waited for too, until
  the timeout: a `progressive-sync retry` of it may still pass the stage;
- `find_cycle`: a cycle of dependencies through one ProgressiveSync (the watcher's `Valid=False`,
  reason DependencyCycle), a ProgressiveSync depending on itself included.

Callers: `steps.depends` (the `wait-for-dependencies` step), `orchestrator.watcher.observe` (cycles),
`orchestrator.cli.plan_cmd` and `orchestrator.api.validation` (`describe_dependency`). Pure data, like
`orchestrator.api.rollout_status`: no adapter, no clock.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from orchestrator.api.models import (
    Dependency,
    ProgressiveSync,
    ProgressiveSyncStatus,
    RolloutPhase,
    StagePhase,
)

# A stage of the dependency that counts as passed: it succeeded, or it had nothing to do.
PASSED_STAGE_PHASES = frozenset({StagePhase.SUCCEEDED, StagePhase.SKIPPED})
# A stage of the dependency that will not pass in this rollout.
STOPPED_STAGE_PHASES = frozenset({StagePhase.FAILED, StagePhase.CANCELLED})
# A rollout of the dependency that ended without passing the stage (or is being undone).
STOPPED_ROLLOUT_PHASES = frozenset(
    {RolloutPhase.FAILED, RolloutPhase.CANCELLED, RolloutPhase.ROLLING_BACK, RolloutPhase.ROLLED_BACK}
)


class DependencyState(StrEnum):
    """Where one dependency stands for the stage that waits for it."""

    SATISFIED = "Satisfied"
    WAITING = "Waiting"
    HELD = "Held"


@dataclass(frozen=True)
class DependencyVerdict:
    """One dependency's state, and the sentence people read about it."""

    name: str
    state: DependencyState
    message: str


def describe_dependency(dependency: Dependency, waiting_stage: str) -> str:
    """One line for people (`plan`, `validate`): who waits for what, how long."""
    what = f"to pass stage {dependency.stage!r}" if dependency.stage else "to finish its rollout Succeeded"
    return (
        f"stage {waiting_stage!r} waits for ProgressiveSync {dependency.name} {what}"
        f" (at most {dependency.timeout_seconds}s)"
    )


def waiting_for(name: str, stage: str | None) -> str:
    """`waiting for <name> to pass stage <stage>` (or to succeed), the status's wording."""
    return f"waiting for {name} " + (
        f"to pass stage {stage!r}" if stage else "to finish its rollout Succeeded"
    )


def judge(name: str, stage: str | None, dependency: ProgressiveSync | None) -> DependencyVerdict:
    """The state of the dependency `name` for passing `stage` (None: its whole rollout), from the
    ProgressiveSync as read now (None: there is none of that name, which may be applied later)."""
    wanted = waiting_for(name, stage)
    if dependency is None:
        return DependencyVerdict(
            name, DependencyState.WAITING, f"{wanted}: no ProgressiveSync {name} in this namespace (yet)"
        )
    if stage is not None and stage not in [s.name for s in dependency.spec.stages]:
        stages = ", ".join(s.name for s in dependency.spec.stages)
        return DependencyVerdict(
            name,
            DependencyState.HELD,
            f"held: {name} has no stage {stage!r} (its stages: {stages}); fix dependsOn[].stage",
        )
    status = dependency.status or ProgressiveSyncStatus()
    rollout = status.rollout
    if rollout is None:
        return DependencyVerdict(name, DependencyState.WAITING, f"{wanted}: it has not started a rollout yet")
    if status.phase == RolloutPhase.SUCCEEDED:
        return DependencyVerdict(
            name, DependencyState.SATISFIED, f"{name} finished rollout {rollout.id} Succeeded"
        )
    entry = next((s for s in status.stages or [] if s.name == stage), None) if stage else None
    if entry is not None and entry.phase in PASSED_STAGE_PHASES:
        return DependencyVerdict(
            name, DependencyState.SATISFIED, f"{name} passed stage {stage!r} in rollout {rollout.id}"
        )
    if entry is not None and entry.phase in STOPPED_STAGE_PHASES:
        return DependencyVerdict(
            name,
            DependencyState.HELD,
            f"held: {name} failed at stage {stage!r} in rollout {rollout.id} ({entry.phase.value})",
        )
    if status.phase in STOPPED_ROLLOUT_PHASES:
        failed_at = next(
            (s.name for s in status.stages or [] if s.phase in STOPPED_STAGE_PHASES), status.current_stage
        )
        where = f" at stage {failed_at!r}" if failed_at else ""
        return DependencyVerdict(
            name,
            DependencyState.HELD,
            f"held: {name} failed{where} in rollout {rollout.id} ({status.phase.value})",
        )
    at = f", now at stage {status.current_stage!r}" if status.current_stage else ""
    phase = status.phase.value if status.phase else "Pending"
    return DependencyVerdict(name, DependencyState.WAITING, f"{wanted}: rollout {rollout.id} is {phase}{at}")


def deadline_of(
    timeout_seconds: int,
    *,
    stage_before_finished: datetime | None,
    rollout_started: datetime | None,
    now: datetime,
) -> datetime:
    """When waiting for a dependency ends: `timeout_seconds` after the stage before the waiting one
    finished, else after the rollout started, else (neither recorded) after `now`."""
    anchor = stage_before_finished or rollout_started or now
    return anchor + timedelta(seconds=timeout_seconds)


class WaitOutcome(StrEnum):
    """What the waiting stage does now."""

    DONE = "Done"
    WAIT = "Wait"
    TIMED_OUT = "TimedOut"


@dataclass(frozen=True)
class WaitDecision:
    """The waiting stage's verdict, and its message (the stage's message in the status)."""

    outcome: WaitOutcome
    message: str


def decide_wait(verdicts: Sequence[tuple[DependencyVerdict, datetime]], now: datetime) -> WaitDecision:
    """Done when every dependency is Satisfied; TimedOut when one that is not is past its deadline
    (each verdict comes with its dependency's deadline); else Wait. The message names every
    dependency not satisfied (or, when done, what satisfied them)."""
    open_ = [
        (verdict, deadline)
        for verdict, deadline in verdicts
        if verdict.state is not DependencyState.SATISFIED
    ]
    if not open_:
        return WaitDecision(
            WaitOutcome.DONE, "dependencies passed: " + "; ".join(v.message for v, _ in verdicts)
        )
    late = [verdict for verdict, deadline in open_ if now >= deadline]
    if late:
        return WaitDecision(
            WaitOutcome.TIMED_OUT,
            "dependsOn timed out: " + "; ".join(verdict.message for verdict in late),
        )
    return WaitDecision(WaitOutcome.WAIT, "; ".join(verdict.message for verdict, _ in open_))


def find_cycle(graph: Mapping[str, Collection[str]], start: str) -> tuple[str, ...] | None:
    """A cycle of dependencies through `start` (`start`, ..., `start`), or None when there is none.

    `graph`: each ProgressiveSync's name and the names it depends on (names absent from `graph` have
    no dependencies). Depth first, in sorted order, so the same graph always gives the same cycle."""
    path: list[str] = [start]
    seen: set[str] = set()

    def visit(node: str) -> bool:
        for child in sorted(graph.get(node, ())):
            if child == start:
                path.append(child)
                return True
            if child in seen:
                continue
            seen.add(child)
            path.append(child)
            if visit(child):
                return True
            path.pop()
        return False

    return tuple(path) if visit(start) else None


def describe_cycle(cycle: Sequence[str]) -> str:
    """`a -> b -> a` for messages."""
    return " -> ".join(cycle)
