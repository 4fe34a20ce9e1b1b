"""Waiting on a condition with a deadline: the only way tests wait (never a fixed sleep)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(
    condition: Callable[[], T],
    *,
    timeout: float = 30.0,
    interval: float = 0.05,
    what: str = "",
    describe: Callable[[], object] | None = None,
) -> T:
    """Call `condition` until it returns something truthy; return that, or fail after `timeout`
    (with what `describe` says of the state then, when given: the facts to find the cause)."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while True:
        last = condition()
        if last:
            return last
        if time.monotonic() >= deadline:
            state = f"; state: {describe()!r}" if describe is not None else ""
            raise AssertionError(
                f"timed out after {timeout}s waiting for {what or condition!r}; last value: {last!r}{state}"
            )
        time.sleep(interval)
