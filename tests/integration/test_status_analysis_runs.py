"""`progressive-sync status` reads the rollout's AnalysisRuns by their labels and shows each run with
its metrics' phases and last values, in the table and in `-o json|yaml`.

Real: the control plane with Argo Rollouts' CRDs (`rollouts_crds`); the CLI in this process. No
controller measures: the test writes each run's status as the Argo Rollouts controller would.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import yaml

from orchestrator.analysis.run import INSTANCE_ID_LABEL, run_labels
from orchestrator.kube.client import ANALYSIS_RUNS, Kube
from tests.integration.test_ops_commands import cli, create_ps  # noqa: F401 - cli is a fixture
from tests.support.builders import PS_NAME, ROLLOUT_ID, make_stage_status
from tests.unit.test_ops_analysis_runs import FAILED, run

pytestmark = pytest.mark.integration

ANALYSIS = {"templates": [{"name": "error-rate"}]}


def create_run(kube: Kube, namespace: str, obj: dict[str, Any], rollout_id: str, cluster: str = "") -> None:
    stage = obj["metadata"]["annotations"]["progressivesync.io/stage"]
    obj = {
        "apiVersion": ANALYSIS_RUNS.api_version,
        "kind": ANALYSIS_RUNS.kind,
        **obj,
        "metadata": {
            **obj["metadata"],
            # An instance id no controller has: the analysis tier's real controller, when it runs on
            # this session's control plane, reconciles every run without one and would overwrite
            # the status this test writes (seen in CI: phase Running, no value).
            "labels": {**run_labels(PS_NAME, rollout_id, stage, cluster), INSTANCE_ID_LABEL: "none"},
        },
    }
    status = obj.pop("status", None)
    kube.create(ANALYSIS_RUNS, namespace, obj)
    if status is not None:
        kube.patch(ANALYSIS_RUNS, namespace, obj["metadata"]["name"], {"status": status})


@pytest.mark.parametrize("fmt", ["table", "json", "yaml"])
def test_status_shows_the_rollouts_analysis_runs_and_their_metrics(
    cli: Any,  # noqa: F811 - the fixture
    kube: Kube,
    namespace: str,
    rollouts_crds: None,
    fmt: str,
) -> None:
    stages = [make_stage_status("canary", phase="Failed", targets=("eu-1",), completed=("eu-1",))]
    create_ps(kube, namespace, phase="Failed", stage_status=stages, analysis=ANALYSIS)
    create_run(kube, namespace, run("r-canary", "canary", status=FAILED), ROLLOUT_ID)
    create_run(kube, namespace, run("r-old", "canary", status=FAILED), "an-older-rollout")
    result = cli("status", PS_NAME, *(() if fmt == "table" else ("-o", fmt)))
    assert result.exit_code == 0, result.output
    if fmt == "table":
        assert re.search(r"canary\s+-\s+r-canary\s+Failed\s+error-rate\s+Failed\s+\[0\.3\]", result.output)
        assert "r-old" not in result.output
        return
    data = json.loads(result.output) if fmt == "json" else yaml.safe_load(result.output)
    assert [r["name"] for r in data["analysisRuns"]] == ["r-canary"]
    assert data["analysisRuns"][0]["metrics"][0] == {
        "name": "error-rate",
        "phase": "Failed",
        "lastValue": "[0.3]",
        "message": "",
    }
