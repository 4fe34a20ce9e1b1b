"""The `follow` step (issue 33): one pod beside the stages that acts the moment a cluster is done.

On the real engine a `cluster` pod needs ~8 s to start (docs/design/dev-stack.md). A sync of a few
seconds, started by `select`'s first wave, by a stage boundary or by a hand-off, is over before the
pod of its cluster runs, and what follows a done cluster (its slot handed to the next cluster, the
stage closed and the next one's first wave started) waited for that pod. The rollout Workflow
therefore runs this step once, beside its stages (`workflow_templates.builder`): it watches the
Applications of the stage in progress and, when a cluster recorded Syncing is done, it does what the
cluster's pod does after its wait, with the same functions:

1. record the cluster Completed (`steps.status_sink.completed`, the `wait-healthy` write), on the
   same verdict (`orchestrator.argocd.assess.assess_cluster` over the Applications `select` planned
   for it, `targetApps`);
2. hand its slot to the next cluster (`steps.chain.hand_off`: the conditional claim on the stage's
   records, then the syncs written with each Application's resourceVersion);
3. when nothing was handed off and it was the stage's last cluster, close the stage and select the
   next one, or on the last stage record the rollout's end (`steps.chain.close_early`, marked
   closed by that cluster; steps/rollout_end.py).

The cluster's pod, when it runs, finds its cluster recorded Completed and ends at once; the
`record-and-select` pod finds the stage closed. So the Workflow's nodes, the status writes and every
outcome are what they were; only the moments move. What the follower never does: decide a failure,
a deadline, a note, a skip or a window (those stay with the cluster's pod), act on a stage in
batches or with per-cluster analysis (`orchestrator.planning.follow.follow_refusal`), or fail the
Workflow: it always exits 0, and its task has `continueOn` (a lost follower only loses speed).

Why maxParallel still holds with a second writer of Completed and of claims: every claim is the
same conditional write (`orchestrator.planning.handoff.next_claim`, refused while maxParallel are
recorded Syncing), and a Hypothesis model (tests/unit/test_handoff.py) checks interleavings of
Argo's starts, the pods and a follower, with the first wave.

It reads the stage's records and the ProgressiveSync again right after it acted, within a second
of a change of one of the stage's Applications, and every 5 s otherwise (`FollowTuning`,
`orchestrator.planning.follow.LookPace`): a quiet stage costs one watch request and one look per
5 s, which matters with hundreds of rollouts in flight.

It stops when the rollout is superseded or ended, a stage failed, every stage is closed, the
Workflow is being stopped, suspended (`argo suspend`: running steps end, and after `argo resume`
the pods do the work), deleted or past its `activeDeadlineSeconds`, or after
`FOLLOW_ERRORS` API errors in a row (each waited out with a backoff).

Caller: `python -m steps follow` (steps.cli).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from orchestrator.api.metadata import workflow_name
from orchestrator.api.models import ProgressiveSync
from orchestrator.argocd.appwatch import SnapshotCause, follow_applications
from orchestrator.argocd.assess import ClusterPhase, assess_cluster, remember_uids
from orchestrator.core.clock import Clock, parse_time
from orchestrator.core.errors import PermanentError, TemporaryError
from orchestrator.kube.client import WORKFLOWS, Kube, KubeError, NotFound
from orchestrator.planning.contract import RolloutContract
from orchestrator.planning.follow import LookPace, Move, next_move
from steps import status_sink as sinks
from steps.chain import close_early, hand_off
from steps.common import FleetLookup, RolloutRef, Superseded, Tuning, UsageProblem, load_progressive_sync
from steps.context import Shared, StepContext
from steps.status_sink import DirectSink, StageRecords, read_stage_records
from steps.wait_healthy import Refreshes, sync_started
from steps.workflow_state import workflow_stopping

log = logging.getLogger(__name__)

# API errors in a row before the follower gives up (the pods do everything it does), and the waits
# between them.
FOLLOW_ERRORS = 6
FOLLOW_BACKOFFS = (0.5, 1.0, 2.0, 5.0, 10.0, 20.0)


@dataclass(frozen=True)
class FollowTuning:
    """How often the follower looks (seconds)."""

    # While a stage is in progress: the records and the ProgressiveSync are read again within this
    # long of a change of one of its Applications, never more often (orchestrator.planning.follow.
    # LookPace) ...
    look_seconds: float = 1.0
    # ... and at least this often while none changes (a stage closed by a pod, a pause).
    quiet_seconds: float = 5.0
    # While no stage is in progress (not selected yet, a gate, a bake, an analysis).
    idle_seconds: float = 2.0
    # How often the Workflow is read (stopped, suspended, deleted, past its deadline).
    workflow_seconds: float = 5.0


@dataclass
class _Tally:
    completed: list[str] = field(default_factory=list)
    handed_off: list[str] = field(default_factory=list)
    closed: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class FollowResult:
    """What the follower did, and why it stopped. Never a failure (see the module)."""

    completed: tuple[str, ...]
    handed_off: tuple[str, ...]
    closed: tuple[str, ...]
    reason: str

    @property
    def failed(self) -> bool:
        """Always False: the follower only ever makes the rollout faster."""
        return False

    @property
    def summary(self) -> str:
        """One line for people (the node's log and message)."""
        return (
            f"follow: recorded {len(self.completed)} cluster(s) done, handed off "
            f"{len(self.handed_off)}, closed {len(self.closed)} stage(s) early; stopped: {self.reason}"
        )


def follow_rollout(
    kube: Kube,
    rollout: RolloutRef,
    contract: RolloutContract,
    *,
    clock: Clock,
    tuning: Tuning,
    follow: FollowTuning = FollowTuning(),
) -> FollowResult:
    """Follow the rollout until it needs the follower no more (see the module)."""
    return _Follower(kube, rollout, contract, clock=clock, tuning=tuning, follow=follow).run()


class _Follower:
    """One run of the follower: what it works for, and what it did."""

    def __init__(
        self,
        kube: Kube,
        rollout: RolloutRef,
        contract: RolloutContract,
        *,
        clock: Clock,
        tuning: Tuning,
        follow: FollowTuning,
    ) -> None:
        self.kube, self.rollout, self.contract = kube, rollout, contract
        self.clock, self.tuning, self.follow = clock, tuning, follow
        self.tally = _Tally()
        self.workflow = _WorkflowCheck(kube, rollout, clock, every=follow.workflow_seconds)
        self.first_uids: dict[str, str] = {}  # each Application as first seen (a new uid: another object)
        self.refreshes: Refreshes | None = None  # the stage's (made by _follow_stage)

    def run(self) -> FollowResult:
        errors = 0
        last_stage = self.contract.stages[-1].name if self.contract.stages else ""
        while True:
            try:
                stop = self.workflow.stopping()
                if stop:
                    return self._result(stop)
                ps = load_progressive_sync(self.kube, self.rollout)
                move = self._move(ps)
                if move.stop:
                    return self._result(move.stop)
                if not move.stage:
                    log.debug("follow: waiting: %s", move.wait)
                    self.clock.sleep(self.follow.idle_seconds)
                elif self._follow_stage(ps, move.stage):
                    if move.stage == last_stage:
                        return self._result(f"every cluster of the last stage {last_stage!r} has an outcome")
                    # Every cluster has an outcome; the stage's own steps (a gate's analysis, its
                    # closing step) close it: look again later, not with a new watch each second.
                    self.clock.sleep(self.follow.idle_seconds)
                errors = 0
            except (Superseded, UsageProblem, PermanentError) as exc:
                return self._result(str(exc))
            except (KubeError, TemporaryError) as exc:
                errors += 1
                if errors >= FOLLOW_ERRORS:
                    return self._result(
                        f"{errors} API errors in a row, the last: {exc} (the pods do the work)"
                    )
                log.warning("follow: %s; looking again", exc)
                self.clock.sleep(FOLLOW_BACKOFFS[min(errors, len(FOLLOW_BACKOFFS)) - 1])

    def _result(self, reason: str) -> FollowResult:
        log.info("follow: stopping: %s", reason)
        tally = self.tally
        return FollowResult(tuple(tally.completed), tuple(tally.handed_off), tuple(tally.closed), reason)

    def _move(self, ps: ProgressiveSync) -> Move:
        status = ps.status
        current = status.rollout.id if status is not None and status.rollout is not None else None
        stages = (status.stages if status is not None else None) or []
        return next_move(
            self.contract,
            on_rollout=current in (None, self.rollout.rollout_id),
            rollout_phase=status.phase if status is not None and current is not None else None,
            stage_phases={stage.name: stage.phase for stage in stages},
        )

    def _open(self, ps: ProgressiveSync, stage: str) -> tuple[StepContext, StageRecords]:
        ctx = StepContext.open(
            self.kube, self.rollout, self.contract, stage=stage, clock=self.clock, tuning=self.tuning, ps=ps
        )
        return ctx, read_stage_records(self.kube, ctx.rollout, ps, stage)

    def _follow_stage(self, ps: ProgressiveSync, stage: str) -> bool:
        """Watch the stage's planned Applications and act on every cluster done, until the stage is
        no longer the one to follow (closed, failed, the rollout gone) or every target has an
        outcome (then True)."""
        ctx, where = self._open(ps, stage)
        planned = where.outcomes.apps
        names = sorted({name for target in where.outcomes.targets for name in planned.get(target, ())})
        if len(where.records) != 1 or not names:
            # Records in parts (over 500 clusters) or without `targetApps`: the pods do it all.
            log.debug("follow: stage %r left to its pods (%d record objects)", stage, len(where.records))
            self.clock.sleep(self.follow.idle_seconds)
            return False
        # The lookup a cluster step gets, told the planned names (one GET per Application, no list).
        fleet = Shared(outcomes=where.outcomes).fleet_for(
            self.kube, ctx, max_age_seconds=self.tuning.fleet_lookup_seconds
        )
        # As a cluster's pod does: ask Argo CD to compare again an Application whose health predates
        # the sync (steps.wait_healthy), or the follower would wait for the application controller's
        # own next look.
        refreshes = Refreshes(self.kube, ctx.rollout.applications_namespace, self.tuning, self.clock)
        self.refreshes = refreshes
        pace = LookPace(self.follow.look_seconds, self.follow.quiet_seconds, looked=self.clock.now())

        def window() -> int:
            now = self.clock.now()
            return pace.window(now, other_due_seconds=refreshes.seconds_to_next(now))

        snapshots = follow_applications(
            self.kube, ctx.rollout.applications_namespace, names, window_seconds=window
        )
        try:
            for snapshot in snapshots:
                acted = self._act(ctx, where, snapshot.objects, fleet)
                changed = snapshot.cause != SnapshotCause.IDLE
                if not pace.due(self.clock.now(), acted=acted, changed=changed):
                    continue
                if self.workflow.stopping():
                    return False
                ps = load_progressive_sync(self.kube, self.rollout)
                if self._move(ps).stage != stage:
                    return False
                ctx, where = self._open(ps, stage)
                if not where.outcomes.syncing and not where.outcomes.not_started:
                    return True  # every target has an outcome: nothing left here to act on
                while acted:  # another cluster may be done in the same snapshot
                    acted = self._act(ctx, where, snapshot.objects, fleet)
                    if acted:
                        ctx, where = self._open(load_progressive_sync(self.kube, self.rollout), stage)
        finally:
            snapshots.close()
        return False

    def _act(
        self,
        ctx: StepContext,
        where: StageRecords,
        objects: Mapping[str, dict[str, Any] | None],
        fleet: FleetLookup,
    ) -> bool:
        """Record the first cluster recorded Syncing whose Applications are done, and hand off or
        close after it; True when it did (the stage's records changed: the caller reads them again)."""
        outcomes = where.outcomes
        for cluster in outcomes.syncing:
            apps = {name: objects.get(name) for name in outcomes.apps.get(cluster, ())}
            if not apps or any(app is None for app in apps.values()):
                log.debug("follow: cluster %s: its Applications %s not all seen", cluster, sorted(apps))
                continue  # not seen yet, or deleted: the pod decides that
            note = self._done(ctx, cluster, apps)
            if note is None:
                continue
            self._finish(ctx, where, cluster, note, fleet)
            return True
        return False

    def _done(self, ctx: StepContext, cluster: str, apps: Mapping[str, dict[str, Any] | None]) -> str | None:
        """The note of a done cluster ("" when none), None when it is not done (waiting or failing:
        the cluster's pod decides those)."""
        ps, rollout_id = ctx.ps, ctx.rollout.rollout_id
        started = sync_started(apps, rollout_id)
        if started is None:
            return None  # no sync of ours seen on it yet
        verdict = assess_cluster(
            cluster,
            apps,
            release=ctx.release,
            rollout_id=rollout_id,
            started=started,
            now=self.clock.now(),
            deadline=started + timedelta(seconds=ps.spec.progress_deadline_seconds),
            since=ps.status.rollout.started_at if ps.status and ps.status.rollout else None,
            degraded_grace=timedelta(seconds=ps.spec.degraded_grace_seconds),
            first_seen=remember_uids(self.first_uids, apps),
        )
        log.debug("follow: cluster %s: %s", cluster, verdict.reason)
        if verdict.phase == ClusterPhase.DONE:
            return "; ".join(verdict.notices)
        if verdict.phase == ClusterPhase.WAITING and self.refreshes is not None:
            self.refreshes.request(verdict.refresh, apps)
        return None

    def _finish(
        self, ctx: StepContext, where: StageRecords, cluster: str, note: str, fleet: FleetLookup
    ) -> None:
        """What the cluster's pod does after its wait (steps.wait_healthy, then steps.chain)."""
        DirectSink(self.kube, where).record(
            cluster,
            sinks.completed(self.clock.now(), note),
            what=f"cluster {cluster} done (seen by the follower)",
        )
        self.tally.completed.append(cluster)
        log.info("follow: cluster %s done; recorded Completed", cluster)
        handed = hand_off(self.kube, ctx, cluster, fleet)
        log.info("follow: after cluster %s: %s", cluster, handed.summary or "no hand-off")
        if handed.started:
            self.tally.handed_off.append(handed.started)
            return
        closed = close_early(self.kube, ctx, cluster)
        if closed.closed:
            self.tally.closed.append(ctx.stage_name)
        log.info("follow: after cluster %s: %s", cluster, closed.summary)


class _WorkflowCheck:
    """Reads the Workflow at most every `every` seconds: why the follower ends (stopped, suspended,
    deleted, gone, past its activeDeadlineSeconds)."""

    def __init__(self, kube: Kube, rollout: RolloutRef, clock: Clock, *, every: float) -> None:
        self.kube, self.rollout, self.clock, self.every = kube, rollout, clock, every
        self.name = workflow_name(rollout.name, rollout.rollout_id)
        self._last: datetime | None = None
        self._deadline: datetime | None = None
        self._reason = ""

    def stopping(self) -> str:
        """Why the follower ends ("" while it goes on); once it says why, it always says so."""
        if not self._reason:
            self._reason = self._look()
        return self._reason

    def _look(self) -> str:
        now = self.clock.now()
        if self._deadline is not None and now >= self._deadline:
            return f"Workflow {self.name} is past its activeDeadlineSeconds"
        if self._last is not None and (now - self._last).total_seconds() < self.every:
            return ""
        self._last = now
        try:
            workflow = self.kube.get(WORKFLOWS, self.rollout.namespace, self.name)
        except NotFound:
            return f"Workflow {self.name} not found (a step run by hand: nothing to follow for)"
        stopping = workflow_stopping(workflow, self.name)
        if stopping:
            return stopping
        if (workflow.get("spec") or {}).get("suspend"):
            # `argo suspend`: running steps end and none starts; after `argo resume` the pods do the
            # work, as they do without a follower.
            return f"Workflow {self.name} is suspended (after argo resume its pods do the work)"
        created = parse_time((workflow.get("metadata") or {}).get("creationTimestamp"))
        seconds = (workflow.get("spec") or {}).get("activeDeadlineSeconds")
        if created is not None and isinstance(seconds, int):
            self._deadline = created + timedelta(seconds=seconds)
        return ""
