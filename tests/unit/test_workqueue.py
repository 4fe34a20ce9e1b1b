"""The work queue: de-duplication, one worker per key, dirty re-queue, backoff, delayed adds.

Pure in-process tests; time is a fake monotonic clock the test moves by hand.
"""

from __future__ import annotations

import threading

import pytest

from orchestrator.kube.client import KubeError, Retryable
from orchestrator.watcher.loop import server_asked_wait
from orchestrator.watcher.workqueue import WorkQueue
from tests.support.wait import wait_for


class FakeMonotonic:
    """A monotonic clock that only moves when told."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make_queue(backoffs: tuple[float, ...] = (1.0, 2.0, 4.0)) -> tuple[WorkQueue[str], FakeMonotonic]:
    clock = FakeMonotonic()
    return WorkQueue(backoffs, clock=clock), clock


def test_a_key_added_many_times_is_handed_out_once() -> None:
    queue, _ = make_queue()
    for _ in range(5):
        queue.add("ns/a")
    queue.add("ns/b")
    assert [queue.get(timeout=0), queue.get(timeout=0), queue.get(timeout=0)] == ["ns/a", "ns/b", None]


def test_a_key_being_processed_is_not_handed_to_a_second_worker_but_requeued_after_done() -> None:
    queue, _ = make_queue()
    queue.add("ns/a")
    assert queue.get(timeout=0) == "ns/a"
    queue.add("ns/a")  # an event arrives while a worker holds the key
    queue.add("ns/a")
    assert queue.get(timeout=0) is None, "the same key must not go to a second worker"
    queue.done("ns/a")
    assert queue.get(timeout=0) == "ns/a", "the change seen during processing is not lost"
    queue.done("ns/a")
    assert queue.get(timeout=0) is None
    assert queue.pending() == 0


@pytest.mark.parametrize(
    ("failures", "expected_delays"),
    [
        pytest.param(1, [1.0], id="first-failure-waits-the-first-backoff"),
        pytest.param(3, [1.0, 2.0, 4.0], id="each-failure-waits-longer"),
        pytest.param(5, [1.0, 2.0, 4.0, 4.0, 4.0], id="past-the-tuple-the-last-backoff-repeats"),
    ],
)
def test_retry_backs_off_along_the_tuple(failures: int, expected_delays: list[float]) -> None:
    queue, _ = make_queue()
    delays = []
    for _ in range(failures):
        delays.append(queue.retry("ns/a"))
    assert delays == expected_delays
    assert queue.failures("ns/a") == failures
    queue.forget("ns/a")
    assert queue.failures("ns/a") == 0
    assert queue.retry("ns/a") == 1.0, "forget resets the backoff"


def test_a_retried_key_comes_back_only_once_its_delay_has_passed() -> None:
    queue, clock = make_queue()
    queue.add("ns/a")
    key = queue.get(timeout=0)
    assert key == "ns/a"
    queue.retry(key)
    queue.done(key)
    assert queue.get(timeout=0) is None
    clock.now += 0.9
    assert queue.get(timeout=0) is None
    clock.now += 0.2
    assert queue.get(timeout=0) == "ns/a"


def test_add_after_keeps_only_the_earliest_wakeup() -> None:
    queue, clock = make_queue()
    queue.add_after("ns/a", 10)
    queue.add_after("ns/a", 2)
    queue.add_after("ns/a", 30)
    assert queue.pending() == 1
    clock.now += 2
    assert queue.get(timeout=0) == "ns/a"
    queue.done("ns/a")
    clock.now += 30
    # The superseded wake-up at +10 may still fire once; never more than that.
    seen = []
    while (key := queue.get(timeout=0)) is not None:
        seen.append(key)
        queue.done(key)
    assert seen in ([], ["ns/a"])


def test_add_after_with_no_delay_is_an_add() -> None:
    queue, _ = make_queue()
    queue.add_after("ns/a", 0)
    assert queue.get(timeout=0) == "ns/a"


def test_shutdown_wakes_a_blocked_worker() -> None:
    queue, _ = make_queue()
    results: list[str | None] = []
    worker = threading.Thread(target=lambda: results.append(queue.get()))
    worker.start()
    queue.shutdown()
    worker.join(timeout=5)
    assert not worker.is_alive()
    assert results == [None]
    queue.add("ns/a")
    assert queue.get(timeout=0) is None, "a shut-down queue hands out nothing"


def test_many_workers_never_hold_the_same_key_at_once() -> None:
    queue: WorkQueue[str] = WorkQueue((0.01,))
    holding: set[str] = set()
    overlaps: list[str] = []
    handled: list[str] = []
    lock = threading.Lock()
    gate = threading.Event()

    def work() -> None:
        while (key := queue.get()) is not None:
            with lock:
                if key in holding:
                    overlaps.append(key)
                holding.add(key)
            gate.wait(0.001)
            with lock:
                holding.discard(key)
                handled.append(key)
            queue.done(key)

    workers = [threading.Thread(target=work) for _ in range(4)]
    for worker in workers:
        worker.start()
    for i in range(400):
        queue.add(f"ns/{i % 7}")
    wait_for(lambda: queue.pending() == 0, timeout=10, what="the queue to drain")
    queue.shutdown()
    for worker in workers:
        worker.join(timeout=5)
    assert overlaps == []
    assert set(handled) == {f"ns/{i}" for i in range(7)}


@pytest.mark.parametrize(
    ("at_least", "expected_delay"),
    [
        pytest.param(0.0, 1.0, id="nothing-asked-the-backoff"),
        pytest.param(0.5, 1.0, id="asked-less-than-the-backoff-the-backoff"),
        pytest.param(7.0, 7.0, id="asked-more-than-the-backoff-retry-after-wins"),
    ],
)
def test_a_retry_waits_at_least_what_the_server_asked(at_least: float, expected_delay: float) -> None:
    queue, clock = make_queue()
    queue.add("ns/a")
    key = queue.get(timeout=0)
    assert key == "ns/a"
    assert queue.retry(key, at_least=at_least) == expected_delay
    queue.done(key)
    clock.now += expected_delay - 0.1
    assert queue.get(timeout=0) is None, "not before the delay"
    clock.now += 0.2
    assert queue.get(timeout=0) == "ns/a"
    assert queue.failures("ns/a") == 1, "Retry-After does not skip the backoff's count"


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        pytest.param(Retryable("429", status=429, retry_after=3.0), 3.0, id="429-with-retry-after"),
        pytest.param(Retryable("429", status=429), 0.0, id="429-without-retry-after"),
        pytest.param(KubeError("500", status=500), 0.0, id="other-kube-error"),
        pytest.param(ValueError("a bug"), 0.0, id="not-a-kube-error"),
    ],
)
def test_the_watcher_retries_a_reconcile_no_sooner_than_retry_after(exc: Exception, expected: float) -> None:
    assert server_asked_wait(exc) == expected
