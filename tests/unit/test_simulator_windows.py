"""Sync windows of an AppProject as the simulated Argo CD evaluates them (types.go `CanSync`)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from orchestrator.simulator.config import Behaviour
from orchestrator.simulator.decision_types import World
from orchestrator.simulator.sync_operation import MSG_BLOCKED
from orchestrator.simulator.windows import Cron, Window, WindowError, can_sync, windows_of
from tests.unit.test_simulator_behaviours import make_app, play, sync_op

# A Wednesday, 14:30 UTC.
NOW = datetime(2030, 1, 2, 14, 30, tzinfo=UTC)
APP = {"metadata": {"name": "web-eu"}, "spec": {"destination": {"name": "eu", "namespace": "web"}}}


def window(
    kind: str = "deny", schedule: str = "0 14 * * *", duration: str = "1h", **extra: Any
) -> dict[str, Any]:
    return {"kind": kind, "schedule": schedule, "duration": duration, "applications": ["*"], **extra}


@pytest.mark.parametrize(
    ("schedule", "duration", "active"),
    [
        pytest.param("0 14 * * *", "1h", True, id="fired-30-minutes-ago-for-an-hour"),
        pytest.param("0 14 * * *", "20m", False, id="fired-but-over"),
        pytest.param("0 15 * * *", "1h", False, id="not-yet"),
        pytest.param("* * * * *", "1m", True, id="every-minute"),
        pytest.param("0 14 * * MON-TUE", "1h", False, id="not-on-wednesday"),
        pytest.param("0 14 * * WED", "1h", True, id="on-wednesday"),
        pytest.param("0 */2 * * *", "1h", True, id="every-two-hours"),
        pytest.param("@daily", "15h", True, id="descriptor"),
        pytest.param("0 22 1 1 *", "16h", False, id="ended-the-morning-after"),
        pytest.param("0 22 1 1 *", "17h", True, id="lasts-past-midnight"),
    ],
)
def test_when_a_window_is_active(schedule: str, duration: str, active: bool) -> None:
    assert Window.from_spec(window(schedule=schedule, duration=duration)).active(NOW) == active


def test_a_time_zone_moves_the_schedule() -> None:
    # 14:30 UTC is 15:30 in Paris: a window from 15:00 Paris time for an hour is active.
    spec = window(schedule="0 15 * * *", duration="1h", timeZone="Europe/Paris")
    assert Window.from_spec(spec).active(NOW)


@pytest.mark.parametrize(
    ("windows", "manual", "allowed"),
    [
        pytest.param([], False, True, id="no-windows"),
        pytest.param([window()], False, False, id="active-deny-blocks-automated"),
        pytest.param([window(manualSync=True)], True, True, id="active-deny-lets-manual-through"),
        pytest.param([window(manualSync=True)], False, False, id="manual-sync-does-not-free-automated"),
        pytest.param([window(schedule="0 3 * * *")], False, True, id="inactive-deny"),
        pytest.param([window("allow")], False, True, id="active-allow"),
        pytest.param([window("allow", schedule="0 3 * * *")], False, False, id="outside-every-allow"),
        pytest.param(
            [window("allow", schedule="0 3 * * *", manualSync=True)], True, True, id="outside-allow-manual"
        ),
        pytest.param([window("allow"), window()], False, False, id="deny-wins-over-allow"),
        pytest.param([window(applications=["other-*"])], False, True, id="window-for-other-applications"),
        pytest.param([window(applications=[], clusters=["eu"])], False, False, id="matched-by-cluster-name"),
        pytest.param([window(applications=[], namespaces=["web"])], False, False, id="matched-by-namespace"),
        pytest.param(
            [window(applications=["web-*"], namespaces=["other"], useAndOperator=True)],
            False,
            True,
            id="and-operator-needs-every-criterion",
        ),
    ],
)
def test_can_sync(windows: list[dict[str, Any]], manual: bool, allowed: bool) -> None:
    parsed = windows_of({"spec": {"syncWindows": windows}})
    assert can_sync(parsed, APP, NOW, manual=manual) == allowed


@pytest.mark.parametrize(
    "spec",
    [
        pytest.param(window(kind="maybe"), id="kind"),
        pytest.param(window(schedule="0 14 * *"), id="four-fields"),
        pytest.param(window(schedule="61 * * * *"), id="minute-out-of-range"),
        pytest.param(window(duration="soon"), id="duration"),
        pytest.param(window(timeZone="Mars/Olympus"), id="time-zone"),
    ],
)
def test_a_bad_window_is_an_error(spec: dict[str, Any]) -> None:
    with pytest.raises(WindowError):
        Window.from_spec(spec)


def test_cron_day_of_month_or_day_of_week() -> None:
    cron = Cron.parse("0 0 1 * MON")  # the 1st, or any Monday (cron's rule)
    assert cron.matches(datetime(2030, 1, 7, 0, 0, tzinfo=UTC))  # a Monday
    assert cron.matches(datetime(2030, 2, 1, 0, 0, tzinfo=UTC))  # the 1st, a Friday
    assert not cron.matches(datetime(2030, 1, 8, 0, 0, tzinfo=UTC))


def test_an_appproject_deny_window_holds_the_operation_running() -> None:
    deny = windows_of({"spec": {"syncWindows": [window(schedule="* * * * *", duration="1h")]}})
    played = play(make_app(operation=sync_op()), World(behaviour=Behaviour(), sync_windows=deny), seconds=20)
    assert played.names == ["pick-up", "sync-blocked"]
    assert played.state()["message"] == MSG_BLOCKED


def test_invalid_windows_block_and_say_why() -> None:
    world = World(behaviour=Behaviour(), windows_error="schedule 'x' does not have five fields")
    played = play(make_app(operation=sync_op()), world, seconds=20)
    assert (
        played.state()["message"]
        == f"{MSG_BLOCKED}: invalid sync windows: schedule 'x' does not have five fields"
    )
