"""The `wait-for-dependencies` loop (steps/depends.py) against an in-memory API and a manual clock:
it writes the waiting stage's message only when what it says changes (never per poll), sleeps at
most the poll interval and never past the deadline, ends Done when the dependency passed, TimedOut
exactly at its deadline with the stage Failed, and waits for a dependency whose spec does not parse.
No cluster; the real kube-apiserver run is tests/integration/test_steps_depends.py.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import timedelta
from typing import Any, cast

from orchestrator.api.depends import WaitOutcome
from orchestrator.api.models import ProgressiveSync, StageStatus
from orchestrator.kube.client import Kube, NotFound
from orchestrator.planning.contract import DependencyContract
from orchestrator.planning.groups import with_run_stages
from steps.common import RolloutRef, Tuning
from steps.context import StepContext
from steps.depends import wait_for_dependencies
from tests.support.builders import T0, make_contract, make_ps, make_stage
from tests.support.clock import ManualClock

STAGES = (make_stage("canary"), make_stage("rest"))
STARTED = T0.strftime("%Y-%m-%dT%H:%M:%SZ")


class _Api:
    """ProgressiveSyncs by name: `get` and the status writer's `replace`; counts our status writes."""

    def __init__(self, *objects: dict[str, Any]) -> None:
        self.objects = {o["metadata"]["name"]: o for o in objects}
        self.status_writes: list[str] = []

    def get(self, resource: Any, namespace: str, name: str) -> dict[str, Any]:
        if name not in self.objects:
            raise NotFound(f"{name} not found", status=404)
        return copy.deepcopy(self.objects[name])

    def replace(
        self, resource: Any, namespace: str, body: dict[str, Any], subresource: str = ""
    ) -> dict[str, Any]:
        name = body["metadata"]["name"]
        self.objects[name]["status"] = copy.deepcopy(body["status"])
        self.status_writes.append(name)
        return copy.deepcopy(self.objects[name])


class _Clock(ManualClock):
    """Sleeps advance the clock and run the test's script (the world moving meanwhile)."""

    def __init__(self, script: Callable[[int], None]) -> None:
        super().__init__(T0 + timedelta(seconds=5))
        self.script = script
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        super().sleep(seconds)
        self.script(len(self.sleeps))


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


def _run(api: _Api, clock: _Clock, timeout_seconds: int = 60) -> Any:
    contract = make_contract(("canary", "rest"), rollout_id="r1").model_copy(
        update={
            "depends_on": (
                DependencyContract(
                    name="payments", stage="canary", before_stage="canary", timeout_seconds=timeout_seconds
                ),
            )
        }
    )
    ps = ProgressiveSync.model_validate(api.get(None, "argocd", "myservice"))
    ctx = StepContext(
        rollout=RolloutRef(namespace="argocd", name="myservice", rollout_id="r1", argocd_namespace="argocd"),
        contract=contract,
        stage=contract.stages[0],
        ps=ps,
        clock=clock,
        tuning=Tuning(),
    )
    return wait_for_dependencies(cast(Kube, api), ctx, poll_seconds=2.0)


def _canary(api: _Api) -> StageStatus:
    status = ProgressiveSync.model_validate(api.objects["myservice"]).status
    assert status is not None and status.stages
    return status.stages[0]


def test_it_writes_once_per_change_and_passes_when_the_canary_succeeded() -> None:
    api = _Api(_ours())

    def world(sleeps: int) -> None:
        if sleeps == 3:
            api.objects["payments"] = _payments("Progressing")
        if sleeps == 9:
            api.objects["payments"] = _payments("Succeeded")

    clock = _Clock(world)
    result = _run(api, clock)
    assert result.outcome is WaitOutcome.DONE and not result.failed
    assert _canary(api).message == "dependencies passed: payments passed stage 'canary' in rollout p1"
    # missing, waiting, passed: three writes over nine polls
    assert api.status_writes == ["myservice"] * 3
    assert clock.sleeps == [2.0] * 9
    assert _canary(api).phase.value == "Pending"


def test_a_held_dependency_times_out_at_its_deadline_and_fails_the_stage() -> None:
    api = _Api(_ours(), _payments("Failed", phase="Failed"))
    clock = _Clock(lambda sleeps: None)
    result = _run(api, clock, timeout_seconds=9)
    assert result.failed
    # started at T0, now T0+5: sleeps of 2, 2 and the last one cut to the deadline (T0+9)
    assert clock.sleeps == [2.0, 2.0]
    assert clock.now() == T0 + timedelta(seconds=9)
    canary = _canary(api)
    assert canary.phase.value == "Failed"
    assert (
        canary.message
        == "dependsOn timed out: held: payments failed at stage 'canary' in rollout p1 (Failed)"
    )
    # the wait's start, then the close
    assert api.status_writes == ["myservice", "myservice"]


def test_a_dependency_whose_spec_does_not_parse_is_waited_for() -> None:
    broken = _payments("Succeeded")
    broken["spec"]["stages"] = []
    api = _Api(_ours(), broken)

    def world(sleeps: int) -> None:
        if sleeps == 2:
            api.objects["payments"] = _payments("Succeeded")

    clock = _Clock(world)
    seen: list[str] = []
    original = api.replace

    def recording(*args: Any, **kwargs: Any) -> dict[str, Any]:
        stored = original(*args, **kwargs)
        seen.append(stored["status"]["stages"][0]["message"])
        return stored

    api.replace = recording  # type: ignore[method-assign]
    assert _run(api, clock).outcome is WaitOutcome.DONE
    assert seen[0] == (
        "waiting for payments to pass stage 'canary': its spec does not parse (its Valid condition says why)"
    )


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


def _run_group(api: _Api, clock: _Clock, stage: str) -> Any:
    contract = make_contract(GROUP_STAGES, rollout_id="r1").model_copy(
        update={
            "depends_on": tuple(
                DependencyContract(name="payments", stage="canary", before_stage=waits, timeout_seconds=60)
                for waits in ("a/canary", "b/canary")
            )
        }
    )
    ps = with_run_stages(ProgressiveSync.model_validate(api.get(None, "argocd", "myservice")), GROUP_STAGES)
    ctx = StepContext(
        rollout=RolloutRef(namespace="argocd", name="myservice", rollout_id="r1", argocd_namespace="argocd"),
        contract=contract,
        stage=next(s for s in contract.stages if s.name == stage),
        ps=ps,
        clock=clock,
        tuning=Tuning(),
    )
    return wait_for_dependencies(cast(Kube, api), ctx, poll_seconds=2.0)


def _stage(api: _Api, name: str) -> StageStatus:
    status = ProgressiveSync.model_validate(api.objects["myservice"]).status
    assert status is not None
    return next(s for s in status.stages or [] if s.name == name)


def test_a_groups_wait_judges_the_same_group_and_counts_from_its_own_start() -> None:
    # b waits for payments' b/canary, which failed (a's passed): held until the timeout, counted
    # from the rollout's start (b/canary is b's first stage), not from a/rest's end before it.
    api = _Api(_grouped_ours(), _grouped_payments("Succeeded", "Failed"))
    clock = _Clock(lambda sleeps: None)
    result = _run_group(api, clock, "b/canary")
    assert result.failed
    assert clock.now() == T0 + timedelta(seconds=60)
    assert _stage(api, "b/canary").message == (
        "dependsOn timed out: held: payments failed at stage 'b/canary' in rollout p1 (Failed)"
    )
    assert _stage(api, "a/canary").message == ""  # another group's stage is not touched


def test_a_groups_wait_passes_when_its_own_group_passed_while_another_still_runs() -> None:
    api = _Api(_grouped_ours(), _grouped_payments("Progressing", "Succeeded"))
    result = _run_group(api, _Clock(lambda sleeps: None), "b/canary")
    assert result.outcome is WaitOutcome.DONE
    assert _stage(api, "b/canary").message == (
        "dependencies passed: payments passed stage 'b/canary' in rollout p1"
    )
