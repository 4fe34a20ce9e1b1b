"""What changed in a ProgressiveSync's status between two versions the watcher saw, as a pure function.

The steps write stage and cluster progress into the status; the watcher sees each write through its
informer (old and new version) and turns the difference into `Transition`s: a stage that ended
(Succeeded, Failed), a cluster whose sync started, that finished or failed, an analysis gate that
ended (Successful, Failed, Error, Inconclusive), a rollout that ended (Succeeded, Failed, Cancelled).
The watcher records each as a Kubernetes Event on the ProgressiveSync and feeds the metrics from
them (`orchestrator.watcher.metrics`).

An analysis gate ends in one of two places the status shows: a stage's own AnalysisRun
(`status.stages[].analysis`, its phase turning final), or a per-cluster run whose cluster failed
with an analysis reason (the `analyze` step writes `cluster C: AnalysisFailed: ...` into the
cluster's record, which the stage's `failed` list repeats). A per-cluster run that passed leaves
no trace in the status (only in its record), so it is not counted here.

Only changes within one rollout count: when the rollout id differs, the old version's stages belong
to another rollout and are not compared. A cluster counts as finished when it leaves `syncing`
without appearing among the failed ones (so this keeps working if the per-cluster `completed` list
is ever trimmed). A first sight (no old version, e.g. a watcher that just started) yields nothing
here: `replayed_transitions` says what a watcher that just took over may have missed.

Each transition has a stable `identity` (rollout, attempt, kind, stage, cluster): the Event it
becomes is named from it, so the same transition recorded twice (by a leader and then by its
successor replaying the recent past) is one Event.

Callers: `orchestrator.watcher.loop`; tests.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum

from orchestrator.api.models import ProgressiveSyncStatus, RolloutPhase, StagePhase, StageStatus
from orchestrator.api.reasons import ANALYSIS_CLUSTER_REASON, Reason


class TransitionKind(StrEnum):
    """What happened; also the Event's reason (`reason`, from the catalog)."""

    ROLLOUT_STARTED = Reason.ROLLOUT_STARTED.value  # recorded by `decide`; here only replayed
    STAGE_SUCCEEDED = Reason.STAGE_SUCCEEDED.value
    STAGE_FAILED = Reason.STAGE_FAILED.value
    CLUSTER_SYNCING = Reason.CLUSTER_SYNCING.value
    CLUSTER_COMPLETED = Reason.CLUSTER_COMPLETED.value
    CLUSTER_FAILED = Reason.CLUSTER_FAILED.value
    ANALYSIS_SUCCESSFUL = Reason.ANALYSIS_SUCCESSFUL.value
    ANALYSIS_FAILED = Reason.ANALYSIS_FAILED.value
    ANALYSIS_ERROR = Reason.ANALYSIS_ERROR.value
    ANALYSIS_INCONCLUSIVE = Reason.ANALYSIS_INCONCLUSIVE.value
    ROLLOUT_SUCCEEDED = Reason.ROLLOUT_SUCCEEDED.value
    ROLLOUT_FAILED = Reason.ROLLOUT_FAILED.value
    ROLLOUT_CANCELLED = Reason.ROLLOUT_CANCELLED.value
    ROLLING_BACK = Reason.ROLLING_BACK.value
    ROLLOUT_ROLLED_BACK = Reason.ROLLOUT_ROLLED_BACK.value
    ROLLBACK_FAILED = Reason.ROLLBACK_FAILED.value

    @property
    def reason(self) -> Reason:
        """The Event's reason: the catalog's entry of the same name."""
        return Reason.named(self.value)

    @property
    def event_type(self) -> str:
        """Normal or Warning."""
        warning = (
            TransitionKind.STAGE_FAILED,
            TransitionKind.CLUSTER_FAILED,
            TransitionKind.ANALYSIS_FAILED,
            TransitionKind.ANALYSIS_ERROR,
            TransitionKind.ANALYSIS_INCONCLUSIVE,
            TransitionKind.ROLLOUT_FAILED,
            TransitionKind.ROLLOUT_CANCELLED,
            TransitionKind.ROLLING_BACK,
            TransitionKind.ROLLOUT_ROLLED_BACK,
            TransitionKind.ROLLBACK_FAILED,
        )
        return "Warning" if self in warning else "Normal"

    @property
    def recorded_as_event(self) -> bool:
        """Cluster syncs starting and finishing are metrics only (thousands per rollout)."""
        return self not in (TransitionKind.CLUSTER_SYNCING, TransitionKind.CLUSTER_COMPLETED)


@dataclass(frozen=True)
class Transition:
    """One change; `seconds` is a stage's duration from its own timestamps, when it ended;
    `phase` an analysis run's final phase (Successful, Failed, Error, Inconclusive); `attempt` the
    rollout's attempt (`progressive-sync retry` counts it up); `at` when it happened as the status
    says (a stage's end, else its start; the rollout's end; the rollback's start), None when the
    status has no time for it."""

    kind: TransitionKind
    rollout_id: str
    message: str
    stage: str = ""
    cluster: str = ""
    seconds: float | None = None
    phase: str = ""
    attempt: int = 1
    at: datetime | None = None

    def identity(self, uid: str) -> str:
        """This transition's `transition_identity` for the ProgressiveSync `uid`."""
        return transition_identity(
            uid, self.rollout_id, self.attempt, self.kind, stage=self.stage, cluster=self.cluster
        )


def transition_identity(
    uid: str, rollout_id: str, attempt: int, kind: TransitionKind, *, stage: str = "", cluster: str = ""
) -> str:
    """A short stable name for one transition of the ProgressiveSync `uid`: the same for the same
    change seen by any watcher, different for each attempt (a retried stage that fails again is a
    new transition) and for a ProgressiveSync deleted and created again."""
    text = "/".join((uid, rollout_id, str(attempt), kind.value, stage, cluster))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# An AnalysisRun's final phases, and the transition each is.
ANALYSIS_ENDS = {
    "Successful": TransitionKind.ANALYSIS_SUCCESSFUL,
    "Failed": TransitionKind.ANALYSIS_FAILED,
    "Error": TransitionKind.ANALYSIS_ERROR,
    "Inconclusive": TransitionKind.ANALYSIS_INCONCLUSIVE,
}
# A cluster failure the analyze step wrote (`cluster C: <Reason>: <message>`), and the phase the
# run's reason stands for (a run stopped past its deadline ended in Error for the gate).
_CLUSTER_ANALYSIS = ANALYSIS_CLUSTER_REASON
_PHASE_OF_REASON = {
    Reason.ANALYSIS_FAILED.value: "Failed",
    Reason.ANALYSIS_ERROR.value: "Error",
    Reason.ANALYSIS_TIMED_OUT.value: "Error",
    Reason.ANALYSIS_INCONCLUSIVE.value: "Inconclusive",
}


_ENDS = {
    RolloutPhase.SUCCEEDED: TransitionKind.ROLLOUT_SUCCEEDED,
    RolloutPhase.FAILED: TransitionKind.ROLLOUT_FAILED,
    RolloutPhase.CANCELLED: TransitionKind.ROLLOUT_CANCELLED,
    RolloutPhase.ROLLING_BACK: TransitionKind.ROLLING_BACK,
    RolloutPhase.ROLLED_BACK: TransitionKind.ROLLOUT_ROLLED_BACK,
}


def status_transitions(old: ProgressiveSyncStatus | None, new: ProgressiveSyncStatus) -> list[Transition]:
    """The transitions from `old` to `new`, in a stable order (stages in order, then the rollout)."""
    if old is None or new.rollout is None:
        return []
    rollout_id = new.rollout.id
    same_rollout = old.rollout is not None and old.rollout.id == rollout_id
    old_stages = {stage.name: stage for stage in (old.stages or [])} if same_rollout else {}
    found: list[Transition] = []
    for stage in new.stages or []:
        for transition in _stage_transitions(rollout_id, old_stages.get(stage.name), stage):
            found.append(replace(transition, at=stage.finished_at or stage.started_at))
    kind = _ENDS.get(new.phase) if new.phase is not None else None
    if kind is not None and (not same_rollout or old.phase != new.phase):
        at = new.rollout.finished_at
        if kind == TransitionKind.ROLLING_BACK and new.rollback is not None:
            at = new.rollback.started_at
        found.append(Transition(kind, rollout_id, new.message or f"rollout {rollout_id} {new.phase}", at=at))
        if kind == TransitionKind.ROLLOUT_FAILED and new.rollback is not None and new.rollback.failed:
            # The rollout failed, and so did its rollback: said apart, so an alert can tell.
            found.append(Transition(TransitionKind.ROLLBACK_FAILED, rollout_id, new.message or "", at=at))
    return [replace(transition, attempt=new.rollout.attempt) for transition in found]


# Why a replayed RolloutStarted says nothing of why the rollout started: only the Event, lost, said it.
REPLAYED = "recorded by a watcher that started after it"


def replayed_transitions(status: ProgressiveSyncStatus, now: datetime, window: timedelta) -> list[Transition]:
    """What a watcher that sees `status` for the first time (it just started, or took the lease
    over) may have missed: the current rollout's transitions, as if from its start, that the
    status dates within `window` before `now`.

    Recorded under their `identity`, those its predecessor already recorded are not recorded again.
    The window keeps a restart long after a rollout from bringing its Events back once the API
    server expired them (`--event-ttl`, one hour by default): it must stay well under that TTL.
    """
    rollout = status.rollout
    if rollout is None:
        return []
    started = Transition(
        TransitionKind.ROLLOUT_STARTED,
        rollout.id,
        Reason.ROLLOUT_STARTED.say(rollout=rollout.id, workflow=rollout.workflow, why=REPLAYED),
        attempt=rollout.attempt,
        at=rollout.started_at,
    )
    since = now - window
    return [
        transition
        for transition in [started, *status_transitions(ProgressiveSyncStatus(rollout=rollout), status)]
        if transition.at is not None and transition.at >= since
    ]


def _stage_transitions(rollout_id: str, old: StageStatus | None, new: StageStatus) -> list[Transition]:
    found: list[Transition] = []
    old_syncing = set(old.syncing) if old else set()
    old_failed = {f.name for f in old.failed} if old else set()
    failed_now = {f.name: f.reason for f in new.failed}
    for cluster in new.syncing:
        if cluster not in old_syncing:
            found.append(
                Transition(
                    TransitionKind.CLUSTER_SYNCING,
                    rollout_id,
                    f"cluster {cluster}: sync requested",
                    stage=new.name,
                    cluster=cluster,
                )
            )
    for cluster in sorted(old_syncing - set(new.syncing) - set(failed_now)):
        found.append(
            Transition(
                TransitionKind.CLUSTER_COMPLETED,
                rollout_id,
                f"cluster {cluster} updated",
                stage=new.name,
                cluster=cluster,
            )
        )
    for failure in new.failed:
        if failure.name not in old_failed:
            found.append(
                Transition(
                    TransitionKind.CLUSTER_FAILED,
                    rollout_id,
                    f"cluster {failure.name} failed in stage {new.name!r}: {failure.reason}",
                    stage=new.name,
                    cluster=failure.name,
                )
            )
            found.extend(_cluster_analysis_ended(rollout_id, new.name, failure.name, failure.reason))
    found.extend(_stage_analysis_ended(rollout_id, old, new))
    ended = {
        StagePhase.SUCCEEDED: TransitionKind.STAGE_SUCCEEDED,
        StagePhase.FAILED: TransitionKind.STAGE_FAILED,
    }
    kind = ended.get(new.phase)
    if kind is not None and (old is None or old.phase != new.phase):
        found.append(
            Transition(
                kind,
                rollout_id,
                f"stage {new.name!r} {new.phase.value.lower()}: {new.message}".rstrip(": "),
                stage=new.name,
                seconds=_seconds(new.started_at, new.finished_at),
            )
        )
    return found


def _stage_analysis_ended(rollout_id: str, old: StageStatus | None, new: StageStatus) -> list[Transition]:
    """The stage's own AnalysisRun turned final (once: the same run in the same final phase again
    is no transition)."""
    run = new.analysis
    kind = ANALYSIS_ENDS.get(run.phase) if run is not None else None
    if run is None or kind is None:
        return []
    before = old.analysis if old is not None else None
    if before is not None and before.run == run.run and before.phase == run.phase:
        return []
    said = f": {run.message}" if run.message else ""
    return [
        Transition(
            kind,
            rollout_id,
            f"analysis {run.run} of stage {new.name!r} {run.phase}{said}",
            stage=new.name,
            phase=run.phase,
        )
    ]


def _cluster_analysis_ended(rollout_id: str, stage: str, cluster: str, reason: str) -> list[Transition]:
    """A cluster that failed by its own AnalysisRun (perCluster)."""
    match = _CLUSTER_ANALYSIS.match(reason)
    phase = _PHASE_OF_REASON.get(match.group(1), "") if match else ""
    if not phase:
        return []
    return [
        Transition(
            ANALYSIS_ENDS[phase],
            rollout_id,
            f"analysis of cluster {cluster} in stage {stage!r} {phase}: {reason}",
            stage=stage,
            cluster=cluster,
            phase=phase,
        )
    ]


def _seconds(started: datetime | None, finished: datetime | None) -> float | None:
    if started is None or finished is None or finished < started:
        return None
    return (finished - started).total_seconds()
