"""`ManualClock`: a `orchestrator.core.clock.Clock` that moves only when a test says so.

Deadlines and durations are tested by advancing it instead of sleeping. Test code only.
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta


class ManualClock:
    """A clock that only moves when told to (`advance`) or when something sleeps on it."""

    def __init__(self, start: datetime) -> None:
        if start.tzinfo is None:
            raise ValueError("ManualClock needs a timezone-aware start time")
        self._now = start
        self._lock = threading.Lock()

    def now(self) -> datetime:
        """The clock's current time."""
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        """Move the clock forward."""
        with self._lock:
            self._now += timedelta(seconds=seconds)

    def sleep(self, seconds: float) -> None:
        """Advance instead of waiting."""
        self.advance(max(0.0, seconds))
