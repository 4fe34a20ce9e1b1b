"""The fleet simulator's work queue: an Application is one worker's at a time, and nothing put for it
is lost (orchestrator.simulator.appcontroller._DelayQueue).

With several workers, two of them acting on one Application at once would write its steps out of
order (a sync finished before it started) or twice; what is put while a worker has it must still
be done after. Checked by example and, over any interleaving of put / pop / done, by Hypothesis.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.simulator.appcontroller import FleetSimulator, _DelayQueue


def test_a_name_put_while_a_worker_has_it_waits_until_that_worker_is_done() -> None:
    queue = _DelayQueue()
    queue.put("app-1")
    assert queue.pop(timeout=0) == "app-1"
    queue.put("app-1")
    assert queue.pop(timeout=0) is None, "a second worker must not get app-1 while the first has it"
    queue.done("app-1")
    assert queue.pop(timeout=0) == "app-1"
    queue.done("app-1")
    assert queue.pop(timeout=0) is None


def test_other_names_go_to_other_workers_meanwhile() -> None:
    queue = _DelayQueue()
    queue.put("app-1")
    queue.put("app-2")
    assert {queue.pop(timeout=0), queue.pop(timeout=0)} == {"app-1", "app-2"}


def test_done_keeps_the_earliest_due_time_put_meanwhile() -> None:
    queue = _DelayQueue()
    queue.put("app-1")
    assert queue.pop(timeout=0) == "app-1"
    queue.put("app-1", delay=3600)
    queue.put("app-1", delay=0)
    queue.done("app-1")
    assert queue.pop(timeout=0) == "app-1"


OPS = st.lists(
    st.tuples(st.sampled_from(["put", "pop", "done"]), st.sampled_from(["a", "b", "c"])), max_size=60
)


@settings(max_examples=300, deadline=None)
@given(OPS)
def test_no_name_is_handed_out_twice_at_once_and_none_is_lost(ops: list[tuple[str, str]]) -> None:
    queue = _DelayQueue()
    held: set[str] = set()  # names a (model) worker has popped and not yet marked done
    owed: set[str] = set()  # names put and not yet handed out since
    for op, name in ops:
        if op == "put":
            queue.put(name)
            owed.add(name)
        elif op == "pop":
            got = queue.pop(timeout=0)
            if got is not None:
                assert got not in held, f"{got} handed out while a worker has it"
                assert got in owed
                held.add(got)
                owed.discard(got)
            else:
                assert owed <= held, f"due names {owed - held} were not handed out"
        elif name in held:
            queue.done(name)
            held.discard(name)
    for name in sorted(held):
        queue.done(name)
    drained: set[str] = set()
    while (got := queue.pop(timeout=0)) is not None:
        assert got not in drained
        drained.add(got)
        queue.done(got)
    assert drained == owed, "every name put is handed out once its worker is done"


@pytest.mark.parametrize(
    ("workers", "error"),
    [
        pytest.param(0, "workers must be at least 1, not 0", id="zero-workers-refused"),
        pytest.param(-2, "workers must be at least 1, not -2", id="negative-workers-refused"),
    ],
)
def test_the_number_of_workers_is_checked(workers: int, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        FleetSimulator(None, "ns", workers=workers)  # type: ignore[arg-type]
