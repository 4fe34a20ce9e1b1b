"""Keyword builders for Applications at each point of a sync, and for stage statuses.

`make_application(phase="Succeeded", reconciled_at=T0)` sets only what a test names and fills the
rest with plain defaults: one Application of ApplicationSet `myservice` on cluster `c1`, already
synced by rollout `r1` when `phase` is given. Used by the pure tests of `orchestrator.argocd.assess` and
`orchestrator.argocd.appsync`, and to create Applications in the integration tests. Nothing here talks
to a cluster.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from orchestrator.api.models import ClusterFailure, StagePhase, StageStatus
from orchestrator.argocd import appsync
from orchestrator.core.clock import format_time

APP_SET = "myservice"
ROLLOUT = "r1"
REVISION = "4f1c2e9b7a3d5c8e1f0a2b4c6d8e0f1a3b5c7d9e"
OLD_REVISION = "9d2b7e4a1c3f5e7d9b0a2c4e6f8a1b3d5e7f9c0b"
T0 = datetime(2030, 1, 1, 12, 0, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    """T0 plus `seconds`."""
    return T0 + timedelta(seconds=seconds)


def server_of(cluster: str) -> str:
    """The API server URL of a test cluster."""
    return f"https://{cluster}.clusters.example.test"


def our_operation(
    *,
    rollout_id: str = ROLLOUT,
    revision: str = REVISION,
    requested_at: datetime = T0,
    retry_limit: int | None = None,
    sources: int = 0,
) -> dict[str, Any]:
    """The `.operation` the sync step writes (`sources`: a multi-source Application's, one pin each)."""
    op: dict[str, Any] = {
        "initiatedBy": {"username": appsync.INITIATOR, "automated": True},
        "info": [
            {"name": appsync.INFO_ROLLOUT_ID, "value": rollout_id},
            {"name": appsync.INFO_STAGE, "value": "canary"},
            {"name": appsync.INFO_REQUESTED_AT, "value": format_time(requested_at)},
        ],
        "sync": {"revisions": [revision] * sources} if sources else {"revision": revision},
    }
    op["sync"]["prune"] = False
    if retry_limit is not None:
        op["retry"] = {"limit": retry_limit}
    return op


def foreign_operation(username: str = "alice", revision: str = OLD_REVISION) -> dict[str, Any]:
    """An operation someone else started (a person in the Argo CD UI)."""
    return {"initiatedBy": {"username": username}, "sync": {"revision": revision}}


def history_entry(
    *,
    username: str = appsync.INITIATOR,
    revision: str = REVISION,
    started_at: datetime = T0,
    deployed_at: datetime | None = None,
    entry_id: int = 1,
) -> dict[str, Any]:
    """One `status.history` entry, as Argo CD appends it when a sync finishes."""
    return {
        "id": entry_id,
        "revision": revision,
        "deployStartedAt": format_time(started_at),
        "deployedAt": format_time(deployed_at or started_at + timedelta(seconds=5)),
        "initiatedBy": {"username": username},
    }


def make_application(
    name: str = "myservice-c1",
    *,
    namespace: str | None = None,
    cluster: str = "c1",
    by: str = "server",
    owner_uid: str | None = None,
    history: list[dict[str, Any]] | None = None,
    operation: dict[str, Any] | None = None,
    phase: str | None = None,
    state_operation: dict[str, Any] | None = None,
    result_revision: str | None = None,
    started_at: datetime | None = None,
    finished_at: datetime | None = None,
    retry_count: int | None = None,
    message: str | None = None,
    sync: str = "OutOfSync",
    sync_revision: str = REVISION,
    health: str = "Healthy",
    health_message: str | None = None,
    reconciled_at: datetime | None = None,
    sources: int = 0,
) -> dict[str, Any]:
    """An Application object. With `phase`, it carries an operationState of rollout `r1`'s operation
    (unless `state_operation` says otherwise); `history` is its `status.history`."""
    metadata: dict[str, Any] = {
        "name": name,
        "ownerReferences": [
            {
                "apiVersion": "argoproj.io/v1alpha1",
                "kind": "ApplicationSet",
                "name": APP_SET,
                "uid": owner_uid or "00000000-0000-4000-8000-0000000000a5",
            }
        ],
    }
    if namespace:
        metadata["namespace"] = namespace
    destination = {"server": server_of(cluster)} if by == "server" else {"name": cluster}
    destination["namespace"] = "myservice"
    spec: dict[str, Any] = {"project": "default", "destination": destination}
    source = {"repoURL": "https://git.example.test/myservice.git", "path": "deploy", "targetRevision": "main"}
    if sources:
        spec["sources"] = [dict(source, path=f"deploy/{i}") for i in range(sources)]
    else:
        spec["source"] = source
    status: dict[str, Any] = {"sync": {"status": sync}, "health": {"status": health}}
    if sources:
        status["sync"]["revisions"] = [sync_revision] * sources
    else:
        status["sync"]["revision"] = sync_revision
    if health_message:
        status["health"]["message"] = health_message
    if reconciled_at is not None:
        status["reconciledAt"] = format_time(reconciled_at)
    if history is not None:
        status["history"] = history
    if phase is not None:
        state: dict[str, Any] = {
            "operation": state_operation if state_operation is not None else our_operation(sources=sources),
            "phase": phase,
            "startedAt": format_time(started_at or T0),
        }
        if finished_at is not None:
            state["finishedAt"] = format_time(finished_at)
        if result_revision is not None:
            if sources:
                state["syncResult"] = {"revisions": [result_revision] * sources}
            else:
                state["syncResult"] = {"revision": result_revision}
        if retry_count is not None:
            state["retryCount"] = retry_count
        if message is not None:
            state["message"] = message
        status["operationState"] = state
    app: dict[str, Any] = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Application",
        "metadata": metadata,
        "spec": spec,
        "status": status,
    }
    if operation is not None:
        app["operation"] = operation
    return app


def done_application(**overrides: Any) -> dict[str, Any]:
    """An Application rollout r1 finished: Succeeded at REVISION, Synced, Healthy, reconciled after."""
    values: dict[str, Any] = {
        "phase": "Succeeded",
        "result_revision": REVISION,
        "finished_at": at(10),
        "sync": "Synced",
        "health": "Healthy",
        "reconciled_at": at(12),
    }
    values.update(overrides)
    return make_application(**values)


def make_stage(
    name: str = "canary",
    *,
    phase: StagePhase = StagePhase.PROGRESSING,
    targets: tuple[str, ...] = (),
    completed: tuple[str, ...] = (),
    failed: dict[str, str] | None = None,
    syncing: tuple[str, ...] = (),
    message: str = "",
    finished_at: datetime | None = None,
) -> StageStatus:
    """A stage status entry."""
    return StageStatus(
        name=name,
        phase=phase,
        targets=list(targets),
        completed=list(completed),
        syncing=list(syncing),
        failed=[ClusterFailure(name=n, reason=r) for n, r in (failed or {}).items()],
        message=message,
        finished_at=finished_at,
    )
