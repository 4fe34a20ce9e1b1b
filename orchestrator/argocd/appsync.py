"""The Argo CD sync operation on Application objects, as pure functions over their JSON.

How Argo CD's own API server triggers a sync through the Kubernetes API (REFERENCE.md, Argo CD):
read the Application; if `.operation` is set (or a non-terminal `status.operationState` is left),
another operation is in progress and nothing is written; otherwise one update carrying the
resourceVersion sets `.operation` and nulls the finished `status.operationState`. This module
decides (`decide_sync`) and builds that update (`build_sync_request`); it also reads what the
controller reports back (operation phase, result revision, who started an operation).

**Which sync is ours.** The ApplicationSet controller rewrites the annotations and labels of the
Applications it generates on every reconcile, so nothing of ours is kept there. Our sync is known by
what Argo CD itself keeps: our rollout id in the operation's `info` (in `.operation` while it is
requested, in `status.operationState.operation` once the controller took it up), and, after someone
else's operation replaced that state, the `status.history` entry Argo CD appends for every finished
sync (initiator `progressive-sync`, started after the rollout began, at the revision we pin).

The revision is always pinned: an empty revision means "whatever targetRevision resolves to now"
and could roll out a commit nobody planned. Which of a release's revisions an Application is
pinned to is decided per Application (`release_pin`): the one Argo CD compared it against.

Callers: `steps.sync`, `orchestrator.argocd.assess` (reading results) and the fleet simulator.
Nothing here talks to the API server or reads the clock.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from orchestrator.api.metadata import (
    INFO_PREVIOUS_REVISIONS,
    INFO_REQUESTED_AT,
    INFO_ROLLBACK,
    INFO_ROLLOUT_ID,
    INFO_STAGE,
)
from orchestrator.argocd import revisions
from orchestrator.core.clock import format_time, parse_time

REFRESH_ANNOTATION = "argocd.argoproj.io/refresh"
# Argo CD's own refresh (its API server, `argocd app get --refresh`) stamps each request with a
# unique time here; the application controller removes it with the refresh annotation, and keeps
# both when the stamp changed during the comparison (a request that arrived meanwhile is answered
# by one more comparison).
REFRESH_TIMESTAMP_ANNOTATION = "argocd.argoproj.io/refresh-timestamp"
REFRESH_ANNOTATIONS = (REFRESH_ANNOTATION, REFRESH_TIMESTAMP_ANNOTATION)
INITIATOR = "progressive-sync"
# Names of our entries in `.operation.info` (Argo CD shows them in its UI next to the operation)
# live in `orchestrator.api.metadata`: INFO_ROLLOUT_ID, INFO_STAGE, INFO_REQUESTED_AT.

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


def error_conditions(app: Mapping[str, Any], *, limit: int = 2, width: int = 200) -> list[str]:
    """Argo CD's error conditions on the Application (`status.conditions` whose type ends in `Error`,
    Argo CD's own rule: ComparisonError, InvalidSpecError, UnknownError, SyncError, ...), as
    `Type: message`, at most `limit`, each message cut at `width` characters."""
    said: list[str] = []
    for condition in (app.get("status") or {}).get("conditions") or []:
        kind = str(condition.get("type") or "")
        if not kind.endswith("Error"):
            continue
        message = " ".join(str(condition.get("message") or "").split())
        if len(message) > width:
            message = message[: width - 3] + "..."
        said.append(f"{kind}: {message}" if message else kind)
    return said[:limit]


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


def deployed_revisions(app: Mapping[str, Any]) -> list[str]:
    """What the Application runs as Argo CD last deployed it: the revision(s) of the newest
    `status.history` entry (one per source; [] when it was never synced). Argo CD appends an entry
    for every sync that succeeded, with the revision it resolved (a Git SHA, a chart version, an
    OCI digest), so this is what a rollback can pin without guessing."""
    history = [
        entry for entry in (app.get("status") or {}).get("history") or [] if isinstance(entry, Mapping)
    ]
    if not history:
        return []
    newest = history[-1]
    if newest.get("revisions"):
        return [str(r) for r in newest["revisions"]]
    return [str(newest["revision"])] if newest.get("revision") else []


def operation_is_ours(op: Mapping[str, Any] | None, rollout_id: str) -> bool:
    """True when the operation carries our rollout id in its info."""
    return info_value(op, INFO_ROLLOUT_ID) == rollout_id


def requested_by_rollout(app: Mapping[str, Any], rollout_id: str) -> bool:
    """True when `.operation` is our request of this rollout (the controller may not have taken it up)."""
    return operation_is_ours(operation(app), rollout_id)


def state_is_ours(app: Mapping[str, Any], rollout_id: str) -> bool:
    """True when `status.operationState` is the controller's run of this rollout's operation."""
    state = operation_state(app)
    return state is not None and operation_is_ours(state.get("operation"), rollout_id)


def synced_in_history(app: Mapping[str, Any], *, since: datetime | None) -> bool:
    """True when `status.history` shows a sync we started at or after `since`.

    Argo CD appends one entry per finished sync and keeps `initiatedBy` and `deployStartedAt`, but
    not the operation's `info`: this is how a sync of ours is still recognised after someone
    else's operation replaced `status.operationState`. An earlier attempt of the same release
    started before this rollout did, so it does not count.
    """
    if since is None:
        return False
    for entry in (app.get("status") or {}).get("history") or []:
        if not isinstance(entry, Mapping):
            continue
        if ((entry.get("initiatedBy") or {}).get("username")) != INITIATOR:
            continue
        started = parse_time(entry.get("deployStartedAt"))
        if started is not None and started >= since:
            return True
    return False


def synced_by_rollout(app: Mapping[str, Any], rollout_id: str, *, since: datetime | None = None) -> bool:
    """True when this rollout requested a sync of the Application already (requested, running or
    finished), by the marks Argo CD keeps; see the module docstring."""
    return (
        requested_by_rollout(app, rollout_id)
        or state_is_ours(app, rollout_id)
        or synced_in_history(app, since=since)
    )


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


def sync_status(app: Mapping[str, Any]) -> str:
    """`status.sync.status` (Synced, OutOfSync, Unknown; Unknown when absent)."""
    return str(((app.get("status") or {}).get("sync") or {}).get("status") or "Unknown")


def compared_revisions(app: Mapping[str, Any]) -> list[str]:
    """The commit(s) Argo CD last compared the Application against (`status.sync.revision(s)`)."""
    sync = (app.get("status") or {}).get("sync") or {}
    if source_count(app):
        return [str(r) for r in sync.get("revisions") or []]
    return [str(sync["revision"])] if sync.get("revision") else []


def health_status(app: Mapping[str, Any]) -> str:
    """`status.health.status` (Unknown when absent)."""
    return str(((app.get("status") or {}).get("health") or {}).get("status") or "Unknown")


def is_being_deleted(app: Mapping[str, Any]) -> bool:
    """True when `metadata.deletionTimestamp` is set (Argo CD's API server refuses to sync it)."""
    return bool((app.get("metadata") or {}).get("deletionTimestamp"))


def reported_as_release(app: Mapping[str, Any], pins: Sequence[str], reported: Sequence[str]) -> bool:
    """True when `reported` (revisions Argo CD reports for this Application, one per source) is what
    `pins` name, by the rule of each source's kind (`orchestrator.argocd.revisions`): a Git SHA or short
    SHA, a chart version or a digest by identity, a tag, branch or constraint only through what Argo
    CD recorded resolving it to on this Application. Never "both non-empty"."""
    return revisions.same_revisions(pins, reported, revisions.source_kinds(app), revisions.resolutions(app))


# --- deciding and building the sync -----------------------------------------------------------


class SyncAction(StrEnum):
    """What the sync step does with one Application."""

    REQUEST = "Request"  # write our operation now
    ALREADY_REQUESTED = "AlreadyRequested"  # this rollout already synced it: write nothing
    ADOPT = "Adopt"  # someone already brought it to a release revision: no sync, wait for health
    UP_TO_DATE = "UpToDate"  # Synced and Healthy at a revision outside the release: left alone
    # Synced and Healthy at a revision outside the release, but on a comparison nobody asked for in
    # this step: ask Argo CD to compare it again and decide on its answer (not left alone yet).
    CONFIRM = "Confirm"
    BUSY = "Busy"  # someone's operation is in progress: never overwrite it
    REFUSED = "Refused"  # it cannot be synced (being deleted, no revision to pin): the cluster fails


@dataclass(frozen=True)
class SyncDecision:
    """The decision for one Application, why, and (for REQUEST) the revisions to pin."""

    action: SyncAction
    reason: str
    pins: tuple[str, ...] = ()


def release_match(app: Mapping[str, Any], release: Sequence[Sequence[str]]) -> tuple[str, ...] | None:
    """The release revision tuple Argo CD compared the Application against, if it is one of the release's."""
    compared = compared_revisions(app)
    if not compared:
        return None
    for candidate in release:
        if reported_as_release(app, candidate, compared):
            return tuple(candidate)
    return None


def release_pin(app: Mapping[str, Any], release: Sequence[Sequence[str]]) -> tuple[str, ...]:
    """Which of the release's revisions this Application is synced to (one per source).

    The one Argo CD compared it against, when that is one of the release's (Applications of one
    release may be at different commits: each reaches its own); otherwise, when the release has
    exactly one revision tuple of the Application's shape (number of sources), that one (Argo CD
    has not compared it yet, or compares it against a newer commit that a later rollout rolls
    out). Else RevisionError: nothing can be pinned without guessing.
    """
    matched = release_match(app, release)
    if matched is not None:
        return matched
    shape = source_count(app) or 1
    fitting = sorted({tuple(r) for r in release if len(r) == shape})
    if len(fitting) == 1:
        return fitting[0]
    kind = f"{shape} sources" if shape > 1 else "a single source"
    offered = "; ".join(",".join(r) for r in release) or "(none)"
    compared = ",".join(compared_revisions(app)) or "nothing yet"
    if not fitting:
        raise RevisionError(
            f"Application {app_name(app)} has {kind}, and no revision of the release ({offered}) has "
            "that many: nothing to pin"
        )
    raise RevisionError(
        f"Argo CD compares Application {app_name(app)} against {compared}, which is none of the "
        f"release's revisions ({offered}): refusing to guess which one to pin"
    )


def decide_sync(
    app: Mapping[str, Any],
    rollout_id: str,
    *,
    release: Sequence[Sequence[str]],
    since: datetime | None = None,
    compared_on_request: bool = False,
) -> SyncDecision:
    """Ordered early returns: ours already, being deleted, someone else's operation in progress,
    already at a release revision (adopt), up to date outside the release, else request (pinned).

    `release` are the release's revision tuples (`orchestrator.api.release.Release.revisions`);
    `since` is when the rollout started (a sync of ours in the Application's history after it
    counts as this rollout's). `compared_on_request`: Argo CD answered a request to compare the
    Application again that the caller made in this step (the annotation it set is gone), so its
    comparison saw every commit pushed before the rollout. Only then is an Application Synced and
    Healthy outside the release left alone (UP_TO_DATE); otherwise it may be one Argo CD has not
    compared since the release (refresh lag, a refresh `select` asked for that went unanswered), and
    the answer is CONFIRM: ask, wait, decide again (issue 29, point 4).
    """
    name = app_name(app)
    if synced_by_rollout(app, rollout_id, since=since):
        return SyncDecision(SyncAction.ALREADY_REQUESTED, f"{name}: already synced by rollout {rollout_id}")
    if is_being_deleted(app):
        return SyncDecision(SyncAction.REFUSED, f"{name}: the Application is being deleted; it is not synced")
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
    compared = compared_revisions(app)
    synced = sync_status(app) == "Synced"
    if synced and release_match(app, release) is not None:
        by = initiator(state.get("operation")) if state else "someone"
        return SyncDecision(
            SyncAction.ADOPT,
            f"{name}: already Synced at {','.join(compared)} (last operation by {by}): adopted, not "
            "synced again; waiting for its health",
        )
    if synced and compared and health_status(app) == "Healthy":
        if not compared_on_request:
            return SyncDecision(
                SyncAction.CONFIRM,
                f"{name}: Synced and Healthy at {','.join(compared)}, which is not a revision of this "
                "release, on a comparison that may predate the release: asking Argo CD to compare it "
                "again before leaving it alone",
            )
        return SyncDecision(
            SyncAction.UP_TO_DATE,
            f"{name}: Synced and Healthy at {','.join(compared)}, which is not a revision of this "
            "release, compared again at our request: left alone",
        )
    try:
        pins = release_pin(app, release)
    except RevisionError as exc:
        return SyncDecision(SyncAction.REFUSED, f"{name}: {exc}")
    return SyncDecision(SyncAction.REQUEST, f"{name}: no operation in progress", pins)


# What Argo CD's own automated syncers (auto-sync in controller/appcontroller.go, RollingSync in
# applicationset/.../progressive_sync.go) put into an operation when the Application sets no retry.
DEFAULT_RETRY: Mapping[str, Any] = {"limit": 5}


def _option_key(option: str) -> str:
    return option.split("=", 1)[0].strip()


def merge_sync_options(app_options: Sequence[str], ours: Sequence[str]) -> list[str]:
    """The sync options of our operation: the Application's own, then the ProgressiveSync's.

    Argo CD applies only the operation's list (`SyncAppState`), and every upstream trigger (API
    server `Sync`, auto-sync, RollingSync) starts from `spec.syncPolicy.syncOptions`, so ours must
    too, or `ServerSideApply=true` apps get applied client-side and `CreateNamespace=true` is lost.
    Where both name the same key (`Key=value`), the ProgressiveSync's value wins, as a sync
    request's options win over the Application's in the API server; order is kept, duplicates go.
    """
    own_keys = {_option_key(option) for option in ours}
    merged = [option for option in app_options if _option_key(option) not in own_keys]
    merged += list(ours)
    return list(dict.fromkeys(merged))


def operation_retry(app: Mapping[str, Any]) -> dict[str, Any]:
    """The retry strategy of our operation: the Application's `spec.syncPolicy.retry`, pinned.

    Without one, Argo CD's automated syncers use `{limit: 5}` (default backoff 5s x2 up to 3m), and
    so do we: a first transient failure must not fail the cluster. `refresh: true` would make Argo
    CD retry with whatever the branch resolves to then instead of our pinned revision, so it is
    dropped (a newer commit is a new release, rolled out by its own rollout).
    """
    policy = ((app.get("spec") or {}).get("syncPolicy")) or {}
    retry = policy.get("retry")
    if not isinstance(retry, Mapping):
        return dict(DEFAULT_RETRY)
    pinned = copy.deepcopy(dict(retry))
    pinned.pop("refresh", None)
    return pinned


def application_sync_options(app: Mapping[str, Any]) -> list[str]:
    """`spec.syncPolicy.syncOptions` of the Application (strings only)."""
    policy = ((app.get("spec") or {}).get("syncPolicy")) or {}
    return [str(option) for option in policy.get("syncOptions") or [] if isinstance(option, str)]


def build_sync_request(
    app: Mapping[str, Any],
    *,
    revisions: Sequence[str],
    rollout_id: str,
    stage: str,
    prune: bool,
    sync_options: Sequence[str],
    now: datetime,
    rollback: bool = False,
) -> dict[str, Any]:
    """The Application with our sync operation set, as ONE update body (it keeps resourceVersion).

    A forward sync also records in `info` what the Application ran before it
    (`INFO_PREVIOUS_REVISIONS`, from `deployed_revisions`, left out when it was never synced): the
    same write that changes the Application keeps what a rollback restores, so nothing can lose it
    between the two. A `rollback` sync is marked `INFO_ROLLBACK` instead (orchestrator.argocd.rollback).

    Sets `.operation` (revision pinned, our rollout id and stage in `info`, the Application's own
    sync options merged with `sync_options` by `merge_sync_options`, its retry by
    `operation_retry`) and nulls the finished `status.operationState` (a left-over one would be
    resumed instead of ours). Metadata is left as it is: the ApplicationSet controller owns the
    annotations, and Argo CD refreshes an Application by itself when an operation completes.
    """
    if not revisions or any(not revision for revision in revisions):
        raise RevisionError("refusing to build a sync operation without a pinned revision")
    body = copy.deepcopy(dict(app))
    sync: dict[str, Any] = {"prune": prune, "syncStrategy": {"hook": {}}}
    if source_count(app):
        sync["revisions"] = list(revisions)
    else:
        sync["revision"] = revisions[0]
    options = merge_sync_options(application_sync_options(app), sync_options)
    if options:
        sync["syncOptions"] = options
    info = [
        {"name": INFO_ROLLOUT_ID, "value": rollout_id},
        {"name": INFO_STAGE, "value": stage},
        {"name": INFO_REQUESTED_AT, "value": format_time(now)},
    ]
    previous = deployed_revisions(app)
    if rollback:
        info.append({"name": INFO_ROLLBACK, "value": "true"})
    elif previous:
        info.append({"name": INFO_PREVIOUS_REVISIONS, "value": json.dumps(previous)})
    body["operation"] = {
        "initiatedBy": {"username": INITIATOR, "automated": True},
        "info": info,
        "sync": sync,
        "retry": operation_retry(app),
    }
    status = body.get("status")
    if isinstance(status, dict) and "operationState" in status:
        status = dict(status)
        status.pop("operationState")
        body["status"] = status
    return body


# --- ending what we started ---------------------------------------------------------------------


class TerminateAction(StrEnum):
    """What ending this rollout's operation on one Application takes."""

    WITHDRAW = "Withdraw"  # our request was not taken up yet: remove `.operation`
    TERMINATE = "Terminate"  # our operation runs: phase Terminating, as `argocd app terminate-op`
    WAIT = "Wait"  # our operation is Terminating already: Argo CD is ending it
    NONE = "None"  # nothing of ours runs (someone else's, or ended): never touched


@dataclass(frozen=True)
class TerminateDecision:
    """The decision for one Application and why."""

    action: TerminateAction
    reason: str


def decide_terminate(app: Mapping[str, Any], rollout_id: str) -> TerminateDecision:
    """Whether (and how) this rollout's operation on the Application is to be ended."""
    name = app_name(app)
    state = operation_state(app)
    if state_is_ours(app, rollout_id):
        assert state is not None
        phase = state.get("phase")
        if phase == "Terminating":
            return TerminateDecision(TerminateAction.WAIT, f"{name}: our sync is Terminating")
        if phase == "Running":
            # Between Argo CD's own retries too (Running with finishedAt): the next attempt must not run.
            return TerminateDecision(
                TerminateAction.TERMINATE,
                f"{name}: our running sync set to Terminating (argocd app terminate-op)",
            )
        return TerminateDecision(TerminateAction.NONE, f"{name}: our sync ended {phase}")
    if requested_by_rollout(app, rollout_id):
        # Not Argo CD's yet (it has not started it): removing the request stops it for good.
        return TerminateDecision(
            TerminateAction.WITHDRAW, f"{name}: our sync request withdrawn before Argo CD took it up"
        )
    return TerminateDecision(TerminateAction.NONE, f"{name}: no operation of ours in flight")


def build_terminate_request(app: Mapping[str, Any]) -> dict[str, Any]:
    """The Application with `status.operationState.phase: Terminating`, as ONE update body.

    What Argo CD's API server `TerminateOperation` writes; the controller then stops the sync and
    records it Failed (it stops a retry loop too).
    """
    body = copy.deepcopy(dict(app))
    body["status"]["operationState"]["phase"] = "Terminating"
    return body


def build_withdraw_request(app: Mapping[str, Any]) -> dict[str, Any]:
    """The Application without our `.operation` (a request the controller never took up), one update."""
    body = copy.deepcopy(dict(app))
    body.pop("operation", None)
    return body


def refresh_patch(now: datetime, level: str = "normal") -> dict[str, Any]:
    """The merge patch that asks Argo CD to compare an Application again: `argocd.argoproj.io/refresh`
    and, as Argo CD's own refresh does, a `refresh-timestamp` unique to this request.

    The stamp makes every request a change of the object: asking again while an earlier request is
    still pending reaches the application controller as a new event (the same annotation value
    alone would be a no-op write, and a request the controller missed would stay unanswered until
    the step's deadline). The application controller removes both once it compared. The
    ApplicationSet controller keeps the refresh annotation (in its default preserved list) and drops
    the stamp on its next reconcile, which leaves the request itself in place.
    """
    stamp = now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {"metadata": {"annotations": {REFRESH_ANNOTATION: level, REFRESH_TIMESTAMP_ANNOTATION: stamp}}}


def refresh_requested(app: Mapping[str, Any]) -> bool:
    """True while a refresh we (or anyone) asked for is pending (the annotation is still there)."""
    return REFRESH_ANNOTATION in app_annotations(app)


def result_revisions(state: Mapping[str, Any] | None) -> list[str]:
    """The revision(s) an operation actually applied (`syncResult.revision` / `.revisions`)."""
    result = (state or {}).get("syncResult") or {}
    if result.get("revisions"):
        return [str(r) for r in result["revisions"]]
    return [str(result["revision"])] if result.get("revision") else []
