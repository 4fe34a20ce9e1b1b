"""The `job` provider of the real Argo Rollouts analysis controller: a metric measured by a real pod.

Real: everything of tests/support/realstack.py (the node runs the Job's pod from our step image,
the node's kube-controller-manager runs the Job controller), Argo Rollouts' analysis CRDs applied to
the real stack's API server, and the analysis controller (`--controllers=analysis --namespaced`,
watching the test's namespace) started by the test. The pod's exit code is the measurement: 0
passes the metric, anything else fails it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.devenv.argorollouts import ArgoRollouts, RolloutsTools
from orchestrator.kube.client import ANALYSIS_RUNS
from tests.support.analysis import (
    FAILED,
    FINAL_PHASES,
    SUCCESSFUL,
    analysis_run,
    metric_results,
    wait_for_phase,
)
from tests.support.realstack import RealStack

pytestmark = pytest.mark.analysis


@pytest.fixture
def rollouts_controller(real_node: RealStack, real_namespace: str, tmp_path: Path) -> Iterator[ArgoRollouts]:
    """The analysis controller on the real stack, for the test's namespace only."""
    assert real_node.stack.cluster is not None
    controller = ArgoRollouts.start(
        real_node.stack.cluster,
        RolloutsTools.find(),
        folder=tmp_path / "argo-rollouts",
        namespace=real_namespace,
    )
    try:
        yield controller
    finally:
        controller.stop()


def job_metric(name: str, image: str, exit_code: int) -> dict[str, Any]:
    """A `job` metric whose pod exits with `exit_code`."""
    return {
        "name": name,
        "provider": {
            "job": {
                "spec": {
                    "backoffLimit": 0,
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [
                                {
                                    "name": "check",
                                    "image": image,
                                    "imagePullPolicy": "Never",
                                    "command": ["python", "-c", f"raise SystemExit({exit_code})"],
                                }
                            ],
                        }
                    },
                }
            }
        },
    }


@pytest.mark.realstack_owner  # starts a controller with a user minted by the stack's own CA
@pytest.mark.parametrize(
    ("exit_code", "phase"),
    [
        pytest.param(0, SUCCESSFUL, id="pod-exits-0-is-successful"),
        pytest.param(1, FAILED, id="pod-exits-1-fails"),
    ],
)
def test_a_job_metric_is_measured_by_a_real_pod(
    real_node: RealStack,
    real_namespace: str,
    rollouts_controller: ArgoRollouts,
    exit_code: int,
    phase: str,
) -> None:
    body = analysis_run("job-check", [job_metric("smoke", real_node.step_image, exit_code)])
    real_node.kube.create(ANALYSIS_RUNS, real_namespace, body)

    run = wait_for_phase(real_node.kube, real_namespace, "job-check", FINAL_PHASES, timeout=120.0)

    assert run["status"]["phase"] == phase, (run["status"], rollouts_controller.log_tail())
    assert metric_results(run)["smoke"]["phase"] == phase
