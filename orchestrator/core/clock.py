"""Time as a value passed in: the `Clock` the steps and the fleet simulator read `now` from.

Deadlines (`progressDeadlineSeconds`), `startedAt`/`finishedAt` stamps and the simulator's sync
durations all come from a `Clock`, so pure decisions get `now` as an argument and tests can use a
manual clock (tests/support/clock.py) instead of sleeping. Callers: the steps' entrypoint (builds a
`SystemClock`), the simulator, the watcher, and the tests.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    """Where a component reads the current time from and how it waits."""

    def now(self) -> datetime:
        """The current time, timezone-aware UTC."""
        ...

    def sleep(self, seconds: float) -> None:
        """Wait `seconds` (a manual clock advances instead)."""
        ...


class SystemClock:
    """The real wall clock."""

    def now(self) -> datetime:
        """`datetime.now(UTC)`."""
        return datetime.now(UTC)

    def sleep(self, seconds: float) -> None:
        """`time.sleep`."""
        if seconds > 0:
            time.sleep(seconds)


def parse_time(value: object) -> datetime | None:
    """Parse an RFC 3339 timestamp as the API server and Argo CD write it; None when absent or bad."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def format_time(value: datetime) -> str:
    """RFC 3339 in UTC with second precision, as metav1.Time (and Argo CD) serialize."""
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_micro_time(value: datetime) -> str:
    """RFC 3339 in UTC with microseconds, as metav1.MicroTime serializes (Lease renewTime, events)."""
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
