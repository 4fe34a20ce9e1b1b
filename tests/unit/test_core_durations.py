"""Argo durations in seconds: the one reader the local executor and the analysis builder share."""

from __future__ import annotations

import pytest

from orchestrator.core.durations import duration_seconds


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        pytest.param("30s", 30.0, id="seconds"),
        pytest.param("1h30m", 5400.0, id="hours-and-minutes"),
        pytest.param("500ms", 0.5, id="milliseconds"),
        pytest.param("45", 45.0, id="a-bare-number-is-seconds"),
        pytest.param(" 2m ", 120.0, id="spaces-around"),
        pytest.param(7, 7.0, id="an-int"),
    ],
)
def test_a_duration_in_seconds(value: str | int, seconds: float) -> None:
    assert duration_seconds(value) == seconds


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("5 minutes", id="words"),
        pytest.param("1d", id="days-are-not-argo"),
        pytest.param("", id="empty"),
        pytest.param("{{args.interval}}", id="an-unresolved-argument"),
    ],
)
def test_anything_else_is_refused_by_name(value: str) -> None:
    with pytest.raises(ValueError, match="is not a duration"):
        duration_seconds(value)
