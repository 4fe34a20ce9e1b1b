"""The `batch` step: the clusters of one batch of a large stage, in one pod (issue 15).

A stage of a few dozen clusters runs one `cluster` pod per cluster. Past
`WorkflowSettings.batch_threshold` targets, the stage runs `batches` pods of this step instead, so
the Workflow keeps O(stages x batches) nodes (Argo keeps every node in the Workflow object) and the
Argo UI draws a batch node rather than thousands of cluster nodes. docs/design/workflow.md says when.

The stage's `maxParallel` slots (its batch count and maxParallel come from the rollout contract,
`orchestrator.planning.contract`) are shared out among the n batches, slot s to batch s mod n
(`orchestrator.planning.sizing.slots_of_batch`: the shares add up to maxParallel, so no more
clusters are in flight across the stage than one pod per cluster allowed), and the stage's
recorded targets (its ProgressiveSyncStage records' `spec.targets`, written by `select`) are dealt
the same way: the target at position k goes to the batch that owns slot k mod maxParallel
(`sizing.clusters_of_batch`). So each batch takes clusters in proportion to its slots, and with
clusters that take equally long every batch ends after the same number of waves as one loop of
maxParallel pods would (dealing them evenly left the batches with fewer slots a wave behind when
the shares were unequal). When the batch count divides
maxParallel this is batch i taking positions i, i+n, i+2n, ... Each cluster runs
exactly as the `cluster` step runs it (`steps.cluster.run_cluster`): its recorded outcome is
reported as is (the batch reads its clusters' records once, when it starts, and knows what it wrote
since: `steps.status_sink.BatchedSink.outcomes`); a cluster of a stage that has failed already
(failures above `maxFailedClusters`, read right before it starts from the stage's records labelled
as holding a failure, `steps.common.read_stage_failures`, so a failure in another batch counts
too) is not started; otherwise sync, then wait-healthy with the per-cluster progress
deadline. The clusters' records are gathered and written together (`steps.status_sink`): a
failure at once, the rest every `Tuning.batch_flush_seconds` and at the end, one merge patch per
part of the stage, so a batch writes a few times, not twice per cluster, and never the
ProgressiveSync; sent SIGTERM, it writes what it gathered before it exits 75 (bounded:
`Tuning.stop_flush_seconds`). Clusters start in target order as
slots free, as Argo starts the items of a `withParam` loop under `parallelism`. While the
ProgressiveSync is paused (`spec.paused`, DESIGN.md §3: no new step starts, running syncs finish)
no new cluster starts: a cluster about to start waits until the pause is lifted (read right
before each start, every `Tuning.pause_poll_seconds`), as Argo starts no new pod of a suspended
Workflow; the clusters in flight go on, and so do those whose sync `select` started already (the
first wave, recorded Syncing: steps/first_wave.py).

A temporary error of one cluster (the API unreachable, a conflict that kept coming) retries that
cluster after `Tuning.batch_retry_backoffs`, the others go on; when the retries run out the step
waits for the clusters in flight and exits 75, and the Workflow's retryStrategy runs the batch
again: recorded clusters are reported without waiting, synced Applications are not synced twice.

Exit codes (steps.cli): 0 every cluster of the batch is done; 1 one failed or was not started;
75 a temporary error outlived the in-process retries.

Caller: `python -m steps batch` (steps.cli); tests call `run_batch` directly too.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

from orchestrator.api.models import ProgressiveSync
from orchestrator.api.stage_records import StageOutcomes
from orchestrator.core.clock import Clock
from orchestrator.core.errors import TemporaryError
from orchestrator.kube.client import Kube, Retryable
from orchestrator.planning.sizing import clusters_of_batch, slots_of_batch
from steps.cluster import ClusterOutcome, ClusterResult, in_flight, run_cluster
from steps.common import (
    FleetLookup,
    UsageProblem,
    load_progressive_sync,
    read_stage_failures,
)
from steps.context import Shared, StepContext
from steps.pause import PausedTooLong, hold_while_paused
from steps.status_sink import BatchedSink, OpenSinks, read_stage_records

log = logging.getLogger(__name__)

R = TypeVar("R")  # what one cluster's run returns (a forward cluster's result, a rollback's)


@dataclass(frozen=True)
class BatchResult:
    """The end of one batch: each cluster's outcome, in target order."""

    stage: str
    batch: int
    results: tuple[ClusterResult, ...]
    status_writes: int = 0  # record patches the batch sent (gathered: steps.status_sink)

    @property
    def failed(self) -> bool:
        """True when a cluster failed or was not started (exit 1)."""
        return any(result.failed for result in self.results)

    @property
    def summary(self) -> str:
        """One line for people: the counts, and the clusters that did not succeed."""
        counts = {outcome: 0 for outcome in ClusterOutcome}
        for result in self.results:
            counts[result.outcome] += 1
        text = f"batch {self.batch} of stage {self.stage!r}: {len(self.results)} cluster(s), " + ", ".join(
            f"{count} {outcome.value}" for outcome, count in counts.items()
        )
        failed = [r for r in self.results if r.outcome == ClusterOutcome.FAILED]
        if failed:
            shown = "; ".join(f"{r.cluster}: {r.reason}" for r in failed[:5])
            more = f" (and {len(failed) - 5} more)" if len(failed) > 5 else ""
            text += f"; failed: {shown}{more}"
        return text + f"; {self.status_writes} record write(s)"


def run_batch(
    kube: Kube, ctx: StepContext, batch: int, *, open_sinks: OpenSinks | None = None
) -> BatchResult:
    """Run the clusters of batch `batch` of the stage's batches (the rollout contract's `batches`),
    its share of the contract's maxParallel at a time.

    `open_sinks`: where the batch's status sink is held while it runs, for the step's SIGTERM
    handler to write what the clusters gathered (steps.status_sink)."""
    rollout, ps, stage, clock, tuning = ctx.rollout, ctx.ps, ctx.stage_name, ctx.clock, ctx.tuning
    batches, max_parallel = ctx.stage.batches, ctx.stage.max_parallel
    if not 0 <= batch < batches:
        raise UsageProblem(
            f"--batch {batch}: stage {stage!r} runs in {batches} batch(es) by the rollout contract "
            "(0 <= batch < batches; 0 batches: one pod per cluster, the `cluster` step)"
        )
    where = read_stage_records(kube, rollout, ps, stage)
    if not where.records:
        raise UsageProblem(
            f"stage {stage!r} has no ProgressiveSyncStage record yet: its select step has not run"
        )
    clusters = clusters_of_batch(where.outcomes.targets, batches, batch, max_parallel)
    slots = slots_of_batch(max_parallel, batches, batch)
    log.info(
        "batch %d/%d of stage %r: %d cluster(s), %d at a time",
        batch + 1,
        batches,
        stage,
        len(clusters),
        slots,
    )

    def paused() -> bool:
        return load_progressive_sync(kube, rollout).spec.paused

    sink = BatchedSink(kube, where, flush_seconds=tuning.batch_flush_seconds)
    # One read of the inventory and of the Applications for the batch's clusters, not two per
    # cluster (the Applications a cluster acts on are still read fresh: steps.common.FleetLookup).
    fleet = FleetLookup(kube, rollout, ps, clock=clock, max_age_seconds=tuning.fleet_lookup_seconds)

    # The clusters of the first wave start right after the reads above: they are their reads (two
    # requests fewer per slot, all at a stage boundary).
    first_wave: list[tuple[ProgressiveSync, StageOutcomes]] = [(ps, where.outcomes)] * min(
        slots, len(clusters)
    )

    def read_now() -> tuple[ProgressiveSync, StageOutcomes]:
        current = load_progressive_sync(kube, rollout)
        return current, sink.outcomes(read_stage_failures(kube, rollout, current, stage))

    def one(cluster: str) -> ClusterResult:
        # One read of the ProgressiveSync and of the stage's failed records right before the cluster
        # starts: paused, then the stage's failures (run_cluster); the cluster's recorded outcome is
        # the batch's first read with what its sink gathered since (no record of the stage re-read).
        try:
            current, outcomes = first_wave.pop()  # atomic: two threads never get the same read
        except IndexError:
            current, outcomes = read_now()
        # A cluster in flight already (its sync started by `select`) is a running sync: it goes on.
        if current.spec.paused and not in_flight(outcomes, cluster):
            hold_while_paused(paused, cluster, clock=clock, tuning=tuning)
            current, outcomes = read_now()
        return run_cluster(kube, ctx.reopen(kube, ps=current), cluster, Shared(sink, fleet, outcomes))

    with sink, (open_sinks or OpenSinks()).holding(sink):
        results = run_clusters(clusters, one, slots=slots, clock=clock, backoffs=tuning.batch_retry_backoffs)
    return BatchResult(stage, batch, tuple(results), status_writes=sink.writes)


def run_clusters(
    clusters: Sequence[str],
    run: Callable[[str], R],
    *,
    slots: int,
    clock: Clock,
    backoffs: Sequence[float],
) -> list[R]:
    """Run `run` for each cluster, at most `slots` at once, starting them in order.

    A temporary error (the adapter's `Retryable`, or a `TemporaryError` such as a missing cluster
    inventory) is retried after each of `backoffs` in turn; once they run out, no new cluster starts,
    the ones in flight finish, and the error is raised (exit 75). A pause that outlived its hold
    (`PausedTooLong`) and any other error stop new starts the same way and are raised after the
    clusters in flight end.
    """
    stop = threading.Event()
    errors: list[BaseException] = []

    def guarded(cluster: str) -> R | None:
        if stop.is_set():
            return None
        for attempt in range(len(backoffs) + 1):
            try:
                return run(cluster)
            except (Retryable, TemporaryError) as exc:
                if isinstance(exc, PausedTooLong) or attempt == len(backoffs) or stop.is_set():
                    stop.set()
                    errors.append(exc)
                    return None
                log.warning(
                    "cluster %s: attempt %d/%d failed: %s; retrying in %.0fs",
                    cluster,
                    attempt + 1,
                    len(backoffs) + 1,
                    exc,
                    backoffs[attempt],
                )
                clock.sleep(backoffs[attempt])
            except BaseException as exc:
                stop.set()
                errors.append(exc)
                return None
        return None  # unreachable: the last attempt returns or records its error

    # The pool takes the clusters in submission order as its workers free up: the order and the
    # bound of an Argo loop with `parallelism`.
    with ThreadPoolExecutor(max_workers=max(1, slots), thread_name_prefix="cluster") as pool:
        outcomes = list(pool.map(guarded, clusters))
    if errors:
        raise errors[0]
    return [outcome for outcome in outcomes if outcome is not None]
