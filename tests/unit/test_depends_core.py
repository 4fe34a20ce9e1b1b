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


# --- groups (docs/depends-on.md "Groups and dependencies") ------------------------------------


def _grouped(phase: str | None, *stages: tuple[str, str], by: str = "region", **kwargs: Any) -> Any:
    """payments grouped by `by`, its status listing `<group>/<stage>` entries."""
    return _dependency(phase, *stages, groupBy=by, **kwargs)


EU_PASSED_US_RUNNING = _grouped(
    "Progressing",
    ("eu/canary", "Succeeded"),
    ("eu/rest", "Progressing"),
    ("us/canary", "Progressing"),
    ("us/rest", "Pending"),
    current="us/canary",
)


@pytest.mark.parametrize(
    ("dependency", "stage", "waiter", "state", "says"),
    [
        pytest.param(
            EU_PASSED_US_RUNNING,
            "canary",
            ("eu", "region"),
            DependencyState.SATISFIED,
            "payments passed stage 'eu/canary' in rollout r1",
            id="same-label-my-group-passed",
        ),
        pytest.param(
            EU_PASSED_US_RUNNING,
            "canary",
            ("us", "region"),
            DependencyState.WAITING,
            "waiting for payments to pass stage 'us/canary': rollout r1 is Progressing",
            id="same-label-my-group-still-running",
        ),
        pytest.param(
            EU_PASSED_US_RUNNING,
            "canary",
            ("ap", "region"),
            DependencyState.WAITING,
            "to pass stage 'canary' in every group (it has no group 'ap'): rollout r1 is Progressing,"
            " now at stage 'us/canary'; not passed yet: us/canary",
            id="same-label-no-such-group-waits-for-every-group",
        ),
        pytest.param(
            EU_PASSED_US_RUNNING,
            "canary",
            ("eu", "team"),
            DependencyState.WAITING,
            "to pass stage 'canary' in every group: rollout r1 is Progressing",
            id="other-label-waits-for-every-group",
        ),
        pytest.param(
            EU_PASSED_US_RUNNING,
            "canary",
            (None, None),
            DependencyState.WAITING,
            "not passed yet: us/canary",
            id="ungrouped-waiter-waits-for-every-group",
        ),
        pytest.param(
            _grouped("Progressing", ("eu/canary", "Succeeded"), ("us/canary", "Skipped")),
            "canary",
            (None, None),
            DependencyState.SATISFIED,
            "payments passed stage 'canary' in every group in rollout r1",
            id="every-group-passed-satisfies",
        ),
        pytest.param(
            _grouped("Progressing", ("eu/canary", "Failed"), ("us/canary", "Progressing")),
            "canary",
            (None, None),
            DependencyState.HELD,
            "held: payments failed at stage 'eu/canary' in rollout r1 (Failed)",
            id="one-group-failed-holds-every-group-wait",
        ),
        pytest.param(
            _grouped("Progressing", ("eu/canary", "Failed"), ("us/canary", "Succeeded")),
            "canary",
            ("us", "region"),
            DependencyState.SATISFIED,
            "passed stage 'us/canary'",
            id="another-group-failed-does-not-hold-mine",
        ),
        pytest.param(
            _grouped("Progressing", ("eu/canary", "Cancelled"), ("us/canary", "Succeeded")),
            "canary",
            ("eu", "region"),
            DependencyState.HELD,
            "held: payments failed at stage 'eu/canary' in rollout r1 (Cancelled)",
            id="my-group-cancelled-holds",
        ),
        pytest.param(
            _grouped("Failed", ("eu/canary", "Succeeded"), ("eu/rest", "Failed"), ("us/canary", "Pending")),
            "canary",
            ("us", "region"),
            DependencyState.HELD,
            "held: payments failed at stage 'eu/rest' in rollout r1 (Failed)",
            id="rollout-ended-before-my-group-passed-holds",
        ),
        pytest.param(
            _grouped("RolledBack", ("eu/canary", "Pending")),
            "canary",
            ("eu", "region"),
            DependencyState.HELD,
            "(RolledBack)",
            id="rolled-back-holds-per-group",
        ),
        pytest.param(
            _grouped("Progressing"),
            "canary",
            ("eu", "region"),
            DependencyState.WAITING,
            "in every group: rollout r1 is Progressing",
            id="no-stage-listed-yet-waits",
        ),
        pytest.param(
            _grouped("Succeeded"),
            "canary",
            ("ap", "region"),
            DependencyState.SATISFIED,
            "finished rollout r1 Succeeded",
            id="succeeded-rollout-satisfies-every-group",
        ),
        pytest.param(
            EU_PASSED_US_RUNNING,
            "eu/canary",
            ("us", "region"),
            DependencyState.SATISFIED,
            "payments passed stage 'eu/canary'",
            id="group-stage-named-is-that-group-for-every-waiter",
        ),
        pytest.param(
            EU_PASSED_US_RUNNING,
            "us/canary",
            (None, None),
            DependencyState.WAITING,
            "waiting for payments to pass stage 'us/canary'",
            id="group-stage-named-still-running",
        ),
        pytest.param(
            EU_PASSED_US_RUNNING,
            "ap/canary",
            (None, None),
            DependencyState.HELD,
            "held: payments has no stage 'ap/canary' in rollout r1 (its groups: eu, us)",
            id="group-stage-of-no-group-holds",
        ),
        pytest.param(
            EU_PASSED_US_RUNNING,
            "eu/blue",
            (None, None),
            DependencyState.HELD,
            "held: payments has no stage 'blue' (its stages: canary, rest)",
            id="group-stage-of-no-spec-stage-holds",
        ),
        pytest.param(
            _dependency("Progressing", ("canary", "Succeeded")),
            "eu/canary",
            (None, None),
            DependencyState.HELD,
            "held: payments has no groups (no spec.groupBy), so no stage 'eu/canary'",
            id="group-stage-of-an-ungrouped-dependency-holds",
        ),
        pytest.param(
            _dependency("Progressing", ("canary", "Succeeded"), ("rest", "Progressing")),
            "canary",
            ("eu", "region"),
            DependencyState.SATISFIED,
            "payments passed stage 'canary' in rollout r1",
            id="ungrouped-dependency-is-the-same-for-every-group",
        ),
    ],
)
def test_a_grouped_dependency_is_judged_per_group_or_in_every_group(
    dependency: Any, stage: str, waiter: tuple[str | None, str | None], state: DependencyState, says: str
) -> None:
    # waiter: the waiting stage's group and the waiting spec's groupBy (None, None: not grouped)
    group, group_by = waiter
    verdict = judge("payments", stage, dependency, group=group, group_by=group_by)
    assert verdict.state is state, verdict.message
    assert says in verdict.message


GROUPS = ["eu", "us", "ap", "(none)"]
PHASES = ["Pending", "Progressing", "Succeeded", "Skipped", "Failed", "Cancelled"]


@given(st.dictionaries(st.sampled_from(GROUPS), st.sampled_from(PHASES), min_size=1), st.sampled_from(GROUPS))
def test_every_group_is_the_strictest_and_a_group_never_waits_for_a_stricter_rule(
    phases: dict[str, str], mine: str
) -> None:
    # Satisfied in every group implies satisfied in mine; one group stopped holds "every group".
    rows = [(f"{group}/canary", phase) for group, phase in phases.items()]
    dependency = _grouped("Progressing", *rows)
    every = judge("payments", "canary", dependency)
    own = judge("payments", "canary", dependency, group=mine, group_by="region")
    if every.state is DependencyState.SATISFIED:
        assert own.state is DependencyState.SATISFIED
    if any(phase in ("Failed", "Cancelled") for phase in phases.values()):
        assert every.state is DependencyState.HELD
    if mine not in phases:  # no group of mine: the same as every group
        assert own.state is every.state


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
