"""A rollout with an analysis gate on the local executor, end to end on the real control plane: the
canary's AnalysisRun decides whether the rollout goes on.

Real: kube-apiserver + etcd with Argo Rollouts' own CRDs (tests/support/analysis_crds.py), the
Workflow as `build_workflow` makes it (the canary's clusters each followed by their `analysis-*`
node), the local executor, the steps as subprocesses with the steps' restricted user. Simulated:
Argo CD (the fleet simulator). Not here: the Argo Rollouts controller. The test writes the canary
AnalysisRun's `status.phase` itself, only to drive the rollout through each outcome; the real
controller measuring real metrics is exercised by the analysis tier.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.analysis.run import analysis_run_name
from orchestrator.kube.client import ANALYSIS_RUNS, ANALYSIS_TEMPLATES, NotFound
from tests.support.analysis_crds import rollouts_crds  # noqa: F401 - fixture
from tests.support.engines import LOCAL, rollout_engine
from tests.support.rollout_rig import PS_NAME, RolloutRig, rollout_rig
from tests.support.wait import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("rollouts_crds")]

ANALYSIS = {
    "templates": [{"name": "error-rate"}],
    "perCluster": True,
    "args": [{"name": "cluster", "valueFrom": {"clusterName": True}}],
}
CANARY = {"name": "canary", "targets": {"clusters": {"selector": {}}}, "maxTargets": 1, "analysis": ANALYSIS}
REST = {"name": "rest", "targets": {"clusters": {"selector": {}}}, "maxParallel": 2}
METRIC = {
    "name": "error-rate",
    "interval": "1s",
    "count": 1,
    "successCondition": "result[0] < 0.05",
    "provider": {
        "prometheus": {"address": "http://prometheus:9090", "query": "errors{cluster='{{args.cluster}}'}"}
    },
}


@pytest.fixture
def rig(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[RolloutRig]:
    with rollout_engine(request, LOCAL, tmp_path) as engine, rollout_rig(engine, clusters=3) as running:
        running.simulate()
        running.kube.create(
            ANALYSIS_TEMPLATES,
            running.namespace,
            {
                "apiVersion": "argoproj.io/v1alpha1",
                "kind": "AnalysisTemplate",
                "metadata": {"name": "error-rate"},
                "spec": {"args": [{"name": "cluster"}], "metrics": [METRIC]},
            },
        )
        yield running


def _run(rig: RolloutRig, name: str) -> dict[str, Any] | None:
    try:
        return rig.kube.get(ANALYSIS_RUNS, rig.namespace, name)
    except NotFound:
        return None


@pytest.mark.parametrize(
    ("phase", "result", "workflow_phase"),
    [
        pytest.param(
            "Successful",
            {
                "name": "error-rate",
                "phase": "Successful",
                "measurements": [{"phase": "Successful", "value": "[0.01]"}],
            },
            "Succeeded",
            id="a-healthy-canary-passes-its-gate",
        ),
        pytest.param(
            "Failed",
            {
                "name": "error-rate",
                "phase": "Failed",
                "count": 1,
                "failed": 1,
                "measurements": [{"phase": "Failed", "value": "[0.37]"}],
            },
            "Failed",
            id="a-healthy-but-bad-canary-stops-the-rollout",
        ),
    ],
)
def test_the_canary_analysis_decides(
    rig: RolloutRig, phase: str, result: dict[str, Any], workflow_phase: str
) -> None:
    rig.run_engine()
    rig.start_rollout([CANARY, REST])
    rollout_id = rig.workflow_name.removeprefix(f"{PS_NAME}-")
    canary = wait_for(lambda: list(rig.sync_starts()), timeout=120, interval=0.2, what="the canary to sync")[
        0
    ]
    name = analysis_run_name(PS_NAME, rollout_id, "canary", canary)
    run = wait_for(lambda: _run(rig, name), timeout=120, interval=0.2, what=f"AnalysisRun {name}")
    assert run["spec"]["args"] == [{"name": "cluster", "value": canary}]
    assert rig.sync_starts() == {canary: 1}  # nothing beyond the canary while its gate runs
    rig.kube.patch(
        ANALYSIS_RUNS, rig.namespace, name, {"status": {"phase": phase, "metricResults": [result]}}
    )
    done = rig.wait_finished()
    assert done["status"]["phase"] == workflow_phase, done["status"].get("message")
    analysis_nodes = rig.nodes(type="Pod")
    assert any("analysis-error-rate" in str(node["name"]) for node in analysis_nodes)
    if workflow_phase == "Succeeded":
        assert rig.sync_starts() == dict.fromkeys(rig.all_clusters(), 1)
        return
    assert rig.sync_starts() == {canary: 1}  # 0 syncs beyond the canary
    stage = rig.progressive_sync().status.stages[0]  # type: ignore[union-attr]
    assert [failure.name for failure in stage.failed] == [canary]
    assert "AnalysisFailed" in stage.failed[0].reason
    assert "error-rate = [0.37]" in stage.failed[0].reason
