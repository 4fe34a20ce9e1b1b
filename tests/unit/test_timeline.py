"""The opt-in timeline of a test run (tests/support/timeline.py): what a worker writes, the summary."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support import timeline


def line(worker: str, nodeid: str, start: float, end: float, *, realstack: bool = False) -> dict[str, Any]:
    return {
        "worker": worker,
        "nodeid": nodeid,
        "realstack": realstack,
        "start": start,
        "end": end,
        "cpu": 1.0,
        "children_cpu": 2.0,
        "machine_busy": 0.0,
        "phases": {},
    }


def test_a_worker_writes_one_line_per_test_and_its_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(timeline.VARIABLE, str(tmp_path / "run"))
    recorder = timeline.Recorder.for_worker("gw3")
    assert recorder is not None
    recorder.session("start")
    with recorder.test("tests/unit/test_x.py::test_y", realstack=False):
        recorder.phases["call"] = 0.25
    lines = [json.loads(text) for text in (tmp_path / "run" / "gw3.jsonl").read_text().splitlines()]
    assert [entry.get("session") for entry in lines] == ["start", None]
    test = lines[1]
    assert test["worker"] == "gw3" and test["nodeid"] == "tests/unit/test_x.py::test_y"
    assert test["end"] >= test["start"] and test["phases"] == {"call": 0.25}
    assert test["realstack"] is False


def test_unset_it_records_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(timeline.VARIABLE, raising=False)
    assert timeline.Recorder.for_worker("gw0") is None


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        pytest.param(
            [
                line("gw0", "a.py::slow", 100.0, 400.0, realstack=True),
                line("gw1", "b.py::fast", 100.0, 150.0),
                line("gw1", "b.py::later", 150.0, 250.0),
            ],
            [
                "3 tests on 2 workers; the last ended at 300s",
                "gw0: 1 tests, first start 0s, end 300s (idle tail 0s), in tests 300s (300s real stack)",
                "gw1: 2 tests, first start 0s, end 150s (idle tail 150s), in tests 150s (0s real stack)",
                "outside the real stack: 2 tests, 150s of wall time over the workers",
                "300.0s gw0",
            ],
            id="each-workers-end-and-idle-tail-from-the-last-end",
        ),
        pytest.param([], ["no tests in the timeline"], id="empty"),
    ],
)
def test_the_summary(lines: list[dict[str, Any]], expected: list[str]) -> None:
    text = timeline.summary(lines)
    for part in expected:
        assert part in text, text
