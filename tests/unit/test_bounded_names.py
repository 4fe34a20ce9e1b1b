"""Every name derived from a ProgressiveSync's name (a Workflow, a label value, a stage record, an
Event) follows one rule, `bounded_name`: the name whole when it fits, else a cut name, a hash of the
whole name and the tail. Objects already named by it keep their names."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.api.metadata import bounded_name, label_value, workflow_name
from orchestrator.api.models import OBJECT_NAME_MAX_LENGTH, OBJECT_NAME_PATTERN
from orchestrator.api.stage_records import record_name
from orchestrator.watcher.act import event_name

IDENTITY = "0123456789abcdef"
object_names = st.from_regex(OBJECT_NAME_PATTERN, fullmatch=True).filter(
    lambda n: len(n) <= OBJECT_NAME_MAX_LENGTH
)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        # The values the names had before the rule was shared: a rollout under way across an upgrade
        # finds its Workflow and its stage records under the same names.
        pytest.param(
            lambda: workflow_name("a" * 44 + "-" + "b" * 30, "7f3c2a1b9e"),
            "a" * 44 + "-2a61bb-7f3c2a1b9e",
            id="workflow-name-unchanged",
        ),
        pytest.param(
            lambda: label_value("c" * 55 + ".-" + "d" * 10), "c" * 55 + "-e48802", id="label-value-unchanged"
        ),
        pytest.param(
            lambda: record_name("e" * 220 + "-" + "f" * 30, "7f3c2a1b9e", 3, 1),
            "e" * 220 + "-ffffffff-1cfffb92-7f3c2a1b9e-3-1",
            id="record-name-unchanged",
        ),
        pytest.param(
            lambda: event_name("web", IDENTITY),
            f"web.{IDENTITY}",
            id="a-short-event-name-is-name-dot-identity",
        ),
        pytest.param(
            lambda: event_name("g" * 236 + "-" + "h" * 16, IDENTITY),
            "g" * 229 + f"-b87121.{IDENTITY}",
            id="a-long-event-name-is-cut-and-hashed",
        ),
    ],
)
def test_names_derived_from_a_progressive_sync(name: Callable[[], str], expected: str) -> None:
    assert name() == expected


def test_a_cut_drops_what_a_dns_label_cannot_end_with() -> None:
    digest = hashlib.sha256(b"ab-.cdef").hexdigest()[:2]
    assert bounded_name("ab-.cdef", "-x", 8, hash_length=2) == f"ab-{digest}-x"


def test_a_tail_that_leaves_no_room_is_refused() -> None:
    with pytest.raises(ValueError, match="no room"):
        bounded_name("web", "-" + "x" * 60, 63)


@given(object_names)
def test_event_names_are_object_names_and_keep_the_identity(ps_name: str) -> None:
    """A ProgressiveSync may have any object name, up to 253 characters: its Events' names are
    valid too (a name near the limit once gave an Event the API server refused)."""
    name = event_name(ps_name, IDENTITY)
    assert len(name) <= OBJECT_NAME_MAX_LENGTH
    assert re.fullmatch(OBJECT_NAME_PATTERN, name), name
    assert name.endswith(f".{IDENTITY}")
    assert name == event_name(ps_name, IDENTITY)
    assert name == f"{ps_name}.{IDENTITY}" or len(ps_name) > OBJECT_NAME_MAX_LENGTH - len(IDENTITY) - 1


@given(object_names, object_names)
def test_two_progressive_syncs_never_share_an_event_name(first: str, second: str) -> None:
    if first != second:
        assert event_name(first, IDENTITY) != event_name(second, IDENTITY)
