"""How a watch response body becomes events (`orchestrator.kube.client.watch_events`): one event per
line as soon as its line is complete, and a body cut inside an event (found by the fault suite's
truncating proxy, cut inside a multi-byte character) is a TruncatedEvent the watch retries, never
a crash of the thread that reads it."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.kube.client import TruncatedEvent, watch_events

EVENTS = [
    {"type": "ADDED", "object": {"metadata": {"name": "a", "annotations": {"note": "héllo ✓"}}}},
    {"type": "MODIFIED", "object": {"metadata": {"name": "b"}}},
    {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "42"}}},
]
# An event cut inside the two bytes of "é".
CUT_IN_A_CHARACTER = '{"type": "ADDED", "object": {"n": "h\u00e9'.encode()[:-1] + b"\n"
BODY = b"".join(json.dumps(event, ensure_ascii=False).encode() + b"\n" for event in EVENTS)


def chunked(body: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({0, len(body), *(cut % (len(body) + 1) for cut in cuts)})
    return [body[start:end] for start, end in itertools.pairwise(points)]


@given(st.lists(st.integers(min_value=0, max_value=10_000), max_size=20))
def test_every_split_of_a_whole_body_gives_the_same_events(cuts: list[int]) -> None:
    assert list(watch_events(chunked(BODY, cuts))) == EVENTS


@given(st.integers(min_value=1, max_value=len(BODY) - 1), st.lists(st.integers(min_value=0), max_size=5))
def test_a_body_cut_inside_an_event_raises_truncated_after_the_whole_events(
    cut: int, splits: list[int]
) -> None:
    body = BODY[:cut]
    if body.endswith(b"\n"):
        return  # cut between events: a whole (shorter) body
    whole = body.count(b"\n")
    seen = []
    with pytest.raises(TruncatedEvent):
        for event in watch_events(chunked(body, splits)):
            seen.append(event)
    assert seen == EVENTS[:whole]


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(
            '{"type": "ADDED", "object": {"n": "h\u00e9'.encode()[:-1] + b"\n",
            id="cut-inside-a-utf8-character",
        ),
        pytest.param(b'{"type": "ADDED", "obj\n', id="cut-inside-the-json"),
        pytest.param(b"[1, 2]\n", id="json-that-is-not-an-event"),
        pytest.param(b'{"type": "ADDED"}', id="no-newline-at-the-end"),
    ],
)
def test_a_broken_line_is_a_truncated_event_not_a_crash(body: bytes) -> None:
    with pytest.raises(TruncatedEvent):
        list(watch_events([body]))


def test_blank_lines_are_skipped_and_an_event_comes_as_soon_as_its_line_ends() -> None:
    def chunks():
        yield b"\n" + BODY.split(b"\n")[0] + b"\n"
        raise AssertionError("read past the first complete line")

    assert next(watch_events(chunks())) == EVENTS[0]
