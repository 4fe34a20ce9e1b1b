"""`orchestrator.core.text.shorten`: the start and the end of a long reason survive the cut."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.core.text import ELLIPSIS, shorten


@pytest.mark.parametrize(
    ("text", "limit", "expected"),
    [
        pytest.param("short", 10, "short", id="a-text-that-fits-is-kept"),
        pytest.param("exactly10!", 10, "exactly10!", id="a-text-at-the-limit-is-kept"),
        pytest.param("abcdefghijkl", 6, "ab\u2026jkl", id="start-and-end-kept"),
        pytest.param("abc", 1, "\u2026", id="a-limit-of-one-is-the-ellipsis"),
    ],
)
def test_shorten(text: str, limit: int, expected: str) -> None:
    assert shorten(text, limit) == expected


def test_an_analysis_reason_keeps_its_metric_when_the_run_name_is_long() -> None:
    reason = (
        f"cluster c-1: AnalysisFailed: analysis {'a-very-long-progressivesync-name-' * 4}-canary-c-1 "
        "failed: metric error-rate = [0.5] (failureCondition result[0] > 0.2; 1 of 1 measurements failed)"
    )
    cut = shorten(reason, 256)
    assert len(cut) == 256
    assert cut.startswith("cluster c-1: AnalysisFailed: analysis")
    assert cut.endswith("error-rate = [0.5] (failureCondition result[0] > 0.2; 1 of 1 measurements failed)")


@given(st.text(st.characters(blacklist_characters=ELLIPSIS), max_size=600), st.integers(1, 520))
def test_a_cut_text_is_the_limit_long_and_made_of_the_texts_ends(text: str, limit: int) -> None:
    cut = shorten(text, limit)
    if len(text) <= limit:
        assert cut == text
        return
    assert len(cut) == limit
    head, _, tail = cut.partition(ELLIPSIS)
    assert text.startswith(head) and text.endswith(tail)
