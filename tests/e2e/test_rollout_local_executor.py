"""The local executor's own behaviour on rendered rollouts, end to end on the real control plane.

The rollout scenarios that both engines share are in test_rollout_scenarios.py; these are about
what only the local executor has: Terminate without the exit handler and `argo suspend` on a Workflow
it runs, and stopping the executor in the middle of a rollout. Real: kube-apiserver + etcd, the steps
(subprocesses with the steps' restricted user), the Workflow as `build_workflow` makes it, the audit
log. Simulated: Argo CD (the fleet simulator).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.api.models import RolloutPhase
from orchestrator.core.clock import SystemClock
from tests.support import workflow_control
from tests.support.engines import LOCAL, rollout_engine
from tests.support.rollout_rig import RolloutRig, rollout_rig
from tests.support.wait import wait_for

pytestmark = pytest.mark.e2e

CANARY = {"name": "canary", "targets": {"clusters": {"selector": {}}}, "maxTargets": 1}
REST = {"name": "rest", "targets": {"clusters": {"selector": {}}}, "maxParallel": 2}


@pytest.fixture
def rig(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[RolloutRig]:
    with rollout_engine(request, LOCAL, tmp_path) as engine, rollout_rig(engine, clusters=6) as running:
        running.simulate()
        yield running


def test_terminate_skips_the_exit_handler(rig: RolloutRig) -> None:
    rig.run_engine()
    rig.start_rollout([CANARY, REST])
    wait_for(lambda: len(rig.sync_starts()) >= 1, timeout=120, interval=0.2, what="the canary to start")
    workflow_control.terminate(rig.kube, rig.namespace, rig.workflow_name)
    done = rig.wait_finished()
    assert done["status"]["message"] == "Stopped with strategy 'Terminate'"
    assert rig.nodes(name=f"{rig.workflow_name}.onExit") == []
    ps = rig.progressive_sync()
    assert ps.status is not None and ps.status.phase != RolloutPhase.CANCELLED


def test_suspend_then_resume_continues_where_it_stood(rig: RolloutRig) -> None:
    rig.run_engine()
    rig.start_rollout([CANARY, REST])
    wait_for(lambda: len(rig.sync_starts()) >= 1, timeout=120, interval=0.2, what="the canary to start")
    workflow_control.suspend(rig.kube, rig.namespace, rig.workflow_name)
    wait_for(
        lambda: not rig.nodes(phase="Running", type="Pod") and not rig.nodes(phase="Pending", type="Pod"),
        timeout=60,
        interval=0.2,
        what="running steps to end",
    )
    # While suspended, the running step finished but nothing new started.
    assert len(rig.sync_starts()) == 1
    assert rig.phase() == "Running"
    workflow_control.resume(rig.kube, rig.namespace, rig.workflow_name, clock=SystemClock())
    assert rig.wait_finished()["status"]["phase"] == "Succeeded"
    assert rig.sync_starts() == dict.fromkeys(rig.all_clusters(), 1)


def test_executor_restarted_mid_rollout_completes_without_syncing_twice(rig: RolloutRig) -> None:
    with rig.engine.running():
        rig.start_rollout([CANARY, REST])
        wait_for(
            lambda: len(rig.sync_starts()) >= 3, timeout=120, interval=0.2, what="the last stage to start"
        )
    running = [n["name"] for n in rig.nodes(type="Pod", phase="Running")]
    rig.run_engine()  # a new executor
    done = rig.wait_finished()
    assert done["status"]["phase"] == "Succeeded", done["status"].get("message")
    assert rig.sync_starts() == dict.fromkeys(rig.all_clusters(), 1)
    restarted = [n for n in rig.nodes(type="Pod") if n["name"] in running]
    assert all(n["phase"] == "Succeeded" for n in restarted)
