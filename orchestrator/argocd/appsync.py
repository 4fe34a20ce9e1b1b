"""The Argo CD sync operation on Application objects, as pure functions over their JSON.

How Argo CD's own API server triggers a sync through the Kubernetes API (REFERENCE.md, Argo CD):
read the Application; if `.operation` is set (or a non-terminal `status.operationState` is left),
another operation is in progress and nothing is written; otherwise one update carrying the
resourceVersion sets `.operation` and nulls the finished `status.operationState`. This module
decides (`decide_sync`) and builds that update (`build_sync_request`); it also reads what the
controller reports back (operation phase, result revision, who started an operation).

The revision is always pinned: an empty revision means "whatever targetRevision resolves to now"
and could roll out a commit nobody planned, so `pinned_revisions` refuses it.

Callers: `steps.sync`, `orchestrator.argocd.assess` (reading results) and the fleet simulator.
Nothing here talks to the API server or reads the clock.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from orchestrator.api.metadata import APP_ROLLOUT_ID_ANNOTATION, APP_STAGE_ANNOTATION
from orchestrator.core.clock import format_time, parse_time

REFRESH_ANNOTATION = "argocd.argoproj.io/refresh"
INITIATOR = "progressive-sync"
# Names of our entries in `.operation.info` (Argo CD shows them in its UI next to the operation).
INFO_ROLLOUT_ID = "rollout-id"
INFO_STAGE = "stage"
INFO_REQUESTED_AT = "requested-at"

TERMINAL_PHASES = frozenset({"Succeeded", "Failed", "Error"})
RUNNING_PHASES = frozenset({"Running", "Terminating"})


class RevisionError(ValueError):
    """The revision given for a sync cannot be pinned (empty, or does not fit the sources)."""


# --- reading an Application -------------------------------------------------------------------


def app_name(app: Mapping[str, Any]) -> str:
    """`metadata.name`."""
    return str((app.get("metadata") or {}).get("name", ""))


def app_annotations(app: Mapping[str, Any]) -> dict[str, str]:
    """`metadata.annotations` (a copy; empty when absent)."""
    return dict((app.get("metadata") or {}).get("annotations") or {})


def owned_by_appset(app: Mapping[str, Any], appset_name: str, appset_uid: str | None) -> bool:
    """True when an ownerReference names the ApplicationSet (kind, name, and uid when known)."""
    for ref in (app.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("kind") != "ApplicationSet" or ref.get("name") != appset_name:
            continue
        if appset_uid and ref.get("uid") and ref.get("uid") != appset_uid:
            continue
        return True
    return False


def source_count(app: Mapping[str, Any]) -> int:
    """0 for a single-source Application, else the number of `spec.sources`."""
    return len((app.get("spec") or {}).get("sources") or [])


def operation(app: Mapping[str, Any]) -> dict[str, Any] | None:
    """The requested operation (`.operation`, top level), or None."""
    value = app.get("operation")
    return value if isinstance(value, dict) and value else None


def operation_state(app: Mapping[str, Any]) -> dict[str, Any] | None:
    """`status.operationState`, or None."""
    value = (app.get("status") or {}).get("operationState")
    return value if isinstance(value, dict) and value else None


def info_value(op: Mapping[str, Any] | None, key: str) -> str | None:
    """The value of one `info` entry of an operation, or None."""
    for entry in (op or {}).get("info") or []:
        if isinstance(entry, Mapping) and entry.get("name") == key:
            return str(entry.get("value", ""))
    return None


def initiator(op: Mapping[str, Any] | None) -> str:
    """Who started an operation, for messages ("alice", "automated sync", "unknown")."""
    by = (op or {}).get("initiatedBy") or {}
    if by.get("username"):
        return str(by["username"])
    if by.get("automated"):
        return "automated sync"
    return "unknown"


def synced_by_rollout(app: Mapping[str, Any]) -> str | None:
    """The rollout id in our annotation: the rollout that requested this Application's last sync."""
    return app_annotations(app).get(APP_ROLLOUT_ID_ANNOTATION)


def operation_is_ours(op: Mapping[str, Any] | None, rollout_id: str) -> bool:
    """True when the operation carries our rollout id in its info."""
    return info_value(op, INFO_ROLLOUT_ID) == rollout_id


def sync_started_at(app: Mapping[str, Any], rollout_id: str) -> datetime | None:
    """When this rollout's sync of the Application started: the controller's `startedAt` for our
    operation, else our request time while the controller has not picked it up yet."""
    state = operation_state(app)
    if state and operation_is_ours(state.get("operation"), rollout_id):
        started = parse_time(state.get("startedAt"))
        if started:
            return started
    op = operation(app)
    if op and operation_is_ours(op, rollout_id):
        return parse_time(info_value(op, INFO_REQUESTED_AT))
    return None


# --- deciding and building the sync -----------------------------------------------------------


class SyncAction(StrEnum):
    """What the sync step does with one Application."""

    REQUEST = "Request"  # write our operation now
    ALREADY_REQUESTED = "AlreadyRequested"  # this rollout already synced it: write nothing
    BUSY = "Busy"  # someone's operation is in progress: never overwrite it


@dataclass(frozen=True)
class SyncDecision:
    """The decision for one Application and why."""

    action: SyncAction
    reason: str


def decide_sync(app: Mapping[str, Any], rollout_id: str) -> SyncDecision:
    """Ordered early returns: ours already, someone else's operation in progress, else request."""
    name = app_name(app)
    if synced_by_rollout(app) == rollout_id:
        return SyncDecision(SyncAction.ALREADY_REQUESTED, f"{name}: already synced by rollout {rollout_id}")
    op = operation(app)
    if op is not None:
        return SyncDecision(
            SyncAction.BUSY, f"{name}: an operation started by {initiator(op)} is in progress"
        )
    state = operation_state(app)
    if state and state.get("phase") in RUNNING_PHASES:
        # Without `.operation` the controller still resumes a non-terminal operationState and would
        # ignore ours (REFERENCE.md), so this is "in progress" too.
        return SyncDecision(
            SyncAction.BUSY,
            f"{name}: an operation started by {initiator(state.get('operation'))} is {state.get('phase')}",
        )
    return SyncDecision(SyncAction.REQUEST, f"{name}: no operation in progress")


def pinned_revisions(revision: str, app: Mapping[str, Any]) -> list[str]:
    """The revisions to pin for this Application: one, or one per `spec.sources` entry.

    `revision` is the release revision; multi-source Applications take a comma-separated list with
    one non-empty revision per source, in `spec.sources` order.
    """
    parts = [part.strip() for part in revision.split(",")] if revision else []
    if not parts or any(not part for part in parts):
        raise RevisionError(
            f"revision {revision!r} is empty: refusing to send a sync without a pinned revision "
            "(an empty one rolls out whatever targetRevision resolves to now)"
        )
    sources = source_count(app)
    expected = sources or 1
    if len(parts) != expected:
        kind = f"{sources} sources" if sources else "a single source"
        raise RevisionError(
            f"Application {app_name(app)} has {kind}; --revision must list {expected} "
            f"comma-separated revision(s), got {len(parts)}: {revision!r}"
        )
    return parts


def build_sync_request(
    app: Mapping[str, Any],
    *,
    revisions: Sequence[str],
    rollout_id: str,
    stage: str,
    prune: bool,
    sync_options: Sequence[str],
    now: datetime,
) -> dict[str, Any]:
    """The Application with our sync operation set, as ONE update body (it keeps resourceVersion).

    Sets `.operation` (revision pinned), nulls the finished `status.operationState` (a left-over
    one would be resumed instead of ours), asks for a refresh, and records rollout id and stage.
    """
    if not revisions or any(not revision for revision in revisions):
        raise RevisionError("refusing to build a sync operation without a pinned revision")
    body = copy.deepcopy(dict(app))
    sync: dict[str, Any] = {"prune": prune, "syncStrategy": {"hook": {}}}
    if source_count(app):
        sync["revisions"] = list(revisions)
    else:
        sync["revision"] = revisions[0]
    if sync_options:
        sync["syncOptions"] = list(sync_options)
    body["operation"] = {
        "initiatedBy": {"username": INITIATOR, "automated": True},
        "info": [
            {"name": INFO_ROLLOUT_ID, "value": rollout_id},
            {"name": INFO_STAGE, "value": stage},
            {"name": INFO_REQUESTED_AT, "value": format_time(now)},
        ],
        "sync": sync,
    }
    status = body.get("status")
    if isinstance(status, dict) and "operationState" in status:
        status = dict(status)
        status.pop("operationState")
        body["status"] = status
    metadata = dict(body.get("metadata") or {})
    metadata["annotations"] = {
        **(metadata.get("annotations") or {}),
        REFRESH_ANNOTATION: "normal",
        APP_ROLLOUT_ID_ANNOTATION: rollout_id,
        APP_STAGE_ANNOTATION: stage,
    }
    body["metadata"] = metadata
    return body


def result_revisions(state: Mapping[str, Any] | None) -> list[str]:
    """The revision(s) an operation actually applied (`syncResult.revision` / `.revisions`)."""
    result = (state or {}).get("syncResult") or {}
    if result.get("revisions"):
        return [str(r) for r in result["revisions"]]
    return [str(result["revision"])] if result.get("revision") else []
