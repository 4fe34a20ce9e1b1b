"""A de-duplicating work queue of ProgressiveSync keys, with rate-limited retries.

The semantics of client-go's workqueue, which every level-triggered controller relies on:

- a key is queued at most once however many events name it (`add` of a queued key is a no-op);
- a key handed to a worker is *processing*: no other worker gets it until `done(key)`; an `add`
  meanwhile marks it *dirty* and it is queued again at `done`, so no change is lost and no key is
  reconciled by two workers at once;
- `retry(key)` re-queues after the key's next backoff (a tuple of delays, the last one repeated:
  a level-triggered controller never gives up on an object, it slows down), or after `at_least`
  seconds when that is longer (the `Retry-After` of a 429 the reconcile met: the server's ask
  wins); `forget(key)` resets the count after a success;
- `add_after(key, delay)` for "look again later" (deadlines, polling a Workflow that has no events).

Time comes from the `clock` given (monotonic seconds), so tests drive it without sleeping.

Callers: `orchestrator.watcher.loop` (event handlers add keys, workers get/done/retry); tests.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)


class WorkQueue(Generic[K]):
    """Keys waiting for a worker; see the module docstring for the guarantees."""

    def __init__(
        self,
        backoffs: tuple[float, ...] = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0),
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not backoffs:
            raise ValueError("backoffs must not be empty")
        self._backoffs = backoffs
        self._clock = clock
        self._cond = threading.Condition()
        self._queue: deque[K] = deque()
        self._queued: set[K] = set()
        self._processing: set[K] = set()
        self._dirty: set[K] = set()
        self._delayed: list[tuple[float, int, K]] = []  # (ready_at, sequence, key) heap
        self._ready_at: dict[K, float] = {}  # the earliest pending ready_at of each delayed key
        self._sequence = 0
        self._failures: dict[K, int] = {}
        self._shut_down = False

    # -- producers ------------------------------------------------------------------------

    def add(self, key: K) -> None:
        """Queue `key` now, unless it is already queued (or processing: then once more after)."""
        with self._cond:
            self._add_locked(key)

    def add_after(self, key: K, delay: float) -> None:
        """Queue `key` once `delay` seconds have passed (at once when delay <= 0)."""
        with self._cond:
            if delay <= 0:
                self._add_locked(key)
                return
            ready_at = self._clock() + delay
            if self._ready_at.get(key, float("inf")) <= ready_at:
                return  # already due sooner: one wake-up is enough
            self._ready_at[key] = ready_at
            self._sequence += 1
            heapq.heappush(self._delayed, (ready_at, self._sequence, key))
            self._cond.notify()

    def retry(self, key: K, *, at_least: float = 0.0) -> float:
        """Re-queue `key` after its next backoff, or `at_least` seconds when longer (call after a
        failed reconcile; `at_least` is what the server asked, `Retry-After`); returns the delay."""
        with self._cond:
            failures = self._failures.get(key, 0) + 1
            self._failures[key] = failures
        delay = max(self._backoffs[min(failures, len(self._backoffs)) - 1], at_least)
        self.add_after(key, delay)
        return delay

    def failures(self, key: K) -> int:
        """How many retries `key` had since its last `forget`."""
        with self._cond:
            return self._failures.get(key, 0)

    def forget(self, key: K) -> None:
        """Reset the backoff of `key` (call after a successful reconcile)."""
        with self._cond:
            self._failures.pop(key, None)

    # -- consumers ------------------------------------------------------------------------

    def get(self, timeout: float | None = None) -> K | None:
        """The next key to work on, marked processing; None on shutdown or after `timeout`."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                self._promote_delayed_locked()
                if self._shut_down:
                    return None
                if self._queue:
                    key = self._queue.popleft()
                    self._queued.discard(key)
                    self._processing.add(key)
                    return key
                wait = None if deadline is None else deadline - time.monotonic()
                if wait is not None and wait <= 0:
                    return None
                if self._delayed:
                    # Wake for the next delayed key; the clock may be a test clock, so cap the wait.
                    until_ready = max(0.0, self._delayed[0][0] - self._clock())
                    wait = until_ready if wait is None else min(wait, until_ready)
                    wait = min(wait, 1.0)
                self._cond.wait(wait)

    def done(self, key: K) -> None:
        """The worker finished `key`; a key added meanwhile is queued again now."""
        with self._cond:
            self._processing.discard(key)
            if key in self._dirty:
                self._dirty.discard(key)
                self._add_locked(key)

    def shutdown(self) -> None:
        """Wake every waiting worker with None; later `get`s return None at once."""
        with self._cond:
            self._shut_down = True
            self._cond.notify_all()

    @property
    def is_shut_down(self) -> bool:
        """True after `shutdown()`."""
        with self._cond:
            return self._shut_down

    def __len__(self) -> int:
        """Keys ready now (not counting delayed or processing ones)."""
        with self._cond:
            self._promote_delayed_locked()
            return len(self._queue)

    def pending(self) -> int:
        """Keys ready, delayed or processing: 0 means nothing left to do at all."""
        with self._cond:
            return len(self._queue) + len(self._ready_at) + len(self._processing) + len(self._dirty)

    # -- internals ------------------------------------------------------------------------

    def _add_locked(self, key: K) -> None:
        if self._shut_down:
            return
        if key in self._processing:
            self._dirty.add(key)
            return
        if key in self._queued:
            return
        self._queued.add(key)
        self._queue.append(key)
        self._cond.notify()

    def _promote_delayed_locked(self) -> None:
        now = self._clock()
        while self._delayed and self._delayed[0][0] <= now:
            ready_at, _, key = heapq.heappop(self._delayed)
            if self._ready_at.get(key) == ready_at:
                del self._ready_at[key]
            self._add_locked(key)
