"""Time windows: when a rollout may write a sync, and when it may next (issue 35, point 3).

One evaluator serves two sources of windows, with the same forms and the same rule:

- `spec.windows` of a ProgressiveSync (docs/windows.md): `kind` (allow or deny), a cron `schedule`,
  a `duration` and an optional `timeZone`;
- `spec.syncWindows` of an Argo CD AppProject, evaluated as Argo CD's `SyncWindows.CanSync` does
  (types.go, without the overrun options), with the Applications each window matches
  (`applications`, `namespaces`, `clusters`: globs; all of them with `useAndOperator`) and
  `manualSync`.

The forms: a five-field cron schedule (minute hour day-of-month month day-of-week; `*`, `?`,
lists, ranges, steps, the names JAN-DEC and SUN-SAT, the descriptors `@daily`, `@hourly`, ...;
cron's rule: when both day fields are restricted, either one matching fires), a Go duration of
hours, minutes and seconds (`1h30m`, `90s`), and an IANA `timeZone` the schedule is read in (UTC
when absent). A window fired at `f` is active on `[f, f + duration)`. The schedule is read on the
zone's wall clock and the duration is elapsed time: a wall time the clocks skip (spring forward)
fires as that time in the offset before the jump (02:30 -> 03:30), one they repeat (fall back)
fires once, the first time.

The rule: an active deny closes; else an active allow opens; else, when allow windows exist, it is
closed outside all of them; else open. Argo CD lets a manual sync through a window with
`manualSync: true`; the rollout's syncs are automated (`initiatedBy.automated`, REFERENCE.md), so
`manualSync` never opens a window for them.

`next_open` says when a closed set of windows opens next (the moment an allow starts or a deny
ends, whichever makes every set open), looking at most a year ahead.

Pure: `now` is always an argument. Callers: the ProgressiveSync model (validation), the planner
(`plan`), the steps (the sync gate, steps.window_gate) and the simulated Argo CD
(orchestrator.simulator.windows).
"""

from __future__ import annotations

import fnmatch
import heapq
import itertools
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
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
DESCRIPTORS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_RANGES = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 7))
KINDS = ("allow", "deny")
# How far `next_open` looks ahead, and how many window edges it tries at most on the way.
HORIZON = timedelta(days=366)
_MAX_EDGES = 10_000
# A fire is looked for this far around the wall time, for the hour a DST change moves it by.
_DST_SLACK = timedelta(hours=2)


class WindowError(ValueError):
    """A window that does not parse; the message names the part and what is wrong with it."""

    def __init__(self, message: str, *, field: str = "") -> None:
        super().__init__(message)
        self.field = field  # "schedule", "duration", "kind" or "timeZone" ("" when not known)


def _field(text: str, low: int, high: int) -> frozenset[int]:
    values: set[int] = set()
    for item in text.split(","):
        part, slash, step_text = item.partition("/")
        step = int(step_text) if slash else 1
        if part in ("*", "?"):
            start, end = low, high
        elif "-" in part:
            first, last = part.split("-", 1)
            start, end = _number(first), _number(last)
        else:
            start = _number(part)
            end = high if slash else start
        if start < low or end > high or start > end or step < 1:
            raise ValueError(f"{text!r} is out of range {low}-{high}")
        values.update(range(start, end + 1, step))
    return frozenset(values)


def _number(text: str) -> int:
    upper = text.strip().upper()
    if upper in _NAMES:
        return _NAMES[upper]
    return int(upper)


@dataclass(frozen=True)
class Cron:
    """A parsed five-field schedule, read on a wall clock (naive datetimes)."""

    text: str  # as written
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0-6, Sunday 0 (7 is read as 0)
    days_any: bool
    weekdays_any: bool

    @classmethod
    def parse(cls, schedule: str) -> Cron:
        """Parse five cron fields (or a descriptor); WindowError says what is wrong."""
        text = DESCRIPTORS.get(schedule.strip(), schedule.strip())
        fields = text.split()
        if len(fields) != 5:
            raise WindowError(
                f"schedule {schedule!r} does not have five fields (minute hour day month weekday)",
                field="schedule",
            )
        try:
            parsed = [_field(f, low, high) for f, (low, high) in zip(fields, _RANGES, strict=True)]
        except ValueError as exc:
            raise WindowError(f"schedule {schedule!r}: {exc}", field="schedule") from exc
        return cls(
            schedule.strip(),
            parsed[0],
            parsed[1],
            parsed[2],
            parsed[3],
            frozenset(d % 7 for d in parsed[4]),
            fields[2] in ("*", "?"),
            fields[4] in ("*", "?"),
        )

    def _day_matches(self, when: datetime) -> bool:
        day = when.day in self.days
        weekday = (when.isoweekday() % 7) in self.weekdays
        if self.days_any or self.weekdays_any:
            return day and weekday
        return day or weekday

    def matches(self, when: datetime) -> bool:
        """True when the schedule fires at this minute (cron's day-of-month OR day-of-week rule)."""
        return (
            when.minute in self.minutes
            and when.hour in self.hours
            and when.month in self.months
            and self._day_matches(when)
        )

    def next_fire(self, start: datetime) -> datetime | None:
        """The first wall-clock minute at or after `start` (naive) when the schedule fires; None when
        none within eight years (a day that never comes, such as 30 February)."""
        when = start.replace(second=0, microsecond=0)
        if when < start:
            when += timedelta(minutes=1)
        limit = start + timedelta(days=8 * 366)
        while when <= limit:
            if when.month not in self.months:
                when = (when.replace(day=1) + timedelta(days=32)).replace(day=1, hour=0, minute=0)
            elif not self._day_matches(when):
                when = (when + timedelta(days=1)).replace(hour=0, minute=0)
            elif when.hour not in self.hours:
                # Straight to the next hour of the schedule (or the next day): not hour by hour.
                hour = min((h for h in self.hours if h > when.hour), default=None)
                if hour is None:
                    when = (when + timedelta(days=1)).replace(hour=0, minute=0)
                else:
                    when = when.replace(hour=hour, minute=0)
            elif when.minute not in self.minutes:
                # Straight to the next minute of the schedule (or the next hour): not minute by
                # minute, which made `is_open` (every fire back to the DST slack) cost milliseconds.
                minute = min((m for m in self.minutes if m > when.minute), default=None)
                if minute is None:
                    when = (when + timedelta(hours=1)).replace(minute=0)
                else:
                    when = when.replace(minute=minute)
            else:
                return when
        return None


_DURATION = re.compile(r"(?:\d+(?:\.\d*)?|\.\d+)[hms]")


def parse_duration(text: str) -> timedelta:
    """A Go duration of hours, minutes and seconds (`1h30m`, `90s`, `1.5h`); WindowError otherwise."""
    value = str(text).strip()
    units = {"h": 3600.0, "m": 60.0, "s": 1.0}
    if value and re.fullmatch(f"(?:{_DURATION.pattern})+", value):
        total = sum(float(part[:-1]) * units[part[-1]] for part in _DURATION.findall(value))
        if total > 0:
            return timedelta(seconds=total)
    raise WindowError(
        f"duration {text!r} is not a positive Go duration of hours, minutes and seconds (e.g. 1h30m)",
        field="duration",
    )


def parse_zone(name: str | None) -> ZoneInfo | None:
    """The IANA time zone `name` (None when empty: UTC); WindowError when there is no such zone."""
    if not name:
        return None
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise WindowError(
            f"timeZone {name!r} is not an IANA time zone (e.g. Europe/Paris, America/New_York)",
            field="timeZone",
        ) from exc


def parse_kind(kind: str) -> str:
    """`allow` or `deny`; WindowError otherwise."""
    if kind not in KINDS:
        raise WindowError(f"kind {kind!r} is not allow or deny", field="kind")
    return kind


@dataclass(frozen=True)
class Recurrence:
    """A schedule on a zone's wall clock and how long each firing lasts."""

    cron: Cron
    duration: timedelta
    zone: ZoneInfo | None = None

    def _absolute(self, wall: datetime) -> datetime:
        return wall.replace(tzinfo=self.zone or UTC).astimezone(UTC)

    def _wall(self, when: datetime) -> datetime:
        return when.astimezone(self.zone or UTC).replace(tzinfo=None)

    def fires(self, start: datetime) -> Iterator[datetime]:
        """The fire times (UTC, in order) from a little before `start` on; one per wall minute."""
        # A zone's clocks jump: a fire with an earlier wall time may come later (see the module).
        wall = self._wall(start) - (_DST_SLACK if self.zone is not None else timedelta(0))
        seen: datetime | None = None
        while True:
            fired = self.cron.next_fire(wall)
            if fired is None:
                return
            absolute = self._absolute(fired)
            if seen is None or absolute > seen:
                seen = absolute
                yield absolute
            wall = fired + timedelta(minutes=1)

    def active(self, now: datetime) -> bool:
        """True when the schedule fired within the last `duration`: `now` in `[f, f + duration)`."""
        return self.active_until(now) is not None

    def active_until(self, now: datetime) -> datetime | None:
        """When the firings active at `now` end (the last of them); None when none is active."""
        until: datetime | None = None
        for fired in self.fires(now - self.duration):
            if fired > now:
                break
            if fired + self.duration > now:
                until = fired + self.duration
        return until

    def starts(self, after: datetime) -> Iterator[datetime]:
        """When the window opens, after `after` (in order)."""
        return (fired for fired in self.fires(after) if fired > after)

    def ends(self, after: datetime) -> Iterator[datetime]:
        """When one firing of the window ends, after `after` (in order)."""
        return (
            fired + self.duration
            for fired in self.fires(after - self.duration)
            if fired + self.duration > after
        )


def recurrence(schedule: str, duration: str, time_zone: str | None = None) -> Recurrence:
    """Parse the three forms (WindowError names the first that is wrong)."""
    return Recurrence(Cron.parse(schedule), parse_duration(duration), parse_zone(time_zone))


@dataclass(frozen=True)
class Window:
    """One window: allow or deny, when, and (an AppProject's) which Applications it applies to."""

    kind: str
    recurrence: Recurrence
    applications: tuple[str, ...] = ()
    namespaces: tuple[str, ...] = ()
    clusters: tuple[str, ...] = ()
    manual_sync: bool = False
    use_and: bool = False

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> Window:
        """One `spec.windows[]` or `spec.syncWindows[]` entry (wire names); WindowError says what is
        wrong (its `field` names the key)."""
        return cls(
            parse_kind(str(spec.get("kind") or "")),
            recurrence(
                str(spec.get("schedule") or ""),
                str(spec.get("duration") or ""),
                str(spec.get("timeZone") or "") or None,
            ),
            tuple(spec.get("applications") or ()),
            tuple(spec.get("namespaces") or ()),
            tuple(spec.get("clusters") or ()),
            bool(spec.get("manualSync")),
            bool(spec.get("useAndOperator")),
        )

    @property
    def cron(self) -> Cron:
        """The schedule."""
        return self.recurrence.cron

    @property
    def duration(self) -> timedelta:
        """How long each firing lasts."""
        return self.recurrence.duration

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
        return self.recurrence.active(now)


def windows_of(project: Mapping[str, Any] | None) -> tuple[Window, ...]:
    """The sync windows of an AppProject object (WindowError when one does not parse)."""
    specs = ((project or {}).get("spec") or {}).get("syncWindows") or []
    return tuple(Window.from_spec(spec) for spec in specs)


def is_open(windows: Sequence[Window], now: datetime, *, manual: bool = False) -> bool:
    """The rule over `windows` (all of them apply): an active deny closes (a manual sync passes when
    every active deny has manualSync); else an active allow opens; else existing allows close
    (manual: unless they all have manualSync); else open."""
    active = [window for window in windows if window.active(now)]
    denies = [window for window in active if window.kind == "deny"]
    if denies:
        return manual and all(window.manual_sync for window in denies)
    if any(window.kind == "allow" for window in active):
        return True
    inactive_allows = [window for window in windows if window.kind == "allow" and window not in active]
    if inactive_allows:
        return manual and all(window.manual_sync for window in inactive_allows)
    return True


def can_sync(windows: Sequence[Window], app: Mapping[str, Any], now: datetime, *, manual: bool) -> bool:
    """Argo CD's `CanSync` for the windows that match this Application."""
    return is_open([window for window in windows if window.matches(app)], now, manual=manual)


def _openings(windows: Sequence[Window], after: datetime) -> Iterator[datetime]:
    """The moments after `after` when `windows` may turn open: an allow starts, a deny ends."""
    streams: list[Iterable[datetime]] = [
        window.recurrence.starts(after) if window.kind == "allow" else window.recurrence.ends(after)
        for window in windows
    ]
    return heapq.merge(*streams)


def next_open(
    sets: Sequence[Sequence[Window]], now: datetime, *, horizon: timedelta = HORIZON
) -> datetime | None:
    """The first moment at or after `now` when every set of windows is open (each set on its own
    rule: a rollout's `spec.windows`, each Application's matching AppProject windows); None when
    none within `horizon`."""
    if all(is_open(windows, now) for windows in sets):
        return now
    everything = [window for windows in sets for window in windows]
    end = now + horizon
    blocked_until = now
    for moment, _ in zip(_dedupe(_openings(everything, now)), range(_MAX_EDGES), strict=False):
        if moment > end:
            return None
        if moment < blocked_until:
            continue  # an active deny still holds it
        if all(is_open(windows, moment) for windows in sets):
            return moment
        ends = [w.recurrence.active_until(moment) for w in everything if w.kind == "deny"]
        blocked_until = max([moment, *(until for until in ends if until is not None)])
    return None


def _dedupe(moments: Iterator[datetime]) -> Iterator[datetime]:
    return (moment for moment, _ in itertools.groupby(moments))


def describe(window: Window) -> str:
    """One line for people: `deny "0 22 * * *" for 8h (Europe/Paris)`."""
    zone = window.recurrence.zone.key if window.recurrence.zone else "UTC"
    return f'{window.kind} "{window.cron.text}" for {duration_text(window.duration)} ({zone})'


def duration_text(duration: timedelta) -> str:
    """`1h30m`, `45s`: a duration as Go writes it, without zero parts."""
    seconds = int(duration.total_seconds())
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return "".join(f"{n}{u}" for n, u in ((hours, "h"), (minutes, "m"), (secs, "s")) if n) or "0s"
