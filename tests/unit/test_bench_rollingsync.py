"""The measuring of bench/bench_rollingsync.py: waves, the fleet's labels, what the watch stream says.

The benchmark runs the real Argo CD (`make bench`); its figures are only as good as these pure
helpers, so they are tested here. The script is loaded from its file (bench/ is not a package).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.app_recorder import AppState, Seen
from tests.support.bench_scripts import load_bench

RELEASE = "b" * 40
OLD = "a" * 40


bench = load_bench("bench_rollingsync")


def state(**changes: Any) -> AppState:
    """An Application at release 1, Synced and Healthy, no operation requested; `changes` on top."""
    fields: dict[str, Any] = {
        "requested_by": "",
        "requested_rollout": "",
        "phase": "Succeeded",
        "started_at": "t-boot",
        "started_by": "test-bootstrap",
        "started_rollout": "",
        "applied": OLD,
        "sync": "Synced",
        "sync_revision": OLD,
        "health": "Healthy",
    }
    fields.update(changes)
    return AppState(**fields)


REQUESTED = {"requested_by": "w", "sync": "OutOfSync", "sync_revision": RELEASE}
RUNNING = {**REQUESTED, "phase": "Running", "started_at": "t1", "started_by": "w"}
PROGRESSING = {
    "phase": "Succeeded",
    "started_at": "t1",
    "started_by": "w",
    "applied": RELEASE,
    "sync_revision": RELEASE,
    "health": "Progressing",
}
HEALTHY = {**PROGRESSING, "health": "Healthy"}


def seen(*steps: tuple[str, float, dict[str, Any]]) -> list[Seen]:
    return [Seen(i, app, state(**fields), str(i), at) for i, (app, at, fields) in enumerate(steps)]


@pytest.mark.parametrize(
    ("parallel", "size", "slots"),
    [
        pytest.param(1, 1, 1, id="one"),
        pytest.param(3, 3, 3, id="count"),
        pytest.param(3, 2, 2, id="count-above-size"),
        pytest.param("50%", 8, 4, id="half"),
        pytest.param("50%", 1, 1, id="percent-at-least-one"),
        pytest.param("30%", 8, 2, id="percent-rounds-down"),
    ],
)
def test_a_wave_runs_as_many_at_once_as_rolling_sync_and_our_planner_would(
    parallel: int | str, size: int, slots: int
) -> None:
    assert bench.Wave("w", "w", parallel).slots(size) == slots


def test_the_fleet_has_one_canary_one_cluster_per_region_then_the_rest() -> None:
    clusters = bench.fleet(12)
    waves = [c.labels["wave"] for c in clusters]
    assert waves.count("canary") == 1 and waves.count("regions") == 3 and waves.count("rest") == 8
    regional = {c.labels["region"] for c in clusters if c.labels["wave"] == "regions"}
    assert regional == set(bench.REGIONS)
    assert len({c.name for c in clusters}) == 12


def test_rolling_sync_steps_and_our_stages_are_the_same_waves() -> None:
    steps = bench.rolling_sync_strategy(bench.WAVES)["rollingSync"]["steps"]
    ours = bench.stages(bench.WAVES)
    assert [s["matchExpressions"][0]["values"] for s in steps] == [
        [s["targets"]["clusters"]["selector"]["matchLabels"]["wave"]] for s in ours
    ]
    assert [s["maxUpdate"] for s in steps] == [s["maxParallel"] for s in ours]


@pytest.mark.parametrize(
    ("steps", "requests", "started", "healthy"),
    [
        pytest.param(
            [
                ("x", 0.0, {}),
                ("x", 2.0, REQUESTED),
                ("x", 3.0, RUNNING),
                ("x", 4.0, PROGRESSING),
                ("x", 9.0, HEALTHY),
            ],
            [2.0],
            1,
            9.0,
            id="one-sync-then-healthy",
        ),
        pytest.param(
            [("x", 0.0, REQUESTED), ("x", 2.0, RUNNING), ("x", 9.0, HEALTHY)],
            [],
            1,
            None,
            id="a-request-before-the-push-is-not-counted",
        ),
        pytest.param(
            [("x", 2.0, REQUESTED), ("x", 3.0, {}), ("x", 4.0, REQUESTED), ("x", 9.0, HEALTHY)],
            [2.0, 4.0],
            1,
            9.0,
            id="two-requests",
        ),
        pytest.param(
            [
                ("x", 2.0, {**REQUESTED, "requested_by": "someone"}),
                ("x", 9.0, {**HEALTHY, "started_by": "someone"}),
            ],
            [],
            0,
            None,
            id="another-writer-is-not-the-legs",
        ),
        pytest.param(
            [("x", 2.0, REQUESTED), ("x", 3.0, {**HEALTHY, "applied": OLD})],
            [2.0],
            1,
            None,
            id="healthy-before-an-operation-succeeded-at-the-release-is-not-done",
        ),
        pytest.param(
            [
                ("x", 2.0, REQUESTED),
                ("x", 3.0, PROGRESSING),
                ("x", 3.5, {**REQUESTED, "sync": "Synced", "health": "Progressing"}),
                ("x", 4.0, {**RUNNING, "started_at": "t2", "sync": "Synced", "health": "Healthy"}),
                ("x", 5.0, {**HEALTHY, "started_at": "t2"}),
            ],
            [2.0, 3.5],
            2,
            4.0,
            id="healthy-while-a-second-sync-runs",
        ),
    ],
)
def test_marks_say_when_the_legs_writer_asked_for_a_sync_and_when_the_release_was_healthy(
    steps: list[tuple[str, float, dict[str, Any]]], requests: list[float], started: int, healthy: float | None
) -> None:
    marks = bench.marks_of(seen(*steps), "w", RELEASE, since=1.0)
    assert marks["x"].requests == requests
    assert len(marks["x"].started) == started
    assert marks["x"].healthy == healthy


def marks(first: float, healthy: float) -> Any:
    return bench.AppMarks(requests=[first], started={"t"}, healthy=healthy)


def test_figures_of_a_leg() -> None:
    # Pushed at 10. Wave 1: a (sync 12, Healthy 20). Wave 2, two at a time: b, c, d; d takes c's slot.
    got = bench.figures(
        {
            "a": marks(12.0, 20.0),
            "b": marks(21.0, 30.0),
            "c": marks(21.5, 28.0),
            "d": marks(28.5, 35.0),
        },
        [["a"], ["b", "c", "d"]],
        [1, 2],
        pushed=10.0,
    )
    assert got.wall == pytest.approx(25.0)
    assert got.first_sync == pytest.approx(2.0)
    assert got.boundaries == [pytest.approx(1.0)]
    assert got.handoffs == [pytest.approx(0.5)]
    # Wave 1: 8 s. Wave 2 at two at a time: b 9 s, c 6.5 s, d 6.5 s after c -> 13 s.
    assert got.critical == pytest.approx(8.0 + 13.0)
    assert set(got.requests.values()) == {1} and set(got.started.values()) == {1}


def test_figures_refuse_an_application_never_seen_healthy() -> None:
    with pytest.raises(ValueError, match="b"):
        bench.figures({"a": marks(1.0, 2.0), "b": bench.AppMarks()}, [["a"], ["b"]], [1, 1], pushed=0.0)


@pytest.mark.parametrize(
    ("argv", "titles"),
    [
        pytest.param(
            [],
            [
                "ROLLINGSYNC grace 30s",
                "ROLLINGSYNC grace 0s",
                "OURS local engine",
                "OURS real Argo requeue 10s",
                "OURS real Argo requeue 1s",
            ],
            id="defaults",
        ),
        pytest.param(
            ["--legs", "argo, rollingsync", "--requeue-times", "1s", "--refresh-grace-seconds", "5"],
            ["OURS real Argo requeue 1s", "ROLLINGSYNC grace 5s"],
            id="chosen",
        ),
    ],
)
def test_the_command_line_says_which_runs_are_measured_in_which_order(
    argv: list[str], titles: list[str]
) -> None:
    assert [run.title for run in bench.runs(bench.parse_options(argv))] == titles


def test_an_unknown_leg_is_a_usage_error() -> None:
    with pytest.raises(SystemExit):
        bench.parse_options(["--legs", "kargo"])
