"""Rollout history: which ProgressiveSyncStage records of old rollouts the watcher deletes.

Each rollout leaves its records (one ProgressiveSyncStage per part of each stage) behind; they are
owned by the ProgressiveSync, so without this they would stay until it is deleted and the watcher's
cache would grow with every rollout. As a Deployment keeps `revisionHistoryLimit` ReplicaSets, the
watcher keeps the records of the current rollout (`status.rollout.id`) and of the `history` most
recent rollouts before it (`--rollout-history`, default 2), and deletes the rest.

`plan_retention(records, current=..., started_at=..., history=...)` decides, as an ordered list of
early returns, each with its reason:

1. no rollout in the status → nothing (none is known to be current);
2. records this ProgressiveSync does not own (no ownerReference with its uid) are never deleted:
   they are someone else's;
3. the current rollout's records are kept, whatever their age;
4. a rollout with a record created at or after the current rollout started is kept: it can only be
   a newer rollout than the status shows (the ProgressiveSync's cache lags the records');
5. the other rollouts, ordered by their first record's `creationTimestamp` (oldest first; the same
   second: by rollout id), keep the `history` newest; every record of the older ones is deleted,
   oldest rollout first (so a bounded pass deletes the oldest first).

Applied again to what is left, it deletes nothing (idempotent). Pure: no client, no clock.
Callers: `orchestrator.watcher.history` (the deletes), tests (table-driven and Hypothesis).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

DEFAULT_ROLLOUT_HISTORY = 2

# A record without a creation time (never one read from the API server) counts as the oldest.
_UNDATED = datetime.min.replace(tzinfo=UTC)


@dataclass(frozen=True)
class RecordRef:
    """What retention reads of one ProgressiveSyncStage record."""

    name: str
    uid: str
    rollout_id: str
    created: datetime | None
    owned: bool = True  # an ownerReference names this ProgressiveSync's uid


@dataclass(frozen=True)
class RetentionPlan:
    """The records to delete (oldest rollout first) and why; `kept`: the rollout ids kept."""

    reason: str
    delete: tuple[RecordRef, ...] = ()
    kept: tuple[str, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        """The names of the records to delete, in order."""
        return tuple(ref.name for ref in self.delete)


def plan_retention(
    records: Iterable[RecordRef], *, current: str | None, started_at: datetime | None, history: int
) -> RetentionPlan:
    """The records of a ProgressiveSync to delete: every rollout's but the current one's and the
    `history` most recent before it (see the module docstring for the rules, in order).
    `started_at`: `status.rollout.startedAt` of the current rollout (None: unknown)."""
    if history < 0:
        raise ValueError(f"history must not be negative, got {history}")
    if current is None:
        return RetentionPlan("no rollout in the status: none is known to be current; nothing deleted")
    by_rollout: dict[str, list[RecordRef]] = {}
    for ref in records:
        if ref.owned and ref.rollout_id != current:
            by_rollout.setdefault(ref.rollout_id, []).append(ref)
    newer = sorted(
        rollout
        for rollout, refs in by_rollout.items()
        if started_at is not None
        and any(ref.created is not None and ref.created >= started_at for ref in refs)
    )
    earlier = sorted(
        (rollout for rollout in by_rollout if rollout not in newer),
        key=lambda rollout: (first_created(by_rollout[rollout]), rollout),
    )
    cut = max(0, len(earlier) - history)
    dropped, kept = earlier[:cut], earlier[cut:]
    kept_ids = (current, *reversed(kept), *newer)
    if not dropped:
        return RetentionPlan(
            f"rollout {current} and {_count(len(kept), 'earlier rollout')} kept "
            f"(at most {history}){_newer_note(newer)}; nothing to delete",
            kept=kept_ids,
        )
    delete = tuple(ref for rollout in dropped for ref in sorted(by_rollout[rollout], key=lambda r: r.name))
    return RetentionPlan(
        f"rollout {current} and the {_count(len(kept), 'most recent earlier rollout')} kept "
        f"(at most {history}){_newer_note(newer)}; deleting {_count(len(delete), 'record')} of "
        f"{_count(len(dropped), 'older rollout')}: {', '.join(dropped[:5])}"
        + (f" and {len(dropped) - 5} more" if len(dropped) > 5 else ""),
        delete=delete,
        kept=kept_ids,
    )


def first_created(refs: Iterable[RecordRef]) -> datetime:
    """When a rollout's first record was created (a rollout's age)."""
    return min((ref.created or _UNDATED for ref in refs), default=_UNDATED)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _newer_note(newer: list[str]) -> str:
    if not newer:
        return ""
    return f", and {_count(len(newer), 'rollout')} newer than the status shows ({', '.join(newer)})"
