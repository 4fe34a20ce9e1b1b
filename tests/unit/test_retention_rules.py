"""Rollout history (orchestrator/watcher/retention.py): which old rollouts' records the watcher deletes.

Pure: record references are built here (name, uid, rollout, creation time, owned); nothing is real.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.watcher.retention import RecordRef, first_created, plan_retention

T0 = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


def ref(rollout: str, minute: int | None, part: int = 0, *, owned: bool = True) -> RecordRef:
    """Part `part` of a record of `rollout`, created `minute` minutes after T0 (None: undated)."""
    return RecordRef(
        name=f"web-{rollout}-0-{part}",
        uid=f"uid-{rollout}-{part}",
        rollout_id=rollout,
        created=None if minute is None else T0 + timedelta(minutes=minute),
        owned=owned,
    )


# Rollouts r1..r4 a minute apart, each with two parts; r4 is the current one.
FOUR = [ref(f"r{i}", i, part) for i in range(1, 5) for part in (0, 1)]


@pytest.mark.parametrize(
    ("records", "current", "started_at", "history", "deleted"),
    [
        pytest.param(FOUR, "r4", None, 2, ["web-r1-0-0", "web-r1-0-1"], id="keeps-current-and-two-before"),
        pytest.param(FOUR, "r4", None, 3, [], id="history-covers-all"),
        pytest.param(
            FOUR,
            "r4",
            None,
            0,
            ["web-r1-0-0", "web-r1-0-1", "web-r2-0-0", "web-r2-0-1", "web-r3-0-0", "web-r3-0-1"],
            id="history-zero-keeps-only-current",
        ),
        pytest.param(FOUR, None, None, 0, [], id="no-rollout-in-status-deletes-nothing"),
        pytest.param(
            [ref("r1", 1), ref("r2", 2), ref("r3", 3)],
            "r1",
            None,
            1,
            ["web-r2-0-0"],
            id="current-kept-whatever-its-age",
        ),
        pytest.param(
            [ref("r1", 1), ref("r2", 2), ref("r3", 30)],
            "r2",
            T0 + timedelta(minutes=20),
            0,
            ["web-r1-0-0"],
            id="a-rollout-newer-than-the-status-is-kept",
        ),
        pytest.param(
            [ref("r1", 1), ref("r2", 2), ref("r3", 20)],
            "r2",
            T0 + timedelta(minutes=20),
            0,
            ["web-r1-0-0"],
            id="created-in-the-second-the-current-started-counts-as-newer",
        ),
        pytest.param(
            [ref("r1", 1, owned=False), ref("r2", 2), ref("r3", 3)],
            "r3",
            None,
            0,
            ["web-r2-0-0"],
            id="a-record-not-owned-is-never-deleted",
        ),
        pytest.param(
            [ref("r9", 1), ref("r8", 5), ref("r7", 9), ref("r6", 12)],
            "r6",
            None,
            1,
            ["web-r9-0-0", "web-r8-0-0"],
            id="age-by-creation-time-not-by-id-oldest-first",
        ),
        pytest.param(
            [ref("rb", 3), ref("ra", 3), ref("rc", 4)],
            "rc",
            None,
            1,
            ["web-ra-0-0"],
            id="same-second-ordered-by-rollout-id",
        ),
        pytest.param(
            [ref("r1", 10, 0), ref("r1", 1, 1), ref("r2", 5), ref("r3", 11)],
            "r3",
            None,
            1,
            ["web-r1-0-0", "web-r1-0-1"],
            id="a-rollout-dates-from-its-first-record",
        ),
        pytest.param(
            [ref("r1", None), ref("r2", 2), ref("r3", 3)],
            "r3",
            None,
            1,
            ["web-r1-0-0"],
            id="undated-is-oldest",
        ),
        pytest.param([], "r1", None, 2, [], id="no-records"),
    ],
)
def test_plan_retention(
    records: list[RecordRef],
    current: str | None,
    started_at: datetime | None,
    history: int,
    deleted: list[str],
) -> None:
    plan = plan_retention(records, current=current, started_at=started_at, history=history)
    assert list(plan.names) == deleted, plan.reason


def test_the_reason_names_what_is_kept_and_deleted() -> None:
    plan = plan_retention(FOUR, current="r4", started_at=None, history=1)
    assert plan.reason == (
        "rollout r4 and the 1 most recent earlier rollout kept (at most 1); "
        "deleting 4 records of 2 older rollouts: r1, r2"
    )
    assert plan.kept == ("r4", "r3")
    quiet = plan_retention(FOUR, current="r4", started_at=None, history=5)
    assert quiet.reason == "rollout r4 and 3 earlier rollouts kept (at most 5); nothing to delete"


def test_negative_history_is_refused() -> None:
    with pytest.raises(ValueError, match="negative"):
        plan_retention(FOUR, current="r4", started_at=None, history=-1)


# --- invariants -------------------------------------------------------------------------------------

ROLLOUTS = st.sampled_from([f"r{i}" for i in range(8)])
_refs = st.builds(
    RecordRef,
    name=st.text("abcdef0123456789", min_size=1, max_size=8),
    uid=st.uuids().map(str),
    rollout_id=ROLLOUTS,
    created=st.one_of(st.none(), st.integers(0, 50).map(lambda m: T0 + timedelta(minutes=m))),
    owned=st.booleans(),
)
_started = st.one_of(st.none(), st.integers(0, 60).map(lambda m: T0 + timedelta(minutes=m)))


@given(
    records=st.lists(_refs, max_size=30).map(lambda refs: list({r.name: r for r in refs}.values())),
    current=st.one_of(st.none(), ROLLOUTS),
    started_at=_started,
    history=st.integers(0, 5),
)
def test_invariants(
    records: list[RecordRef], current: str | None, started_at: datetime | None, history: int
) -> None:
    plan = plan_retention(records, current=current, started_at=started_at, history=history)
    deleted = set(plan.delete)
    # Never the current rollout's records, never a record someone else owns, nothing twice.
    assert all(r.rollout_id != current and r.owned for r in deleted)
    assert len(plan.delete) == len(deleted)
    assert deleted <= set(records)
    # A rollout goes whole or not at all.
    gone = {r.rollout_id for r in deleted}
    left = [r for r in records if r not in deleted]
    assert not gone & {r.rollout_id for r in left if r.owned}
    # At most `history` rollouts are kept besides the current one and those newer than its start,
    # and they are the most recent.
    history_kept = {
        r.rollout_id
        for r in left
        if r.owned
        and r.rollout_id != current
        and not (
            started_at is not None
            and any(
                o.created is not None and o.created >= started_at
                for o in records
                if o.owned and o.rollout_id == r.rollout_id
            )
        )
    }
    if current is not None:
        assert len(history_kept) == min(history, len(history_kept | gone))
        age = {
            rollout: first_created(r for r in records if r.owned and r.rollout_id == rollout)
            for rollout in gone | history_kept
        }
        assert all(age[g] <= age[k] for g in gone for k in history_kept)
    else:
        assert not deleted
    # Idempotent: what is left is already within the limit.
    again = plan_retention(left, current=current, started_at=started_at, history=history)
    assert again.delete == ()
