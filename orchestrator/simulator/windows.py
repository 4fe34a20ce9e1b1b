"""Sync windows of an AppProject, as Argo CD evaluates them (`SyncWindows.CanSync`).

A window (`spec.syncWindows[]` of the Application's AppProject) has a `kind` (allow or deny), a cron
`schedule` (five fields, names and `@daily`-style descriptors), a `duration` (Go duration), the
Applications it matches (`applications`, `namespaces`, `clusters`: globs on the name, the destination
namespace, the destination server or name; all of them with `useAndOperator`), `manualSync` and an
optional `timeZone`. It is active
when the schedule fired within the last `duration`. Argo CD's rule (types.go `CanSync`, without the
overrun options): an active deny blocks, unless the sync is manual and every active deny allows
manual syncs; else an active allow lets it through; else allow windows that exist but are inactive
block (manual syncs through when they allow it); else it runs.

Pure. Callers: `behaviours` (a Running operation in a window stays Running).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

_NAMES = {
    **{name: index for index, name in enumerate(("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"))},
    **{
        name: index + 1
        for index, name in enumerate(
            ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
        )
    },
}
_DESCRIPTORS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_RANGES = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 6))
# Windows longer than this are evaluated as this long (a minute-by-minute look back).
_MAX_LOOKBACK_MINUTES = 7 * 24 * 60


class WindowError(ValueError):
    """A window that does not parse; Argo CD then refuses to sync ("invalid sync windows")."""


def _field(text: str, low: int, high: int) -> frozenset[int]:
    values: set[int] = set()
    for item in text.split(","):
        part, _, step_text = item.partition("/")
        step = int(step_text) if step_text else 1
        if part in ("*", "?"):
            start, end = low, high
        elif "-" in part:
            first, last = part.split("-", 1)
            start, end = _number(first), _number(last)
        else:
            start = _number(part)
            end = high if step != 1 else start
        if start < low or end > high or step < 1:
            raise WindowError(f"{text!r} is out of range {low}-{high}")
        values.update(range(start, end + 1, step))
    return frozenset(values)


def _number(text: str) -> int:
    upper = text.strip().upper()
    if upper in _NAMES:
        return _NAMES[upper]
    return int(upper)


@dataclass(frozen=True)
class Cron:
    """A parsed five-field schedule."""

    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]
    days_any: bool
    weekdays_any: bool

    @classmethod
    def parse(cls, schedule: str) -> Cron:
        """Parse five cron fields (or a descriptor); WindowError says what is wrong."""
        text = _DESCRIPTORS.get(schedule.strip(), schedule.strip())
        fields = text.split()
        if len(fields) != 5:
            raise WindowError(f"schedule {schedule!r} does not have five fields")
        try:
            parsed = [_field(f, low, high) for f, (low, high) in zip(fields, _RANGES, strict=True)]
        except ValueError as exc:
            raise WindowError(f"schedule {schedule!r}: {exc}") from exc
        weekdays = frozenset(7 if d == 0 else d for d in parsed[4]) | parsed[4]
        return cls(
            parsed[0],
            parsed[1],
            parsed[2],
            parsed[3],
            weekdays,
            fields[2] in ("*", "?"),
            fields[4] in ("*", "?"),
        )

    def matches(self, when: datetime) -> bool:
        """True when the schedule fires at this minute (cron's day-of-month OR day-of-week rule)."""
        if when.minute not in self.minutes or when.hour not in self.hours or when.month not in self.months:
            return False
        day = when.day in self.days
        weekday = (when.isoweekday() % 7) in self.weekdays
        if self.days_any or self.weekdays_any:
            return day and weekday
        return day or weekday


def _duration(text: str) -> timedelta:
    units = {"h": 3600.0, "m": 60.0, "s": 1.0}
    total, number = 0.0, ""
    for char in str(text).strip():
        if char.isdigit() or char == ".":
            number += char
        elif char in units and number:
            total += float(number) * units[char]
            number = ""
        else:
            raise WindowError(f"duration {text!r} is not a Go duration (e.g. 1h30m)")
    if number or total <= 0:
        raise WindowError(f"duration {text!r} is not a Go duration (e.g. 1h30m)")
    return timedelta(seconds=total)


@dataclass(frozen=True)
class Window:
    """One sync window of an AppProject."""

    kind: str
    cron: Cron
    duration: timedelta
    applications: tuple[str, ...]
    namespaces: tuple[str, ...]
    clusters: tuple[str, ...]
    manual_sync: bool
    zone: ZoneInfo | None
    use_and: bool = False

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> Window:
        """One `spec.syncWindows[]` entry; WindowError says what is wrong."""
        kind = str(spec.get("kind") or "")
        if kind not in ("allow", "deny"):
            raise WindowError(f"kind {kind!r} is not allow or deny")
        zone = None
        if spec.get("timeZone"):
            try:
                zone = ZoneInfo(str(spec["timeZone"]))
            except (ZoneInfoNotFoundError, ValueError) as exc:
                raise WindowError(f"timeZone {spec['timeZone']!r}: {exc}") from exc
        return cls(
            kind,
            Cron.parse(str(spec.get("schedule") or "")),
            _duration(str(spec.get("duration") or "")),
            tuple(spec.get("applications") or ()),
            tuple(spec.get("namespaces") or ()),
            tuple(spec.get("clusters") or ()),
            bool(spec.get("manualSync")),
            zone,
            bool(spec.get("useAndOperator")),
        )

    def matches(self, app: Mapping[str, Any]) -> bool:
        """Argo CD's `SyncWindows.Matches`: any configured criterion matches (all, with
        `useAndOperator`): application name, destination cluster (server or name), namespace."""
        name = str((app.get("metadata") or {}).get("name") or "")
        destination = (app.get("spec") or {}).get("destination") or {}
        namespace = str(destination.get("namespace") or "")
        clusters = [str(destination.get(key) or "") for key in ("name", "server") if destination.get(key)]
        results = [
            any(fnmatch.fnmatchcase(value, glob) for glob in globs for value in values)
            for globs, values in (
                (self.applications, [name]),
                (self.clusters, clusters),
                (self.namespaces, [namespace]),
            )
            if globs
        ]
        if not results:
            return False
        return all(results) if self.use_and else any(results)

    def active(self, now: datetime) -> bool:
        """True when the schedule fired within the last `duration`."""
        local = now.astimezone(self.zone) if self.zone else now
        minute = local.replace(second=0, microsecond=0)
        lookback = min(int(self.duration.total_seconds() // 60) + 1, _MAX_LOOKBACK_MINUTES)
        for back in range(lookback):
            fired = minute - timedelta(minutes=back)
            if fired + self.duration > local and self.cron.matches(fired):
                return True
        return False


def windows_of(project: Mapping[str, Any] | None) -> tuple[Window, ...]:
    """The sync windows of an AppProject object (WindowError when one does not parse)."""
    specs = ((project or {}).get("spec") or {}).get("syncWindows") or []
    return tuple(Window.from_spec(spec) for spec in specs)


def can_sync(windows: Sequence[Window], app: Mapping[str, Any], now: datetime, *, manual: bool) -> bool:
    """Argo CD's `CanSync` for the windows that match this Application."""
    matching = [window for window in windows if window.matches(app)]
    if not matching:
        return True
    active = [window for window in matching if window.active(now)]
    denies = [window for window in active if window.kind == "deny"]
    if denies:
        return manual and all(window.manual_sync for window in denies)
    if any(window.kind == "allow" for window in active):
        return True
    inactive_allows = [window for window in matching if window.kind == "allow" and window not in active]
    if inactive_allows:
        return manual and all(window.manual_sync for window in inactive_allows)
    return True
