"""Ordering between services (`spec.dependsOn`, docs/depends-on.md): the pure decisions.

A ProgressiveSync may list others of its namespace it depends on; a stage of its rollout (the
entry's `beforeStage`, else the first) waits until each of them has passed a stage (`stage`) in
its newest rollout, or finished that rollout Succeeded. Everything here is a pure function of
what the caller read:

- `judge`: one dependency's state from that ProgressiveSync as read now (None: it does not exist):
  Satisfied, Waiting (not there yet, or running), Held (its rollout failed, was cancelled or rolled
  back before passing the stage, or it has no such stage). "Its newest rollout" is the one its
  `status.rollout` records: a release its watcher has not started yet is not seen, and a rollout
  that ended Succeeded satisfies every stage of it. With groups (docs/depends-on.md, "Groups and
  dependencies") `judged_stages` says which of its status entries a `stage` stands for: one group's
  (`<group>/<stage>`, or the waiting stage's own group when both are grouped by the same label) or
  the stage in every group of a grouped dependency;
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

from orchestrator.api.groups import group_stage_name, split_stage_name
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


def describe_dependency(dependency: Dependency, waiting_stage: str, *, group_by: str | None = None) -> str:
    """One line for people (`plan`, `validate`): who waits for what, how long. `group_by`: the
    waiting spec's groupBy, whose `waiting_stage` (a spec stage: of each group; or one group's,
    "<group>/<stage>") waits in each group on its own."""
    what = f"to pass stage {dependency.stage!r}" if dependency.stage else "to finish its rollout Succeeded"
    group = split_stage_name(waiting_stage)[0]
    if group_by is not None and dependency.stage and split_stage_name(dependency.stage)[0] is None:
        same = (
            f"its {group_stage_name(group, dependency.stage)!r}" if group is not None else "in the same group"
        )
        what += f" ({same} when it is grouped by {group_by} too, else in every group)"
    who = f"stage {waiting_stage!r}" + (" of each group" if group_by is not None and group is None else "")
    return f"{who} waits for ProgressiveSync {dependency.name} {what} (at most {dependency.timeout_seconds}s)"


def waiting_for(name: str, stage: str | None) -> str:
    """`waiting for <name> to pass stage <stage>` (or to succeed), the status's wording."""
    return f"waiting for {name} " + (
        f"to pass stage {stage!r}" if stage else "to finish its rollout Succeeded"
    )


def judged_stages(
    stage: str, dependency: ProgressiveSync, *, group: str | None = None, group_by: str | None = None
) -> tuple[list[str], str]:
    """The status entries of the dependency's newest rollout that `stage` (a `dependsOn[].stage`)
    stands for, and how to say it (docs/depends-on.md, "Groups and dependencies"):

    - the dependency has no groupBy, or `stage` names one group's stage (`<group>/<stage>`): that
      entry;
    - a plain stage of a grouped dependency, waited for from group `group` of a ProgressiveSync
      grouped by the same label (`group_by`) whose rollout has that group: that group's stage;
    - else that stage in every group of its rollout (all of them must pass; [] while its status
      lists none yet). A group of the waiting one that the dependency does not have waits for every
      group: nothing of the dependency in that group to wait for, so the safe side."""
    if dependency.spec.group_by is None or split_stage_name(stage)[0] is not None:
        return [stage], ""
    status = dependency.status or ProgressiveSyncStatus()
    listed = [entry.name for entry in status.stages or [] if split_stage_name(entry.name)[1] == stage]
    listed = [name for name in listed if split_stage_name(name)[0] is not None]
    if group is not None and group_by == dependency.spec.group_by:
        own = group_stage_name(group, stage)
        if own in listed:
            return [own], ""
        if listed:
            return listed, f" in every group (it has no group {group!r})"
    return listed, " in every group"


def judge(
    name: str,
    stage: str | None,
    dependency: ProgressiveSync | None,
    *,
    group: str | None = None,
    group_by: str | None = None,
) -> DependencyVerdict:
    """The state of the dependency `name` for passing `stage` (None: its whole rollout), from the
    ProgressiveSync as read now (None: there is none of that name, which may be applied later).

    `group`, `group_by`: the waiting stage's group and the waiting spec's groupBy (None without
    groups); a plain `stage` of a dependency grouped by the same label is its stage in that group
    (`judged_stages`)."""
    wanted = waiting_for(name, stage)
    if dependency is None:
        return DependencyVerdict(
            name, DependencyState.WAITING, f"{wanted}: no ProgressiveSync {name} in this namespace (yet)"
        )
    if stage is not None:
        problem = _stage_problem(name, stage, dependency)
        if problem:
            return DependencyVerdict(name, DependencyState.HELD, problem)
    status = dependency.status or ProgressiveSyncStatus()
    rollout = status.rollout
    if rollout is None:
        return DependencyVerdict(name, DependencyState.WAITING, f"{wanted}: it has not started a rollout yet")
    if status.phase == RolloutPhase.SUCCEEDED:
        return DependencyVerdict(
            name, DependencyState.SATISFIED, f"{name} finished rollout {rollout.id} Succeeded"
        )
    names, where = judged_stages(stage, dependency, group=group, group_by=group_by) if stage else ([], "")
    if len(names) == 1 and not where:
        stage = names[0]
        wanted = waiting_for(name, stage)
    entries = [entry for entry in status.stages or [] if entry.name in names]
    stopped = next((entry for entry in entries if entry.phase in STOPPED_STAGE_PHASES), None)
    if entries and len(entries) == len(names) and all(e.phase in PASSED_STAGE_PHASES for e in entries):
        return DependencyVerdict(
            name, DependencyState.SATISFIED, f"{name} passed stage {stage!r}{where} in rollout {rollout.id}"
        )
    if stopped is not None:
        return DependencyVerdict(
            name,
            DependencyState.HELD,
            f"held: {name} failed at stage {stopped.name!r} in rollout {rollout.id} ({stopped.phase.value})",
        )
    if stage is not None and split_stage_name(stage)[0] is not None and status.stages and not entries:
        groups = sorted({g for g, _ in map(split_stage_name, (e.name for e in status.stages)) if g})
        return DependencyVerdict(
            name,
            DependencyState.HELD,
            f"held: {name} has no stage {stage!r} in rollout {rollout.id} (its groups: {', '.join(groups)});"
            " fix dependsOn[].stage",
        )
    if status.phase in STOPPED_ROLLOUT_PHASES:
        failed_at = next(
            (s.name for s in status.stages or [] if s.phase in STOPPED_STAGE_PHASES), status.current_stage
        )
        at_stage = f" at stage {failed_at!r}" if failed_at else ""
        return DependencyVerdict(
            name,
            DependencyState.HELD,
            f"held: {name} failed{at_stage} in rollout {rollout.id} ({status.phase.value})",
        )
    at = f", now at stage {status.current_stage!r}" if status.current_stage else ""
    phase = status.phase.value if status.phase else "Pending"
    pending = [e.name for e in entries if e.phase not in PASSED_STAGE_PHASES] if where else []
    not_yet = f"; not passed yet: {', '.join(pending)}" if pending else ""
    return DependencyVerdict(
        name, DependencyState.WAITING, f"{wanted}{where}: rollout {rollout.id} is {phase}{at}{not_yet}"
    )


def _stage_problem(name: str, stage: str, dependency: ProgressiveSync) -> str:
    """Why `stage` can never pass in the dependency (held with that message), "" when it can."""
    group, spec_name = split_stage_name(stage)
    stages = ", ".join(s.name for s in dependency.spec.stages)
    if spec_name not in [s.name for s in dependency.spec.stages]:
        return f"held: {name} has no stage {spec_name!r} (its stages: {stages}); fix dependsOn[].stage"
    if group is not None and dependency.spec.group_by is None:
        return (
            f"held: {name} has no groups (no spec.groupBy), so no stage {stage!r};"
            f" fix dependsOn[].stage to one of its stages ({stages})"
        )
    return ""


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
