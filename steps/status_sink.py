"""Where a cluster's step records its outcome: the stage's ProgressiveSyncStage records (issue 30).

Each cluster of a stage has its record (state, reason, note, revisions, times) in one of the
stage's ProgressiveSyncStage objects, which `select` created (`StageRecords`: which object holds
which cluster). `sync` and `wait-healthy` state each change of a cluster as a pure function
`Change: current record -> record to write` (None: nothing to write), built on
`orchestrator.api.stage_records.merge_record` (an outcome never goes back, Failed wins). A sink
reads the record, applies the change and writes it by JSON merge patch of that cluster's key
only (`orchestrator.kube.stage_records.patch_clusters`): no resourceVersion, no conflict with the
stage's other clusters, and no write to the ProgressiveSync at all (the steps that own the stage
put its summary there: select, record, finalize; the watcher keeps it live meanwhile).

Run alone or in a `cluster` pod, each change is one read and one patch at once (`DirectSink`). A
`batch` pod gathers them (`BatchedSink`) and writes one patch per part of the stage:

- a failure at once, with whatever is gathered: the other batches read the stage's failures right
  before they start a cluster (`maxFailedClusters`, DESIGN.md §3: only the records labelled as
  holding one, `steps.common.read_stage_failures`), so it must not wait;
- the rest (in flight, completed, notes) every `Tuning.batch_flush_seconds` while there is any,
  and when the batch ends (`close`, also on an error).

A batch reads its clusters' records once, when it starts (`StageRecords`), and knows what it
gathered since: `BatchedSink.outcomes` is that read with the batch's own changes applied and the
stage's failures read again merged in, so a cluster start re-reads no record of the stage (each
cluster belongs to one batch: no other pod writes it while the batch runs).

A batch pod sent SIGTERM (deleted, evicted, drained) writes what it gathered before it exits
(issue 29 point 9): the step's SIGTERM handler (`steps.cli`) flushes the sinks the step holds open
(`OpenSinks`) within `Tuning.stop_flush_seconds`, then exits 75. What a batch pod had gathered and
still not written (killed outright, or the write not done within the bound) is done again by the
batch Argo runs again: syncs are known by the Application (`operation.info`), never sent twice, and
a done cluster is seen done at once.

Callers: `steps.sync`, `steps.wait_healthy` (through the sink they are given), `steps.cluster`,
`steps.batch`, `steps.failure`; `OpenSinks`: `steps.batch` and `steps.cli`.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from orchestrator.api.models import ProgressiveSync
from orchestrator.api.stage_records import (
    ClusterRecord,
    ClusterState,
    ProgressiveSyncStage,
    StageOutcomes,
    cut_text,
    end_record,
    merge_record,
    merged_with,
    noted,
    outcomes_of,
)
from orchestrator.kube.client import Kube
from orchestrator.kube.stage_records import list_records, patch_clusters, read_record
from steps.common import RolloutRef, UsageProblem, stage_index

log = logging.getLogger(__name__)

Change = Callable[[ClusterRecord | None], ClusterRecord | None]
"""What a step says of one cluster: the record to write given the one recorded (None: nothing)."""


def syncing(now: datetime, revisions: Sequence[str] = ()) -> Change:
    """The cluster's sync was requested (or adopted) at `now`, at `revisions`."""
    proposed = ClusterRecord(state=ClusterState.SYNCING, started_at=now, revisions=list(revisions) or None)
    return lambda current: merge_record(current, proposed)


def completed(now: datetime, note: str = "") -> Change:
    """The cluster is done (Synced and Healthy at the release); `note`: what it left worth a remark."""
    proposed = ClusterRecord(state=ClusterState.COMPLETED, note=cut_text(note), finished_at=now)
    return lambda current: end_record(current, proposed)


def failed(now: datetime | None, reason: str) -> Change:
    """The cluster failed, for `reason` (the first reason recorded stays)."""
    proposed = ClusterRecord(state=ClusterState.FAILED, reason=cut_text(reason), finished_at=now)
    return lambda current: end_record(current, proposed)


def skipped(now: datetime, reason: str) -> Change:
    """The cluster is left out by a skip mark (`reason`: which), found before anything was written."""
    proposed = ClusterRecord(state=ClusterState.SKIPPED, reason=cut_text(reason), finished_at=now)
    return lambda current: end_record(current, proposed)


def note(text: str) -> Change:
    """What holds the cluster while a step waits ("" removes it); an outcome keeps its own."""
    return lambda current: noted(current, text)


@dataclass(frozen=True)
class StageRecords:
    """A stage's ProgressiveSyncStage objects as a step read them: its targets, its clusters'
    records, and which object holds which cluster."""

    namespace: str
    stage: str
    records: tuple[ProgressiveSyncStage, ...]  # in part order

    @property
    def outcomes(self) -> StageOutcomes:
        """The stage's clusters as the records tell them."""
        return outcomes_of(self.stage, self.records)

    @functools.cached_property
    def _holders(self) -> dict[str, str]:
        return {target: record.metadata.name for record in self.records for target in record.spec.targets}

    def holder(self, cluster: str) -> str:
        """The name of the object that holds `cluster`'s record (a cluster no part lists, a step run
        by hand for another cluster, goes into the first); UsageProblem when the stage has none."""
        if cluster in self._holders:
            return self._holders[cluster]
        if not self.records:
            raise UsageProblem(
                f"stage {self.stage!r} has no ProgressiveSyncStage record: its select step has not run "
                "(or the stage took no cluster)"
            )
        return self.records[0].metadata.name


def read_stage_records(kube: Kube, rollout: RolloutRef, ps: ProgressiveSync, stage: str) -> StageRecords:
    """The stage's records of this rollout (one list request)."""
    parts = list_records(
        kube, rollout.namespace, rollout.name, rollout.rollout_id, stage_index=stage_index(ps, stage)
    )
    return StageRecords(rollout.namespace, stage, tuple(sorted(parts, key=lambda r: r.spec.part)))


class StatusSink(Protocol):
    """Takes a change of one cluster's record; `urgent` ones must reach the API server before it returns."""

    def record(self, cluster: str, change: Change, *, what: str, urgent: bool = False) -> None:
        """Apply `change` to the cluster's record (now, or with the batch's next write)."""
        ...


class DirectSink:
    """Every change is one read of the record and at most one merge patch, at once (a step run
    alone, a `cluster` pod)."""

    def __init__(self, kube: Kube, where: StageRecords) -> None:
        self.kube, self.where = kube, where
        self.writes = 0

    def record(self, cluster: str, change: Change, *, what: str, urgent: bool = False) -> None:
        """Write it now (nothing when it changes nothing)."""
        name = self.where.holder(cluster)
        current = read_record(self.kube, self.where.namespace, name).clusters.get(cluster)
        proposed = change(current)
        if proposed is None:
            log.debug("record of %s: %s changes nothing; not writing", cluster, what)
            return
        patch_clusters(self.kube, self.where.namespace, name, {cluster: proposed})
        self.writes += 1
        log.debug("record of %s: %s written", cluster, what)


class BatchedSink:
    """Gathers the changes of a batch's clusters and writes them as one merge patch per part (see
    module).

    Thread-safe: the batch runs its clusters in threads. One flush at a time, each change applied
    in the order it came. A context manager: a background thread flushes every `flush_seconds`;
    leaving the block flushes what is left.
    """

    def __init__(self, kube: Kube, where: StageRecords, *, flush_seconds: float) -> None:
        self.kube, self.where = kube, where
        self.flush_seconds = flush_seconds
        self.writes = 0  # merge patches sent (for the batch's summary line)
        self._pending: list[tuple[str, Change, str]] = []
        self._first = where.outcomes  # the batch's one read of the stage's records
        self._known: dict[str, ClusterRecord] = {}  # each change gathered, applied to what it knew
        self._lock = threading.Lock()  # guards _pending and _known
        self._write_lock = threading.Lock()  # one flush at a time, in order
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="status-flush", daemon=True)

    def record(self, cluster: str, change: Change, *, what: str, urgent: bool = False) -> None:
        """Gather it; an urgent one is written at once with everything gathered."""
        with self._lock:
            self._pending.append((cluster, change, what))
            waiting = len(self._pending)
            proposed = change(self._known.get(cluster, self._first.clusters.get(cluster)))
            if proposed is not None:
                self._known[cluster] = proposed
        log.debug("gathered: %s (%d change(s) for the next write)", what, waiting)
        if urgent:
            self.flush()

    def outcomes(self, failures: StageOutcomes | None = None) -> StageOutcomes:
        """The stage's clusters as the batch knows them: its first read, every change it gathered
        since (written or not yet), and `failures` (the stage's failed records read again:
        `steps.common.read_stage_failures`) merged in (an outcome never goes back, Failed wins)."""
        with self._lock:
            known = merged_with(self._first, self._known)
        return merged_with(known, failures.clusters) if failures is not None else known

    @property
    def pending(self) -> int:
        """How many gathered changes are not written yet."""
        with self._lock:
            return len(self._pending)

    def flush(self) -> None:
        """Write everything gathered so far: per part of the stage, one read and one merge patch of
        the clusters whose record changes (nothing gathered, or nothing changes: no write)."""
        with self._write_lock:
            with self._lock:
                pending, self._pending = self._pending, []
            if not pending:
                return
            by_part: dict[str, list[tuple[str, Change, str]]] = {}
            for entry in pending:
                by_part.setdefault(self.where.holder(entry[0]), []).append(entry)
            done: set[str] = set()
            try:
                for name, changes in by_part.items():
                    current = dict(read_record(self.kube, self.where.namespace, name).clusters)
                    written: dict[str, ClusterRecord] = {}
                    for cluster, change, _ in changes:
                        proposed = change(current.get(cluster))
                        if proposed is not None:
                            current[cluster] = written[cluster] = proposed
                    if written:
                        patch_clusters(self.kube, self.where.namespace, name, written)
                        self.writes += 1
                    done.add(name)
            except BaseException:
                left = [entry for name, changes in by_part.items() if name not in done for entry in changes]
                with self._lock:  # keep what is not written for the next flush (or the batch's end)
                    self._pending[:0] = left
                raise
            log.debug("flushed %d change(s) into %d record(s)", len(pending), len(by_part))

    def _run(self) -> None:
        while not self._stop.wait(self.flush_seconds):
            try:
                self.flush()
            except Exception as exc:  # the next flush (or close) tries again and raises there
                log.warning("record flush failed (kept for the next one): %s", exc)

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
            log.error("could not write the batch's last record changes: %s", flush_error)


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
