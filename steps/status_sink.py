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
is right. What a batch pod had gathered and not written when it was killed is done again by the
batch Argo runs again: syncs are known by the Application (`operation.info`), never sent twice,
and a done cluster is seen done at once.

Callers: `steps.sync`, `steps.wait_healthy` (through the sink they are given), `steps.batch`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
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
        if urgent:
            self.flush()

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
