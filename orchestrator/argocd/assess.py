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
from datetime import datetime
from enum import StrEnum
from typing import Any

from orchestrator.api.models import RolloutPhase, StagePhase, StageStatus
from orchestrator.argocd import appsync
from orchestrator.core.clock import format_time, parse_time


class ClusterPhase(StrEnum):
    """Where one cluster (or one Application of it) stands in `wait-healthy`."""

    WAITING = "Waiting"
    DONE = "Done"
    FAILED = "Failed"


def assess_application(
    name: str, app: Mapping[str, Any] | None, *, revision: str, rollout_id: str
) -> tuple[ClusterPhase, str]:
    """Decide one Application; `app` is None when it no longer exists."""
    if app is None:
        return ClusterPhase.FAILED, f"Application {name} was deleted"
    if appsync.synced_by_rollout(app) != rollout_id:
        return ClusterPhase.WAITING, f"{name}: the sync of rollout {rollout_id} was not requested yet"
    op = appsync.operation(app)
    state = appsync.operation_state(app)
    state_is_ours = state is not None and appsync.operation_is_ours(state.get("operation"), rollout_id)
    if op is not None and not state_is_ours:
        if appsync.operation_is_ours(op, rollout_id):
            return ClusterPhase.WAITING, f"{name}: sync operation not picked up by Argo CD yet"
        return ClusterPhase.WAITING, f"{name}: an operation started by {appsync.initiator(op)} is in progress"
    if state is None:
        return ClusterPhase.WAITING, f"{name}: sync operation not started yet"
    if not state_is_ours:
        return (
            ClusterPhase.WAITING,
            f"{name}: the current operation was started by {appsync.initiator(state.get('operation'))}, "
            f"not by rollout {rollout_id}",
        )
    phase = str(state.get("phase", ""))
    if phase in appsync.RUNNING_PHASES:
        return ClusterPhase.WAITING, f"{name}: sync operation {phase}"
    if phase in ("Failed", "Error"):
        retry = ((state.get("operation") or {}).get("retry")) or {}
        limit = int(retry.get("limit", 0) or 0)
        attempts = int(state.get("retryCount", 0) or 0)
        # Argo CD sets Failed between retries and runs the operation again until retries run out.
        if limit < 0 or attempts < limit:
            return (
                ClusterPhase.WAITING,
                f"{name}: sync operation {phase}; Argo CD retries ({attempts}/{limit})",
            )
        message = state.get("message") or "no message"
        return ClusterPhase.FAILED, f"{name}: sync operation {phase}: {message}"
    if phase != "Succeeded":
        return ClusterPhase.WAITING, f"{name}: sync operation phase {phase or 'unknown'}"
    try:
        pinned = appsync.pinned_revisions(revision, app)
    except appsync.RevisionError as exc:
        return ClusterPhase.FAILED, f"{name}: {exc}"
    applied = appsync.result_revisions(state)
    if applied != pinned:
        return (
            ClusterPhase.FAILED,
            f"{name}: sync Succeeded at revision {','.join(applied) or '(none)'}, "
            f"not the pinned {','.join(pinned)}",
        )
    status = app.get("status") or {}
    sync_status = (status.get("sync") or {}).get("status") or "Unknown"
    if sync_status != "Synced":
        return ClusterPhase.WAITING, f"{name}: sync status {sync_status}, waiting for Synced"
    finished = parse_time(state.get("finishedAt"))
    reconciled = parse_time(status.get("reconciledAt"))
    if finished is None or reconciled is None or reconciled < finished:
        # A Healthy read before the controller reconciled after the sync is from the previous
        # revision: Argo CD's own RollingSync trusted it and started later waves too early.
        seen = format_time(reconciled) if reconciled else "never"
        until = format_time(finished) if finished else "(no finishedAt)"
        return (
            ClusterPhase.WAITING,
            f"{name}: health not observed since the sync finished at {until} (last reconciled {seen})",
        )
    health = status.get("health") or {}
    health_status = health.get("status") or "Unknown"
    if health_status == "Degraded":
        detail = f": {health['message']}" if health.get("message") else ""
        return ClusterPhase.FAILED, f"{name}: health Degraded after the sync{detail}"
    if health_status != "Healthy":
        return ClusterPhase.WAITING, f"{name}: health {health_status}, waiting for Healthy"
    return ClusterPhase.DONE, f"{name}: Synced and Healthy at {','.join(pinned)}"


def assess_cluster(
    cluster: str,
    apps: Mapping[str, Mapping[str, Any] | None],
    *,
    revision: str,
    rollout_id: str,
    started: datetime,
    now: datetime,
    deadline: datetime,
    cluster_exists: bool = True,
) -> tuple[ClusterPhase, str]:
    """Decide one cluster from its Applications (name -> object, None when deleted)."""
    if not cluster_exists:
        return ClusterPhase.FAILED, f"cluster {cluster}: its Argo CD cluster Secret was deleted"
    if not apps:
        return ClusterPhase.FAILED, f"cluster {cluster}: no Application of the ApplicationSet targets it"
    verdicts = {
        name: assess_application(name, app, revision=revision, rollout_id=rollout_id)
        for name, app in sorted(apps.items())
    }
    failed = [reason for phase, reason in verdicts.values() if phase == ClusterPhase.FAILED]
    if failed:
        return ClusterPhase.FAILED, f"cluster {cluster}: " + "; ".join(failed)
    waiting = [reason for phase, reason in verdicts.values() if phase == ClusterPhase.WAITING]
    if not waiting:
        count = len(verdicts)
        noun = "Application" if count == 1 else "Applications"
        return ClusterPhase.DONE, f"cluster {cluster}: {count} {noun} Synced and Healthy"
    if now >= deadline:
        seconds = int((deadline - started).total_seconds())
        return (
            ClusterPhase.FAILED,
            f"cluster {cluster}: progress deadline of {seconds}s passed "
            f"(sync started {format_time(started)}); still waiting for " + "; ".join(waiting),
        )
    return ClusterPhase.WAITING, f"cluster {cluster}: " + "; ".join(waiting)


def assess_stage(stage: StageStatus, *, max_failed_clusters: int) -> tuple[StagePhase, str]:
    """Close a stage: Succeeded, or Failed when failures exceed the policy or targets never finished."""
    if stage.phase == StagePhase.SKIPPED:
        return StagePhase.SKIPPED, stage.message
    total = len(stage.targets)
    if total == 0:
        return StagePhase.SKIPPED, stage.message or "no cluster to update"
    failed_names = {failure.name for failure in stage.failed}
    completed = set(stage.completed)
    updated = [name for name in stage.targets if name in completed and name not in failed_names]
    if len(stage.failed) > max_failed_clusters:
        details = ", ".join(f"{f.name} ({f.reason})" if f.reason else f.name for f in stage.failed)
        return (
            StagePhase.FAILED,
            f"{len(stage.failed)} of {total} clusters failed (at most {max_failed_clusters} tolerated): "
            f"{details}; {len(updated)} updated",
        )
    unfinished = [name for name in stage.targets if name not in completed and name not in failed_names]
    if unfinished:
        return (
            StagePhase.FAILED,
            f"{len(unfinished)} of {total} clusters did not finish: {', '.join(unfinished)}; "
            f"{len(updated)} updated, {len(stage.failed)} failed",
        )
    message = f"{len(updated)} of {total} clusters updated"
    if stage.failed:
        message += f", {len(stage.failed)} failed (at most {max_failed_clusters} tolerated)"
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
    if failed:
        first = failed[0]
        return RolloutPhase.FAILED, f"stage {first.name!r} failed: {first.message}".rstrip(": ")
    failed_clusters = [
        f"{failure.name} ({failure.reason})" if failure.reason else failure.name
        for stage in stages
        for failure in stage.failed
        if stage.phase == StagePhase.PROGRESSING
    ]
    if workflow_status != WorkflowOutcome.SUCCEEDED:
        detail = f"; failed: {', '.join(failed_clusters)}" if failed_clusters else ""
        return RolloutPhase.FAILED, f"Workflow {workflow_name} ended {workflow_status.value}{detail}"
    unfinished = [
        stage.name for stage in stages if stage.phase not in (StagePhase.SUCCEEDED, StagePhase.SKIPPED)
    ]
    if unfinished:
        return (
            RolloutPhase.FAILED,
            f"Workflow {workflow_name} Succeeded but stage(s) never finished: {', '.join(unfinished)}",
        )
    updated = sum(len(stage.completed) for stage in stages)
    return RolloutPhase.SUCCEEDED, f"{len(stages)} stage(s) finished; {updated} cluster(s) updated"
