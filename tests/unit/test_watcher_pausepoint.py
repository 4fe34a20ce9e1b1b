"""The fault suite's failpoints (`tests/support/watcher_pausepoint.py`) patch watcher methods by name;
when the watcher's code moves, a point must fail here at once, not as a watcher that exits 1 in the
middle of a fault row (as after the Watcher split moved them to `act.Actor`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "point",
    [
        pytest.param("after-workflow-create", id="after-workflow-create"),
        pytest.param("event:RolloutStarted", id="before-an-event"),
    ],
)
def test_every_pause_point_arms_against_the_current_watcher(point: str) -> None:
    # In a child process: arming replaces methods for the whole interpreter.
    armed = subprocess.run(
        [sys.executable, "-c", f"from tests.support import watcher_pausepoint as p; p._arm({point!r}, 0)"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert armed.returncode == 0, armed.stderr
