"""A sync operation as Argo CD's application controller runs it, one write at a time.

`operation_step` handles `.operation`: the pick-up (`{operation, phase: Running, startedAt}`), a
sync window that blocks it (or the `syncWindow` behaviour), "one or more tasks are running" with the
revision resolved, then Succeeded / Failed / Error with `.operation` removed; with
`operation.retry` a failed attempt waits (`next_retry_at`, Argo CD's backoff) and runs again;
`phase: Terminating` ends it Failed "Operation terminated". A success is appended to
`status.history`. Pure decisions (controller/appcontroller.go `processRequestedAppOperation`,
controller/sync.go `SyncAppState`).

Callers: `behaviours.next_step`; the tests read the messages (`MSG_*`) and `next_retry_at`.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from orchestrator.core.clock import format_time, parse_time
from orchestrator.simulator import application
from orchestrator.simulator.comparison import comparison_target
from orchestrator.simulator.config import Behaviour, SyncWindow
from orchestrator.simulator.decision_types import Decision, Event, FieldPath, Step, Timeline, World
from orchestrator.simulator.git import GitRefs, UnresolvableRevision
from orchestrator.simulator.windows import can_sync

MSG_RUNNING = "one or more tasks are running"
MSG_SUCCEEDED = "successfully synced (all tasks run)"
MSG_FAILED = "one or more objects failed to apply"
MSG_ERROR = "rpc error: code = Unavailable desc = connection refused (simulated repo-server outage)"
MSG_BLOCKED = "Sync operation blocked by sync window"
MSG_TERMINATED = "Operation terminated"

# Argo CD's retry defaults (pkg/apis/application/v1alpha1: DefaultSyncRetry*).
RETRY_DURATION_SECONDS = 5.0
RETRY_FACTOR = 2.0
RETRY_MAX_DURATION_SECONDS = 180.0
REVISION_HISTORY_LIMIT = 10
# How often a blocked or hung operation is looked at again (a window may be lifted by an annotation).
RECHECK_SECONDS = 1.0


def operation_step(app: Mapping[str, Any], world: World, now: datetime, timeline: Timeline) -> Decision:
    """The next write of the requested operation: pick it up, or run the one Running (or Terminating)."""
    op = application.requested_operation(app)
    if op is None:
        return Decision()
    state = application.operation_state(app)
    if state is None or state.get("phase") in application.COMPLETED_PHASES:
        return _pick_up(app, op, world, now, timeline)
    return _run(app, state, world, now, timeline)


def _pick_up(
    app: Mapping[str, Any], op: dict[str, Any], world: World, now: datetime, timeline: Timeline
) -> Decision:
    due = timeline.first(f"requested:{application.name(app)}:{_fingerprint(op)}", now) + timedelta(
        seconds=world.behaviour.pick_up_seconds
    )
    if now < due:
        return Decision(wake_at=due)
    started = format_time(now)
    new = application.writable_copy(app)
    new["status"]["operationState"] = {
        "operation": copy.deepcopy(op),
        "phase": "Running",
        "startedAt": started,
    }
    event = Event(
        "sync-start",
        {"revision": ",".join(_pins(op)), "initiatedBy": _initiator(op), "info": _info(op)},
    )
    proof = (
        (("status", "operationState", "startedAt"), started),
        (("status", "operationState", "operation"), op),
    )
    return Decision(Step("pick-up", new, (event,), proof))


def _fingerprint(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _info(op: Mapping[str, Any]) -> dict[str, str]:
    return {
        str(entry.get("name")): str(entry.get("value", ""))
        for entry in op.get("info") or []
        if isinstance(entry, Mapping)
    }


def _initiator(op: Mapping[str, Any]) -> str:
    by = op.get("initiatedBy") or {}
    return str(by.get("username") or ("automated" if by.get("automated") else "unknown"))


def _pins(op: Mapping[str, Any]) -> list[str]:
    sync = op.get("sync") or {}
    return [str(r) for r in sync.get("revisions") or []] or [str(sync.get("revision") or "")]


def _window_message(app: Mapping[str, Any], op: Mapping[str, Any], world: World, now: datetime) -> str | None:
    """Argo CD's `syncWindowPreventsSync`: the Running message when a window holds the sync, else
    None. The windows are the AppProject's and the cluster's `syncWindow` behaviour."""
    manual = not bool((op.get("initiatedBy") or {}).get("automated"))
    behaviour = world.behaviour
    if world.windows_error:
        return f"{MSG_BLOCKED}: invalid sync windows: {world.windows_error}"
    if behaviour.sync_window == SyncWindow.DENY and not (manual and behaviour.sync_window_manual_sync):
        return MSG_BLOCKED
    if not can_sync(world.sync_windows, app, now, manual=manual):
        return MSG_BLOCKED
    return None


def _initial_result(app: Mapping[str, Any], op: Mapping[str, Any]) -> dict[str, Any]:
    """`newSyncOperationResult`: the revision as requested (not resolved yet) and the sources."""
    sync = op.get("sync") or {}
    result: dict[str, Any] = {"revision": str(sync.get("revision") or "")}
    if application.is_multi_source(app):
        result["sources"] = application.sources(app)
        result["revisions"] = [str(r) for r in sync.get("revisions") or []]
    else:
        result["source"] = application.sources(app)[0]
    return result


def _resolve(app: Mapping[str, Any], op: Mapping[str, Any], git: GitRefs) -> list[str]:
    """The full SHA(s) the operation syncs to (a chart version for a Helm chart source); an empty pin
    means what targetRevision resolves to."""
    sync = op.get("sync") or {}
    sources = application.sources(app)
    if application.is_multi_source(app):
        pins = [str(r) for r in sync.get("revisions") or []] or [""] * len(sources)
    else:
        pins = [str(sync.get("revision") or "")]
    if not git.exists:
        compared = comparison_target(app, git)
        return [pin or (compared[index] if index < len(compared) else "") for index, pin in enumerate(pins)]
    return [
        git.resolve_source(sources[index] if index < len(sources) else {}, pin)
        for index, pin in enumerate(pins)
    ]


def _with_revisions(result: dict[str, Any], app: Mapping[str, Any], revisions: list[str]) -> dict[str, Any]:
    result = dict(result)
    if application.is_multi_source(app):
        result["revisions"] = revisions
        result["revision"] = ""
    else:
        result["revision"] = revisions[0] if revisions else ""
    return result


def _attempt_outcome(
    op: Mapping[str, Any], state: Mapping[str, Any], behaviour: Behaviour, app: Mapping[str, Any]
) -> tuple[str, str]:
    """(phase, message) of one sync attempt."""
    if behaviour.error:
        return "Error", MSG_ERROR
    options = _sync_options(op)
    missing = [option for option in behaviour.require_sync_options if option not in options]
    if missing:
        namespace = ((app.get("spec") or {}).get("destination") or {}).get("namespace") or "default"
        reason = (
            f'namespaces "{namespace}" not found'
            if any(option.startswith("CreateNamespace") for option in missing)
            else f"the objects need the sync option(s) {', '.join(missing)} (simulated)"
        )
        return "Failed", f"{MSG_FAILED}, reason: {reason}"
    retry_count = int(state.get("retryCount") or 0)
    if behaviour.fail or retry_count < behaviour.fail_attempts:
        return (
            "Failed",
            f'{MSG_FAILED}, reason: Deployment.apps "{application.name(app)}" is invalid (simulated)',
        )
    return "Succeeded", MSG_SUCCEEDED


def _sync_options(op: Mapping[str, Any]) -> list[str]:
    return [str(option) for option in (op.get("sync") or {}).get("syncOptions") or []]


@dataclass(frozen=True)
class _Running:
    """A Running (or Terminating) operation as read, and how to write its next state."""

    app: Mapping[str, Any]
    state: Mapping[str, Any]
    now: datetime

    @property
    def op(self) -> dict[str, Any]:
        return dict(self.state.get("operation") or {})

    @property
    def started(self) -> str:
        return str(self.state.get("startedAt") or "")

    @property
    def retry_count(self) -> int:
        return int(self.state.get("retryCount") or 0)

    @property
    def result(self) -> dict[str, Any]:
        return dict(self.state.get("syncResult") or _initial_result(self.app, self.op))

    def write(
        self, name: str, changes: Mapping[str, Any], events: tuple[Event, ...], *, done: bool = False
    ) -> Decision:
        """The operation state with `changes` (None removes a key); `done` also removes `.operation`."""
        new = application.writable_copy(self.app)
        new_state = dict(self.state)
        for key, value in changes.items():
            if value is None:
                new_state.pop(key, None)
            else:
                new_state[key] = value
        new["status"]["operationState"] = new_state
        proof: list[tuple[FieldPath, Any]] = [(("status", "operationState", "startedAt"), self.started)]
        proof += [(("status", "operationState", key), value) for key, value in changes.items()]
        marks: tuple[str, ...] = ()
        if done:
            new.pop("operation", None)
            proof.append((("operation",), None))
            marks = (f"finished:{application.name(self.app)}:{self.started}",)
        return Decision(Step(name, new, events, tuple(proof), marks))

    def finish(
        self, outcome: str, message: str, revisions: list[str], *, terminated: bool = False
    ) -> Decision:
        """End the attempt: a retry when Argo CD has retries left, else the operation's end."""
        result = _with_revisions(self.result, self.app, revisions) if revisions else self.result
        now, retry_count = self.now, self.retry_count
        if outcome in ("Failed", "Error") and not terminated and _retries_left(self.op, retry_count):
            count = retry_count + 1
            retry_at = next_retry_at(self.op.get("retry") or {}, now, retry_count)
            return self.write(
                "sync-attempt-failed",
                {
                    "phase": "Running",
                    "message": f"{message}. Retrying attempt #{count} at {_kitchen(retry_at)}.",
                    "finishedAt": format_time(now),
                    "retryCount": count,
                    "syncResult": result,
                },
                (Event("sync-attempt-failed", {"phase": outcome, "retryCount": count, "message": message}),),
            )
        if retry_count > 0 and outcome != "Succeeded":
            message = f"{message} (retried {retry_count} times)."
        event = Event(
            "sync-finish",
            {
                "phase": outcome,
                "revision": ",".join(application.result_revisions(result)),
                "message": message,
                "retryCount": retry_count,
                "terminated": terminated,
            },
        )
        changes = {"phase": outcome, "message": message, "finishedAt": format_time(now), "syncResult": result}
        decision = self.write("sync-finish", changes, (event,), done=True)
        if outcome == "Succeeded" and decision.step is not None:
            _record_history(decision.step.app, self.state, result, now)
        return decision


def _run(
    app: Mapping[str, Any], state: dict[str, Any], world: World, now: datetime, timeline: Timeline
) -> Decision:
    """A Running (or Terminating) operation: window, terminate, retry wait, attempt, finish."""
    running = _Running(app, state, now)
    op, behaviour = running.op, world.behaviour
    phase = str(state.get("phase") or "")
    if phase == "Terminating":
        # Before the window: a terminate is never held by a sync window (v3.6 SyncAppState checks
        # the window only when the phase is not Terminating; it used to, and stayed Terminating).
        return running.finish("Failed", MSG_TERMINATED, [], terminated=True)
    blocked = _window_message(app, op, world, now)
    if blocked is not None:
        if phase == "Running" and state.get("message") != blocked:
            return running.write(
                "sync-blocked",
                {"message": blocked, "syncResult": running.result},
                (Event("sync-blocked", {"message": blocked}),),
            )
        return Decision(wake_at=now + timedelta(seconds=RECHECK_SECONDS))
    if state.get("finishedAt"):  # Running with finishedAt: waiting for Argo CD's next retry
        finished = parse_time(state.get("finishedAt")) or now
        retry_at = next_retry_at(op.get("retry") or {}, finished, running.retry_count)
        if now < retry_at:
            return Decision(wake_at=retry_at)
        return running.write(
            "sync-retry",
            {
                "message": f"Retrying operation. Attempt #{running.retry_count}",
                "finishedAt": None,
                "syncResult": None,
            },
            (Event("sync-retry", {"attempt": running.retry_count}),),
        )
    try:
        revisions = _resolve(app, op, world.git)
    except UnresolvableRevision as exc:
        return running.finish("Error", f"ComparisonError: {exc}", [])
    attempt = timeline.first(f"attempt:{application.name(app)}:{running.started}:{running.retry_count}", now)
    due = attempt + timedelta(seconds=behaviour.sync_seconds)
    resolved = _with_revisions(running.result, app, revisions)
    in_progress = behaviour.hang or now < due
    if in_progress and (state.get("message") != MSG_RUNNING or state.get("syncResult") != resolved):
        return running.write("sync-running", {"message": MSG_RUNNING, "syncResult": resolved}, ())
    if behaviour.hang:
        return Decision()  # until someone terminates it (the change wakes the controller)
    if now < due:
        return Decision(wake_at=due)
    outcome, message = _attempt_outcome(op, state, behaviour, app)
    return running.finish(outcome, message, revisions)


def _record_history(
    app: dict[str, Any], state: Mapping[str, Any], result: Mapping[str, Any], now: datetime
) -> None:
    """Append the deployment to `status.history` (Argo CD's persistRevisionHistory)."""
    status = app.setdefault("status", {})
    history = list(status.get("history") or [])
    entry: dict[str, Any] = {
        "id": (max((int(h.get("id") or 0) for h in history), default=-1) + 1),
        "deployedAt": format_time(now),
        "deployStartedAt": state.get("startedAt"),
        "initiatedBy": dict((state.get("operation") or {}).get("initiatedBy") or {}),
    }
    if result.get("revisions"):
        entry["revisions"] = list(result["revisions"])
        entry["sources"] = list(result.get("sources") or [])
    else:
        entry["revision"] = result.get("revision", "")
        entry["source"] = dict(result.get("source") or {})
    status["history"] = [*history, entry][-REVISION_HISTORY_LIMIT:]


# --- Argo CD's retry backoff -------------------------------------------------------------------


def _kitchen(when: datetime) -> str:
    """Go's time.Kitchen ("3:04PM"), which Argo CD's retry message uses."""
    return f"{(when.hour % 12) or 12}:{when.minute:02d}{'AM' if when.hour < 12 else 'PM'}"


def _seconds(value: Any, default: float) -> float:
    """A retry backoff duration as Argo CD parses it: a bare number is seconds, else a Go duration."""
    if value in (None, ""):
        return default
    text = str(value).strip()
    try:
        return float(int(text))
    except ValueError:
        pass
    total, number = 0.0, ""
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
    index = 0
    while index < len(text):
        char = text[index]
        if char.isdigit() or char == ".":
            number += char
            index += 1
            continue
        unit = "ms" if text[index : index + 2] == "ms" else char
        if unit not in units or not number:
            return default
        total += float(number) * units[unit]
        number = ""
        index += len(unit)
    return total if not number else default


def next_retry_at(retry: Mapping[str, Any], last_attempt: datetime, retry_count: int) -> datetime:
    """Argo CD's `RetryStrategy.NextRetryAt`: duration * factor^retryCount, capped at maxDuration."""
    backoff = retry.get("backoff") or {}
    duration = _seconds(backoff.get("duration"), RETRY_DURATION_SECONDS)
    max_duration = _seconds(backoff.get("maxDuration"), RETRY_MAX_DURATION_SECONDS)
    factor = float(backoff["factor"]) if backoff.get("factor") is not None else RETRY_FACTOR
    wait = duration * math.pow(factor, retry_count)
    if max_duration > 0:
        wait = min(max_duration, wait)
    return last_attempt + timedelta(seconds=wait)


def _retries_left(op: Mapping[str, Any], retry_count: int) -> bool:
    limit = int((op.get("retry") or {}).get("limit") or 0)
    return limit < 0 or retry_count < limit
