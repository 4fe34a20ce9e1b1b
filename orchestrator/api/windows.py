"""Rollout windows in the API: `spec.windows` (docs/windows.md; absent: a rollout may sync any time).

Each window is `{kind: allow|deny, schedule: <cron>, duration: <Go duration>, timeZone: <IANA>}`,
the forms of an Argo CD AppProject's `syncWindows` and the same rule (an active deny closes; when
any allow exists, the time outside every allow is closed). The steps write no sync while the
windows are closed; a wave waits until they open (`steps.window_gate`).

Each field is checked by the evaluator that runs them (`orchestrator.core.windows`), so a window
`validate` accepts is one the steps can evaluate. The API server's twin is the schema's `enum` and
`pattern`s: they catch the form (kind, five fields or a descriptor, a Go duration, a zone-like
name); the values (a minute of 61, a zone that does not exist) only `validate`, the models and the
watcher's Valid condition see.

Pure data, like `orchestrator.api.models`, which imports this module.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any

from pydantic import Field, field_validator

from orchestrator.api.base import _Model
from orchestrator.core.clock import format_time
from orchestrator.core.windows import (
    Cron,
    Window,
    WindowError,
    describe,
    is_open,
    next_open,
    parse_duration,
    parse_zone,
)

# The forms the API server checks (the CRD's patterns); the models check the values too.
SCHEDULE_PATTERN = r"^\s*(@[a-z]+|\S+(\s+\S+){4})\s*$"
DURATION_PATTERN = r"^(([0-9]+(\.[0-9]*)?|\.[0-9]+)[hms])+$"
TIME_ZONE_PATTERN = r"^[A-Za-z0-9_+-]+(/[A-Za-z0-9_+-]+)*$"
MAX_WINDOWS = 32


class WindowKind(StrEnum):
    """What a window does while it is active."""

    ALLOW = "allow"
    """Syncs may be written while it is active; outside every allow window, none."""
    DENY = "deny"
    """No sync is written while it is active, even inside an allow window."""


class RolloutWindow(_Model):
    """When the rollout may write syncs: an allow or deny window (docs/windows.md)."""

    kind: WindowKind
    """allow or deny."""
    schedule: Annotated[
        str, Field(min_length=1, max_length=256, json_schema_extra={"pattern": SCHEDULE_PATTERN})
    ]
    """When the window starts: five cron fields (minute hour day month weekday) or @daily, @hourly..."""
    duration: Annotated[
        str, Field(min_length=1, max_length=64, json_schema_extra={"pattern": DURATION_PATTERN})
    ]
    """How long it lasts from each start: a Go duration of hours, minutes and seconds, such as 1h30m."""
    time_zone: (
        Annotated[str, Field(min_length=1, max_length=64, json_schema_extra={"pattern": TIME_ZONE_PATTERN})]
        | None
    ) = None
    """The IANA time zone the schedule is read in, such as Europe/Paris; absent: UTC."""

    @field_validator("schedule")
    @classmethod
    def _schedule(cls, schedule: str) -> str:
        try:
            Cron.parse(schedule)
        except WindowError as exc:
            raise ValueError(f"{exc} (e.g. '0 22 * * MON-FRI' or '@daily')") from exc
        return schedule

    @field_validator("duration")
    @classmethod
    def _duration(cls, duration: str) -> str:
        try:
            parse_duration(duration)
        except WindowError as exc:
            raise ValueError(str(exc)) from exc
        return duration

    @field_validator("time_zone")
    @classmethod
    def _time_zone(cls, time_zone: str | None) -> str | None:
        try:
            parse_zone(time_zone)
        except WindowError as exc:
            raise ValueError(str(exc)) from exc
        return time_zone

    def evaluated(self) -> Window:
        """The window as the evaluator reads it."""
        return Window.from_spec(
            {
                "kind": self.kind.value,
                "schedule": self.schedule,
                "duration": self.duration,
                "timeZone": self.time_zone or "",
            }
        )


RolloutWindows = Annotated[list[RolloutWindow], Field(max_length=MAX_WINDOWS)]


def evaluated_windows(windows: Sequence[RolloutWindow] | None) -> tuple[Window, ...]:
    """`spec.windows` as the evaluator reads them (() when absent)."""
    return tuple(window.evaluated() for window in windows or ())


@dataclass(frozen=True)
class Outlook:
    """What `spec.windows` say at one moment: open now, or closed until when (None: not within a year)."""

    at: datetime
    open: bool
    opens_at: datetime | None

    def sentence(self) -> str:
        """One line for people."""
        if self.open:
            return f"open at {format_time(self.at)}: a rollout may write syncs now"
        if self.opens_at is None:
            return f"closed at {format_time(self.at)} and not open within a year: no rollout writes a sync"
        return (
            f"closed at {format_time(self.at)}: a rollout writes no sync until {format_time(self.opens_at)}"
        )

    def to_dict(self) -> dict[str, Any]:
        """The `-o json` form."""
        return {
            "evaluatedAt": format_time(self.at),
            "open": self.open,
            "opensAt": format_time(self.opens_at) if self.opens_at else None,
        }


def outlook(windows: Sequence[RolloutWindow] | None, now: datetime) -> Outlook:
    """Whether `spec.windows` are open at `now`, and when they open next (pure: `now` passed in)."""
    evaluated = evaluated_windows(windows)
    opens = next_open([evaluated], now)
    return Outlook(now, is_open(evaluated, now), opens)


def describe_windows(windows: Sequence[RolloutWindow] | None) -> tuple[str, ...]:
    """One line per window for `plan` and `validate`: `deny "0 22 * * *" for 8h (Europe/Paris)`."""
    return tuple(describe(window) for window in evaluated_windows(windows))
