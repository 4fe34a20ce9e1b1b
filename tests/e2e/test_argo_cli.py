"""The real `argo` CLI against the local control plane, on rollouts run by the local executor.

Real: the argo CLI of the pinned Argo Workflows (built by `make tools`), talking to kube-apiserver
directly (no Argo Server), the steps, the local executor; simulated: Argo CD (the fleet simulator).
It shows that what people do in production, `argo get`, `argo resume` at an approval gate and
`argo stop`, works on Workflows the local executor runs, because both sides read and write the same
fields.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.api.models import RolloutPhase
from orchestrator.devenv.controlplane import DevCluster
from orchestrator.kube.client import Kube
from tests.support.rollout_rig import RolloutRig, rollout_rig
from tests.support.wait import wait_for

pytestmark = pytest.mark.e2e

CANARY = {"name": "canary", "targets": {"clusters": {"selector": {}}}, "maxTargets": 1}
REST = {"name": "rest", "targets": {"clusters": {"selector": {}}}, "maxParallel": 3}


@pytest.fixture
def rig(control_plane: DevCluster, kube: Kube, namespace: str, tmp_path: Path) -> Iterator[RolloutRig]:
    with rollout_rig(control_plane, kube, namespace, tmp_path, clusters=6) as running:
        yield running


def run_argo(argo: Path, rig: RolloutRig, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": str(rig.control_plane.kubeconfig)}
    env.pop("ARGO_SERVER", None)
    result = subprocess.run(
        [str(argo), *args, "-n", rig.namespace],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, f"argo {' '.join(args)}: {result.stdout}{result.stderr}"
    return result


def test_argo_get_and_argo_resume_at_the_approval_gate(argo: Path, rig: RolloutRig) -> None:
    name = rig.start_rollout([CANARY, {**REST, "approval": "Manual"}])
    rig.start_executor()
    wait_for(
        lambda: rig.nodes(templateName="approval", phase="Running"),
        timeout=120,
        interval=0.2,
        what="the gate",
    )
    shown = json.loads(run_argo(argo, rig, "get", name, "-o", "json").stdout)
    assert shown["status"]["phase"] == "Running"
    assert len(rig.sync_starts()) == 1
    run_argo(argo, rig, "resume", name)
    done = rig.wait_finished()
    assert done["status"]["phase"] == "Succeeded"
    assert rig.fleet is not None
    assert rig.sync_starts() == {app: 1 for app in rig.fleet.applications}
    table = run_argo(argo, rig, "get", name).stdout
    assert "Succeeded" in table and "canary" in table


def test_argo_stop_runs_the_exit_handler_and_cancels_the_rollout(argo: Path, rig: RolloutRig) -> None:
    name = rig.start_rollout([CANARY, REST])
    rig.start_executor()
    wait_for(lambda: len(rig.sync_starts()) >= 1, timeout=120, interval=0.2, what="the canary to start")
    run_argo(argo, rig, "stop", name)
    done = rig.wait_finished()
    assert done["status"]["message"] == "Stopped with strategy 'Stop'"
    assert rig.nodes(name=f"{name}.onExit")[0]["phase"] == "Succeeded"
    ps = rig.progressive_sync()
    assert ps.status is not None and ps.status.phase == RolloutPhase.CANCELLED
