"""The sizing math of a rollout (orchestrator/planning/sizing.py): int-or-percent, stage size,
batch count, a batch's slots and clusters, deadline waves and the first wave. Pure functions, tables
and Hypothesis invariants; nothing talks to a cluster. (The planner, the builder and `render`
agreeing on a stage's size: test_stage_sizing.py; the batch step's use: test_batch_step.py.)
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.api.models import Stage
from orchestrator.planning.sizing import (
    StageSize,
    batch_count,
    clusters_of_batch,
    deadline_waves,
    first_wave,
    resolve_int_or_percent,
    slots_of_batch,
    stage_size,
)
from tests.support.builders import make_stage

# --- int or percent -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("size", "total", "expected"),
    [
        pytest.param("10%", 2, 1, id="10pct-of-2-rounds-down-to-min-1"),
        pytest.param("50%", 5, 2, id="50pct-of-5-rounds-down"),
        pytest.param("100%", 0, 1, id="100pct-of-0-is-min-1-caller-caps"),
        pytest.param("1%", 0, 1, id="1pct-of-0-is-min-1"),
        pytest.param("100%", 7, 7, id="100pct-is-all"),
        pytest.param("25%", 12, 3, id="25pct-of-12-exact"),
        pytest.param("33%", 10, 3, id="33pct-of-10"),
        pytest.param("99%", 100, 99, id="99pct-of-100"),
        pytest.param("1%", 1000, 10, id="1pct-of-1000"),
        pytest.param(3, 2, 3, id="int-is-as-is-even-above-total"),
        pytest.param(1, 0, 1, id="int-1-of-0"),
    ],
)
def test_resolve_int_or_percent(size: int | str, total: int, expected: int) -> None:
    assert resolve_int_or_percent(size, total) == expected


@pytest.mark.parametrize("size", [pytest.param("0%", id="0pct"), pytest.param("abc", id="abc")])
def test_resolve_rejects_what_validation_rejects(size: str) -> None:
    with pytest.raises(ValueError, match="not an int or percentage"):
        resolve_int_or_percent(size, 10)


@given(percent=st.integers(min_value=1, max_value=100), total=st.integers(min_value=0, max_value=100_000))
def test_percentage_resolution_is_floor_with_minimum_one(percent: int, total: int) -> None:
    resolved = resolve_int_or_percent(f"{percent}%", total)
    assert resolved >= 1
    assert resolved == max(1, total * percent // 100)
    # Never more than the total, except the minimum of 1 on an empty total (the caller caps it).
    assert resolved <= max(total, 1)
    # Monotone in the percentage: a larger share never resolves to fewer clusters.
    if percent < 100:
        assert resolve_int_or_percent(f"{percent + 1}%", total) >= resolved


@given(size=st.integers(min_value=1, max_value=10_000), total=st.integers(min_value=0, max_value=10_000))
def test_integer_sizes_ignore_the_total(size: int, total: int) -> None:
    assert resolve_int_or_percent(size, total) == size


# --- a stage's size ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stage", "available", "targets", "expected"),
    [
        pytest.param({"max_targets": 1}, 12, None, StageSize(1, 1), id="one-of-twelve"),
        pytest.param({"max_targets": "50%", "max_parallel": "50%"}, 12, None, StageSize(6, 3), id="halves"),
        pytest.param({"max_targets": 5}, 3, None, StageSize(3, 1), id="max-targets-capped-by-the-fleet"),
        pytest.param({"max_targets": "10%"}, 0, None, StageSize(0, 1), id="nothing-available-parallel-one"),
        pytest.param({"max_parallel": 4}, 10, 2, StageSize(2, 4), id="int-max-parallel-above-the-targets"),
        pytest.param({"max_parallel": "25%"}, 100, 12, StageSize(12, 3), id="percent-of-the-known-targets"),
    ],
)
def test_stage_size(
    stage: dict[str, int | str], available: int, targets: int | None, expected: StageSize
) -> None:
    sized = stage_size(Stage.model_validate(make_stage("s", **stage)), available=available, targets=targets)
    assert sized == expected


# --- batches ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("size", "threshold", "per_batch", "batches"),
    [
        pytest.param(StageSize(50, 10), 50, 500, 0, id="at-the-threshold-one-pod-per-cluster"),
        pytest.param(StageSize(51, 10), 50, 500, 1, id="above-the-threshold-one-batch"),
        pytest.param(StageSize(1_001, 100), 50, 500, 3, id="at-most-per-batch-clusters-per-batch"),
        pytest.param(StageSize(10_000, 4), 50, 500, 4, id="never-more-batches-than-max-parallel"),
        pytest.param(StageSize(3, 1), 0, 500, 1, id="threshold-zero-batches-every-stage"),
        pytest.param(StageSize(0, 1), 0, 500, 0, id="planned-empty-no-batch"),
    ],
)
def test_batch_count(size: StageSize, threshold: int, per_batch: int, batches: int) -> None:
    assert batch_count(size, threshold=threshold, per_batch=per_batch) == batches


@pytest.mark.parametrize(
    ("max_parallel", "batches", "shares"),
    [
        pytest.param(4, 4, [1, 1, 1, 1], id="one-slot-each"),
        pytest.param(10, 3, [4, 3, 3], id="the-first-batches-take-the-remainder"),
        pytest.param(7, 1, [7], id="one-batch-takes-all"),
    ],
)
def test_slots_of_batch(max_parallel: int, batches: int, shares: list[int]) -> None:
    assert [slots_of_batch(max_parallel, batches, batch) for batch in range(batches)] == shares


@pytest.mark.parametrize(
    ("targets", "batches", "max_parallel", "dealt"),
    [
        pytest.param("abcdef", 2, 2, ["ace", "bdf"], id="batches-divide-max-parallel"),
        pytest.param("abcdefg", 2, 3, ["acdfg", "be"], id="two-slots-and-one"),
        pytest.param("ab", 3, 3, ["a", "b", ""], id="fewer-targets-than-batches"),
    ],
)
def test_clusters_of_batch(targets: str, batches: int, max_parallel: int, dealt: list[str]) -> None:
    taken = [
        "".join(clusters_of_batch(list(targets), batches, batch, max_parallel)) for batch in range(batches)
    ]
    assert taken == dealt


# --- waves ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("size", "waves", "first"),
    [
        pytest.param(StageSize(12, 3), 4, 3, id="four-waves-of-three"),
        pytest.param(StageSize(13, 3), 5, 3, id="a-partial-last-wave-counts"),
        pytest.param(StageSize(0, 1), 1, 1, id="a-stage-planned-empty-still-one-wave"),
        pytest.param(StageSize(2, 5), 1, 5, id="max-parallel-above-the-targets-one-wave"),
    ],
)
def test_deadline_waves_and_the_first_wave(size: StageSize, waves: int, first: int) -> None:
    assert (deadline_waves(size), first_wave(size)) == (waves, first)


@given(st.integers(min_value=0, max_value=20_000), st.integers(min_value=1, max_value=5_000))
def test_the_waves_cover_every_target(targets: int, max_parallel: int) -> None:
    waves = deadline_waves(StageSize(targets, max_parallel))
    assert waves * max_parallel >= targets and (waves - 1) * max_parallel < max(targets, 1)
