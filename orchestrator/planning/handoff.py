"""The chained hand-off's decision (issue 33): which cluster a finishing cluster step starts next.

A stage of one pod per cluster runs its clusters as a `withParam` loop under `parallelism` =
maxParallel. Argo Workflows v3.7 (workflow/controller/dag.go, `executeDAGTask`: the expanded items
are executed in list order, and the loop returns at the first item refused by `checkParallelism`)
and the local engine (`orchestrator.engine.dag`, `execute_loop`) start the items in list order: a
freed slot goes to the first target that has no node yet. On the real node that pod then takes
seconds to start before it requests its sync. The step whose cluster just finished (recorded
Completed) requests the sync of that next cluster before its pod exits, so the pod Argo starts in
the freed slot finds its sync ours and only waits for health (`steps.chain`).

This module is the pure part: given the stage's targets in rollout order and its records as just
read, which cluster, if any, may be claimed. The claim itself is the record of that cluster set
Syncing, written with the records object's resourceVersion (a concurrent writer is a Conflict and
the decision is taken again on a fresh read), so two steps finishing at once never claim the same
cluster. The rules:

- only a target with no record at all is claimed: any record (Syncing, a note, an outcome) means a
  step started it already;
- the first such target in rollout order: the one Argo starts next;
- never when the stage's clusters in flight (Syncing) already fill maxParallel: the records can
  only under-count what is in flight (a pod that has not recorded yet), so this check never lets
  more through than the pod count does, it only refuses earlier.

Why maxParallel holds (docs/design/workflow.md, "The chained hand-off"): every claimed cluster
without a pod yet is the first target without a record when claimed, so such clusters are always
the first of the targets without a node; each was claimed by a live pod whose cluster is done, and
the slot that pod frees goes to the first target without a node: one of them. So clusters in flight
are at most the fan-out's pods, which Argo keeps at maxParallel. A Hypothesis test
(tests/unit/test_handoff.py) checks it over interleavings of finishing steps and pod starts.

The stage boundary (`boundary_refusal`): the step whose cluster is the stage's last to finish
closes the stage and selects the next one itself, when the Workflow would do exactly that next in
one `record-and-select` pod (the contract's `selectsNext`) and nothing else runs between the
clusters and it (no stage-level analysis after the clusters, no batches); then the next stage's
first wave does not wait for this pod to end and that step's pod to start. Which step does it is
decided by a second claim, on the records object (`steps.chain`).

Pods at once (`own_turn`): in a stage whose cluster pods all start together
(`StageContract.pods_at_once`), the fan-out has no `parallelism` and every target has a pod from the
start; a pod whose cluster has no record claims it only when it is the first target without one and
fewer than maxParallel are in flight, the cluster the hand-off would take next. Then maxParallel is
held by the conditional claims alone (docs/design/workflow.md, "Pods at once"; the Hypothesis model
runs this case too).

Pure: no adapter, no clock. Callers: `steps.chain`, `steps.turn`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from orchestrator.api.stage_records import END_STATES, ClusterState
from orchestrator.planning.contract import StageContract


@dataclass(frozen=True)
class Claim:
    """The decision: `cluster` to start ("" when none), and why in words."""

    cluster: str
    reason: str

    @property
    def claimed(self) -> bool:
        """True when a cluster is to be started."""
        return bool(self.cluster)


def in_flight(targets: Sequence[str], states: Mapping[str, ClusterState]) -> list[str]:
    """The stage's targets recorded Syncing (their sync requested, not done or failed)."""
    return [target for target in targets if states.get(target) == ClusterState.SYNCING]


def next_claim(
    targets: Sequence[str],
    states: Mapping[str, ClusterState],
    *,
    finished: str,
    max_parallel: int,
) -> Claim:
    """The cluster the step of `finished` (recorded Completed) may start, from the stage's `targets`
    in rollout order and `states`, each cluster's recorded state (a target absent has no record);
    see the module for the rules."""
    if finished not in targets:
        return Claim("", f"cluster {finished} is not a target of the stage")
    if states.get(finished) != ClusterState.COMPLETED:
        return Claim("", f"cluster {finished} is not recorded Completed")
    busy = in_flight(targets, states)
    if len(busy) >= max_parallel:
        return Claim("", f"{len(busy)} cluster(s) in flight already fill maxParallel {max_parallel}")
    for target in targets:
        if target not in states:
            return Claim(target, f"the first target not started ({len(busy)}/{max_parallel} in flight)")
    return Claim("", "every target of the stage has started")


@dataclass(frozen=True)
class Turn:
    """A waiting cluster pod's decision (`own_turn`): go on, claim its own cluster first, or wait;
    why in words."""

    go: bool
    claim: bool
    reason: str


def own_turn(
    targets: Sequence[str],
    states: Mapping[str, ClusterState],
    *,
    cluster: str,
    max_parallel: int,
) -> Turn:
    """May the pod of `cluster`, started before its slot (a stage whose pods all start at once,
    `StageContract.pods_at_once`), start its cluster now? From the stage's `targets` in rollout order
    and `states` as in `next_claim`:

    - go on, claiming nothing, when the cluster has a record: someone started it (the first wave,
      a hand-off, the follower) or this pod did before a restart;
    - claim it when it is the first target without a record and fewer than maxParallel clusters are
      in flight: the cluster a hand-off would take next, so pods and hand-offs claim in one order;
    - else wait."""
    if cluster not in targets:
        return Turn(go=True, claim=False, reason=f"cluster {cluster} is not a target of the stage")
    state = states.get(cluster)
    if state is not None:
        return Turn(go=True, claim=False, reason=f"its record says {state.value}")
    busy = in_flight(targets, states)
    if len(busy) >= max_parallel:
        return Turn(
            go=False, claim=False, reason=f"{len(busy)} cluster(s) in flight fill maxParallel {max_parallel}"
        )
    before = [target for target in targets[: targets.index(cluster)] if target not in states]
    if before:
        return Turn(
            go=False,
            claim=False,
            reason=f"{len(before)} target(s) before it have not started (first: {before[0]})",
        )
    return Turn(go=True, claim=True, reason=f"a slot is free ({len(busy)}/{max_parallel} in flight)")


def boundary_refusal(sized: StageContract, targets: Sequence[str], states: Mapping[str, ClusterState]) -> str:
    """Why the step of a cluster just recorded Completed may not close its stage and select the next
    one, or end the rollout after the last stage (`sized`: the stage's contract; `targets` and
    `states` as in `next_claim`): "" when it may, that is when the Workflow's next step is
    `record-and-select` right after the clusters (`selectsNext`), or the last stage's `record` and
    then the exit handler (`endsRollout`), and every target has an outcome."""
    if not sized.closing_step_done_early:
        return (
            "the stage's own closing step runs next "
            "(the next stage opens itself, a bake follows, or groups end on their own)"
        )
    if sized.batches:
        return "the stage runs in batches"
    analysis = sized.analysis
    if analysis is not None and analysis.after_healthy:
        return "the stage's analysis runs before it closes"
    open_ = [target for target in targets if states.get(target) not in END_STATES]
    if open_:
        return f"{len(open_)} cluster(s) of the stage have no outcome yet"
    return ""
