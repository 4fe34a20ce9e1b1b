"""The window gate's decision (steps.window_gate.window_state), pure: the rollout's windows and each
Application's matching AppProject windows, what closes a cluster, and the note the status shows."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.core.windows import Window, windows_of
from steps.window_gate import open_first, window_state

NOW = datetime(2030, 1, 2, 12, 30, tzinfo=UTC)  # a Wednesday
DENY_NOON = {"kind": "deny", "schedule": "0 12 * * *", "duration": "1h"}


def app(name: str, project: str = "default", cluster: str = "eu-1") -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"project": project, "destination": {"name": cluster}}}


def project(*windows: dict[str, Any]) -> tuple[Window, ...]:
    return windows_of({"spec": {"syncWindows": list(windows)}})


@pytest.mark.parametrize(
    ("ours", "projects", "apps", "closed_by", "opens"),
    [
        pytest.param([], {}, [app("a")], (), None, id="no-windows-open"),
        pytest.param(
            [DENY_NOON], {}, [app("a")], ("spec.windows",), datetime(2030, 1, 2, 13, tzinfo=UTC), id="ours"
        ),
        pytest.param(
            [],
            {"default": project({**DENY_NOON, "applications": ["a"]})},
            [app("a")],
            ("AppProject default (Application a)",),
            datetime(2030, 1, 2, 13, tzinfo=UTC),
            id="project-window-matching-the-application",
        ),
        pytest.param(
            [],
            {"default": project({**DENY_NOON, "applications": ["other-*"]})},
            [app("a")],
            (),
            None,
            id="project-window-for-other-applications",
        ),
        pytest.param(
            [],
            {"default": project({**DENY_NOON, "clusters": ["eu-*"], "manualSync": True})},
            [app("a")],
            ("AppProject default (Application a)",),
            datetime(2030, 1, 2, 13, tzinfo=UTC),
            id="manual-sync-does-not-free-our-automated-sync",
        ),
        pytest.param(
            [{**DENY_NOON, "duration": "45m"}],
            {"payments": project({**DENY_NOON, "applications": ["*"]})},
            [app("a"), app("b", project="payments")],
            ("spec.windows", "AppProject payments (Application b)"),
            datetime(2030, 1, 2, 13, tzinfo=UTC),
            id="both-closed-opens-when-both-are-open",
        ),
    ],
)
def test_window_state(
    ours: list[dict[str, Any]],
    projects: dict[str, tuple[Window, ...]],
    apps: list[dict[str, Any]],
    closed_by: tuple[str, ...],
    opens: datetime | None,
) -> None:
    state = window_state([Window.from_spec(w) for w in ours], projects, apps, NOW)
    assert state.open == (not closed_by)
    assert state.closed_by == closed_by
    assert state.opens_at == opens


def test_the_note_says_when_and_what() -> None:
    state = window_state([Window.from_spec(DENY_NOON)], {}, [app("a")], NOW)
    assert state.note == "waiting for window: opens at 2030-01-02T13:00:00Z (closed: spec.windows)"
    assert window_state([], {}, [app("a")], NOW).note == ""


def test_a_window_that_never_opens_says_so() -> None:
    always = Window.from_spec({"kind": "deny", "schedule": "* * * * *", "duration": "1h"})
    state = window_state([always], {}, [app("a")], NOW)
    assert not state.open and state.opens_at is None
    assert "does not open within a year" in state.note


# --- open_first: the order select records a stage's targets in ---------------------------------------


@pytest.mark.parametrize(
    ("targets", "closed", "expected"),
    [
        pytest.param(("a", "b", "c"), set(), ("a", "b", "c"), id="all-open-keeps-the-plan"),
        pytest.param(("a", "b", "c"), {"a"}, ("b", "c", "a"), id="a-closed-first-goes-last"),
        pytest.param(("a", "b", "c", "d"), {"a", "c"}, ("b", "d", "a", "c"), id="each-part-keeps-its-order"),
        pytest.param(("a", "b"), {"a", "b"}, ("a", "b"), id="all-closed-keeps-the-plan"),
        pytest.param((), {"x"}, (), id="no-targets"),
    ],
)
def test_open_first_moves_the_closed_clusters_behind_the_others(
    targets: tuple[str, ...], closed: set[str], expected: tuple[str, ...]
) -> None:
    assert open_first(targets, closed) == expected


@given(st.lists(st.text(min_size=1, max_size=3), unique=True, max_size=12), st.data())
def test_open_first_is_a_stable_partition(targets: list[str], data: st.DataObject) -> None:
    closed = set(data.draw(st.lists(st.sampled_from(targets), unique=True))) if targets else set()
    ordered = open_first(targets, closed)
    assert sorted(ordered) == sorted(targets)  # the same clusters, each once
    first = [t for t in ordered if t not in closed]
    assert ordered == tuple(first) + tuple(t for t in ordered if t in closed)  # open ones first
    assert first == [t for t in targets if t not in closed]  # each part in the plan's order
    assert [t for t in ordered if t in closed] == [t for t in targets if t in closed]
