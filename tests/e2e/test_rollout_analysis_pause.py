"""A pause while the canary's analysis gate runs: the AnalysisRun is left to finish (never
terminated), the next stage waits for `resume`, and the rollout then goes on with the same run.

Why a pause does not terminate the run: docs/CONTRACTS.md, "Pause and analysis". Real: as in
tests/e2e/test_rollout_analysis.py (its rig: the control plane with Argo Rollouts' CRDs, the local
executor, the steps as subprocesses; the simulated fleet). The test pauses as the watcher does (it
suspends the Workflow with the watcher's mark) and writes the run's phase as the controller would.
"""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.analysis.run import analysis_run_name
from orchestrator.kube.client import ANALYSIS_RUNS, WORKFLOWS
from orchestrator.workflows import control
from tests.e2e.test_rollout_analysis import CANARY, REST, _run, rig  # noqa: F401 - rig is a fixture
from tests.support.analysis_crds import rollouts_crds  # noqa: F401 - fixture
from tests.support.rollout_rig import PS_NAME, RolloutRig
from tests.support.wait import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("rollouts_crds")]

PASSED = {
    "phase": "Successful",
    "metricResults": [
        {
            "name": "error-rate",
            "phase": "Successful",
            "measurements": [{"phase": "Successful", "value": "[0.01]"}],
        }
    ],
}


def analysis_nodes(running: RolloutRig) -> list[dict[str, Any]]:
    return [n for n in running.nodes(type="Pod") if "analysis-error-rate" in str(n.get("name"))]


def test_a_pause_lets_the_gates_run_finish_and_holds_the_next_stage_until_resume(
    rig: RolloutRig,  # noqa: F811 - the fixture
) -> None:
    rig.run_engine()
    rig.start_rollout([CANARY, REST])
    rollout_id = rig.workflow_name.removeprefix(f"{PS_NAME}-")
    canary = wait_for(lambda: list(rig.sync_starts()), timeout=120, interval=0.2, what="the canary to sync")[
        0
    ]
    name = analysis_run_name(PS_NAME, rollout_id, "canary", canary)
    wait_for(lambda: _run(rig, name), timeout=120, interval=0.2, what=f"AnalysisRun {name}")

    # Pause as the watcher does, while the gate's run is Running.
    rig.kube.patch(WORKFLOWS, rig.namespace, rig.workflow_name, control.suspend_patch(by_watcher=True))
    rig.kube.patch(ANALYSIS_RUNS, rig.namespace, name, {"status": PASSED})
    wait_for(
        lambda: [n.get("phase") for n in analysis_nodes(rig)] == ["Succeeded"],
        timeout=120,
        interval=0.2,
        what="the gate's step to end with its run while paused",
    )
    run = _run(rig, name)
    assert run is not None and "terminate" not in run["spec"], "a pause must not terminate the run"
    assert rig.sync_starts() == {canary: 1}, "no cluster of the next stage starts while paused"
    assert rig.phase() == "Running"

    rig.kube.patch(WORKFLOWS, rig.namespace, rig.workflow_name, control.lift_watcher_suspend_patch())
    done = rig.wait_finished()
    assert done["status"]["phase"] == "Succeeded", done["status"].get("message")
    assert rig.sync_starts() == dict.fromkeys(rig.all_clusters(), 1)
    assert len(analysis_nodes(rig)) == 1  # one gate step, one AnalysisRun: the same run passed it
