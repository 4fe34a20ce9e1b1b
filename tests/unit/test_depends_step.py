"""The `wait-for-dependencies` decisions (steps/depends.py `DependencyWait`, `watch_window`) on the
objects a watch would show, at times the test chooses: the stage's message is written only when what
it says changes (never once per change seen), the wait ends Done when the dependency passed and
TimedOut exactly at its deadline, a dependency whose spec does not parse is waited for, and the
watch window never runs past the nearest deadline. No API; the real kube-apiserver run (the watch,
the status writes) is tests/integration/test_steps_depends.py.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.api.depends import WaitOutcome
from orchestrator.api.models import ProgressiveSync, StageStatus
from orchestrator.planning.contract import DependencyContract
from orchestrator.planning.groups import with_run_stages
from steps.common import RolloutRef, Tuning
from steps.context import StepContext
from steps.depends import DependencyWait, stage_deadline, watch_window
from tests.support.builders import T0, make_contract, make_ps, make_stage

STAGES = (make_stage("canary"), make_stage("rest"))
STARTED = T0.strftime("%Y-%m-%dT%H:%M:%SZ")
NOW = T0 + timedelta(seconds=5)


def _ours() -> dict[str, Any]:
    obj = make_ps(
        "myservice",
        stages=STAGES,
        phase="Progressing",
        rollout_id="r1",
        stage_status=[StageStatus(name="canary"), StageStatus(name="rest")],
        dependsOn=[{"name": "payments", "stage": "canary"}],
    )
    obj["status"]["rollout"]["startedAt"] = STARTED
    return obj


def _payments(canary: str, phase: str = "Progressing") -> dict[str, Any]:
    return make_ps(
        "payments",
        stages=STAGES,
        phase=phase,
        rollout_id="p1",
        stage_status=[StageStatus(name="canary", phase=canary), StageStatus(name="rest")],  # type: ignore[arg-type]
    )


def _context(
    ours: dict[str, Any], contract: Any, stage: str, *, stage_names: tuple[str, ...] = ()
) -> StepContext:
    ps = ProgressiveSync.model_validate(ours)
    if stage_names:
        ps = with_run_stages(ps, stage_names)
    return StepContext(
        rollout=RolloutRef(namespace="argocd", name="myservice", rollout_id="r1", argocd_namespace="argocd"),
        contract=contract,
        stage=next(s for s in contract.stages if s.name == stage),
        ps=ps,
        clock=None,  # type: ignore[arg-type]
        tuning=Tuning(),
    )


def _wait(timeout_seconds: int = 60) -> DependencyWait:
    """myservice's canary waiting for payments' canary; its deadline as the step computes it."""
    dependency = DependencyContract(
        name="payments", stage="canary", before_stage="canary", timeout_seconds=timeout_seconds
    )
    contract = make_contract(("canary", "rest"), rollout_id="r1").model_copy(
        update={"depends_on": (dependency,)}
    )
    ctx = _context(_ours(), contract, "canary")
    return DependencyWait((dependency,), {"payments": stage_deadline(ctx, dependency, NOW)})


def test_it_writes_once_per_change_and_passes_when_the_canary_succeeded() -> None:
    wait = _wait()
    seen: list[tuple[str, bool]] = []
    for offset, payments in enumerate(
        [None, None, _payments("Progressing"), _payments("Progressing"), _payments("Succeeded")]
    ):
        look = wait.look({"payments": payments}, NOW + timedelta(seconds=offset))
        seen.append((look.decision.outcome.value, look.write_note))
    assert seen == [
        ("Wait", True),  # missing: said once
        ("Wait", False),
        ("Wait", True),  # it appeared, Progressing
        ("Wait", False),  # the same again (another change of payments): nothing to write
        ("Done", True),
    ]
    assert look.decision.message == "dependencies passed: payments passed stage 'canary' in rollout p1"
    assert look.next_deadline is None


def test_a_held_dependency_times_out_at_its_deadline_and_writes_only_the_close() -> None:
    wait = _wait(timeout_seconds=9)  # from the rollout's start, T0: the deadline is T0+9
    failed = {"payments": _payments("Failed", phase="Failed")}
    first = wait.look(failed, NOW)
    assert (first.decision.outcome, first.write_note) == (WaitOutcome.WAIT, True)
    assert first.decision.message == "held: payments failed at stage 'canary' in rollout p1 (Failed)"
    assert first.next_deadline == T0 + timedelta(seconds=9)
    assert not wait.look(failed, T0 + timedelta(seconds=8.9)).write_note
    timed_out = wait.look(failed, T0 + timedelta(seconds=9))
    assert (timed_out.decision.outcome, timed_out.write_note) == (WaitOutcome.TIMED_OUT, False)
    assert timed_out.decision.message == (
        "dependsOn timed out: held: payments failed at stage 'canary' in rollout p1 (Failed)"
    )


def test_a_dependency_whose_spec_does_not_parse_is_waited_for() -> None:
    broken = _payments("Succeeded")
    broken["spec"]["stages"] = []
    wait = _wait()
    look = wait.look({"payments": broken}, NOW)
    assert look.decision.outcome is WaitOutcome.WAIT
    assert look.decision.message == (
        "waiting for payments to pass stage 'canary': its spec does not parse (its Valid condition says why)"
    )
    assert wait.look({"payments": _payments("Succeeded")}, NOW).decision.outcome is WaitOutcome.DONE


@pytest.mark.parametrize(
    ("left", "window_cap", "expected"),
    [
        pytest.param(None, 30, 30, id="no-deadline-open-the-whole-window"),
        pytest.param(100.0, 30, 30, id="a-far-deadline-the-whole-window"),
        pytest.param(4.2, 30, 5, id="a-near-deadline-rounded-up-so-the-look-after-it-times-out"),
        pytest.param(0.0, 30, 1, id="a-deadline-now-at-least-one-second"),
        pytest.param(-3.0, 30, 1, id="a-deadline-past-at-least-one-second"),
    ],
)
def test_the_watch_window_ends_at_the_nearest_deadline(
    left: float | None, window_cap: int, expected: int
) -> None:
    deadline: datetime | None = None if left is None else NOW + timedelta(seconds=left)
    assert watch_window(NOW, deadline, Tuning(watch_window_seconds=window_cap)) == expected


# --- groups (docs/depends-on.md "Groups and dependencies") ------------------------------------

GROUP_STAGES = ("a/canary", "a/rest", "b/canary", "b/rest")


def _grouped_ours() -> dict[str, Any]:
    obj = make_ps(
        "myservice",
        stages=STAGES,
        phase="Progressing",
        rollout_id="r1",
        stage_status=[
            StageStatus(name="a/canary", phase="Succeeded", finished_at=T0 + timedelta(seconds=100)),  # type: ignore[arg-type]
            StageStatus(name="a/rest", phase="Succeeded", finished_at=T0 + timedelta(seconds=200)),  # type: ignore[arg-type]
            StageStatus(name="b/canary"),
            StageStatus(name="b/rest"),
        ],
        groupBy="region",
        dependsOn=[{"name": "payments", "stage": "canary"}],
    )
    obj["status"]["rollout"]["startedAt"] = STARTED
    return obj


def _grouped_payments(a: str, b: str) -> dict[str, Any]:
    return make_ps(
        "payments",
        stages=STAGES,
        phase="Progressing",
        rollout_id="p1",
        stage_status=[StageStatus(name="a/canary", phase=a), StageStatus(name="b/canary", phase=b)],  # type: ignore[arg-type]
        groupBy="region",
    )


def _group_wait(stage: str) -> DependencyWait:
    """myservice's stage `stage` (a group's canary) waiting for payments' same group's canary."""
    dependencies = tuple(
        DependencyContract(name="payments", stage="canary", before_stage=waits, timeout_seconds=60)
        for waits in ("a/canary", "b/canary")
    )
    contract = make_contract(GROUP_STAGES, rollout_id="r1").model_copy(update={"depends_on": dependencies})
    ctx = _context(_grouped_ours(), contract, stage, stage_names=GROUP_STAGES)
    mine = contract.dependencies_before(stage)
    return DependencyWait(
        mine,
        {d.name: stage_deadline(ctx, d, NOW) for d in mine},
        group=stage.split("/", maxsplit=1)[0],
        group_by="region",
    )


def test_a_groups_wait_judges_the_same_group_and_counts_from_its_own_start() -> None:
    # b waits for payments' b/canary, which failed (a's passed): held until the timeout, counted
    # from the rollout's start (b/canary is b's first stage), not from a/rest's end before it.
    wait = _group_wait("b/canary")
    payments = {"payments": _grouped_payments("Succeeded", "Failed")}
    held = wait.look(payments, NOW)
    assert held.decision.outcome is WaitOutcome.WAIT
    assert held.next_deadline == T0 + timedelta(seconds=60)
    timed_out = wait.look(payments, T0 + timedelta(seconds=60))
    assert timed_out.decision.outcome is WaitOutcome.TIMED_OUT
    assert timed_out.decision.message == (
        "dependsOn timed out: held: payments failed at stage 'b/canary' in rollout p1 (Failed)"
    )


def test_a_groups_wait_passes_when_its_own_group_passed_while_another_still_runs() -> None:
    look = _group_wait("b/canary").look({"payments": _grouped_payments("Progressing", "Succeeded")}, NOW)
    assert look.decision.outcome is WaitOutcome.DONE
    assert look.decision.message == "dependencies passed: payments passed stage 'b/canary' in rollout p1"


PHASES = (None, "Pending", "Progressing", "Succeeded", "Failed")


@given(
    seen=st.lists(
        st.tuples(st.sampled_from(PHASES), st.floats(min_value=0, max_value=10, allow_nan=False)),
        min_size=1,
        max_size=12,
    )
)
def test_any_run_of_changes_writes_only_what_is_new_and_times_out_only_past_the_deadline(
    seen: list[tuple[str | None, float]],
) -> None:
    """Whatever payments goes through and whenever the step looks: a note is asked for exactly when
    what the stage would say differs from the last note (or the wait is over), never at or after a
    time out; Done exactly when the canary Succeeded; TimedOut only at or past the deadline."""
    wait = _wait(timeout_seconds=30)
    deadline = wait.deadlines["payments"]
    now, last_said = NOW, None
    for canary, step in seen:
        now += timedelta(seconds=step)
        payments = None if canary is None else _payments(canary)
        look = wait.look({"payments": payments}, now)
        outcome = look.decision.outcome
        if canary == "Succeeded":
            assert outcome is WaitOutcome.DONE and look.write_note
            return
        if outcome is WaitOutcome.TIMED_OUT:
            assert now >= deadline and not look.write_note
            return
        assert outcome is WaitOutcome.WAIT and now < deadline
        assert look.write_note == (look.decision.message != last_said)
        assert look.next_deadline == deadline
        last_said = look.decision.message
