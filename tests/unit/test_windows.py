"""The window evaluator (orchestrator.core.windows) with the clock passed in: when a set of allow
and deny windows is open, and when it opens next."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.core.windows import (
    Window,
    WindowError,
    describe,
    is_open,
    next_open,
    parse_duration,
)

# A Wednesday.
DAY = datetime(2030, 1, 2, tzinfo=UTC)


def at(hour: int, minute: int = 0, second: int = 0, *, day: datetime = DAY) -> datetime:
    return day.replace(hour=hour, minute=minute, second=second)


def win(kind: str, schedule: str, duration: str, zone: str | None = None) -> Window:
    spec: dict[str, Any] = {"kind": kind, "schedule": schedule, "duration": duration}
    if zone:
        spec["timeZone"] = zone
    return Window.from_spec(spec)


@pytest.mark.parametrize(
    ("windows", "now", "open_now", "opens"),
    [
        pytest.param([], at(12), True, at(12), id="no-windows-always-open"),
        pytest.param([win("deny", "0 12 * * *", "1h")], at(12, 30), False, at(13), id="inside-a-deny"),
        pytest.param([win("deny", "0 12 * * *", "1h")], at(13), True, at(13), id="deny-ends-exclusive"),
        pytest.param([win("deny", "0 12 * * *", "1h")], at(12), False, at(13), id="deny-starts-inclusive"),
        pytest.param([win("allow", "0 9 * * *", "8h")], at(8), False, at(9), id="before-the-allow"),
        pytest.param(
            [win("allow", "0 9 * * *", "8h")],
            at(18),
            False,
            at(9, day=DAY + timedelta(days=1)),
            id="after-it",
        ),
        pytest.param([win("allow", "0 9 * * *", "8h")], at(10), True, at(10), id="inside-the-allow"),
        pytest.param(
            [win("allow", "0 9 * * *", "8h"), win("deny", "0 12 * * *", "1h")],
            at(12, 10),
            False,
            at(13),
            id="deny-inside-allow-wins",
        ),
        pytest.param(
            [win("allow", "0 9 * * *", "8h"), win("deny", "0 16 * * *", "2h")],
            at(16, 10),
            False,
            at(9, day=DAY + timedelta(days=1)),
            id="deny-past-the-allow-end-waits-for-the-next-allow",
        ),
        pytest.param([win("deny", "0 22 * * *", "10h")], at(3), False, at(8), id="deny-crossing-midnight"),
        pytest.param(
            [win("deny", "0 22 * * *", "10h")], at(21, 59), True, at(21, 59), id="before-the-night-deny"
        ),
        pytest.param(
            [win("allow", "0 9 * * MON-FRI", "8h")],
            at(18, day=datetime(2030, 1, 4, tzinfo=UTC)),  # a Friday evening
            False,
            at(9, day=datetime(2030, 1, 7, tzinfo=UTC)),  # Monday
            id="weekdays-only-waits-over-the-weekend",
        ),
        pytest.param(
            [win("deny", "0 12 * * *", "1h", "Europe/Paris")],
            at(11, 30),  # 12:30 in Paris (UTC+1 in January)
            False,
            at(12),
            id="time-zone-moves-the-deny",
        ),
        pytest.param(
            [win("deny", "* * * * *", "90s")], at(12, 0, 30), False, None, id="always-denied-never-opens"
        ),
        pytest.param(
            [win("deny", "0 12 * * *", "45s")], at(12, 0, 30), False, at(12, 0, 45), id="sub-minute-duration"
        ),
    ],
)
def test_open_and_next_open(
    windows: list[Window], now: datetime, open_now: bool, opens: datetime | None
) -> None:
    assert is_open(windows, now) == open_now
    assert next_open([windows], now) == opens


@pytest.mark.parametrize(
    ("window", "now", "active"),
    [
        # Europe/Berlin springs forward on 2030-03-31 at 02:00 CET (01:00 UTC) to 03:00 CEST.
        pytest.param(
            win("deny", "0 3 * * *", "1h", "Europe/Berlin"),
            datetime(2030, 3, 31, 1, 30, tzinfo=UTC),  # 03:30 CEST
            True,
            id="dst-spring-wall-clock-schedule",
        ),
        pytest.param(
            win("deny", "30 2 * * *", "10m", "Europe/Berlin"),
            datetime(2030, 3, 31, 1, 35, tzinfo=UTC),  # 03:35 CEST: 02:30 was skipped, fired as 03:30
            True,
            id="dst-skipped-wall-time-fires-after-the-jump",
        ),
        pytest.param(
            win("deny", "0 0 * * *", "6h", "Europe/Berlin"),
            datetime(2030, 3, 31, 4, 30, tzinfo=UTC),  # 06:30 CEST, yet only 5h30 since midnight CET
            True,
            id="dst-duration-is-elapsed-time",
        ),
        pytest.param(
            # Fall back on 2030-10-27 at 03:00 CEST (01:00 UTC) to 02:00 CET: 01:30 fires once.
            win("deny", "30 1 * * *", "1h", "Europe/Berlin"),
            datetime(2030, 10, 27, 0, 45, tzinfo=UTC),  # 02:45 CEST
            False,
            id="dst-repeated-hour-fires-once",
        ),
        pytest.param(
            win("deny", "0 9 * * *", "1h", "America/New_York"),
            datetime(2030, 7, 1, 13, 30, tzinfo=UTC),  # 09:30 EDT
            True,
            id="summer-offset",
        ),
    ],
)
def test_time_zones_and_dst(window: Window, now: datetime, active: bool) -> None:
    assert window.active(now) == active


def test_next_open_across_dst() -> None:
    # A deny until 08:00 Berlin time: on the morning clocks spring forward it ends at 06:00 UTC.
    deny = win("deny", "0 0 * * *", "7h", "Europe/Berlin")  # 00:00 CET + 7h elapsed = 08:00 CEST
    opens = next_open([[deny]], datetime(2030, 3, 31, 3, 0, tzinfo=UTC))
    assert opens == datetime(2030, 3, 31, 6, 0, tzinfo=UTC)


def test_every_set_must_be_open() -> None:
    ours = [win("deny", "0 12 * * *", "1h")]
    project = [win("deny", "30 12 * * *", "1h")]
    assert next_open([ours, project], at(12, 10)) == at(13, 30)


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        pytest.param({"kind": "maybe"}, "kind", id="kind"),
        pytest.param({"schedule": "0 12 * *"}, "schedule", id="four-fields"),
        pytest.param({"schedule": "0 24 * * *"}, "schedule", id="hour-out-of-range"),
        pytest.param({"schedule": "0 12 * * FUNDAY"}, "schedule", id="unknown-day-name"),
        pytest.param({"schedule": "5-1 * * * *"}, "schedule", id="backwards-range"),
        pytest.param({"duration": "soon"}, "duration", id="duration-words"),
        pytest.param({"duration": "0s"}, "duration", id="duration-zero"),
        pytest.param({"duration": "1d"}, "duration", id="duration-days-are-not-go"),
        pytest.param({"duration": "-1h"}, "duration", id="duration-negative"),
        pytest.param({"timeZone": "Mars/Olympus"}, "timeZone", id="time-zone"),
    ],
)
def test_a_bad_window_names_its_field(spec: dict[str, Any], field: str) -> None:
    full = {"kind": "deny", "schedule": "0 12 * * *", "duration": "1h", **spec}
    with pytest.raises(WindowError) as raised:
        Window.from_spec(full)
    assert raised.value.field == field


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        pytest.param("1h30m", 5400, id="hours-and-minutes"),
        pytest.param("90s", 90, id="seconds"),
        pytest.param("1.5h", 5400, id="fraction"),
    ],
)
def test_durations(text: str, seconds: int) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)


def test_describe() -> None:
    assert (
        describe(win("deny", "0 22 * * *", "8h", "Europe/Paris")) == 'deny "0 22 * * *" for 8h (Europe/Paris)'
    )


_windows = st.lists(
    st.builds(
        win,
        st.sampled_from(["allow", "deny"]),
        st.sampled_from(["0 * * * *", "*/15 * * * *", "30 9 * * *", "0 12 * * MON-FRI", "0 0,12 * * *"]),
        st.sampled_from(["1m", "10m", "45m", "2h", "90s"]),
        st.sampled_from([None, "Europe/Paris", "Asia/Kolkata"]),
    ),
    max_size=3,
)


@settings(max_examples=40, deadline=None)
@given(windows=_windows, minutes=st.integers(min_value=0, max_value=3 * 24 * 60))
def test_next_open_is_open_and_nothing_before_it_is(windows: list[Window], minutes: int) -> None:
    now = DAY + timedelta(minutes=minutes, seconds=17)
    horizon = timedelta(hours=26)
    opens = next_open([windows], now, horizon=horizon)
    if opens is not None:
        assert opens >= now
        assert is_open(windows, opens)
    probe, end = now, opens or now + horizon
    while probe < end:  # every half minute in between is closed
        assert not is_open(windows, probe)
        probe += timedelta(seconds=30)
