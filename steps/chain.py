"""The chained hand-off (issue 33): a `cluster` pod whose cluster is done starts the next one's sync.

In a stage of one pod per cluster, a freed slot is taken by the next cluster's pod, which Argo
creates once it has seen the finished pod end, and which then needs seconds on the real node to
start (docs/design/dev-stack.md) before it requests its sync: ~11-16 s from a cluster Healthy to the
next sync written, on the critical path of every wave. The step of the cluster that finished knows
the slot is free first, so before it exits it requests the sync of the next cluster itself; the pod
Argo starts for that cluster finds the sync ours (our rollout id in `.operation.info`,
`steps.sync`) and only waits for health, exactly as for the first wave (`steps.first_wave`).

`run_and_hand_off` runs the cluster (`steps.cluster.run_cluster`; in a stage whose pods all start at
once, after its turn came, `steps.turn`), then, only when this run saw the
cluster done (not a rerun that found it recorded, not a failure, not a skip), `hand_off`:

1. only in a stage of one pod per cluster without per-cluster analysis (the rollout contract: no
   `batches`, a batch refills its own slots in-process; with perCluster analysis the slot frees
   after the cluster's analysis, not after its pod) and with more targets than maxParallel, whose
   records are one ProgressiveSyncStage object (at most 500 clusters);
2. nothing when the ProgressiveSync (read again, one GET) is paused, its rollout superseded or
   ended, or the stage failed (`steps.first_wave.first_wave_refusal`), nor when the Workflow is
   being stopped or terminated (`spec.shutdown`), deleted, or cannot be found (a step run by hand:
   no pod would follow);
3. the claim: the next cluster (`orchestrator.planning.handoff.next_claim`: the first target with no
   record, while fewer than maxParallel are in flight) recorded Syncing by a merge patch carrying
   the records object's resourceVersion; a Conflict (another step wrote) is read again and decided
   again, a few times, then given up (the next pod syncs its cluster itself). Each run claims at
   most one cluster: a claim whose answer was lost is recognised by its `startedAt`;
4. the syncs of the claimed cluster's Applications, each read fresh and written once with its
   resourceVersion (`steps.first_wave.start_cluster`, the first wave's rules: someone's operation,
   a conflict, an error, an Application Synced and Healthy outside the release, a skip mark, a
   closed window (`steps.window_gate`) are left to the cluster's own step, which decides again).
   When nothing was written the claim is taken back (only if nobody wrote the record since), so
   the cluster is "not started" as before; in a stage whose pods all start at once it stays (the
   cluster's pod, already running, may have gone on when it saw the claim: `steps.turn`).

Every Application still gets one sync write per rollout: the claim makes the hand-offs exclusive,
the resourceVersion of each Application makes a hand-off and the cluster's own pod exclusive.

**The stage boundary** (`close_early`). When nothing is left to hand off and this cluster was the
stage's last to finish, the Workflow's next step is `record-and-select` (close this stage, select
the next one and start its first wave, steps/hand_over.py), which on the real node starts only once
this pod ended, the controller saw it and the new pod started: 6-13 s on the critical path of every
boundary. So this step does that work itself, the same function with the same writes, when:

1. the contract says the stage's closing step selects the next stage (`selectsNext`, or
   `endsRollout`: see "the rollout's end" below), the stage
   runs no batches and no analysis after its clusters, and every target has an outcome
   (`orchestrator.planning.handoff.boundary_refusal`), in one records object;
2. the same refusals as a hand-off (paused, superseded, the stage failed, the Workflow stopping,
   deleted, gone or suspended: no step would follow);
3. the records object is marked closed by this cluster (`progressivesync.io/closed-by`) with its
   resourceVersion: of two last clusters finishing at once one closes the stage, the other finds
   the mark (or a Conflict) and leaves it.

The `record-and-select` pod Argo starts after this one then finds the stage closed and the next
one selected (both idempotent: it hands the recorded targets on and starts nothing), so the
Workflow's shape, nodes and outputs are unchanged. Anything that stops the early close part-way is
finished by that pod, as before.

**The rollout's end.** The last stage's closing step is `record`, then the exit handler. When the
contract says so (`endsRollout`: no groups, no bake after it), the same close, under the same
refusals and the same mark, closes the last stage and records the rollout Succeeded
(steps/rollout_end.py); the Workflow's `record` and `finalize` then write nothing.

Nothing here raises: a hand-off or a close that cannot be done is logged and the step ends as it
would have.

Caller: `python -m steps cluster` (steps.cli).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from orchestrator.api.metadata import workflow_name
from orchestrator.api.stage_records import (
    CLOSED_BY_ANNOTATION,
    ClusterRecord,
    ProgressiveSyncStage,
    outcomes_of,
)
from orchestrator.api.windows import evaluated_windows
from orchestrator.argocd.fleet import app_view_from_object
from orchestrator.core.errors import PermanentError, TemporaryError
from orchestrator.kube.client import Conflict, Kube, KubeError
from orchestrator.kube.stage_records import claim_boundary, claim_cluster, read_record, withdraw_claim
from orchestrator.planning.contract import StageContract
from orchestrator.planning.handoff import Claim, boundary_refusal, next_claim
from orchestrator.planning.skip import skip_reason
from steps.cluster import ClusterOutcome, ClusterResult, run_cluster
from steps.common import FleetLookup, Superseded, load_progressive_sync
from steps.context import Shared, StepContext
from steps.first_wave import first_wave_refusal, start_cluster
from steps.hand_over import HandOverResult, hand_over
from steps.rollout_end import RolloutEnd, end_rollout
from steps.status_sink import read_stage_records
from steps.turn import await_turn, claim_record
from steps.window_gate import read_project_windows, window_state
from steps.workflow_state import read_workflow_state

log = logging.getLogger(__name__)

# Conflicts on the records object before the hand-off is given up (each is one GET and one PATCH).
CLAIM_ATTEMPTS = 5


@dataclass(frozen=True)
class HandOff:
    """What the hand-off did: the cluster whose sync it started ("" when none) and why in words."""

    started: str = ""
    reason: str = ""

    @property
    def summary(self) -> str:
        """For the step's summary line."""
        if self.started:
            return f"handed off to cluster {self.started}: its sync is requested"
        return f"no hand-off: {self.reason}" if self.reason else ""


@dataclass(frozen=True)
class EarlyClose:
    """What the stage boundary did: how the stage was closed and the next one selected, or the
    last stage closed and the rollout's end recorded (both None when this step did not), or why not
    in words."""

    handed_over: HandOverResult | None = None
    reason: str = ""
    ended: RolloutEnd | None = None

    @property
    def closed(self) -> bool:
        """This step closed the stage."""
        return self.handed_over is not None or self.ended is not None

    @property
    def summary(self) -> str:
        """For the step's summary line."""
        if self.handed_over is not None:
            return f"closed the stage (the last cluster): {self.handed_over.summary}"
        if self.ended is not None:
            return f"closed the last stage (the last cluster): {self.ended.summary}"
        return f"the stage is left to its closing step: {self.reason}" if self.reason else ""


@dataclass(frozen=True)
class ChainedResult:
    """The cluster's end, and the hand-off and the early close made after it."""

    cluster: ClusterResult
    hand_off: HandOff
    early_close: EarlyClose = EarlyClose()

    @property
    def failed(self) -> bool:
        """As the cluster's (neither the hand-off nor the early close ever fails the step)."""
        return self.cluster.failed

    @property
    def summary(self) -> str:
        """The cluster's line, and the hand-off's or the close's when it did something."""
        if self.hand_off.started:
            return f"{self.cluster.summary}; {self.hand_off.summary}"
        if self.early_close.closed:
            return f"{self.cluster.summary}; {self.early_close.summary}"
        return self.cluster.summary


def run_and_hand_off(kube: Kube, ctx: StepContext, cluster: str) -> ChainedResult:
    """`run_cluster`, then `hand_off` when this run saw the cluster done, then, when it handed
    nothing off, `close_early` (see the module)."""
    if ctx.stage.pods_at_once:
        # Started before its slot (every pod of the stage at once): wait for its turn first.
        turn = await_turn(kube, ctx, cluster)
        if not turn.start:
            log.info("cluster %s not started: %s", cluster, turn.reason)
            return ChainedResult(ClusterResult(cluster, ClusterOutcome.NOT_STARTED, turn.reason), HandOff())
        if turn.waited:
            ctx = ctx.reopen(kube)  # the ProgressiveSync as it is now, not as it was before the wait
    fleet = FleetLookup(
        kube, ctx.rollout, ctx.ps, clock=ctx.clock, max_age_seconds=ctx.tuning.fleet_lookup_seconds
    )
    result = run_cluster(kube, ctx, cluster, Shared(fleet=fleet))
    if result.outcome != ClusterOutcome.DONE or not result.finished_here:
        return ChainedResult(result, HandOff())
    try:
        handed = hand_off(kube, ctx, cluster, fleet)
    except KubeError as exc:  # the API: the next pod syncs its cluster itself, as before
        log.warning("no hand-off after cluster %s: %s", cluster, exc)
        handed = HandOff(reason=f"the API answered {exc}")
    log.info("cluster %s: %s", cluster, handed.summary)
    if handed.started:
        return ChainedResult(result, handed)
    try:
        closed = close_early(kube, ctx, cluster)
    except (KubeError, TemporaryError, PermanentError, Superseded) as exc:
        # The stage's closing step (record-and-select) does, or finishes, the work, as before.
        log.warning("cluster %s: the stage was not closed early: %s", cluster, exc)
        closed = EarlyClose(reason=f"it stopped part-way: {exc}")
    log.info("cluster %s: %s", cluster, closed.summary)
    return ChainedResult(result, handed, closed)


def chained(sized: StageContract) -> str:
    """Why this stage has no hand-off ("" when it has one), from its rollout contract alone."""
    analysis = sized.analysis
    if sized.batches:
        return "the stage runs in batches (a batch refills its own slots)"
    if analysis is not None and analysis.after_healthy and analysis.per_cluster:
        return "each cluster is analyzed after it is done (the slot frees after the analysis)"
    if sized.targets <= sized.max_parallel:
        return "every target of the stage starts at once"
    return ""


def hand_off(kube: Kube, ctx: StepContext, finished: str, fleet: FleetLookup) -> HandOff:
    """After `finished` was recorded Completed by this run: claim the next cluster of the stage and
    request its syncs (see the module)."""
    off = chained(ctx.stage)
    if off:
        return HandOff(reason=off)
    rollout, stage = ctx.rollout, ctx.stage_name
    ps = load_progressive_sync(kube, rollout)
    where = read_stage_records(kube, rollout, ps, stage)
    if len(where.records) != 1:
        return HandOff(reason=f"the stage's records are {len(where.records)} objects, not one")
    refused = first_wave_refusal(ps, rollout.rollout_id, stage, where.outcomes) or _workflow_stopping(
        kube, rollout.namespace, workflow_name(rollout.name, rollout.rollout_id)
    )
    if refused:
        return HandOff(reason=refused)
    now = ctx.clock.now()
    proposed = claim_record(ctx, now)
    claimed, held = _claim(
        kube, where.records[0], finished=finished, max_parallel=ctx.stage.max_parallel, proposed=proposed
    )
    if not claimed.claimed or held is None:
        return HandOff(reason=claimed.reason)
    target = claimed.cluster
    # Read again right before the writes (as the first wave does): a pause, a cancel or a sibling's
    # failure recorded while the records were read and claimed starts nothing.
    ps = load_progressive_sync(kube, rollout)
    mark = first_wave_refusal(ps, rollout.rollout_id, stage, outcomes_of(stage, (held,)))
    started = False
    apps: list[dict[str, Any]] = []
    if not mark:
        found, clusters = fleet.find(target)
        apps = fleet.apps_of(found, clusters) if found is not None else []
        skip = skip_reason(ps.spec.skip, found, [app_view_from_object(a) for a in apps]) if found else None
        mark = f"a skip mark on it ({skip})" if skip else ""
    if not mark:
        # A closed window (spec.windows, the AppProjects' sync windows): no sync here; the cluster's
        # own step waits for the window (steps.window_gate), as for the first wave.
        closed = window_state(
            evaluated_windows(ctx.contract.windows),
            read_project_windows(kube, rollout, apps),
            apps,
            ctx.clock.now(),
        )
        mark = "" if closed.open else closed.note
    if not mark:
        since = ps.status.rollout.started_at if ps.status and ps.status.rollout else None
        started = start_cluster(
            kube,
            rollout,
            ps,
            stage=stage,
            cluster=target,
            apps=apps,
            release=ctx.release,
            since=since,
            clock=ctx.clock,
        )
    if started:
        return HandOff(started=target, reason=claimed.reason)
    # With pods at once the cluster's pod already runs and may have gone on when it saw the claim:
    # the claim stays (its slot held, as a pod waiting for a window holds it) and that pod decides,
    # so no cluster ever starts without a claim (steps.turn).
    withdrawn = not ctx.stage.pods_at_once and withdraw_claim(
        kube,
        held.metadata.namespace or rollout.namespace,
        held.metadata.name,
        resource_version=held.metadata.resource_version or "",
        cluster=target,
    )
    why = mark or "no sync of it could be written here"
    return HandOff(
        reason=f"claimed cluster {target} but {why}; the claim {'was taken back' if withdrawn else 'stays'}, "
        "its own step decides"
    )


def _claim(
    kube: Kube,
    part: ProgressiveSyncStage,
    *,
    finished: str,
    max_parallel: int,
    proposed: ClusterRecord,
) -> tuple[Claim, ProgressiveSyncStage | None]:
    """Record the next cluster `proposed` (Syncing) with the object's resourceVersion; (the
    decision, the object as stored after the claim, None when nothing was claimed). See the module,
    point 3."""
    tried = ""
    namespace = part.metadata.namespace or ""
    for _ in range(CLAIM_ATTEMPTS):
        states = {name: record.state for name, record in part.clusters.items()}
        if tried and tried in part.clusters and part.clusters[tried].started_at == proposed.started_at:
            # The claim's answer was lost (a retried PATCH then met its own write): it is ours.
            return Claim(tried, "claimed (the answer was lost)"), part
        claim = next_claim(part.spec.targets, states, finished=finished, max_parallel=max_parallel)
        if not claim.claimed:
            return claim, None
        tried = claim.cluster
        try:
            stored = claim_cluster(
                kube,
                namespace,
                part.metadata.name,
                resource_version=part.metadata.resource_version or "",
                cluster=claim.cluster,
                record=proposed,
            )
        except Conflict:
            part = read_record(kube, namespace, part.metadata.name)
            continue
        return claim, stored
    return Claim("", f"the stage's records changed under {CLAIM_ATTEMPTS} claims in a row"), None


def close_early(kube: Kube, ctx: StepContext, finished: str) -> EarlyClose:
    """After `finished` was recorded Completed by this run and nothing was handed off: when it was
    the stage's last cluster, close the stage and select the next one here (see the module)."""
    sized = ctx.stage
    if not sized.closing_step_done_early:  # decided on the contract alone, before any read
        return EarlyClose(reason=boundary_refusal(sized, (), {}))
    rollout, stage = ctx.rollout, ctx.stage_name
    ps = load_progressive_sync(kube, rollout)
    where = read_stage_records(kube, rollout, ps, stage)
    if len(where.records) != 1:
        return EarlyClose(reason=f"the stage's records are {len(where.records)} objects, not one")
    part = where.records[0]
    closer = (part.metadata.annotations or {}).get(CLOSED_BY_ANNOTATION)
    if closer:
        return EarlyClose(reason=f"cluster {closer}'s step closed it")
    states = {name: record.state for name, record in part.clusters.items()}
    refused = (
        boundary_refusal(sized, part.spec.targets, states)
        or first_wave_refusal(ps, rollout.rollout_id, stage, where.outcomes)
        or _workflow_stopping(kube, rollout.namespace, workflow_name(rollout.name, rollout.rollout_id))
    )
    if refused:
        return EarlyClose(reason=refused)
    if not claim_boundary(
        kube,
        part.metadata.namespace or rollout.namespace,
        part.metadata.name,
        resource_version=part.metadata.resource_version or "",
        cluster=finished,
    ):
        return EarlyClose(reason="another step wrote the stage's records meanwhile (it decides)")
    if sized.selects_next is None:  # the last stage (endsRollout): steps/rollout_end.py
        return EarlyClose(ended=end_rollout(kube, ctx.reopen(kube, ps=ps)))
    return EarlyClose(hand_over(kube, ctx.reopen(kube, ps=ps), sized.selects_next))


def _workflow_stopping(kube: Kube, namespace: str, name: str) -> str:
    """Why no pod will follow in this Workflow ("" when one will): stopped, terminated, suspended,
    deleted, gone."""
    return read_workflow_state(kube, namespace, name).no_step_follows
