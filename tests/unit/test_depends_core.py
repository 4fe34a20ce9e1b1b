"""The pure rules of spec.dependsOn (orchestrator/api/depends.py): a dependency's status to
Satisfied/Waiting/Held, the wait's Done/Wait/TimedOut against deadlines, and cycles (Hypothesis:
a graph with a cycle through a node always has one found, an acyclic graph never). Pure.
"""

from __future__ import annotations

import itertools
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.api.depends import (
    DependencyState,
    DependencyVerdict,
    WaitOutcome,
    deadline_of,
    decide_wait,
    describe_cycle,
    find_cycle,
    judge,
)
from orchestrator.api.models import StageStatus
from tests.support.builders import T0, at, make_ps_model, make_stage

STAGES = (make_stage("canary"), make_stage("rest"))


def _dependency(
    phase: str | None, *stages: tuple[str, str], current: str | None = None, **kwargs: Any
) -> Any:
    extra = {"currentStage": current} if current else {}
    return make_ps_model(
        "payments",
        stages=STAGES,
        phase=phase,
        stage_status=[StageStatus(name=name, phase=stage_phase) for name, stage_phase in stages],  # type: ignore[arg-type]
        status_extra=extra,
        **{"rollout_id": "r1", **kwargs},
    )


@pytest.mark.parametrize(
    ("dependency", "stage", "state", "says"),
    [
        pytest.param(
            None, "canary", DependencyState.WAITING, "no ProgressiveSync payments", id="missing-waits"
        ),
        pytest.param(
            _dependency(None), "canary", DependencyState.WAITING, "not started a rollout", id="no-status"
        ),
        pytest.param(
            _dependency("Progressing", ("canary", "Progressing"), ("rest", "Pending"), current="canary"),
            "canary",
            DependencyState.WAITING,
            "waiting for payments to pass stage 'canary': rollout r1 is Progressing, now at stage 'canary'",
            id="stage-running-waits",
        ),
        pytest.param(
            _dependency("Progressing", ("canary", "Succeeded"), ("rest", "Progressing")),
            "canary",
            DependencyState.SATISFIED,
            "payments passed stage 'canary' in rollout r1",
            id="stage-succeeded-satisfies",
        ),
        pytest.param(
            _dependency("Progressing", ("canary", "Skipped"), ("rest", "Progressing")),
            "canary",
            DependencyState.SATISFIED,
            "passed stage 'canary'",
            id="stage-skipped-counts-as-passed",
        ),
        pytest.param(
            _dependency("Succeeded", ("canary", "Succeeded"), ("rest", "Succeeded")),
            None,
            DependencyState.SATISFIED,
            "finished rollout r1 Succeeded",
            id="whole-rollout-succeeded",
        ),
        pytest.param(
            _dependency("Succeeded"),
            "canary",
            DependencyState.SATISFIED,
            "finished rollout r1 Succeeded",
            id="succeeded-rollout-satisfies-any-stage",
        ),
        pytest.param(
            _dependency("Progressing", ("canary", "Succeeded"), ("rest", "Progressing")),
            None,
            DependencyState.WAITING,
            "waiting for payments to finish its rollout Succeeded",
            id="whole-rollout-still-running",
        ),
        pytest.param(
            _dependency("Failed", ("canary", "Failed"), ("rest", "Pending")),
            "canary",
            DependencyState.HELD,
            "held: payments failed at stage 'canary' in rollout r1 (Failed)",
            id="stage-failed-holds",
        ),
        pytest.param(
            _dependency("Failed", ("canary", "Succeeded"), ("rest", "Failed")),
            "canary",
            DependencyState.SATISFIED,
            "passed stage 'canary'",
            id="failure-after-the-stage-still-satisfies",
        ),
        pytest.param(
            _dependency("Failed", ("canary", "Succeeded"), ("rest", "Failed")),
            None,
            DependencyState.HELD,
            "held: payments failed at stage 'rest' in rollout r1 (Failed)",
            id="whole-rollout-failed-holds",
        ),
        pytest.param(
            _dependency("Cancelled", ("canary", "Cancelled"), ("rest", "Pending")),
            "canary",
            DependencyState.HELD,
            "held: payments failed at stage 'canary'",
            id="cancelled-holds",
        ),
        pytest.param(
            _dependency("RolledBack", ("canary", "Pending"), ("rest", "Pending")),
            "canary",
            DependencyState.HELD,
            "(RolledBack)",
            id="rolled-back-before-the-stage-holds",
        ),
        pytest.param(
            _dependency("Progressing", ("canary", "Progressing")),
            "blue",
            DependencyState.HELD,
            "held: payments has no stage 'blue' (its stages: canary, rest)",
            id="no-such-stage-holds",
        ),
    ],
)
def test_a_dependency_is_judged_from_its_newest_rollout(
    dependency: Any, stage: str | None, state: DependencyState, says: str
) -> None:
    verdict = judge("payments", stage, dependency)
    assert verdict.state is state
    assert says in verdict.message


def test_a_rollout_of_an_older_release_in_the_status_is_the_one_judged() -> None:
    # The dependency's watcher has not started the newer release yet: its status still names r1.
    verdict = judge("payments", "canary", _dependency("Succeeded", rollout_id="old-1"))
    assert verdict.state is DependencyState.SATISFIED
    assert "old-1" in verdict.message


SATISFIED = DependencyVerdict("a", DependencyState.SATISFIED, "a passed stage 'canary' in rollout r1")
WAITING = DependencyVerdict("b", DependencyState.WAITING, "waiting for b to pass stage 'canary'")
HELD = DependencyVerdict("c", DependencyState.HELD, "held: c failed at stage 'canary' in rollout r2 (Failed)")


@pytest.mark.parametrize(
    ("verdicts", "now", "outcome", "says"),
    [
        pytest.param(
            [(SATISFIED, at(60))], at(0), WaitOutcome.DONE, "dependencies passed: a passed", id="all-done"
        ),
        pytest.param(
            [(SATISFIED, at(-1))],
            at(0),
            WaitOutcome.DONE,
            "a passed",
            id="satisfied-past-its-deadline-is-done",
        ),
        pytest.param(
            [(SATISFIED, at(60)), (WAITING, at(60))], at(0), WaitOutcome.WAIT, "waiting for b", id="one-waits"
        ),
        pytest.param(
            [(HELD, at(60))], at(59), WaitOutcome.WAIT, "held: c failed", id="held-waits-until-timeout"
        ),
        pytest.param(
            [(HELD, at(60))],
            at(60),
            WaitOutcome.TIMED_OUT,
            "dependsOn timed out: held: c",
            id="held-times-out",
        ),
        pytest.param(
            [(WAITING, at(30)), (HELD, at(90))],
            at(30),
            WaitOutcome.TIMED_OUT,
            "dependsOn timed out: waiting for b",
            id="each-has-its-own-deadline",
        ),
    ],
)
def test_the_wait_is_done_waits_or_times_out(
    verdicts: list[tuple[DependencyVerdict, Any]], now: Any, outcome: WaitOutcome, says: str
) -> None:
    decision = decide_wait(verdicts, now)
    assert decision.outcome is outcome
    assert says in decision.message


@pytest.mark.parametrize(
    ("before", "started", "expected"),
    [
        pytest.param(at(100), at(10), at(160), id="from-the-stage-before-its-end"),
        pytest.param(None, at(10), at(70), id="from-the-rollout-start"),
        pytest.param(None, None, at(560), id="from-now-when-nothing-is-recorded"),
    ],
)
def test_the_deadline_is_anchored_in_the_status(before: Any, started: Any, expected: Any) -> None:
    assert deadline_of(60, stage_before_finished=before, rollout_started=started, now=at(500)) == expected


def test_the_deadline_does_not_move_with_a_rerun() -> None:
    first = deadline_of(60, stage_before_finished=None, rollout_started=T0, now=at(5))
    again = deadline_of(60, stage_before_finished=None, rollout_started=T0, now=at(50))
    assert first == again == T0 + timedelta(seconds=60)


# --- cycles ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("graph", "start", "cycle"),
    [
        pytest.param({"a": ["a"]}, "a", ("a", "a"), id="self"),
        pytest.param({"a": ["b"], "b": ["a"]}, "a", ("a", "b", "a"), id="two"),
        pytest.param(
            {"a": ["b"], "b": ["c"], "c": ["a"]}, "b", ("b", "c", "a", "b"), id="three-from-the-middle"
        ),
        pytest.param(
            {"a": ["b"], "b": ["c"], "c": ["b"]}, "a", None, id="a-cycle-downstream-is-not-this-ones"
        ),
        pytest.param({"a": ["b", "c"], "b": ["c"]}, "a", None, id="diamond"),
        pytest.param({"a": ["missing"]}, "a", None, id="unknown-names-depend-on-nothing"),
    ],
)
def test_cycles_through_a_progressive_sync(
    graph: dict[str, list[str]], start: str, cycle: tuple[str, ...] | None
) -> None:
    assert find_cycle(graph, start) == cycle


def test_a_cycle_reads_as_a_path() -> None:
    assert describe_cycle(("a", "b", "a")) == "a -> b -> a"


NODES = [f"ps{i}" for i in range(8)]


@st.composite
def acyclic_graphs(draw: st.DrawFn) -> dict[str, list[str]]:
    """Edges only from a lower index to a higher one: never a cycle."""
    return {
        node: draw(st.lists(st.sampled_from(NODES[index + 1 :]), unique=True))
        if index + 1 < len(NODES)
        else []
        for index, node in enumerate(NODES)
    }


@given(acyclic_graphs())
def test_an_acyclic_graph_never_has_a_cycle(graph: dict[str, list[str]]) -> None:
    assert all(find_cycle(graph, node) is None for node in NODES)


@given(acyclic_graphs(), st.lists(st.sampled_from(NODES), min_size=1, max_size=len(NODES), unique=True))
def test_a_planted_cycle_is_always_found_and_is_a_real_cycle(
    graph: dict[str, list[str]], ring: list[str]
) -> None:
    cyclic = {node: list(children) for node, children in graph.items()}
    for node, after in zip(ring, [*ring[1:], ring[0]], strict=True):
        cyclic[node] = [*cyclic[node], after]
    for node in ring:
        cycle = find_cycle(cyclic, node)
        assert cycle is not None
        assert cycle[0] == cycle[-1] == node
        assert all(b in cyclic[a] for a, b in itertools.pairwise(cycle))
