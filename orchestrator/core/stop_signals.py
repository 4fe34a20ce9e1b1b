"""SIGTERM and SIGINT answered on a thread of their own, so no signal handler ever waits on a lock.

Python runs a signal handler in the main thread, between two of its bytecodes, wherever that
thread happens to be. When that is inside `threading.Event.wait`, the main thread holds the
Event's internal lock, and a handler that calls `Event.set()` waits for that lock forever: the
process hangs until it is killed. A main thread waiting on `stop.wait(0)` in a loop hung 124 times
in 200 SIGTERMs (CPython 3.11); with the 0.5 s waits our commands use it is rare, and it hung
`simulate run` in CI once. The same holds for any lock: a step's SIGTERM handler that writes to
the API server meets the connection pool's lock, which the interrupted main thread may hold.

So the handlers do nothing in Python. The C-level handler writes the signal's number to a pipe
(`signal.set_wakeup_fd`) at once, and a daemon thread reads it and runs the caller's action, which
may then take any lock: the thread that holds it is not the one waiting.

`stop_signals(action)` installs that for SIGTERM and SIGINT for the length of a block;
`relay_stop_signals` installs it for the rest of the process (a step, which exits after its work).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Callable, Iterator, Sequence

log = logging.getLogger(__name__)

STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGINT)


def _ignore(signum: int, frame: object) -> None:
    """The Python-level handler: the work is done by the relay thread, woken through the pipe."""


def relay_stop_signals(
    action: Callable[[int], None], signals: Sequence[signal.Signals] = STOP_SIGNALS
) -> Callable[[], None]:
    """From now on, run `action(signum)` on a relay thread whenever one of `signals` arrives; returns
    the function that puts the previous handlers back (a process that ends after its work need not).

    The action runs once per signal received, one after another, never in a signal handler: it may
    set Events, write to the API server, log, or `os._exit` (not `sys.exit`: that would end only the
    relay thread). Call it from the main thread, as the signal module requires.
    """
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)  # the C handler must never block on a full pipe
    wanted = {int(s) for s in signals}
    # The pipe first, then the handlers: a signal between the two still reaches the previous handler
    # and, through the pipe, the action; the other order would drop it.
    previous_fd = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    previous_handlers = {s: signal.signal(s, _ignore) for s in signals}
    relay = threading.Thread(target=_relay, args=(read_end, wanted, action), name="stop-signals", daemon=True)
    relay.start()

    def restore() -> None:
        for signum, handler in previous_handlers.items():  # the handlers first, for the same reason
            signal.signal(signum, handler)
        signal.set_wakeup_fd(previous_fd)
        os.close(write_end)  # the relay reads end-of-file and ends
        relay.join(timeout=5.0)

    return restore


@contextlib.contextmanager
def stop_signals(
    action: Callable[[int], None], signals: Sequence[signal.Signals] = STOP_SIGNALS
) -> Iterator[None]:
    """`relay_stop_signals` for the block's length: the previous handlers are back when it ends."""
    restore = relay_stop_signals(action, signals)
    try:
        yield
    finally:
        restore()


def _relay(read_end: int, wanted: set[int], action: Callable[[int], None]) -> None:
    """Read signal numbers from the wakeup pipe and run the action for each one that is wanted."""
    try:
        while True:
            try:
                data = os.read(read_end, 64)
            except InterruptedError:  # pragma: no cover - PEP 475 retries; kept for clarity
                continue
            if not data:
                return
            for signum in data:
                if signum not in wanted:
                    continue  # another signal with a Python handler (SIGCHLD, ...) also writes here
                try:
                    action(signum)
                except Exception:
                    log.exception("the action for signal %d failed", signum)
    finally:
        os.close(read_end)
