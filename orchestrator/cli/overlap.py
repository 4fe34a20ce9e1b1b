"""Run a pure, quiet function in a forked child while the command goes on in the parent.

`render --fleet` has two independent halves of about a second each on a 10,000-cluster fleet file:
reading and planning the fleet, and importing Hera (the Workflow builder; `import hera.workflows`
alone is 0.65-1.0 s). One Python process runs them one after the other; on two cores a forked child
reads and plans while the parent imports, and sends back only the small answer the Workflow needs.

    with in_child(work) as pending:
        ...                       # the parent's own work (imports)
        answer = pending.result() # work's return value, or the ClickException it raised

Rules for `work`: it prints nothing (its stdout and stderr are the command's) and returns, or raises
as a `click.ClickException`, something picklable. The answer is always the one `work()` would give
in the parent; only the time differs:

- The child is not used where a fork could deadlock or is unsupported: off Linux, or when the
  process already runs other threads (a fork copies their held locks, not the threads), nor when
  `PROGRESSIVE_SYNC_NO_FORK` is set to anything but "" or "0" (one process, for a debugger or a
  test that spies on the reading). Then `result()` runs `work` in the parent.
- A child that dies without an answer, or whose `work` raised anything but a ClickException, is
  not trusted either: `result()` runs `work` in the parent, so a bug surfaces with its real
  traceback and a killed child costs only time.
- The child ends with `os._exit`, skipping the clean-up of what it parsed (millions of objects for
  a large fleet) and never flushing the copy of the parent's output buffers it was forked with (so
  nothing is printed twice); leaving the block early kills and reaps it, so no child outlives the
  command.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

import click

T = TypeVar("T")

# What the child sends: ("value", the return value) or ("refused", the ClickException it raised).
_VALUE = "value"
_REFUSED = "refused"


NO_FORK_VARIABLE = "PROGRESSIVE_SYNC_NO_FORK"


def fork_is_safe() -> bool:
    """Whether to fork: Linux, no thread but this one, and not turned off by `NO_FORK_VARIABLE`."""
    if os.environ.get(NO_FORK_VARIABLE, "") not in ("", "0"):
        return False
    return sys.platform.startswith("linux") and hasattr(os, "fork") and threading.active_count() == 1


class Pending(Generic[T]):
    """The answer of `work`, computed in a child when one was started, else on `result()`."""

    def __init__(self, work: Callable[[], T], pid: int | None, reader: int | None) -> None:
        self._work = work
        self._pid = pid
        self._reader = reader
        self.child_pid = pid  # None when no child was started
        self.ran_in_child = False  # True once `result()` returned or raised the child's answer

    def result(self) -> T:
        """`work()`'s value, or the ClickException it raised; from the child when it answered.

        Call it once: the child's answer is read once.
        """
        answer = self._collect()
        if answer is None:
            return self._work()
        self.ran_in_child = True
        if answer[0] == _REFUSED:
            raise answer[1]
        value: T = answer[1]
        return value

    def _collect(self) -> tuple[Any, ...] | None:
        """Read the child's answer and reap it; None when there is no usable answer."""
        if self._pid is None or self._reader is None:
            return None
        reader, self._reader = self._reader, None
        with os.fdopen(reader, "rb") as stream:
            data = stream.read()
        self._reap()
        if not data:
            return None
        try:
            answer = pickle.loads(data)
        except Exception:
            return None
        if not isinstance(answer, tuple) or len(answer) != 2:
            return None
        kind, payload = answer
        if kind == _VALUE or (kind == _REFUSED and isinstance(payload, click.ClickException)):
            return answer
        return None

    def _reap(self) -> None:
        if self._pid is not None:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self._pid, 0)
            self._pid = None

    def abandon(self) -> None:
        """Stop a child whose answer will not be read (the parent failed first)."""
        if self._reader is not None:
            os.close(self._reader)
            self._reader = None
        if self._pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._pid, signal.SIGKILL)
            self._reap()


@contextlib.contextmanager
def in_child(work: Callable[[], T]) -> Iterator[Pending[T]]:
    """Start `work` in a forked child where that is safe (see the module docstring)."""
    if not fork_is_safe():
        yield Pending(work, None, None)
        return
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: answer, then leave without running any of the parent's clean-up
        os.close(reader)
        _answer(work, writer)
    os.close(writer)
    pending: Pending[T] = Pending(work, pid, reader)
    try:
        yield pending
    finally:
        pending.abandon()


def _answer(work: Callable[[], object], writer: int) -> None:
    """In the child: run `work`, write its answer to `writer` and exit (never returns)."""
    code = 0
    try:
        try:
            answer: tuple[Any, ...] = (_VALUE, work())
        except click.ClickException as refusal:  # pickled whole: its message and exit code
            answer = (_REFUSED, refusal)
        data = pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL)
        with os.fdopen(writer, "wb") as stream:
            stream.write(data)
    except BaseException:  # any other end: no answer, so the parent runs `work` itself
        code = 1
    finally:
        os._exit(code)
