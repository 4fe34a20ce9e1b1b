"""The watch loop's backoff policy: bounded waits, progress resets, give-up only without progress.

Hypothesis drives arbitrary sequences of failures and progress through `Backoff`; the invariants
are what issue 18 asks of every list/watch loop: no wait beyond the cap, the first failure after
progress waits the shortest delay, and only `give_up_after` failures *in a row* end the loop.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.kube.informer import InformerSettings
from orchestrator.kube.watchloop import Backoff, BackoffPolicy, WatchLoopSettings

delays = st.lists(st.floats(min_value=0.0, max_value=60.0), min_size=1, max_size=12).map(tuple)
limits = st.none() | st.integers(min_value=1, max_value=30)
# True: progress (a list, an accepted stream, an event); False: a failed attempt.
histories = st.lists(st.booleans(), max_size=200)


@given(delays, limits, histories)
def test_waits_are_bounded_and_only_failures_in_a_row_give_up(
    delay_tuple: tuple[float, ...], limit: int | None, history: list[bool]
) -> None:
    backoff = Backoff(BackoffPolicy(delays=delay_tuple, give_up_after=limit))
    in_a_row = 0
    for progressed in history:
        if progressed:
            backoff.progressed()
            in_a_row = 0
            continue
        in_a_row += 1
        delay = backoff.failed()
        if limit is not None and in_a_row >= limit:
            assert delay is None, "the limit of failures in a row gives up"
            return
        assert delay is not None
        assert 0.0 <= delay <= backoff.policy.cap
        assert delay == delay_tuple[min(in_a_row, len(delay_tuple)) - 1]


@given(delays, st.integers(min_value=1, max_value=500))
def test_a_network_that_keeps_working_never_exhausts_the_policy(
    delay_tuple: tuple[float, ...], cycles: int
) -> None:
    """Streams cut every few seconds: each cycle is one failure then one successful reconnect."""
    backoff = Backoff(BackoffPolicy.bounded(delay_tuple))
    for _ in range(cycles):
        assert backoff.failed() == delay_tuple[0], "after progress the wait starts short again"
        backoff.progressed()


@given(delays)
def test_without_a_limit_it_never_gives_up(delay_tuple: tuple[float, ...]) -> None:
    backoff = Backoff(BackoffPolicy(delays=delay_tuple, give_up_after=None))
    waits = [backoff.failed() for _ in range(len(delay_tuple) + 50)]
    assert None not in waits
    assert waits[-1] == delay_tuple[-1], "the last delay repeats"


def test_the_informers_default_is_never_deaf_for_long_and_rides_out_two_minutes() -> None:
    policy = InformerSettings().loop.backoff
    assert policy.cap <= 5.0, "the ProgressiveSync informer used to be deaf for 30 s at a time"
    assert policy.give_up_after is not None
    refused_for = sum(policy.delays[: policy.give_up_after - 1])
    assert refused_for >= 90.0, f"an unreachable API server is waited out for {refused_for}s"


@pytest.mark.parametrize(
    ("window", "idle", "expected"),
    [
        pytest.param(300, 75.0, 75.0, id="long-stream-bounded-by-the-bookmark-silence"),
        pytest.param(2, 75.0, 7.0, id="short-stream-bounded-by-its-own-end"),
    ],
)
def test_the_read_timeout_catches_a_half_open_stream(window: int, idle: float, expected: float) -> None:
    assert WatchLoopSettings(idle_timeout_seconds=idle).read_timeout(window) == expected


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        pytest.param({"delays": ()}, "non-empty", id="no-delays"),
        pytest.param({"delays": (-1.0,)}, "non-negative", id="negative-delay"),
        pytest.param({"give_up_after": 0}, "at least 1", id="zero-limit"),
    ],
)
def test_a_policy_that_cannot_work_is_refused(policy: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        BackoffPolicy(**policy)  # type: ignore[arg-type]
