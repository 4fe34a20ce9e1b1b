"""SIGTERM / SIGINT reach the action on the relay thread, even when the main thread holds the lock the
action needs at the moment the signal lands (orchestrator.core.stop_signals).

Each case runs in a child process of its own: signals, handlers and the wakeup fd are per process.
The first case is the race that hung `simulate run` in CI, made certain: the signal arrives while
the main thread holds the lock; a handler that took that lock itself would wait forever.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

PRELUDE = textwrap.dedent(
    """
    import os, signal, sys, threading
    from orchestrator.core.stop_signals import relay_stop_signals, stop_signals
    """
)

LOCK_HELD_BY_MAIN = """
lock = threading.Lock()
done = threading.Event()
def action(signum):
    with lock:
        done.set()
with stop_signals(action):
    with lock:
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(100000):  # bytecodes: a Python-level handler would run here, inside the lock
            pass
    assert done.wait(10), "the action never ran"
print("stopped")
"""

BUSY_EVENT_WAIT = """
stop = threading.Event()
with stop_signals(lambda signum: stop.set()):
    threading.Thread(target=lambda: os.kill(os.getpid(), signal.SIGTERM)).start()
    while not stop.wait(0):  # mostly inside the Event's lock: 124 hangs in 200 with a plain handler
        pass
print("stopped")
"""

BOTH_SIGNALS = """
seen = []
two = threading.Event()
def action(signum):
    seen.append(signum)
    if len(seen) == 2:
        two.set()
with stop_signals(action):
    os.kill(os.getpid(), signal.SIGINT)
    os.kill(os.getpid(), signal.SIGTERM)
    assert two.wait(10), seen
print("stopped", sorted(seen) == sorted([int(signal.SIGINT), int(signal.SIGTERM)]))
"""

ONLY_THE_WANTED_SIGNALS = """
got = threading.Event()
signal.signal(signal.SIGUSR1, lambda *_: None)  # another Python handler: it also writes to the pipe
with stop_signals(lambda signum: got.set(), signals=(signal.SIGTERM,)):
    os.kill(os.getpid(), signal.SIGUSR1)
    assert not got.wait(0.5), "the action ran for SIGUSR1"
    os.kill(os.getpid(), signal.SIGTERM)
    assert got.wait(10)
print("stopped")
"""

RESTORED_AFTER_THE_BLOCK = """
before = signal.getsignal(signal.SIGTERM)
with stop_signals(lambda signum: None):
    assert signal.getsignal(signal.SIGTERM) is not before
assert signal.getsignal(signal.SIGTERM) is before
assert signal.set_wakeup_fd(-1) == -1, "the wakeup fd was left set"
assert [t.name for t in threading.enumerate()] == ["MainThread"], threading.enumerate()
print("stopped")
"""

EXIT_FROM_THE_ACTION = """
relay_stop_signals(lambda signum: os._exit(75), signals=(signal.SIGTERM,))
os.kill(os.getpid(), signal.SIGTERM)
threading.Event().wait(10)
print("not stopped")
"""


def run_child(body: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(body)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("body", "code", "stdout"),
    [
        pytest.param(LOCK_HELD_BY_MAIN, 0, "stopped\n", id="the-action-takes-a-lock-the-main-thread-holds"),
        pytest.param(BUSY_EVENT_WAIT, 0, "stopped\n", id="main-thread-busy-in-event-wait"),
        pytest.param(BOTH_SIGNALS, 0, "stopped True\n", id="sigint-and-sigterm-each-run-the-action"),
        pytest.param(ONLY_THE_WANTED_SIGNALS, 0, "stopped\n", id="other-signals-do-not-run-the-action"),
        pytest.param(RESTORED_AFTER_THE_BLOCK, 0, "stopped\n", id="handlers-and-wakeup-fd-restored"),
        pytest.param(EXIT_FROM_THE_ACTION, 75, "", id="os-exit-from-the-action-ends-the-process"),
    ],
)
def test_stop_signals(body: str, code: int, stdout: str) -> None:
    done = run_child(body)
    assert (done.returncode, done.stdout) == (code, stdout), done.stderr


def test_the_main_thread_busy_in_event_wait_always_stops() -> None:
    """The race that hung CI, many times over: every child stops."""
    for attempt in range(20):
        done = run_child(BUSY_EVENT_WAIT)
        assert (done.returncode, done.stdout) == (0, "stopped\n"), (attempt, done.stderr)
