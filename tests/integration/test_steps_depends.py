"""`wait-for-dependencies` (spec.dependsOn, docs/depends-on.md) through its entrypoint on a real
kube-apiserver, with two ProgressiveSyncs: `myservice` (rollout r1, its canary Pending) waits for
`payments` to pass its stage `canary`.

- While payments' canary runs, the step waits and says so once in myservice's canary message;
  when payments' canary Succeeded it says what satisfied it and exits 0: one status write per
  change of what it says, however many changes of payments it sees (it follows them with a watch).
- A dependency that does not exist yet is a wait, not an error.
- payments' canary Failed holds the stage ("held: payments failed at stage 'canary'") until the
  timeout, then the stage and the rollout are Failed with that reason and the step exits 1.
- A rerun after the wait was satisfied decides again from the API and exits 0 at once.
- Both grouped by region (docs/depends-on.md "Groups and dependencies"): myservice's
  `eu-west-1/canary` waits for payments' `eu-west-1/canary` only: it passes while payments'
  us-east-1 canary still runs, its message is on its own group stage's entry (the other group's
  is untouched), and us-east-1's wait goes on waiting for payments' us-east-1 canary.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from orchestrator.core.clock import format_time
from orchestrator.kube.client import PROGRESSIVE_SYNCS, Kube
from orchestrator.planning.contract import DependencyContract
from tests.support.builders import make_contract
from tests.support.steps_harness import StepRunner, make_progressive_sync, read_progressive_sync, writes_by
from tests.support.steps_rig import CANARY, REST, assert_ok, finish
from tests.support.wait import wait_for

pytestmark = pytest.mark.integration

DEPENDS_ON = [{"name": "payments", "stage": "canary", "timeoutSeconds": 600}]


def _status(
    *stages: tuple[str, str], phase: str = "Progressing", started: str | None = None
) -> dict[str, Any]:
    return {
        "phase": phase,
        "rollout": {"id": "r1", "revision": "abc", "startedAt": started or format_time(datetime.now(UTC))},
        "stages": [{"name": name, "phase": stage_phase} for name, stage_phase in stages],
    }


def _contract(runner: StepRunner, timeout_seconds: int) -> str:
    dependency = DependencyContract(
        name="payments", stage="canary", before_stage="canary", timeout_seconds=timeout_seconds
    )
    return runner.contract().model_copy(update={"depends_on": (dependency,)}).to_json()


def _set_status(kube: Kube, namespace: str, name: str, status: dict[str, Any]) -> None:
    obj = kube.get(PROGRESSIVE_SYNCS, namespace, name)
    obj["status"] = status
    kube.replace(PROGRESSIVE_SYNCS, namespace, obj, subresource="status")


def _canary_message(kube: Kube, namespace: str) -> str:
    status = read_progressive_sync(kube, namespace).status
    assert status is not None and status.stages
    return status.stages[0].message


def test_the_stage_waits_for_the_dependencys_canary_and_says_so_once(
    kube: Kube, namespace: str, runner: StepRunner, control_plane: Any, tmp_path: Path
) -> None:
    make_progressive_sync(
        kube, namespace, stages=[CANARY, REST], dependsOn=DEPENDS_ON, status=_status(("canary", "Pending"))
    )
    # Not there yet: a wait, not an error.
    before = control_plane.audit_mark()
    step = runner.start(
        "wait-for-dependencies",
        "--stage",
        "canary",
        log_path=tmp_path / "wait.log",
        PROGRESSIVE_SYNC_CONTRACT=_contract(runner, 600),
    )
    try:
        wait_for(
            lambda: "no ProgressiveSync payments in this namespace (yet)" in _canary_message(kube, namespace),
            what="the stage says its dependency does not exist yet",
        )
        make_progressive_sync(
            kube,
            namespace,
            name="payments",
            app_set="payments",
            stages=[CANARY, REST],
            status=_status(("canary", "Progressing"), ("rest", "Pending")),
        )
        wait_for(
            lambda: _canary_message(kube, namespace).startswith(
                "waiting for payments to pass stage 'canary': rollout r1 is Progressing"
            ),
            what="the stage says what it waits for",
        )
        assert step.poll() is None, "still waiting"
        # A change of payments that changes nothing the stage says (seen before the next one).
        kube.patch(PROGRESSIVE_SYNCS, namespace, "payments", {"metadata": {"labels": {"team": "payments"}}})
        _set_status(kube, namespace, "payments", _status(("canary", "Succeeded"), ("rest", "Progressing")))
        code, log = finish(step, tmp_path / "wait.log", timeout=30)
    finally:
        if step.poll() is None:
            step.kill()
    assert code == 0, log
    assert "wait-for-dependencies: stage 'canary': Done" in log
    assert _canary_message(kube, namespace) == (
        "dependencies passed: payments passed stage 'canary' in rollout r1"
    )
    status = read_progressive_sync(kube, namespace).status
    assert status is not None and status.stages is not None and status.stages[0].phase.value == "Pending"
    # One write per change of what it says (missing, not started yet when payments is created
    # before its status is set, waiting, satisfied), each saying something new; none for a change
    # of payments that changes nothing it says.
    said = [
        line.split("stage 'canary': ", 1)[1] for line in log.splitlines() if "INFO steps.depends:" in line
    ]
    assert said[0].endswith("no ProgressiveSync payments in this namespace (yet)"), said
    assert said[-1] == "dependencies passed: payments passed stage 'canary' in rollout r1", said
    assert all(before != after for before, after in itertools.pairwise(said)), said
    ours = [
        w
        for w in writes_by(control_plane, before)
        if w.resource == "progressivesyncs" and w.subresource == "status" and w.name == "myservice"
    ]
    assert len(ours) == len(said), ([(w.verb, w.name) for w in ours], said)

    # A rerun decides again from the API: satisfied at once, nothing new to write.
    again = runner.run(
        "wait-for-dependencies", "--stage", "canary", PROGRESSIVE_SYNC_CONTRACT=_contract(runner, 600)
    )
    assert_ok(again)
    assert "Done" in again.stdout


def test_a_failed_dependency_holds_the_stage_until_the_timeout_then_fails_it(
    kube: Kube, namespace: str, runner: StepRunner
) -> None:
    make_progressive_sync(
        kube, namespace, stages=[CANARY, REST], dependsOn=DEPENDS_ON, status=_status(("canary", "Pending"))
    )
    make_progressive_sync(
        kube,
        namespace,
        name="payments",
        app_set="payments",
        stages=[CANARY, REST],
        status=_status(("canary", "Failed"), ("rest", "Pending"), phase="Failed"),
    )
    result = runner.run(
        "wait-for-dependencies",
        "--stage",
        "canary",
        timeout=60,
        PROGRESSIVE_SYNC_CONTRACT=_contract(runner, 2),
    )
    assert_ok(result, code=1)
    held = "held: payments failed at stage 'canary' in rollout r1 (Failed)"
    assert f"TimedOut: dependsOn timed out: {held}" in result.stdout
    status = read_progressive_sync(kube, namespace).status
    assert status is not None and status.stages is not None
    assert (status.stages[0].phase.value, status.stages[0].message) == (
        "Failed",
        f"dependsOn timed out: {held}",
    )
    assert status.phase is not None and status.phase.value == "Failed"


GROUPED = [{**CANARY, "maxTargets": 1}, REST]
GROUP_STAGES = [f"{g}/{s}" for g in ("eu-west-1", "us-east-1") for s in ("canary", "rest")]


def _grouped_contract(timeout_seconds: int) -> str:
    dependencies = tuple(
        DependencyContract(
            name="payments",
            stage="canary",
            before_stage=f"{group}/canary",
            timeout_seconds=timeout_seconds,
        )
        for group in ("eu-west-1", "us-east-1")
    )
    contract = make_contract(GROUP_STAGES, rollout_id="r1")
    return contract.model_copy(update={"depends_on": dependencies}).to_json()


def _messages(kube: Kube, namespace: str) -> dict[str, str]:
    status = read_progressive_sync(kube, namespace).status
    assert status is not None and status.stages is not None
    return {stage.name: stage.message for stage in status.stages}


def test_each_group_waits_for_the_same_group_of_a_grouped_dependency(
    kube: Kube, namespace: str, runner: StepRunner, tmp_path: Path
) -> None:
    canary = "canary"
    make_progressive_sync(
        kube,
        namespace,
        stages=GROUPED,
        groupBy="region",
        dependsOn=[{"name": "payments", "stage": canary, "timeoutSeconds": 600}],
        status=_status(*((name, "Pending") for name in GROUP_STAGES)),
    )
    make_progressive_sync(
        kube,
        namespace,
        name="payments",
        app_set="payments",
        stages=GROUPED,
        groupBy="region",
        status=_status((f"eu-west-1/{canary}", "Succeeded"), (f"us-east-1/{canary}", "Progressing")),
    )
    eu = runner.run(
        "wait-for-dependencies",
        "--stage",
        f"eu-west-1/{canary}",
        PROGRESSIVE_SYNC_CONTRACT=_grouped_contract(600),
    )
    assert_ok(eu)
    assert f"wait-for-dependencies: stage 'eu-west-1/{canary}': Done" in eu.stdout
    messages = _messages(kube, namespace)
    assert messages[f"eu-west-1/{canary}"] == (
        f"dependencies passed: payments passed stage 'eu-west-1/{canary}' in rollout r1"
    )
    assert messages[f"us-east-1/{canary}"] == "", "another group's stage is not touched"

    step = runner.start(
        "wait-for-dependencies",
        "--stage",
        f"us-east-1/{canary}",
        log_path=tmp_path / "us.log",
        PROGRESSIVE_SYNC_CONTRACT=_grouped_contract(600),
    )
    try:
        wait_for(
            lambda: _messages(kube, namespace)[f"us-east-1/{canary}"].startswith(
                f"waiting for payments to pass stage 'us-east-1/{canary}': rollout r1 is Progressing"
            ),
            what="us-east-1 says it waits for payments' us-east-1 canary",
        )
        assert step.poll() is None, "us-east-1 still waits while eu-west-1 went on"
        _set_status(
            kube,
            namespace,
            "payments",
            _status((f"eu-west-1/{canary}", "Succeeded"), (f"us-east-1/{canary}", "Succeeded")),
        )
        code, log = finish(step, tmp_path / "us.log", timeout=30)
    finally:
        if step.poll() is None:
            step.kill()
    assert code == 0, log
    assert _messages(kube, namespace)[f"us-east-1/{canary}"] == (
        f"dependencies passed: payments passed stage 'us-east-1/{canary}' in rollout r1"
    )
