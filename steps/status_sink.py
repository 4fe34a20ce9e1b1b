"""Where a cluster's step sends its status changes: at once, or gathered for a whole batch (issue 15).

`sync` and `wait-healthy` state each cluster's progress as a pure mutation
(`orchestrator.api.rollout_status`). Run alone or in a `cluster` pod, each mutation is one status
write at once (`DirectSink`). In a `batch` pod of a large stage that would be two or more writes per
cluster, each sending the whole ProgressiveSync to every watcher, so `BatchedSink` gathers them
and writes them as one update:

- a failure at once, with whatever is gathered: the other batches read the stage's failures right
  before they start a cluster (`maxFailedClusters`, DESIGN.md §3), so it must not wait;
- the rest (in flight, completed, notes) every `Tuning.batch_flush_seconds` while there is any,
  and when the batch ends (`close`, also on an error).

So a batch writes its status about once per flush interval plus once per failure, not once per
cluster. The mutations state end results, so applying them together, or again after a conflict,
is right.

A batch pod sent SIGTERM (deleted, evicted, drained) writes what it gathered before it exits
(issue 29 point 9): the step's SIGTERM handler (`steps.cli`) flushes the sinks the step holds open
(`OpenSinks`) within `Tuning.stop_flush_seconds`, then exits 75. Without that, the clusters that
had just completed were lost with the process, and once the Workflow stopped retrying they ended
as "did not finish". What a batch pod had gathered and still not written (killed outright, or
the write not done within the bound) is done again by the batch Argo runs again: syncs are known
by the Application (`operation.info`), never sent twice, and a done cluster is seen done at once.

Callers: `steps.sync`, `steps.wait_healthy` (through the sink they are given), `steps.batch`;
`OpenSinks`: `steps.batch` and `steps.cli`.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Protocol

from orchestrator.api.models import ProgressiveSyncStatus
from orchestrator.kube.client import Kube
from orchestrator.kube.status_writer import StatusWriterSettings, update_status

log = logging.getLogger(__name__)

Mutation = Callable[[ProgressiveSyncStatus], ProgressiveSyncStatus]


class StatusSink(Protocol):
    """Takes a status mutation of one cluster; `urgent` ones must reach the API server before it returns."""

    def record(self, mutation: Mutation, *, what: str, urgent: bool = False) -> None:
        """Apply `mutation` to the ProgressiveSync's status (now, or with the batch's next write)."""
        ...


class DirectSink:
    """Every mutation is one status update at once (a step run alone, a `cluster` pod)."""

    def __init__(self, kube: Kube, namespace: str, name: str, settings: StatusWriterSettings) -> None:
        self.kube, self.namespace, self.name, self.settings = kube, namespace, name, settings

    def record(self, mutation: Mutation, *, what: str, urgent: bool = False) -> None:
        """Write it now."""
        update_status(self.kube, self.namespace, self.name, mutation, what=what, settings=self.settings)


class BatchedSink:
    """Gathers the mutations of a batch's clusters and writes them as one update (see module).

    Thread-safe: the batch runs its clusters in threads. One write at a time, in the order the
    mutations came. A context manager: a background thread flushes every `flush_seconds`; leaving
    the block flushes what is left.
    """

    def __init__(
        self,
        kube: Kube,
        namespace: str,
        name: str,
        settings: StatusWriterSettings,
        *,
        flush_seconds: float,
    ) -> None:
        self.kube, self.namespace, self.name, self.settings = kube, namespace, name, settings
        self.flush_seconds = flush_seconds
        self.writes = 0  # status updates sent (for the batch's summary line)
        self._pending: list[tuple[Mutation, str]] = []
        self._lock = threading.Lock()  # guards _pending
        self._write_lock = threading.Lock()  # one write at a time, in order
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="status-flush", daemon=True)

    def record(self, mutation: Mutation, *, what: str, urgent: bool = False) -> None:
        """Gather it; an urgent one is written at once with everything gathered."""
        with self._lock:
            self._pending.append((mutation, what))
            waiting = len(self._pending)
        log.debug("gathered: %s (%d change(s) for the next status write)", what, waiting)
        if urgent:
            self.flush()

    @property
    def pending(self) -> int:
        """How many gathered changes are not written yet."""
        with self._lock:
            return len(self._pending)

    def flush(self) -> None:
        """Write everything gathered so far as one status update (nothing gathered: no write)."""
        with self._write_lock:
            with self._lock:
                pending, self._pending = self._pending, []
            if not pending:
                return
            mutations = [mutation for mutation, _ in pending]

            def all_of(status: ProgressiveSyncStatus) -> ProgressiveSyncStatus:
                for mutation in mutations:
                    status = mutation(status)
                return status

            what = pending[0][1] if len(pending) == 1 else f"{len(pending)} cluster changes of the batch"
            try:
                update_status(self.kube, self.namespace, self.name, all_of, what=what, settings=self.settings)
            except BaseException:
                with self._lock:  # keep them for the next flush (or the batch's end)
                    self._pending[:0] = pending
                raise
            self.writes += 1

    def _run(self) -> None:
        while not self._stop.wait(self.flush_seconds):
            try:
                self.flush()
            except Exception as exc:  # the next flush (or close) tries again and raises there
                log.warning("status flush failed (kept for the next one): %s", exc)

    def __enter__(self) -> BatchedSink:
        self._thread.start()
        return self

    def __exit__(self, exc_type: object, exc: object, traceback: object) -> None:
        self._stop.set()
        self._thread.join()
        try:
            self.flush()
        except Exception as flush_error:
            if exc is None:
                raise
            log.error("could not write the batch's last status changes: %s", flush_error)


class OpenSinks:
    """The batched sinks a step holds open, so that its SIGTERM handler can write what they
    gathered before the process exits (see module). Thread-safe."""

    def __init__(self) -> None:
        self._sinks: list[BatchedSink] = []
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def holding(self, sink: BatchedSink) -> Iterator[BatchedSink]:
        """`sink` is flushed by `flush_before_exit` while the block runs."""
        with self._lock:
            self._sinks.append(sink)
        try:
            yield sink
        finally:
            with self._lock:
                self._sinks.remove(sink)

    def flush_before_exit(self, seconds: float) -> str:
        """Write what the open sinks gathered, waiting at most `seconds`; what happened, for people.

        Called from a signal handler, which runs in the main thread between two of its bytecodes:
        the writes run in a thread of their own (the main thread may hold a sink's write lock) and
        are given up at the bound (the process exits anyway; the retry finds those clusters again).
        """
        with self._lock:
            sinks = list(self._sinks)
        gathered = sum(sink.pending for sink in sinks)
        if not gathered:
            return "no status change was waiting to be written"
        errors: list[BaseException] = []

        def write_all() -> None:
            for sink in sinks:
                try:
                    sink.flush()
                except BaseException as exc:  # reported below; the other sinks still write
                    errors.append(exc)

        writer = threading.Thread(target=write_all, name="status-flush-on-stop", daemon=True)
        writer.start()
        writer.join(seconds)
        left = sum(sink.pending for sink in sinks)
        if writer.is_alive():
            return (
                f"{gathered} gathered status change(s) not written within {seconds:g} s "
                "(the retry finds those clusters again)"
            )
        if errors or left:
            return (
                f"{left or gathered} gathered status change(s) could not be written: "
                f"{errors[0] if errors else 'still pending'} (the retry finds those clusters again)"
            )
        return f"wrote the {gathered} status change(s) its clusters had gathered"
