"""The CI timeline's summary (tests/support/timeline.py) names the tests that failed, in the phase
they failed, with their worker and window: a run cut short still says what broke beside what."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.timeline import summary, waited


def _line(nodeid: str, worker: str, start: float, end: float, **extra: Any) -> dict[str, Any]:
    return {
        "nodeid": nodeid,
        "worker": worker,
        "start": start,
        "end": end,
        "realstack": False,
        "cpu": 0.1,
        "children_cpu": 0.0,
        "machine_busy": 1.0,
        "phases": {"call": end - start},
        **extra,
    }


def test_the_summary_lists_each_failed_test_with_its_phase_worker_and_window() -> None:
    lines = [
        {"session": "start", "at": 100.0, "worker": "gw0", "machine_busy": 0.0},
        _line("t::ok", "gw0", 100.0, 110.0),
        _line("t::broken", "gw1", 105.0, 405.0, failed=["call"]),
        _line("t::setup_broke", "gw0", 110.0, 111.0, failed=["setup", "teardown"]),
    ]

    text = summary(lines)

    failed = text.split("failed (2)", 1)[1].splitlines()[1:]
    assert failed == [
        "  gw1     5s-  305s [call] t::broken",
        "  gw0    10s-   11s [setup, teardown] t::setup_broke",
    ]


def test_a_run_without_failures_has_no_failed_section() -> None:
    assert "failed (" not in summary([_line("t::ok", "gw0", 0.0, 1.0)])


@pytest.mark.parametrize(
    ("phases", "expected"),
    [
        pytest.param(
            {"setup": 0.0, "call": 31.0, "teardown": 0.0},
            469.0,
            id="a-stack-stopping-test-waits-for-the-guest",
        ),
        pytest.param({"setup": 100.0, "call": 400.0}, 0.0, id="no-wait-outside-the-phases"),
        pytest.param({}, 500.0, id="no-phases-recorded"),
    ],
)
def test_the_summary_shows_the_wait_outside_a_tests_phases(phases: dict[str, float], expected: float) -> None:
    line = _line("t::stops_the_stack", "gw1", 1000.0, 1500.0, phases=phases)

    assert waited(line) == expected
    assert f"waited {expected:5.1f}s" in summary([line])
