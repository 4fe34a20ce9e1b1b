"""Recording what happens to Applications, in the API server's order, from one watch stream.

`AppRecorder` lists then watches the Applications of a namespace on a thread and reduces every
event to an `AppState`: the fields progressive-sync and a person read (operation requested and by
whom, operation phase, started at, applied revision, sync status and revision, health). Only
changes of that state are kept, each with its resourceVersion and the time it was seen, so:

- `sync_starts(app)` counts the operations the controller started (distinct `startedAt` +
  initiator), which is how "each Application synced exactly once" is checked against real Argo CD
  and against the simulator alike;
- `first_requested` gives the order in which our sync requests reached the API server (one watch
  stream delivers events in etcd order, so this order is exact, unlike second-resolution stamps);
- `history(app)` is the sequence of distinct states, what the contract test compares;
- `uids(app)` the objects that carried the name, in order (an Application deleted and created
  again is a new object: `sync_starts(app, uid=...)` counts one object's operations only).

Real: the API server's watch. A 410 or a dropped stream re-lists and carries on (states in between
may be missed, which the tests' assertions tolerate: they assert on what was seen in order).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from orchestrator.kube.client import APPLICATIONS, Gone, Kube, KubeError


@dataclass(frozen=True)
class AppState:
    """The observable state of one Application at one moment."""

    requested_by: str  # `.operation.initiatedBy.username` while an operation is requested, else ""
    requested_rollout: str  # the rollout-id info of the requested operation
    phase: str  # status.operationState.phase ("" without one)
    started_at: str
    started_by: str  # initiatedBy.username of the operation in operationState
    started_rollout: str
    applied: str  # operationState.syncResult.revision(s), joined with ","
    sync: str  # status.sync.status
    sync_revision: str
    health: str
    message: str = field(default="", compare=False)

    @classmethod
    def of(cls, app: Mapping[str, Any]) -> AppState:
        """Reduce an Application to its observable state."""
        operation = app.get("operation") or {}
        status = app.get("status") or {}
        state = status.get("operationState") or {}
        state_op = state.get("operation") or {}
        result = state.get("syncResult") or {}
        sync = status.get("sync") or {}
        return cls(
            requested_by=_initiator(operation) if operation else "",
            requested_rollout=_info(operation, "rollout-id"),
            phase=str(state.get("phase", "")),
            started_at=str(state.get("startedAt", "")),
            started_by=_initiator(state_op) if state else "",
            started_rollout=_info(state_op, "rollout-id"),
            applied=",".join(
                result.get("revisions") or ([result["revision"]] if result.get("revision") else [])
            ),
            sync=str(sync.get("status", "")),
            sync_revision=",".join(
                sync.get("revisions") or ([sync["revision"]] if sync.get("revision") else [])
            ),
            health=str((status.get("health") or {}).get("status", "")),
            message=str(state.get("message", "")),
        )


def _initiator(op: Mapping[str, Any]) -> str:
    by = op.get("initiatedBy") or {}
    return str(by.get("username") or ("automated" if by.get("automated") else ""))


def _info(op: Mapping[str, Any], key: str) -> str:
    for entry in op.get("info") or []:
        if entry.get("name") == key:
            return str(entry.get("value", ""))
    return ""


@dataclass(frozen=True)
class Seen:
    """One change of an Application's state, in watch order."""

    seq: int
    app: str
    state: AppState
    resource_version: str
    monotonic: float
    uid: str = ""


class AppRecorder:
    """Watches Applications (those `keep(name)` accepts) and keeps each change of their state."""

    def __init__(self, kube: Kube, namespace: str, keep: Callable[[str], bool] = lambda _: True) -> None:
        self.kube = kube
        self.namespace = namespace
        self.keep = keep
        self.seen: list[Seen] = []
        self._last: dict[str, tuple[str, AppState]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._stream_stop: Callable[[], None] | None = None
        self._thread = threading.Thread(target=self._run, name="app-recorder", daemon=True)
        self._listed = threading.Event()
        self.error: BaseException | None = None

    def start(self, timeout: float = 30.0) -> AppRecorder:
        """Start watching; returns once the first list is recorded."""
        self._thread.start()
        if not self._listed.wait(timeout):
            raise AssertionError(f"the Application recorder did not list within {timeout}s: {self.error}")
        return self

    def stop(self) -> None:
        """Stop watching (ends the stream at once)."""
        self._stop.set()
        if self._stream_stop is not None:
            self._stream_stop()
        self._thread.join(15)

    def _record(self, app: Mapping[str, Any]) -> None:
        name = str((app.get("metadata") or {}).get("name", ""))
        if not self.keep(name):
            return
        state = AppState.of(app)
        uid = str((app.get("metadata") or {}).get("uid", ""))
        with self._lock:
            if self._last.get(name) == (uid, state):
                return
            self._last[name] = (uid, state)
            self.seen.append(
                Seen(
                    len(self.seen),
                    name,
                    state,
                    str((app.get("metadata") or {}).get("resourceVersion", "")),
                    time.monotonic(),
                    uid,
                )
            )

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                items, version = self.kube.list(APPLICATIONS, self.namespace)
                for item in items:
                    self._record(item)
                self._listed.set()
                while not self._stop.is_set():
                    for event in self.kube.watch(
                        APPLICATIONS,
                        self.namespace,
                        resource_version=version,
                        timeout_seconds=30,
                        on_open=self._opened,
                    ):
                        version = event.resource_version or version
                        if event.type in ("ADDED", "MODIFIED"):
                            self._record(event.object)
            except Gone:
                continue
            except KubeError as exc:
                if self._stop.is_set():
                    return
                self.error = exc
                time.sleep(0.5)

    def _opened(self, stop_stream: Callable[[], None]) -> None:
        self._stream_stop = stop_stream
        if self._stop.is_set():
            stop_stream()

    # -- reading ----------------------------------------------------------------------------

    def history(self, app: str) -> list[AppState]:
        """The distinct states `app` went through, in order."""
        with self._lock:
            return [seen.state for seen in self.seen if seen.app == app]

    def uids(self, app: str) -> list[str]:
        """The uids of the objects named `app`, in the order they were seen."""
        with self._lock:
            return list(dict.fromkeys(seen.uid for seen in self.seen if seen.app == app))

    def sync_starts(
        self, app: str, *, by: str | None = None, rollout: str | None = None, uid: str | None = None
    ) -> int:
        """How many operations the controller started on `app` (optionally only `by`/`rollout`'s,
        only on the object `uid`)."""
        started: set[tuple[str, str, str]] = set()
        with self._lock:
            states = [s.state for s in self.seen if s.app == app and (uid is None or s.uid == uid)]
        for state in states:
            if not state.started_at:
                continue
            if by is not None and state.started_by != by:
                continue
            if rollout is not None and state.started_rollout != rollout:
                continue
            started.add((state.started_at, state.started_by, state.started_rollout))
        return len(started)

    def sync_requests(self, app: str, *, by: str, uid: str | None = None) -> int:
        """How many times a sync request by `by` appeared on `app` (on the object `uid`): a state
        with `.operation` by `by` after one without (Argo CD keeps `.operation` while it runs)."""
        count = 0
        before: dict[str, str] = {}
        with self._lock:
            seen = [s for s in self.seen if s.app == app and (uid is None or s.uid == uid)]
        for entry in seen:
            previous = before.get(entry.uid, "")
            if entry.state.requested_by == by and previous != by:
                count += 1
            before[entry.uid] = entry.state.requested_by
        return count

    def first_requested(self, *, by: str) -> list[str]:
        """Applications in the order a sync request by `by` first appeared on them."""
        order: list[str] = []
        with self._lock:
            for seen in self.seen:
                if seen.state.requested_by == by and seen.app not in order:
                    order.append(seen.app)
        return order

    def first_seen(self, app: str, predicate: Callable[[AppState], bool]) -> Seen | None:
        """The first recorded change of `app` for which `predicate` holds (with when it was seen)."""
        with self._lock:
            return next((s for s in self.seen if s.app == app and predicate(s.state)), None)

    def first_seq(self, app: str, predicate: Callable[[AppState], bool]) -> int | None:
        """The position of the first recorded state of `app` for which `predicate` holds."""
        with self._lock:
            return next((s.seq for s in self.seen if s.app == app and predicate(s.state)), None)


@contextlib.contextmanager
def recording(
    kube: Kube, namespace: str, keep: Callable[[str], bool] = lambda _: True
) -> Iterator[AppRecorder]:
    """`with recording(kube, ns) as recorder:` an AppRecorder, stopped at the end."""
    recorder = AppRecorder(kube, namespace, keep).start()
    try:
        yield recorder
    finally:
        recorder.stop()
