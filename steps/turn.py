"""A cluster pod started before its slot waits for its turn (issue 33, "Pods at once").

In a stage whose cluster pods all start together (`StageContract.pods_at_once`: one pod per cluster,
more targets than maxParallel, at most `WorkflowSettings.pods_at_once_limit`), Argo does not hold the
pods back: the fan-out has no `parallelism`. maxParallel is held by the stage's records instead: a
cluster starts only once its record says Syncing, written with the records object's resourceVersion
by whoever starts it (the first wave, `steps.first_wave`; a hand-off by a done cluster's pod or the
follower, `steps.chain`; or this pod). So before `run_cluster`, the pod of a cluster without a record:

1. watches the stage's records object (`orchestrator.kube.follow.follow_objects`: one watch on one
   object by name, never a poll) and decides on each change
   (`orchestrator.planning.handoff.own_turn`);
2. goes on when its cluster has a record (someone started it: its sync is ours already, or about
   to be, and the cluster step adopts it);
3. claims its own cluster when it is the first target without a record and fewer than maxParallel
   are in flight: a merge patch carrying the resourceVersion, a Conflict read again and decided again.
   Pods and hand-offs take clusters in one order (rollout order), and every target has a pod, so no
   cluster waits for a pod that Argo holds back;
4. does not claim while the ProgressiveSync is paused or its Workflow suspended (no new cluster
   starts then, DESIGN.md §3), and stops waiting when the rollout was superseded or ended or the
   stage failed (the cluster step then reports the cluster not started), or when the Workflow is
   being stopped or deleted (not started).

The wait is bounded by the stage's deadline (one progress deadline per wave of maxParallel, the
Workflow's own budget), not counting the time the ProgressiveSync spent paused (at most
`Tuning.pause_hold_seconds`); past it the step ends with a temporary error and the Workflow's retry
waits again. Running it twice is running it once: a claim already made is a record, which goes on.

Caller: `steps.chain.run_and_hand_off` (the `cluster` step).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from orchestrator.api.metadata import workflow_name
from orchestrator.api.stage_records import ClusterRecord, ClusterState, ProgressiveSyncStage, outcomes_of
from orchestrator.core.errors import TemporaryError
from orchestrator.kube.client import PROGRESSIVE_SYNC_STAGES, Conflict, Kube
from orchestrator.kube.follow import SnapshotCause, follow_objects
from orchestrator.kube.stage_records import claim_cluster, parse_record, read_record
from orchestrator.planning.handoff import own_turn
from steps.common import load_progressive_sync
from steps.context import StepContext
from steps.first_wave import first_wave_refusal
from steps.status_sink import read_stage_records
from steps.workflow_state import read_workflow_state

log = logging.getLogger(__name__)

# Conflicts in a row on the pod's own claim before it waits for the next change of the records.
CLAIM_ATTEMPTS = 5
PAUSED = "the ProgressiveSync is paused or its Workflow suspended: no new cluster starts"


@dataclass(frozen=True)
class Waited:
    """How the wait ended: `start` False when the cluster must not start (its Workflow is ending),
    what was seen in words, and whether the pod waited for a slot at all."""

    start: bool
    reason: str
    waited: bool = False


def claim_record(ctx: StepContext, at: datetime) -> ClusterRecord:
    """The record that claims a cluster of the step's stage: Syncing since `at`, at the release's
    revisions (a pod's own claim here, a hand-off's in `steps.chain`)."""
    revisions = list(dict.fromkeys(rev for pin in ctx.release for rev in pin))
    return ClusterRecord(state=ClusterState.SYNCING, started_at=at, revisions=revisions or None)


def await_turn(kube: Kube, ctx: StepContext, cluster: str) -> Waited:
    """Wait until `cluster` may start, claiming its slot when it is its turn (see the module)."""
    rollout, clock, tuning = ctx.rollout, ctx.clock, ctx.tuning
    where = read_stage_records(kube, rollout, ctx.ps, ctx.stage_name)
    if len(where.records) != 1:
        # Pods at once is only for stages of at most a few dozen targets: one records object.
        raise TemporaryError(
            f"the stage's records are {len(where.records)} objects, not one: no slot to claim"
        )
    name = where.records[0].metadata.name
    namespace = where.records[0].metadata.namespace or rollout.namespace
    budget = timedelta(seconds=ctx.stage.deadline_waves * ctx.ps.spec.progress_deadline_seconds)
    began = clock.now()
    paused_since: datetime | None = None
    paused_for = timedelta()
    waiting = ""
    # Quiet windows of a few seconds: the ProgressiveSync (a pause, a failed stage, a new rollout)
    # and the clock are looked at between changes of the records.
    window = max(1, int(min(tuning.watch_window_seconds, tuning.stage_check_seconds)))
    snapshots = follow_objects(
        kube, PROGRESSIVE_SYNC_STAGES, namespace, [name], window_seconds=lambda: window
    )
    try:
        for snapshot in snapshots:
            obj = snapshot.objects.get(name)
            if obj is None:
                raise TemporaryError(f"the stage's records {name} are gone")
            seen = _look(kube, ctx, cluster, parse_record(obj), idle=snapshot.cause == SnapshotCause.IDLE)
            if isinstance(seen, Waited):
                took = (clock.now() - began).total_seconds()
                log.info("cluster %s: its turn after %.1fs: %s", cluster, took, seen.reason)
                return Waited(seen.start, seen.reason, waited=bool(waiting))
            now = clock.now()
            if seen == PAUSED and paused_since is None:
                paused_since = now
            elif seen != PAUSED and paused_since is not None:
                paused_for, paused_since = paused_for + (now - paused_since), None
            held = paused_for + (now - paused_since if paused_since else timedelta())
            if held.total_seconds() > tuning.pause_hold_seconds:
                raise TemporaryError(
                    f"cluster {cluster} held by a pause for over {tuning.pause_hold_seconds}s"
                )
            if now - began - held > budget:
                raise TemporaryError(
                    f"cluster {cluster} waited {int((now - began).total_seconds())}s for a free slot, past "
                    f"its stage's deadline ({int(budget.total_seconds())}s): the step's retry waits again"
                )
            if seen != waiting:
                log.info("cluster %s waits for a free slot: %s", cluster, seen)
                waiting = seen
    finally:
        snapshots.close()
    raise TemporaryError(f"the watch on the stage's records {name} ended")  # it never ends by itself


def _look(
    kube: Kube, ctx: StepContext, cluster: str, part: ProgressiveSyncStage, *, idle: bool
) -> Waited | str:
    """Decide on the records object as seen (claiming when it is the cluster's turn): a `Waited`
    when the wait is over, else why the pod waits, in words (`PAUSED` while nothing may start). The
    ProgressiveSync is read before a claim and on a quiet look (`idle`), not on every change."""
    rollout, stage = ctx.rollout, ctx.stage_name
    for _ in range(CLAIM_ATTEMPTS):
        states = {target: record.state for target, record in part.clusters.items()}
        turn = own_turn(part.spec.targets, states, cluster=cluster, max_parallel=ctx.stage.max_parallel)
        if turn.go and not turn.claim:
            return Waited(True, turn.reason)
        if not turn.claim and not idle:
            return turn.reason
        ps = load_progressive_sync(kube, rollout)
        refused = first_wave_refusal(ps, rollout.rollout_id, stage, outcomes_of(stage, (part,)))
        if refused:
            # Superseded, ended or failed: the cluster step reports it. Paused: nothing starts.
            return PAUSED if ps.spec.paused else Waited(True, refused)
        if not turn.claim:
            return turn.reason
        workflow = read_workflow_state(
            kube, rollout.namespace, workflow_name(rollout.name, rollout.rollout_id)
        )
        if workflow.ending:
            return Waited(False, workflow.ending)
        if workflow.suspended:
            return PAUSED
        # Not found: a step run by hand, which claims like any pod (maxParallel still holds).
        record = claim_record(ctx, ctx.clock.now())
        namespace = part.metadata.namespace or rollout.namespace
        try:
            claim_cluster(
                kube,
                namespace,
                part.metadata.name,
                resource_version=part.metadata.resource_version or "",
                cluster=cluster,
                record=record,
            )
        except Conflict:
            part = read_record(kube, namespace, part.metadata.name)
            idle = False
            continue
        return Waited(True, f"claimed its own slot ({turn.reason})")
    return f"the stage's records changed under {CLAIM_ATTEMPTS} claims in a row"
