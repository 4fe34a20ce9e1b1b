"""Pure status decisions: is a cluster done, failed or still waiting; did a stage pass; how did a
rollout end.

Each decision is an ordered list of early returns with a reason a person can read in
`kubectl get psync -o yaml` or the Argo UI. Nothing here talks to the API server or reads the clock:
`now` and the deadline come in as arguments. Callers: `steps.wait_healthy`, `steps.record`,
`steps.finalize`, and the table-driven tests in `tests/unit/test_assess.py`.

The rules are DESIGN.md §3 and REFERENCE.md (Argo CD): a cluster is done when every Application of
it finished its operation `Succeeded` at the pinned revision, is `Synced` and `Healthy`, and the
health was observed after the operation finished (`reconciledAt >= operationState.finishedAt`), so
a stale Healthy from the previous revision never counts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from orchestrator.api.groups import describe_groups
from orchestrator.api.models import STATUS_LIST_CAP, RolloutPhase, StagePhase, StageStatus
from orchestrator.api.phases import PASSED_STAGE_PHASES, UNFINISHED_STAGE_PHASES
from orchestrator.api.rollout_status import is_step_error
from orchestrator.api.stage_records import StageOutcomes
from orchestrator.argocd import appsync
from orchestrator.core.clock import format_time, parse_time


class ClusterPhase(StrEnum):
    """Where one cluster (or one Application of it) stands in `wait-healthy`."""

    WAITING = "Waiting"
    DONE = "Done"
    FAILED = "Failed"


class Notice(StrEnum):
    """Something a waiting (or done) Application shows that a person should hear about while it lasts.

    A plain wait (the operation runs, health Progressing) has no notice: `syncing` says it all.
    These are written next to the cluster in the stage status (`status.stages[].waiting`).
    """

    SYNC_WINDOW = "SyncWindow"  # Argo CD holds our sync: a sync window denies it now
    WAITING_FOR_WINDOW = "WaitingForWindow"  # no sync written yet: spec.windows or an AppProject's closed
    RETRYING = "Retrying"  # an attempt failed; Argo CD retries the operation (retry.limit)
    DEGRADED = "Degraded"  # Degraded within the grace period after the sync
    SUSPENDED = "Suspended"  # e.g. an Argo Rollouts canary paused at a step
    MISSING = "Missing"
    UNKNOWN = "Unknown"  # health or sync status Unknown
    OUT_OF_SYNC = "OutOfSync"  # still OutOfSync after the sync succeeded
    PRUNE_SKIPPED = "PruneSkipped"  # done, but resources that only pruning removes are left (prune off)
    BUSY = "Busy"  # someone else's operation runs on it
    ADOPTED = "Adopted"  # done: someone else had synced it to the release revision; not synced again
    LEFT_ALONE = "LeftAlone"  # done: up to date at a revision outside this release; not synced


@dataclass(frozen=True)
class Verdict:
    """The decision for one Application or one cluster: phase, a reason for people, and a notice."""

    phase: ClusterPhase
    reason: str
    notice: Notice | None = None
    # Set when only a fresh comparison can tell: the sync finished no earlier than Argo CD last
    # compared (whole seconds). From this time on (a second after finishedAt, so that the new
    # reconciledAt can be later) a refresh request gets the answer in seconds instead of at the
    # next periodic comparison: Argo CD updates health after a sync without moving reconciledAt.
    refresh_after: datetime | None = None


# Argo CD's message on a Running operation a sync window holds back (controller/sync.go).
SYNC_WINDOW_MESSAGE = "blocked by sync window"
# The default of `spec.degradedGraceSeconds`: how long a Degraded right after a sync may last.
DEFAULT_DEGRADED_GRACE = timedelta(seconds=120)


def assess_application(
    name: str,
    app: Mapping[str, Any] | None,
    *,
    release: Sequence[Sequence[str]],
    rollout_id: str,
    now: datetime,
    since: datetime | None = None,
    degraded_grace: timedelta = DEFAULT_DEGRADED_GRACE,
) -> Verdict:
    """Decide one Application; `app` is None when it no longer exists. See DESIGN.md §3 (Done, Failed).

    `release` are the release's revision tuples: our own operation is judged against the revisions
    it pinned, someone else's sync is adopted when it reached one of them. `since` is when the
    rollout started (a sync of ours in the Application's history after it counts as ours).
    """
    if app is None:
        return Verdict(ClusterPhase.FAILED, f"Application {name} was deleted")
    if appsync.is_being_deleted(app):
        return Verdict(ClusterPhase.FAILED, f"Application {name} is being deleted")
    op = appsync.operation(app)
    state = appsync.operation_state(app)
    if op is not None and not appsync.operation_is_ours(op, rollout_id):
        # A new operation someone requested replaces whatever the state says once Argo CD takes it up.
        return Verdict(
            ClusterPhase.WAITING,
            f"{name}: an operation started by {appsync.initiator(op)} is in progress",
            Notice.BUSY,
        )
    if appsync.state_is_ours(app, rollout_id):
        assert state is not None
        return _assess_our_operation(name, app, state, now=now, degraded_grace=degraded_grace)
    if op is not None:
        return Verdict(ClusterPhase.WAITING, f"{name}: sync operation not picked up by Argo CD yet")
    if state is not None and state.get("phase") in appsync.RUNNING_PHASES:
        return Verdict(
            ClusterPhase.WAITING,
            f"{name}: an operation started by {appsync.initiator(state.get('operation'))} is "
            f"{state.get('phase')}",
            Notice.BUSY,
        )
    compared = appsync.compared_revisions(app)
    synced = appsync.sync_status(app) == "Synced"
    if synced and appsync.release_match(app, release) is not None:
        # Someone (a person, or a sync of ours someone else's operation replaced) already brought it
        # to the release revision: adopt it, never sync it again; only its health is left to wait for.
        by = appsync.initiator(state.get("operation")) if state else "someone"
        finished = parse_time(state.get("finishedAt")) if state else None
        return _assess_health(
            name,
            app,
            target=compared,
            finished=finished,
            prune=bool(((state or {}).get("operation") or {}).get("sync", {}).get("prune")),
            now=now,
            degraded_grace=degraded_grace,
            fallback_start=since,
            adopted_from=by,
        )
    if (
        synced
        and compared
        and appsync.health_status(app) == "Healthy"
        and not appsync.synced_in_history(app, since=since)
    ):
        # What the sync step leaves alone (appsync.decide_sync): up to date at its own revision.
        return Verdict(
            ClusterPhase.DONE,
            f"{name}: Synced and Healthy at {','.join(compared)}, which is not a revision of this "
            "release: left alone",
            Notice.LEFT_ALONE,
        )
    if appsync.synced_in_history(app, since=since):
        current = appsync.initiator(state.get("operation")) if state else "unknown"
        return Verdict(
            ClusterPhase.WAITING,
            f"{name}: rollout {rollout_id} synced it, then an operation by {current} left it "
            f"{appsync.sync_status(app)} at {','.join(compared) or '(no revision)'}",
        )
    return Verdict(ClusterPhase.WAITING, f"{name}: the sync of rollout {rollout_id} was not requested yet")


def application_uids(apps: Mapping[str, Mapping[str, Any] | None]) -> dict[str, str]:
    """Name -> metadata.uid of the Applications that exist (and carry one)."""
    return {
        name: str(uid)
        for name, app in apps.items()
        if app is not None and (uid := (app.get("metadata") or {}).get("uid"))
    }


def remember_uids(first_seen: dict[str, str], apps: Mapping[str, Mapping[str, Any] | None]) -> dict[str, str]:
    """Add the uid of each Application seen for the first time to `first_seen`; returns it (what a
    follower passes to `assess_cluster` as `first_seen`: a name keeps the uid it was first seen with)."""
    for name, uid in application_uids(apps).items():
        first_seen.setdefault(name, uid)
    return first_seen


def replacement(first_seen: Mapping[str, str], apps: Mapping[str, Mapping[str, Any] | None]) -> str:
    """Why the cluster fails because an Application followed since `first_seen` (name -> uid) is now
    another object of the same name ("" when none is).

    An Application deleted and created again (by a person, or by the ApplicationSet controller) is
    a new object: the sync this rollout requested was on the old one, whose result is not the new
    one's, and the new one is never synced by this rollout. A watch that saw the deletion says
    "was deleted" first; this catches the replacement when the deletion was not seen (a re-list)."""
    for name, uid in sorted(application_uids(apps).items()):
        before = first_seen.get(name)
        if before and before != uid:
            return (
                f"Application {name} was deleted and created again (uid {before} -> {uid}) while this "
                "rollout waited for it: its sync was requested on the deleted object, and the new one "
                "is not synced by this rollout"
            )
    return ""


def _assess_our_operation(
    name: str,
    app: Mapping[str, Any],
    state: Mapping[str, Any],
    *,
    now: datetime,
    degraded_grace: timedelta,
) -> Verdict:
    """Our operation is (or was) the controller's: judge it, then the Application it left."""
    phase = str(state.get("phase", ""))
    message = str(state.get("message") or "")
    if phase == "Running" and state.get("finishedAt"):
        # Between Argo CD's own retries the state stays Running with finishedAt set
        # (controller/appcontroller.go): not final.
        limit = ((state.get("operation") or {}).get("retry") or {}).get("limit", 0)
        return Verdict(
            ClusterPhase.WAITING,
            f"{name}: a sync attempt failed; Argo CD retries it (attempt {state.get('retryCount', 0)} "
            f"of {limit}): {message or 'no message'}",
            Notice.RETRYING,
        )
    if phase == "Running" and SYNC_WINDOW_MESSAGE in message:
        return Verdict(
            ClusterPhase.WAITING,
            f"{name}: Argo CD holds the sync: {message}; it starts when the window allows "
            "(the progress deadline keeps running)",
            Notice.SYNC_WINDOW,
        )
    if phase in appsync.RUNNING_PHASES:
        return Verdict(ClusterPhase.WAITING, f"{name}: sync operation {phase}")
    if phase in ("Failed", "Error"):
        # A stored Failed or Error is final: retries happen while the state says Running.
        return Verdict(ClusterPhase.FAILED, f"{name}: sync operation {phase}: {message or 'no message'}")
    if phase != "Succeeded":
        return Verdict(ClusterPhase.WAITING, f"{name}: sync operation phase {phase or 'unknown'}")
    pins = _requested_revisions(state)
    applied = appsync.result_revisions(state)
    if not pins or not appsync.reported_as_release(app, pins, applied):
        return Verdict(
            ClusterPhase.FAILED,
            f"{name}: sync Succeeded at revision {','.join(applied) or '(none)'}, "
            f"not the pinned {','.join(pins) or '(none)'}",
        )
    return _assess_health(
        name,
        app,
        target=applied,
        finished=parse_time(state.get("finishedAt")),
        prune=bool(((state.get("operation") or {}).get("sync") or {}).get("prune")),
        now=now,
        degraded_grace=degraded_grace,
    )


def _assess_health(
    name: str,
    app: Mapping[str, Any],
    *,
    target: Sequence[str],
    finished: datetime | None,
    prune: bool,
    now: datetime,
    degraded_grace: timedelta,
    fallback_start: datetime | None = None,
    adopted_from: str = "",
) -> Verdict:
    """After a sync reached `target` (full SHAs): is what Argo CD reports about it fresh, Synced, Healthy?"""
    status = app.get("status") or {}
    reconciled = parse_time(status.get("reconciledAt"))
    compared = appsync.compared_revisions(app)
    # Argo CD writes the operation state before its next comparison, and keeps reconciledAt and
    # finishedAt in whole seconds: only a comparison strictly after the sync describes its result.
    fresh = finished is None or (reconciled is not None and reconciled > finished)
    if not fresh:
        seen = format_time(reconciled) if reconciled else "never"
        until = format_time(finished) if finished else "(no finishedAt)"
        return Verdict(
            ClusterPhase.WAITING,
            f"{name}: health not observed since the sync finished at {until} (last reconciled {seen})"
            + _argocd_reports(app),
            refresh_after=finished + timedelta(seconds=1) if finished is not None else None,
        )
    sync_status = appsync.sync_status(app)
    notes: list[str] = []
    if compared and list(compared) != list(target):
        # Argo CD compared it against a newer commit since (the branch moved on): its sync status
        # is about that commit; the health of what we applied is still what it reports.
        notes.append(f"Argo CD now compares it against {','.join(compared)}")
    elif sync_status == "Unknown":
        return Verdict(
            ClusterPhase.WAITING, f"{name}: sync status Unknown{_argocd_reports(app)}", Notice.UNKNOWN
        )
    elif sync_status == "OutOfSync":
        leftovers = _prune_only_leftovers(status)
        if leftovers is None or prune:
            # Missing resources also make it OutOfSync (Argo CD): say the health too.
            health = status.get("health") or {}
            health_status = str(health.get("status") or "Unknown")
            detail = f": {health['message']}" if health.get("message") else ""
            return Verdict(
                ClusterPhase.WAITING,
                f"{name}: still OutOfSync after the sync at {','.join(target)}; "
                f"health {health_status}{detail}",
                Notice.MISSING if health_status == "Missing" else Notice.OUT_OF_SYNC,
            )
        notes.append(
            f"{len(leftovers)} resource(s) that only pruning removes are left (prune is off): "
            + ", ".join(leftovers[:5])
            + (" ..." if len(leftovers) > 5 else "")
        )
    health = status.get("health") or {}
    health_status = health.get("status") or "Unknown"
    detail = f": {health['message']}" if health.get("message") else ""
    if health_status == "Degraded":
        start = finished or fallback_start or now
        degraded_for = now - start
        if degraded_for < degraded_grace:
            return Verdict(
                ClusterPhase.WAITING,
                f"{name}: health Degraded {int(degraded_for.total_seconds())}s after the sync (grace "
                f"{int(degraded_grace.total_seconds())}s){detail}",
                Notice.DEGRADED,
            )
        return Verdict(
            ClusterPhase.FAILED,
            f"{name}: health Degraded after the sync, past the grace of "
            f"{int(degraded_grace.total_seconds())}s{detail}",
        )
    if health_status == "Suspended":
        return Verdict(
            ClusterPhase.WAITING,
            f"{name}: health Suspended (e.g. a paused Argo Rollouts canary){detail}; waiting for Healthy",
            Notice.SUSPENDED,
        )
    if health_status in ("Missing", "Unknown"):
        return Verdict(
            ClusterPhase.WAITING,
            f"{name}: health {health_status}{detail}; waiting for Healthy{_argocd_reports(app)}",
            Notice(health_status),
        )
    if health_status != "Healthy":
        return Verdict(ClusterPhase.WAITING, f"{name}: health {health_status}, waiting for Healthy")
    adopted = f" (synced by {adopted_from}; adopted, not synced again)" if adopted_from else ""
    reason = f"{name}: Synced and Healthy at {','.join(target)}{adopted}"
    notice = Notice.ADOPTED if adopted_from else None
    if notes:
        reason = f"{reason}; {'; '.join(notes)}"
        if any("pruning" in note for note in notes):
            notice = Notice.PRUNE_SKIPPED
    return Verdict(ClusterPhase.DONE, reason, notice)


def _requested_revisions(state: Mapping[str, Any]) -> list[str]:
    sync = (state.get("operation") or {}).get("sync") or {}
    if sync.get("revisions"):
        return [str(r) for r in sync["revisions"]]
    return [str(sync["revision"])] if sync.get("revision") else []


def _prune_only_leftovers(status: Mapping[str, Any]) -> list[str] | None:
    """The OutOfSync resources when every one of them only waits for pruning; else None."""
    leftovers: list[str] = []
    for resource in status.get("resources") or []:
        if not isinstance(resource, Mapping) or resource.get("status") != "OutOfSync":
            continue
        if resource.get("requiresPruning") is not True:
            return None
        leftovers.append(f"{resource.get('kind', '?')}/{resource.get('name', '?')}")
    return leftovers or None


def _argocd_reports(app: Mapping[str, Any]) -> str:
    """`; Argo CD reports ComparisonError: ...` when the Application carries error conditions: why
    Argo CD cannot compare it (its comparison then leaves `reconciledAt` and the sync status as
    they were, or Unknown), which a person needs next to a wait that does not end."""
    errors = appsync.error_conditions(app)
    return f"; Argo CD reports {'; '.join(errors)}" if errors else ""


@dataclass(frozen=True)
class ClusterVerdict:
    """The decision for one cluster, and the notices of its Applications worth a line in the status."""

    phase: ClusterPhase
    reason: str
    notices: tuple[str, ...] = ()
    # Applications to ask Argo CD to compare again, and from when (see Verdict.refresh_after).
    refresh: Mapping[str, datetime] = field(default_factory=dict)


def assess_cluster(
    cluster: str,
    apps: Mapping[str, Mapping[str, Any] | None],
    *,
    release: Sequence[Sequence[str]],
    rollout_id: str,
    started: datetime,
    now: datetime,
    deadline: datetime,
    cluster_exists: bool = True,
    since: datetime | None = None,
    degraded_grace: timedelta = DEFAULT_DEGRADED_GRACE,
    first_seen: Mapping[str, str] | None = None,
) -> ClusterVerdict:
    """Decide one cluster from its Applications (name -> object, None when deleted).

    `release` are the release's revision tuples (see `assess_application`). `first_seen` (name ->
    uid, see `remember_uids`): an Application now of another uid was replaced (`replacement`).
    """
    if not cluster_exists:
        return ClusterVerdict(
            ClusterPhase.FAILED, f"cluster {cluster}: its Argo CD cluster Secret was deleted"
        )
    replaced = replacement(first_seen or {}, apps)
    if replaced:
        return ClusterVerdict(ClusterPhase.FAILED, f"cluster {cluster}: {replaced}")
    if not apps:
        return ClusterVerdict(
            ClusterPhase.FAILED, f"cluster {cluster}: no Application of the ApplicationSet targets it"
        )
    verdicts = {
        name: assess_application(
            name,
            app,
            release=release,
            rollout_id=rollout_id,
            now=now,
            since=since,
            degraded_grace=degraded_grace,
        )
        for name, app in sorted(apps.items())
    }
    notices = tuple(v.reason for v in verdicts.values() if v.notice is not None)
    failed = [v.reason for v in verdicts.values() if v.phase == ClusterPhase.FAILED]
    if failed:
        return ClusterVerdict(ClusterPhase.FAILED, f"cluster {cluster}: " + "; ".join(failed))
    waiting = [v.reason for v in verdicts.values() if v.phase == ClusterPhase.WAITING]
    if not waiting:
        count = len(verdicts)
        noun = "Application" if count == 1 else "Applications"
        remarks = f" ({'; '.join(notices)})" if notices else ""
        return ClusterVerdict(
            ClusterPhase.DONE, f"cluster {cluster}: {count} {noun} Synced and Healthy{remarks}", notices
        )
    if now >= deadline:
        seconds = int((deadline - started).total_seconds())
        return ClusterVerdict(
            ClusterPhase.FAILED,
            f"cluster {cluster}: progress deadline of {seconds}s passed "
            f"(sync started {format_time(started)}); still waiting for " + "; ".join(waiting),
        )
    refresh = {name: v.refresh_after for name, v in verdicts.items() if v.refresh_after is not None}
    return ClusterVerdict(ClusterPhase.WAITING, f"cluster {cluster}: " + "; ".join(waiting), notices, refresh)


def first_few(items: Sequence[str], limit: int = STATUS_LIST_CAP) -> str:
    """`a, b, c` for people, cut after `limit` items with how many more (status messages stay small)."""
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


def assess_stage(
    stage: StageStatus, outcomes: StageOutcomes, *, max_failed_clusters: int
) -> tuple[StagePhase, str]:
    """Close a stage: Succeeded, or Failed when failures exceed the policy or targets never finished.

    `outcomes`: the stage's clusters as its records tell them (`stage_records.outcomes_of`)."""
    if stage.phase == StagePhase.SKIPPED:
        return StagePhase.SKIPPED, stage.message
    total = len(outcomes.targets)
    if total == 0:
        return StagePhase.SKIPPED, stage.message or "no cluster to update"
    failed = outcomes.failed
    failed_names = set(failed)
    completed = set(outcomes.completed)
    # A target the sync step found skipped is neither failed nor pending: it is done, not updated.
    skipped = set(outcomes.skipped)
    updated = [name for name in outcomes.targets if name in completed and name not in failed_names]
    if len(failed) > max_failed_clusters:
        reasons = {name: outcomes.clusters[name].reason for name in failed}
        details = first_few([f"{name} ({reasons[name]})" if reasons[name] else name for name in failed])
        return (
            StagePhase.FAILED,
            f"{len(failed)} of {total} clusters failed (at most {max_failed_clusters} tolerated): "
            f"{details}; {len(updated)} updated",
        )
    unfinished = [
        name
        for name in outcomes.targets
        if name not in completed and name not in failed_names and name not in skipped
    ]
    if unfinished:
        return (
            StagePhase.FAILED,
            f"{len(unfinished)} of {total} clusters did not finish: {first_few(unfinished)}; "
            f"{len(updated)} updated, {len(failed)} failed",
        )
    message = f"{len(updated)} of {total} clusters updated"
    left_out = [name for name in outcomes.targets if name in skipped and name not in failed_names]
    if left_out:
        message += f", {len(left_out)} skipped ({first_few(left_out)})"
    if failed:
        message += f", {len(failed)} failed (at most {max_failed_clusters} tolerated)"
    return StagePhase.SUCCEEDED, message


class WorkflowOutcome(StrEnum):
    """`{{workflow.status}}` as the exit handler sees it."""

    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    ERROR = "Error"


def assess_rollout(
    workflow_name: str,
    workflow_status: WorkflowOutcome,
    *,
    shutdown: str | None,
    stages: Sequence[StageStatus],
) -> tuple[RolloutPhase, str]:
    """How a rollout ended, from the Workflow's end state and the stages' phases."""
    if shutdown:
        # `argo stop` (Stop) runs exit handlers; Terminate does not, but a person may run finalize.
        return RolloutPhase.CANCELLED, f"Workflow {workflow_name} was stopped ({shutdown})"
    failed = [stage for stage in stages if stage.phase == StagePhase.FAILED]
    # With spec.groupBy: which group ended how ("" without groups; orchestrator.api.groups).
    groups = describe_groups(stages)
    if failed:
        first = failed[0]
        reason = f"stage {first.name!r} failed: {first.message}".rstrip(": ")
        return RolloutPhase.FAILED, f"{reason}; {groups}" if groups else reason
    failed_clusters = [
        f"{failure.name} ({failure.reason})" if failure.reason else failure.name
        for stage in stages
        for failure in stage.failed
        if stage.phase == StagePhase.PROGRESSING
    ]
    if workflow_status != WorkflowOutcome.SUCCEEDED:
        detail = f"; failed: {first_few(failed_clusters)}" if failed_clusters else ""
        errors = [
            f"stage {stage.name!r}: {stage.message}"
            for stage in stages
            if stage.phase in UNFINISHED_STAGE_PHASES and is_step_error(stage.message)
        ]
        detail += "".join(f"; {error}" for error in errors)
        return RolloutPhase.FAILED, f"Workflow {workflow_name} ended {workflow_status.value}{detail}"
    unfinished = [stage.name for stage in stages if stage.phase not in PASSED_STAGE_PHASES]
    if unfinished:
        return (
            RolloutPhase.FAILED,
            f"Workflow {workflow_name} Succeeded but stage(s) never finished: {', '.join(unfinished)}",
        )
    updated = sum(stage.tally().completed for stage in stages)
    return RolloutPhase.SUCCEEDED, f"{len(stages)} stage(s) finished; {updated} cluster(s) updated"
