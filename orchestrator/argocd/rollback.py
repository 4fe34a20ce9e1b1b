"""Rolling one Application back: what it ran before our sync, and whether we may restore it.

A forward sync of ours records what the Application ran before it in the same write
(`appsync.build_sync_request`: the `previous-revisions` entry of the operation's `info`, from the
newest `status.history` entry). Argo CD keeps that operation in `status.operationState.operation`
until the next operation replaces it, so the marks on the Application itself say everything a
rollback needs, after any restart of anything:

- our forward operation is the last one, finished -> restore what it recorded (ROLL_BACK);
- our forward operation still runs (a cancelled rollout, a cluster stopped mid-sync) -> end it
  first (END_FORWARD), then decide again;
- our rollback operation is there (requested, running or finished) -> it was written: never a
  second one (DONE);
- someone else's operation came after ours (a person's `argocd app sync`, auto-sync) -> the
  Application moved on: touch nothing, say so (MOVED_ON);
- we never synced it in this rollout (adopted, left alone, or our request was withdrawn before
  Argo CD took it up) -> nothing to undo (NOT_OURS);
- we synced it, but it had never been deployed before (no history) -> nothing to restore to
  (NO_EARLIER): it is named, never guessed.

The rollback sync is the forward sync's write pinned to other revisions (the Application's own
sync options and retry, our rollout id in `info`, plus `rollback: true`): least privilege does not
widen. Pure: no API call, no clock. Callers: `steps.rollback`, `steps.rollback_plan`; tests.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from orchestrator.api.metadata import INFO_PREVIOUS_REVISIONS, INFO_ROLLBACK
from orchestrator.argocd import appsync


class RollbackAction(StrEnum):
    """What rolling one Application back takes now."""

    ROLL_BACK = "RollBack"  # write our rollback sync, pinned to `revisions`
    END_FORWARD = "EndForward"  # our forward operation still runs: end it, then decide again
    DONE = "Done"  # our rollback sync was written already: follow it, never write another
    MOVED_ON = "MovedOn"  # someone else's operation came after ours: left alone
    NOT_OURS = "NotOurs"  # this rollout changed nothing on it: nothing to undo
    NO_EARLIER = "NoEarlier"  # we synced it, but it had no earlier deployed revision to restore
    REFUSED = "Refused"  # it cannot be synced (being deleted)


@dataclass(frozen=True)
class RollbackDecision:
    """The decision for one Application, why, and (ROLL_BACK) the revisions it restores."""

    action: RollbackAction
    reason: str
    revisions: tuple[str, ...] = ()


def is_rollback(op: Mapping[str, Any] | None) -> bool:
    """True when the operation is a rollback sync (ours: `rollback: true` in its info)."""
    return appsync.info_value(op, INFO_ROLLBACK) == "true"


def pinned_revisions(op: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The revision(s) an operation's sync is pinned to (() when none)."""
    sync = (op or {}).get("sync") or {}
    if sync.get("revisions"):
        return tuple(str(r) for r in sync["revisions"])
    return (str(sync["revision"]),) if sync.get("revision") else ()


def recorded_previous(op: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The revisions our forward operation recorded the Application ran before it (() when none
    were recorded, or the entry is not a JSON list of non-empty strings)."""
    raw = appsync.info_value(op, INFO_PREVIOUS_REVISIONS)
    if not raw:
        return ()
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        return ()
    if not isinstance(value, list) or not value or not all(isinstance(r, str) and r for r in value):
        return ()
    return tuple(value)


def decide_rollback(
    app: Mapping[str, Any], rollout_id: str, *, since: datetime | None = None
) -> RollbackDecision:
    """Ordered early returns (see the module docstring). `since`: when the rollout started (a
    sync of ours in the history after it means we synced it, even once someone's operation
    replaced ours)."""
    name = appsync.app_name(app)
    op = appsync.operation(app)
    state = appsync.operation_state(app)
    state_op = (state or {}).get("operation")
    for current in (op, state_op):
        if appsync.operation_is_ours(current, rollout_id) and is_rollback(current):
            return RollbackDecision(
                RollbackAction.DONE,
                f"{name}: our rollback sync was written already",
                revisions=pinned_revisions(current),
            )
    if op is not None:
        if appsync.operation_is_ours(op, rollout_id):
            return RollbackDecision(
                RollbackAction.END_FORWARD,
                f"{name}: our sync request was not taken up by Argo CD yet: withdrawing it first",
            )
        if appsync.synced_by_rollout(app, rollout_id, since=since):
            return RollbackDecision(
                RollbackAction.MOVED_ON,
                f"{name}: {appsync.initiator(op)} requested an operation after our sync: left alone",
            )
        return RollbackDecision(RollbackAction.NOT_OURS, f"{name}: not synced by rollout {rollout_id}")
    if appsync.state_is_ours(app, rollout_id):
        assert state is not None
        if state.get("phase") in appsync.RUNNING_PHASES:
            return RollbackDecision(
                RollbackAction.END_FORWARD,
                f"{name}: our sync is {state.get('phase')}: ending it before the rollback",
            )
        if appsync.is_being_deleted(app):
            return RollbackDecision(
                RollbackAction.REFUSED, f"{name}: the Application is being deleted; it is not rolled back"
            )
        previous = recorded_previous(state_op)
        if not previous:
            return RollbackDecision(
                RollbackAction.NO_EARLIER,
                f"{name}: it had no deployed revision before our sync (no history): nothing to restore",
            )
        return RollbackDecision(
            RollbackAction.ROLL_BACK, f"{name}: restoring {','.join(previous)}", revisions=previous
        )
    if appsync.synced_in_history(app, since=since):
        by = appsync.initiator(state_op) if state else "someone"
        return RollbackDecision(
            RollbackAction.MOVED_ON,
            f"{name}: {by} synced it after rollout {rollout_id} did: left alone",
        )
    return RollbackDecision(RollbackAction.NOT_OURS, f"{name}: not synced by rollout {rollout_id}")


def build_rollback_request(
    app: Mapping[str, Any],
    *,
    revisions: tuple[str, ...],
    rollout_id: str,
    stage: str,
    prune: bool,
    sync_options: list[str],
    now: datetime,
) -> dict[str, Any]:
    """The Application with our rollback sync set, as ONE update body (it keeps resourceVersion):
    the forward sync's write (`appsync.build_sync_request`) pinned to `revisions`, marked rollback."""
    return appsync.build_sync_request(
        app,
        revisions=list(revisions),
        rollout_id=rollout_id,
        stage=stage,
        prune=prune,
        sync_options=sync_options,
        now=now,
        rollback=True,
    )
