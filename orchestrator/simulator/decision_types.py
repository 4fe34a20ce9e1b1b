"""The vocabulary of the simulated controllers' decisions: what a decision reads besides the
Application (`World`), what it returns (`Decision`: one `Step` to write, with its `Event`s and the
proof that it landed, or when to look again), and the simulator's memory of when it first saw each
state (`Timeline`). Data only: nothing here decides or talks to the API server.

Callers: `behaviours` and its parts (`comparison`, `sync_operation`), which build these, and the
controller loop (`appcontroller`), which writes the steps and keeps the timeline.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from orchestrator.simulator.appset import ClusterParams
from orchestrator.simulator.config import Behaviour
from orchestrator.simulator.git import GitRefs
from orchestrator.simulator.windows import Window

# A path of keys into an object, e.g. ("status", "sync", "revision").
FieldPath = tuple[str, ...]


@dataclass(frozen=True)
class World:
    """Everything a decision reads besides the Application: its cluster's behaviour and parameters,
    the simulated Git repository, the ApplicationSet that owns it, the controller's flags."""

    behaviour: Behaviour
    cluster: ClusterParams | None = None
    git: GitRefs = field(default_factory=lambda: GitRefs({}))
    app_set: Mapping[str, Any] | None = None
    preserved_annotations: tuple[str, ...] = ()
    preserved_labels: tuple[str, ...] = ()
    # The sync windows of the Application's AppProject (or why they do not parse).
    sync_windows: tuple[Window, ...] = ()
    windows_error: str = ""


@dataclass(frozen=True)
class Event:
    """One line of the events log: its name and its own keys."""

    name: str
    fields: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Step:
    """One write: the Application as it must be stored (it carries the resourceVersion it was decided
    on), the events it stands for, the paths whose stored values prove it landed (an answer can be
    lost), and the moments to remember once it has."""

    name: str
    app: dict[str, Any]
    events: tuple[Event, ...]
    proof: tuple[tuple[FieldPath, Any], ...]
    marks: tuple[str, ...] = ()

    def landed_in(self, stored: Mapping[str, Any]) -> bool:
        """True when the stored object shows this write (compared on the proof paths)."""
        return all(get_path(stored, path) == value for path, value in self.proof)


@dataclass(frozen=True)
class Decision:
    """The next write, or when to look at the Application again (None: only when it changes)."""

    step: Step | None = None
    wake_at: datetime | None = None


class Timeline:
    """When the simulator first saw each state of each Application (its memory of durations).

    Not thread-safe: the controller's workers use it under one lock (`FleetSimulator._timeline_lock`).
    Forgets the oldest entries past `limit`.
    """

    def __init__(self, limit: int = 20000) -> None:
        self._seen: dict[str, datetime] = {}
        self._limit = limit

    def first(self, key: str, now: datetime) -> datetime:
        """When `key` was first seen (now, if this is the first time)."""
        if key not in self._seen:
            if len(self._seen) >= self._limit:
                for old in list(self._seen)[: self._limit // 2]:
                    del self._seen[old]
            self._seen[key] = now
        return self._seen[key]

    def mark(self, key: str, when: datetime) -> None:
        """Remember that `key` happened at `when` (kept if already known)."""
        self.first(key, when)

    def knows(self, key: str) -> bool:
        """True when `key` was seen or marked."""
        return key in self._seen


def get_path(obj: Mapping[str, Any], path: FieldPath) -> Any:
    """The value at `path` (None when any part is missing)."""
    value: Any = obj
    for part in path:
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value
