"""The `batch` step's own rules (steps/batch.py): which clusters a batch takes, its share of
maxParallel, and how it runs its clusters (order, bound, temporary errors). Pure: the clusters are
a function given in, the clock a ManualClock. Each cluster as the `cluster` step runs it, against
the real API server, is covered by the rollout scenarios in batch mode
(tests/e2e/test_rollout_scenarios.py `[local-batch]`).
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from orchestrator.core.errors import TemporaryError
from orchestrator.kube.client import Kube, Retryable
from orchestrator.planning.sizing import clusters_of_batch, slots_of_batch
from steps.batch import BatchResult, PausedTooLong, hold_while_paused, run_batch, run_clusters
from steps.cli import exit_code, step_error
from steps.cluster import ClusterOutcome, ClusterResult
from steps.common import RolloutRef, Tuning, UsageProblem
from steps.context import StepContext
from tests.support.builders import make_contract, make_ps_model, make_stage
from tests.support.clock import ManualClock

CLOCK_START = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


@given(st.integers(min_value=1, max_value=500), st.integers(min_value=1, max_value=500))
def test_the_batches_share_max_parallel_exactly(max_parallel: int, batches: int) -> None:
    batches = min(batches, max_parallel)  # the builder never makes more batches than maxParallel
    shares = [slots_of_batch(max_parallel, batches, batch) for batch in range(batches)]
    assert sum(shares) == max_parallel and min(shares) >= 1


@given(
    st.lists(st.text(min_size=1, max_size=5), unique=True, max_size=60),
    st.integers(1, 12),
    st.integers(1, 40),
)
def test_the_batches_take_every_target_once_in_order(
    targets: list[str], batches: int, max_parallel: int
) -> None:
    batches = min(batches, max_parallel)
    taken = [clusters_of_batch(targets, batches, batch, max_parallel) for batch in range(batches)]
    assert sorted(c for batch in taken for c in batch) == sorted(targets)
    for batch in taken:
        assert batch == [t for t in targets if t in batch]  # rollout order inside each batch


@given(st.integers(0, 400), st.integers(1, 60), st.integers(1, 30))
def test_the_batches_first_waves_are_the_first_max_parallel_targets(
    targets: int, max_parallel: int, batches: int
) -> None:
    # `select` starts the syncs of the stage's first maxParallel targets (steps/first_wave.py): they
    # must be the clusters the batches start first, each batch its first `slots` clusters.
    batches = min(batches, max_parallel)
    names = [f"c{i}" for i in range(targets)]
    first_waves = [
        clusters_of_batch(names, batches, batch, max_parallel)[: slots_of_batch(max_parallel, batches, batch)]
        for batch in range(batches)
    ]
    assert sorted(c for wave in first_waves for c in wave) == sorted(names[:max_parallel])


@settings(deadline=None)
@given(st.integers(0, 2_000), st.integers(1, 300), st.integers(1, 60))
def test_equal_clusters_end_in_as_many_waves_as_one_loop_of_max_parallel_pods(
    targets: int, max_parallel: int, batches: int
) -> None:
    # Each batch runs its clusters `share` at a time, so with clusters that all take as long it ends
    # after ceil(clusters / share) waves; one loop of maxParallel pods ends after ceil(targets /
    # maxParallel). Dealing the clusters in proportion to the shares makes them equal, whatever the
    # shares (dealt evenly, a batch with one slot fewer ended a wave or more behind).
    batches = min(batches, max_parallel)
    names = [f"c{index}" for index in range(targets)]
    waves = [
        -(
            -len(clusters_of_batch(names, batches, batch, max_parallel))
            // slots_of_batch(max_parallel, batches, batch)
        )
        for batch in range(batches)
    ]
    assert max(waves) == -(-targets // max_parallel)


@pytest.mark.parametrize(
    ("max_parallel", "batches", "dealt"),
    [
        pytest.param(4, 2, [[0, 2, 4, 6, 8], [1, 3, 5, 7, 9]], id="shares-equal-every-other-target"),
        pytest.param(5, 2, [[0, 2, 4, 5, 7, 9], [1, 3, 6, 8]], id="three-slots-and-two-take-six-and-four"),
        pytest.param(3, 3, [[0, 3, 6, 9], [1, 4, 7], [2, 5, 8]], id="one-slot-each-round-robin"),
        pytest.param(20, 2, [[0, 2, 4, 6, 8], [1, 3, 5, 7, 9]], id="more-slots-than-targets"),
    ],
)
def test_which_targets_each_batch_takes(max_parallel: int, batches: int, dealt: list[list[int]]) -> None:
    names = [str(index) for index in range(10)]
    taken = [clusters_of_batch(names, batches, batch, max_parallel) for batch in range(batches)]
    assert taken == [[str(index) for index in batch] for batch in dealt]


def _done(cluster: str) -> ClusterResult:
    return ClusterResult(cluster, ClusterOutcome.DONE, "ok")


def test_clusters_start_in_order_never_more_than_the_slots_at_once() -> None:
    lock = threading.Lock()
    running: list[str] = []
    started: list[str] = []
    peak = 0
    release = threading.Semaphore(0)

    def run(cluster: str) -> ClusterResult:
        nonlocal peak
        with lock:
            running.append(cluster)
            started.append(cluster)
            peak = max(peak, len(running))
        release.acquire(timeout=10)
        with lock:
            running.remove(cluster)
        return _done(cluster)

    clusters = [f"c{i}" for i in range(9)]
    for _ in clusters:
        release.release()
    results = run_clusters(clusters, run, slots=3, clock=ManualClock(CLOCK_START), backoffs=())
    assert [r.cluster for r in results] == clusters
    assert peak <= 3
    assert started[:3] == sorted(started[:3]) == ["c0", "c1", "c2"]


def test_a_temporary_error_retries_the_cluster_after_the_backoffs() -> None:
    clock = ManualClock(CLOCK_START)
    attempts: dict[str, int] = {}

    def run(cluster: str) -> ClusterResult:
        attempts[cluster] = attempts.get(cluster, 0) + 1
        if cluster == "flaky" and attempts[cluster] < 3:
            raise Retryable("the API server is away", status=503)
        return _done(cluster)

    results = run_clusters(["a", "flaky", "b"], run, slots=1, clock=clock, backoffs=(5.0, 10.0, 20.0))
    assert [r.outcome for r in results] == [ClusterOutcome.DONE] * 3
    assert attempts == {"a": 1, "flaky": 3, "b": 1}
    assert (clock.now() - CLOCK_START).total_seconds() == 15.0


def test_when_retries_run_out_no_new_cluster_starts_and_the_error_is_raised() -> None:
    started: list[str] = []

    def run(cluster: str) -> ClusterResult:
        started.append(cluster)
        if cluster == "down":
            raise Retryable("connection refused")
        return _done(cluster)

    with pytest.raises(Retryable, match="connection refused"):
        run_clusters(["down", "a", "b"], run, slots=1, clock=ManualClock(CLOCK_START), backoffs=(1.0,))
    assert started == ["down", "down"]  # one retry, then nothing new starts (exit 75 retries the batch)


@pytest.mark.parametrize(
    ("outcomes", "failed"),
    [
        pytest.param([ClusterOutcome.DONE, ClusterOutcome.DONE], False, id="all-done-exit-0"),
        pytest.param([ClusterOutcome.DONE, ClusterOutcome.FAILED], True, id="one-failed-exit-1"),
        pytest.param([ClusterOutcome.FAILED, ClusterOutcome.NOT_STARTED], True, id="not-started-exit-1"),
    ],
)
def test_a_batch_fails_when_a_cluster_did_not_succeed(outcomes: list[ClusterOutcome], failed: bool) -> None:
    result = BatchResult("rest", 0, tuple(ClusterResult(f"c{i}", o, "why") for i, o in enumerate(outcomes)))
    assert result.failed is failed
    assert result.summary.startswith(f"batch 0 of stage 'rest': {len(outcomes)} cluster(s)")


def test_a_cluster_does_not_start_while_the_progressive_sync_is_paused() -> None:
    clock = ManualClock(CLOCK_START)
    answers = iter([True, True, True, False])  # paused for three looks, then resumed
    hold_while_paused(lambda: next(answers), "c1", clock=clock, tuning=Tuning(pause_poll_seconds=2.0))
    assert (clock.now() - CLOCK_START).total_seconds() == 4.0  # two waits between three looks


def test_a_pause_longer_than_the_hold_exits_75_for_argo_to_retry() -> None:
    clock = ManualClock(CLOCK_START)
    with pytest.raises(PausedTooLong, match="stayed paused for 10s"):
        hold_while_paused(
            lambda: True, "c1", clock=clock, tuning=Tuning(pause_poll_seconds=3.0, pause_hold_seconds=10)
        )
    # Temporary by its type (the entrypoint exits 75); not the adapter's Retryable.
    error = step_error(PausedTooLong("x"))
    assert error is not None and exit_code(error) == 75
    assert isinstance(PausedTooLong("x"), TemporaryError) and not isinstance(PausedTooLong("x"), Retryable)


def test_a_pause_longer_than_the_hold_is_not_retried_in_the_pod() -> None:
    """run_clusters retries temporary errors in the pod, but the hold already was the wait."""
    calls: list[str] = []

    def paused_too_long(cluster: str) -> ClusterResult:
        calls.append(cluster)
        raise PausedTooLong(f"cluster {cluster}: the ProgressiveSync stayed paused")

    with pytest.raises(PausedTooLong):
        run_clusters(["c1"], paused_too_long, slots=1, clock=ManualClock(CLOCK_START), backoffs=(1.0, 2.0))
    assert calls == ["c1"]


def test_the_contract_refuses_more_batches_than_max_parallel() -> None:
    # Every batch runs at least one cluster at a time: the contract itself cannot say otherwise.
    with pytest.raises(ValidationError, match=r"batches \(3\) above maxParallel \(2\)"):
        make_contract(["rest"], sizing={"rest": {"batches": 3, "max_parallel": 2}})


@pytest.mark.parametrize(
    ("batch", "batches"),
    [
        pytest.param(3, 3, id="batch-index-past-the-last"),
        pytest.param(0, 0, id="a-stage-without-batches"),
    ],
)
def test_a_batch_refuses_an_index_the_contract_does_not_have(batch: int, batches: int) -> None:
    # Refused before any API call: the context is opened on a ProgressiveSync given in.
    contract = make_contract(["rest"], sizing={"rest": {"batches": batches, "max_parallel": 6}})
    ctx = StepContext.open(
        cast(Kube, None),
        RolloutRef(namespace="ns", name="ps", rollout_id=contract.rollout_id, argocd_namespace="argocd"),
        contract,
        stage="rest",
        clock=ManualClock(CLOCK_START),
        ps=make_ps_model(stages=[make_stage("rest")]),
    )
    with pytest.raises(UsageProblem, match=r"--batch .*runs in .* batch\(es\) by the rollout contract"):
        run_batch(cast(Kube, None), ctx, batch)
