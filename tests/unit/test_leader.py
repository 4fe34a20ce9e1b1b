"""The leader-election decision: create, renew, take over or wait, from what the Lease says and how
long it has looked the same to us (our monotonic clock, never the wall clocks of other replicas)."""

from __future__ import annotations

import pytest

from orchestrator.watcher.leader import LeaseAction, LeaseRecord, LeaseSettings, decide_lease

ME = "watcher-a"


def record(holder: str, lease_seconds: float = 15) -> LeaseRecord:
    return LeaseRecord(
        holder=holder,
        renew_time="2030-01-01T12:00:00.000000Z",
        lease_seconds=lease_seconds,
        transitions=3,
        resource_version="7",
    )


@pytest.mark.parametrize(
    ("lease", "unchanged_for", "action"),
    [
        pytest.param(None, 0.0, LeaseAction.CREATE, id="no-lease-create-it"),
        pytest.param(record(ME), 0.0, LeaseAction.RENEW, id="ours-renew"),
        pytest.param(record(ME), 100.0, LeaseAction.RENEW, id="ours-even-if-late-renew"),
        pytest.param(record(""), 0.0, LeaseAction.TAKE, id="released-take-at-once"),
        pytest.param(record("watcher-b"), 14.9, LeaseAction.WAIT, id="held-and-fresh-wait"),
        pytest.param(record("watcher-b"), 15.0, LeaseAction.TAKE, id="unchanged-for-the-lease-take"),
        pytest.param(
            record("watcher-b", lease_seconds=1), 1.5, LeaseAction.TAKE, id="its-own-duration-counts"
        ),
    ],
)
def test_decide_lease(lease: LeaseRecord | None, unchanged_for: float, action: LeaseAction) -> None:
    assert decide_lease(lease, ME, unchanged_for) == action


@pytest.mark.parametrize(
    ("lease", "retry", "renew"),
    [
        pytest.param(15, 2, 15, id="renew-deadline-not-below-lease"),
        pytest.param(15, 10, 10, id="retry-not-below-renew-deadline"),
        pytest.param(15, 0, 10, id="retry-zero"),
    ],
)
def test_timings_must_leave_a_margin(lease: float, retry: float, renew: float) -> None:
    with pytest.raises(ValueError, match="retry period < renew deadline < lease duration"):
        LeaseSettings(
            namespace="ns",
            name="l",
            identity=ME,
            lease_seconds=lease,
            renew_deadline_seconds=renew,
            retry_seconds=retry,
        )
