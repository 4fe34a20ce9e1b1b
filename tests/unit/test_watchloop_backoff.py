"""The watch loop's backoff policy: bounded waits, progress resets, give-up only without progress.

Hypothesis drives arbitrary sequences of failures and progress through `Backoff`; the invariants
are what issue 18 asks of every list/watch loop: no wait beyond the cap, the first failure after
progress waits the shortest delay, and only `give_up_after` failures *in a row* end the loop.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.kube.client import (
    APPLICATIONS,
    PROGRESSIVE_SYNCS,
    SECRETS,
    WORKFLOWS,
    Forbidden,
    KubeError,
    NotFound,
    Resource,
    Retryable,
)
from orchestrator.kube.informer import InformerSettings
from orchestrator.kube.watchloop import (
    CRD_MISSING,
    FORBIDDEN,
    Backoff,
    BackoffPolicy,
    WatchLoopSettings,
    blocked_by,
)

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


@given(delays, limits, st.integers(min_value=1, max_value=300))
def test_a_wait_on_an_operator_never_gives_up_and_stays_capped(
    delay_tuple: tuple[float, ...], limit: int | None, attempts: int
) -> None:
    """A 403 or a missing CRD waits as long as it takes, along the same capped delays."""
    backoff = Backoff(BackoffPolicy(delays=delay_tuple, give_up_after=limit))
    waits = [backoff.waiting() for _ in range(attempts)]
    assert all(0.0 <= wait <= backoff.policy.cap for wait in waits)
    assert waits[0] == delay_tuple[0]
    assert waits[-1] == delay_tuple[min(attempts, len(delay_tuple)) - 1]
    backoff.progressed()
    assert backoff.waiting() == delay_tuple[0], "recovery resets it"


def test_the_informers_wait_on_an_operator_and_the_steps_do_not() -> None:
    assert InformerSettings().loop.wait_when_blocked
    assert not WatchLoopSettings().wait_when_blocked


@pytest.mark.parametrize(
    ("error", "resource", "namespace", "verb", "reason", "says"),
    [
        pytest.param(
            Forbidden("workflows is forbidden", status=403),
            WORKFLOWS,
            "team-a",
            "watch",
            FORBIDDEN,
            ["forbidden to watch workflows.argoproj.io in namespace team-a", "grant", "list and watch"],
            id="403-on-a-watch-is-a-missing-permission",
        ),
        pytest.param(
            Forbidden("secrets is forbidden", status=403),
            SECRETS,
            None,
            "list",
            FORBIDDEN,
            ["forbidden to list secrets cluster-wide"],
            id="403-on-a-core-resource-too",
        ),
        pytest.param(
            NotFound("the server could not find the requested resource", status=404),
            WORKFLOWS,
            "team-a",
            "list",
            CRD_MISSING,
            ["workflows.argoproj.io is not installed", "install Argo Workflows' CRDs"],
            id="404-on-workflows-means-install-argo-workflows",
        ),
        pytest.param(
            NotFound("not found", status=404),
            APPLICATIONS,
            "argocd",
            "watch",
            CRD_MISSING,
            ["applications.argoproj.io is not installed", "install Argo CD's CRDs"],
            id="404-on-applications-means-install-argo-cd",
        ),
        pytest.param(
            NotFound("not found", status=404),
            PROGRESSIVE_SYNCS,
            None,
            "list",
            CRD_MISSING,
            ["progressivesyncs.progressivesync.io", "install progressive-sync's CRDs"],
            id="404-on-our-own-crd",
        ),
        pytest.param(
            NotFound("not found", status=404),
            Resource("example.com", "v1", "widgets", "Widget"),
            "x",
            "list",
            CRD_MISSING,
            ["install the CRD widgets.example.com"],
            id="404-on-an-unknown-crd-names-it",
        ),
        pytest.param(
            NotFound("nope", status=404), SECRETS, "x", "list", None, [], id="404-core-is-a-failure"
        ),
        pytest.param(Retryable("503", status=503), WORKFLOWS, "x", "watch", None, [], id="503-is-a-failure"),
        pytest.param(Retryable("429", status=429), WORKFLOWS, "x", "list", None, [], id="429-is-a-failure"),
        pytest.param(
            KubeError("refused", status=0), WORKFLOWS, "x", "list", None, [], id="refused-is-a-failure"
        ),
    ],
)
def test_which_errors_wait_and_say_so(
    *,
    error: KubeError,
    resource: Resource,
    namespace: str | None,
    verb: str,
    reason: str | None,
    says: list[str],
) -> None:
    blocked = blocked_by(error, resource, namespace, verb)
    if reason is None:
        assert blocked is None
        return
    assert blocked is not None
    assert blocked.reason == reason
    for text in says:
        assert text in blocked.message
