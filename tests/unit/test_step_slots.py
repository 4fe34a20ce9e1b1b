"""The local executor's bound on step processes (orchestrator/engine/slots.py): who a free slot goes
to, that every Workflow keeps its floor, and that steps waiting for other steps cannot deadlock it.

No processes and no API server: `admit` is pure, `StepSlots` is plain state, and the model at the end
plays Workflows whose steps wait for one another under the bound.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.engine.interface import PodState
from orchestrator.engine.operator import operate
from orchestrator.engine.slots import WORKFLOW_FLOOR, SlotRequest, StepSlots, admit


def reqs(*pairs: str) -> list[SlotRequest]:
    """`"a1"` is node 1 of Workflow a."""
    return [SlotRequest(pair[0], pair) for pair in pairs]


@pytest.mark.parametrize(
    ("waiting", "running", "limit", "floor", "expected"),
    [
        pytest.param(reqs("a1", "a2", "a3"), [], 0, 2, reqs("a1", "a2", "a3"), id="no-limit-admits-all"),
        pytest.param(reqs("a1", "a2", "a3"), [], 2, 1, reqs("a1", "a2"), id="limit-oldest-first"),
        pytest.param(reqs("a3"), reqs("a1", "a2"), 2, 1, [], id="limit-full-waits"),
        pytest.param(
            reqs("b1", "b2", "b3"), reqs("a1", "a2"), 2, 2, reqs("b1", "b2"), id="floor-past-the-limit"
        ),
        pytest.param(
            reqs("a3", "b1"), reqs("a1", "a2"), 2, 2, reqs("b1"), id="floor-for-the-other-not-for-the-full"
        ),
        pytest.param(reqs("a3", "b1"), reqs("a1"), 2, 0, reqs("a3"), id="a-free-slot-goes-to-the-oldest"),
        pytest.param(
            reqs("a2", "a3", "b1"), [], 1, 1, reqs("a2", "b1"), id="later-owner-gets-its-floor-not-the-limit"
        ),
    ],
)
def test_admit(
    waiting: list[SlotRequest],
    running: list[SlotRequest],
    limit: int,
    floor: int,
    expected: list[SlotRequest],
) -> None:
    assert admit(waiting, running, limit=limit, floor=floor) == expected


def test_a_request_waits_and_a_release_gives_its_slot_to_the_oldest_waiting_and_wakes_it() -> None:
    slots = StepSlots(limit=1, floor=0)
    woken: list[str] = []
    assert slots.request("a", "1", lambda: woken.append("a1"))
    assert not slots.request("a", "2", lambda: woken.append("a2"))
    assert not slots.request("b", "1", lambda: woken.append("b1"))
    assert not slots.request("a", "2", lambda: woken.append("a2-again"))  # asking again keeps its place
    assert slots.usage() == (1, 2)
    slots.release("a", "1")
    assert woken == ["a2"]
    assert slots.holds("a", "2") and not slots.holds("b", "1")
    assert slots.request("a", "2", lambda: None)  # the woken worker asks again: it holds the slot
    slots.forget("b")  # b's worker ended: its place in line goes
    slots.release("a", "2")
    assert woken == ["a2"] and slots.usage() == (0, 0)


def test_releasing_twice_or_what_never_ran_changes_nothing() -> None:
    slots = StepSlots(limit=1, floor=0)
    assert slots.request("a", "1", lambda: None)
    slots.release("a", "1")
    slots.release("a", "1")
    slots.release("z", "9")
    assert slots.usage() == (0, 0)
    assert slots.request("a", "2", lambda: None)


# --- invariants over any run of requests and releases --------------------------------------------

OWNERS = st.sampled_from("abc")
ACTIONS = st.lists(
    st.tuples(st.sampled_from(["request", "release", "forget"]), OWNERS, st.integers(0, 5)), max_size=60
)


@given(actions=ACTIONS, limit=st.integers(0, 4), floor=st.integers(0, 3))
def test_the_bound_the_floor_and_the_order_hold_for_any_run(
    actions: list[tuple[str, str, int]], limit: int, floor: int
) -> None:
    slots = StepSlots(limit=limit, floor=floor)
    asked: list[SlotRequest] = []  # the order in which requests first joined the line
    for action, owner, number in actions:
        node = str(number)
        if action == "request":
            slots.request(owner, node, lambda: None)
            if SlotRequest(owner, node) not in asked:
                asked.append(SlotRequest(owner, node))
        elif action == "release":
            slots.release(owner, node)
            asked = [r for r in asked if r != SlotRequest(owner, node)]
        else:
            slots.forget(owner)
            asked = [r for r in asked if r.owner != owner or slots.holds(r.owner, r.node_id)]
        running = [r for r in asked if slots.holds(r.owner, r.node_id)]
        waiting = [r for r in asked if not slots.holds(r.owner, r.node_id)]
        per_owner = Counter(r.owner for r in running)
        # Past the limit only by the floors.
        if limit:
            assert len(running) <= limit + floor * len(per_owner)
        # Nothing waits that a slot could take: below the limit, or below its floor.
        for request in waiting:
            assert limit and len(running) >= limit
            assert per_owner[request.owner] >= floor
        # Within a Workflow, no step runs that asked after one still waiting.
        for request in waiting:
            later = asked[asked.index(request) + 1 :]
            assert not any(r.owner == request.owner and r in running for r in later)
        assert slots.usage() == (len(running), len(waiting))


# --- the floor keeps waiting steps from deadlocking the bound -------------------------------------


@dataclass
class Flow:
    """A Workflow in the model: its steps in the order it asks for them. Step 0 may be a follower
    (ends only after every other step); step k may wait for every step before it to end (a pod
    waiting for its turn)."""

    name: str
    steps: int
    follower: bool
    waits_for_earlier: frozenset[int]
    ended: set[int] = field(default_factory=set)

    def can_end(self, step: int) -> bool:
        if self.follower and step == 0:
            return len(self.ended) == self.steps - 1
        if step in self.waits_for_earlier:
            return all(
                earlier in self.ended for earlier in range(step) if not (self.follower and earlier == 0)
            )
        return True


def play(flows: list[Flow], limit: int, floor: int, pick: Any) -> bool:
    """Run the model until nothing can move: True when every step of every Workflow ended."""
    slots = StepSlots(limit=limit, floor=floor)
    # The Workflows ask at the same time: their requests interleave, each Workflow's in its order.
    asked = {flow.name: 0 for flow in flows}
    while open_flows := [flow for flow in flows if asked[flow.name] < flow.steps]:
        flow = open_flows[pick(len(open_flows))]
        slots.request(flow.name, str(asked[flow.name]), lambda: None)
        asked[flow.name] += 1
    for _ in range(10_000):
        movable = [
            (flow, step)
            for flow in flows
            for step in range(flow.steps)
            if step not in flow.ended and slots.holds(flow.name, str(step)) and flow.can_end(step)
        ]
        if not movable:
            break
        flow, step = movable[pick(len(movable))]
        flow.ended.add(step)
        slots.release(flow.name, str(step))
    return all(len(flow.ended) == flow.steps for flow in flows)


FLOWS = st.lists(
    st.builds(
        lambda steps, follower, waits: (steps, follower, frozenset(w for w in waits if w < steps)),
        st.integers(1, 6),
        st.booleans(),
        st.frozensets(st.integers(1, 5)),
    ),
    min_size=1,
    max_size=5,
)


@settings(max_examples=300)
@given(shapes=FLOWS, limit=st.integers(0, 6), choices=st.randoms(use_true_random=False))
def test_with_the_floor_every_workflow_ends_whatever_the_limit(
    shapes: list[tuple[int, bool, frozenset[int]]], limit: int, choices: Any
) -> None:
    flows = [Flow(f"w{i}", steps, follower, waits) for i, (steps, follower, waits) in enumerate(shapes)]
    assert play(flows, limit, WORKFLOW_FLOOR, choices.randrange)


def test_without_the_floor_followers_fill_the_slots_and_nothing_ends() -> None:
    # Two rollouts, each a follower and one step, under a limit of 2: the followers take both slots
    # and wait for steps that can never start. The floor is what prevents it.
    def shapes() -> list[Flow]:
        return [Flow(name, 2, True, frozenset()) for name in ("a", "b")]

    def round_robin() -> Any:
        turns = iter(range(1000))
        return lambda n: next(turns) % n

    assert not play(shapes(), limit=2, floor=0, pick=round_robin())
    assert play(shapes(), limit=2, floor=WORKFLOW_FLOOR, pick=round_robin())


# --- what the Workflow shows for a step waiting for a slot ----------------------------------------


def test_a_launched_step_waiting_for_a_slot_is_pending_with_the_reason_and_not_launched_again() -> None:
    workflow: dict[str, Any] = {
        "metadata": {"name": "wf", "namespace": "ns", "uid": "u"},
        "spec": {
            "entrypoint": "main",
            "templates": [
                {"name": "main", "container": {"image": "python", "command": ["python", "-c", "pass"]}}
            ],
        },
    }
    now = datetime(2026, 1, 1, tzinfo=UTC)
    first = operate(workflow, now=now, pods={}, lock_held=False)
    [launch] = first.launches
    workflow["status"] = first.status
    waiting = PodState(started_at=now, waiting="waiting for a free step process")
    second = operate(workflow, now=now, pods={launch.node_id: waiting}, lock_held=False)
    node = second.status["nodes"][launch.node_id]
    assert (node["phase"], node["message"]) == ("Pending", "waiting for a free step process")
    assert second.launches == [] and not second.finished
    third = operate(
        {**workflow, "status": second.status}, now=now, pods={launch.node_id: PodState(now)}, lock_held=False
    )
    assert third.status["nodes"][launch.node_id]["phase"] == "Running"
    assert "message" not in third.status["nodes"][launch.node_id]
