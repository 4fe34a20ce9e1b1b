"""What a stage's rollback fan-out runs (`orchestrator.planning.rollback.fanout_items`), and what
rollback-plan writes for it (`steps.rollback_plan.RollbackPlanResult.outputs`).

The exit handler has no Argo `parallelism` (Argo v3.7's controller exits on it there: docs/design/
workflow.md, "No parallelism in the exit handler"), so the fan-out starts every item at once: the
items must never be more than may run at once, and the batch pods must still restore every cluster.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.api.stage_records import ClusterRollback, RollbackState, StageOutcomes
from orchestrator.planning.rollback import FanoutItems, fanout_items, rollback_batch_share
from orchestrator.planning.sizing import rollback_batch_pods, slots_of_batch
from steps.rollback_plan import RollbackPlanResult
from tests.unit.test_rollback_decisions import DONE, outcomes

RESTORED = DONE.model_copy(update={"rollback": ClusterRollback(state=RollbackState.ROLLED_BACK)})


def stage_of(count: int, ended: frozenset[int] = frozenset()) -> tuple[list[str], StageOutcomes]:
    names = [f"c{i}" for i in range(count)]
    return names, outcomes("rest", {n: (RESTORED if i in ended else DONE) for i, n in enumerate(names)})


@pytest.mark.parametrize(
    ("count", "batches", "parallel", "expected"),
    [
        pytest.param(1, 0, 1, FanoutItems(clusters=("c0",)), id="a-canary-is-one-pod"),
        pytest.param(3, 0, 3, FanoutItems(clusters=("c0", "c1", "c2")), id="as-many-as-parallel-a-pod-each"),
        pytest.param(3, 0, 2, FanoutItems(batches=("0", "1")), id="more-than-parallel-batch-pods"),
        pytest.param(9, 0, 4, FanoutItems(batches=("0", "1", "2", "3")), id="parallel-batch-pods"),
        pytest.param(2, 0, 5, FanoutItems(clusters=("c0", "c1")), id="fewer-than-parallel"),
        pytest.param(9, 3, 5, FanoutItems(batches=("0", "1", "2")), id="a-stage-in-batches"),
        pytest.param(9, 8, 2, FanoutItems(batches=("0", "1")), id="batches-capped-by-parallel"),
        pytest.param(0, 0, 2, FanoutItems(), id="nothing-to-restore"),
    ],
)
def test_fanout_items(count: int, batches: int, parallel: int, expected: FanoutItems) -> None:
    names, stage = stage_of(count)
    assert fanout_items(names, stage, batches=batches, parallel=parallel) == expected


@given(
    st.integers(min_value=0, max_value=40),
    st.integers(min_value=0, max_value=6),
    st.integers(min_value=1, max_value=8),
    st.frozensets(st.integers(min_value=0, max_value=39)),
)
def test_a_fanout_never_starts_more_pods_than_may_run_and_restores_every_cluster_once(
    count: int, batches: int, parallel: int, ended: frozenset[int]
) -> None:
    """Whatever the stage: at most `parallel` items, one of the two lists empty, and the clusters
    to restore each in exactly one pod, at most `parallel` restored at once (a batch pod restores
    its share `slots_of_batch` at a time)."""
    names, stage = stage_of(count, ended)
    left = [n for i, n in enumerate(names) if i not in ended]
    items = fanout_items(left, stage, batches=batches, parallel=parallel)
    assert not (items.clusters and items.batches)
    assert len(items.clusters) + len(items.batches) <= parallel
    if items.clusters or not items.batches:
        assert list(items.clusters) == left
        return
    pods = rollback_batch_pods(batches, parallel)
    shares = [
        rollback_batch_share(stage, batches=pods, batch=int(b), parallel=parallel) for b in items.batches
    ]
    dealt = [name for share in shares for name in share]
    assert sorted(dealt) == sorted(left) and all(shares)
    assert sum(slots_of_batch(parallel, pods, int(b)) for b in items.batches) <= parallel


def test_rollback_plan_writes_both_lists_for_every_stage() -> None:
    result = RollbackPlanResult(
        "r1", "rolling back", 3, {0: FanoutItems(clusters=("c1",)), 2: FanoutItems(batches=("0", "1"))}
    )
    assert {name: json.loads(value) for name, value in result.outputs.items()} == {
        "rollback-0": ["c1"],
        "rollback-batches-0": [],
        "rollback-1": [],
        "rollback-batches-1": [],
        "rollback-2": [],
        "rollback-batches-2": ["0", "1"],
    }
