"""The rollout follower's decisions (issue 33): which stage it follows, and when it stops.

The `follow` step (steps/follow.py) runs beside the stages of a rollout Workflow, one pod for the
whole rollout. The moment a cluster in flight is done it does what that cluster's own `cluster` pod
does once it runs and sees it: record it Completed, hand its slot to the next cluster
(`steps.chain.hand_off`), and, when it was its stage's last, close the stage and start the next one's
first wave (`steps.chain.close_early`). On the real engine a step pod needs ~8 s to start; a sync
of a few seconds is over before its pod runs, and every hand-off and stage boundary used to wait for
that pod. The follower's writes are those of the pod, by the same functions, under the same
conditional claims, so the pod that runs later finds its cluster recorded and does nothing more.

This module is the pure part: from the rollout contract and the ProgressiveSync's status as just
read, whether the follower follows a stage now, waits, or stops (`next_move`); and while it follows
one, when it reads the stage's records and the ProgressiveSync again (`LookPace`). Caller:
`steps.follow`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from orchestrator.api.phases import FINISHED_ROLLOUT_PHASES, RolloutPhase, StagePhase
from orchestrator.planning.contract import RolloutContract, StageContract

# A stage in one of these is over for the follower.
_PASSED = frozenset({StagePhase.SUCCEEDED, StagePhase.SKIPPED})


@dataclass(frozen=True)
class Move:
    """What the follower does next: follow `stage` ("" when not), stop (with the reason), or wait."""

    stage: str = ""
    stop: str = ""
    wait: str = ""


def follow_refusal(sized: StageContract) -> str:
    """Why the follower leaves this stage to its pods ("" when it follows it), from the contract alone."""
    if sized.batches:
        return "the stage runs in batches (each batch pod follows its own clusters)"
    analysis = sized.analysis
    if analysis is not None and analysis.after_healthy and analysis.per_cluster:
        return "each cluster is analyzed after it is done (its slot frees after the analysis)"
    return ""


def followed(contract: RolloutContract) -> bool:
    """True when the follower has any stage to follow in this rollout (else the Workflow runs none)."""
    return any(not follow_refusal(sized) for sized in contract.stages)


def next_move(
    contract: RolloutContract,
    *,
    on_rollout: bool,
    rollout_phase: RolloutPhase | None,
    stage_phases: Mapping[str, StagePhase],
) -> Move:
    """The follower's next move, from the contract and the status as just read: `on_rollout` (the
    status is on this rollout, or on none yet), its phase and each stage's phase by name."""
    if not on_rollout:
        return Move(stop="the ProgressiveSync is on another rollout (this one was superseded)")
    if rollout_phase in FINISHED_ROLLOUT_PHASES:
        return Move(stop=f"the rollout ended {rollout_phase}")
    failed = [name for name, phase in stage_phases.items() if phase == StagePhase.FAILED]
    if failed:
        return Move(stop=f"stage {failed[0]!r} failed (its pods and the exit handler take it from here)")
    stages = contract.stages
    if stages and all(stage_phases.get(sized.name) in _PASSED for sized in stages):
        return Move(stop="every stage is closed")
    for sized in stages:
        if stage_phases.get(sized.name) != StagePhase.PROGRESSING:
            continue
        refused = follow_refusal(sized)
        if refused:
            return Move(wait=f"stage {sized.name!r}: {refused}")
        return Move(stage=sized.name)
    return Move(wait="no stage is in progress (not selected yet, or a gate, a bake or an analysis holds it)")


@dataclass
class LookPace:
    """When the follower reads the stage's records and the ProgressiveSync again while it watches
    the stage's Applications (issue 33: 200 rollouts at once).

    What it needs from those reads changes with its Applications: a pod's claim is followed by that
    cluster's sync written on its Application, a cluster done shows there. So it reads them again at
    once after it acted, within `look_seconds` of a change of an Application (never more often: a
    busy stage costs at most one look a second), and otherwise every `quiet_seconds` (a stage closed
    or failed by a pod, a pause, a new rollout: changes that touch none of its Applications). A quiet
    stage then costs one watch request and one look per `quiet_seconds`, not one of each a second.
    Times are the caller's clock readings (`now`)."""

    look_seconds: float
    quiet_seconds: float
    looked: datetime
    changed: bool = False  # an Application changed since the last look

    def due(self, now: datetime, *, acted: bool, changed: bool) -> bool:
        """Look again now? `acted`: the follower just changed the records; `changed`: this snapshot
        came from a change of an Application (or a re-list), not from a quiet window's end. When
        True the caller looks, and the pace counts from `now`."""
        self.changed = self.changed or changed
        since = (now - self.looked).total_seconds()
        if acted or (self.changed and since >= self.look_seconds) or since >= self.quiet_seconds:
            self.looked, self.changed = now, False
            return True
        return False

    def window(self, now: datetime, *, other_due_seconds: float = math.inf) -> int:
        """Whole seconds the next watch request may stay quiet (>= 1): until the next look is due,
        or `other_due_seconds` (another deadline of the caller's) when sooner."""
        since = (now - self.looked).total_seconds()
        left = (self.look_seconds if self.changed else self.quiet_seconds) - since
        return max(1, math.ceil(min(left, other_due_seconds)))
