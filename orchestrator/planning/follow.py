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
read, whether the follower follows a stage now, waits, or stops. Caller: `steps.follow`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

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
