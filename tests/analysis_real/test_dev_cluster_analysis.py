"""`progressive-sync dev-cluster up --argo-rollouts`, end to end, as a person runs it.

Real: the CLI as a subprocess and everything it starts (a control plane of its own, the analysis
CRDs, the Argo Rollouts analysis controller, Prometheus, the metrics endpoint). Checked: the export
lines name Prometheus and the metrics control URL, a cluster made bad through the control URL is
what Prometheus reports, an AnalysisRun whose metric names no address is measured against the
stack's Prometheus (the controller's default address), and `down` leaves nothing running.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from orchestrator.devenv.analysis_stack import METRICS_CONTROL_URL_VARIABLE, PROMETHEUS_URL_VARIABLE
from orchestrator.devenv.metrics_endpoint import MetricsControl, error_rate_query
from orchestrator.devenv.processes import Supervisor
from orchestrator.devenv.prometheus import Prometheus
from orchestrator.kube.client import ANALYSIS_RUNS, NAMESPACES, Kube
from tests.support.analysis import FAILED, FINAL_PHASES, analysis_run, prometheus_metric, wait_for_phase
from tests.support.wait import wait_for

# Not in the `analysis` xdist group: it starts a stack of its own, and runs beside the others.
pytestmark = pytest.mark.analysis

CLI = [sys.executable, "-m", "orchestrator.cli.main", "dev-cluster"]


@pytest.mark.timeout(300)
def test_up_with_argo_rollouts_exports_prometheus_and_the_control_url_and_down_stops_it(
    tmp_path: Path,
) -> None:
    env = {**os.environ, "PROGRESSIVE_SYNC_DEV_CLUSTER_DIR": str(tmp_path / "state")}
    started = time.monotonic()
    up = subprocess.Popen(
        [*CLI, "up", "--argo-rollouts", "--metrics-cluster", "eu-1", "--metrics-cluster", "us-1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert up.stdout is not None
        exports: dict[str, str] = {}
        lines = []
        for line in up.stdout:  # bounded: `up` prints its export lines, or exits on failure
            lines.append(line)
            if line.startswith("export "):
                name, value = line.removeprefix("export ").strip().split("=", 1)
                exports[name] = value
            if METRICS_CONTROL_URL_VARIABLE in exports:
                break
        assert METRICS_CONTROL_URL_VARIABLE in exports, (lines, up.stderr and up.stderr.read())
        print(f"dev-cluster up --argo-rollouts ready in {time.monotonic() - started:.1f}s")
        assert "# Argo Rollouts analysis controller (--controllers=analysis)" in "".join(lines)
        children = psutil.Process(up.pid).children(recursive=True)
        assert {"prometheus", "rollouts-controller"} <= {child.name() for child in children}

        MetricsControl(exports[METRICS_CONTROL_URL_VARIABLE]).set_error_rate("us-1", 0.5)
        prometheus = Prometheus(
            url=exports[PROMETHEUS_URL_VARIABLE], folder=tmp_path, supervisor=Supervisor(tmp_path)
        )
        wait_for(
            lambda: prometheus.wait_for_value(error_rate_query("us-1")) > 0.49,
            timeout=30.0,
            interval=0.2,
            what="Prometheus to report us-1's error rate",
        )

        kube = Kube.from_kubeconfig(exports["KUBECONFIG"])
        try:
            kube.create(
                NAMESPACES, None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "t"}}
            )
            # No address: the controller's default, the stack's Prometheus.
            query = error_rate_query("us-1")
            metric = prometheus_metric("error-rate", address=None, query=query, failure=None)
            kube.create(ANALYSIS_RUNS, "t", analysis_run("default-address", [metric]))
            run = wait_for_phase(kube, "t", "default-address", FINAL_PHASES)
            assert run["status"]["phase"] == FAILED, run["status"]
        finally:
            kube.close()
    finally:
        down = subprocess.run(
            [*CLI, "down"], capture_output=True, text=True, env=env, timeout=90, check=False
        )
        up.wait(timeout=60)
    assert down.returncode == 0, down.stderr
    assert not [child for child in children if child.is_running() and child.status() != psutil.STATUS_ZOMBIE]
