"""Credentials in cluster Secrets (`data.config`) are never decoded, logged or written anywhere.

A marker is planted in every cluster Secret's `data.config`; then a whole two-stage rollout runs
through the real entrypoints (`python -m steps ...` at DEBUG log level, `progressive-sync simulate
run` as a subprocess), with the cluster inventory published from those Secrets. No output, log,
output file, events log or object the API server holds (other than the Secrets themselves) may
contain the marker, raw or base64-encoded.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from orchestrator.api.models import RolloutPhase
from orchestrator.devenv.controlplane import DevCluster
from orchestrator.kube.client import (
    APPLICATION_SETS,
    APPLICATIONS,
    CONFIG_MAPS,
    EVENTS,
    PROGRESSIVE_SYNCS,
    SECRETS,
    WORKFLOWS,
    Kube,
)
from orchestrator.simulator.seed import seed_fleet
from tests.support.builders import NEW_REVISION as REVISION
from tests.support.steps_harness import (
    StepRunner,
    make_progressive_sync,
    publish_inventory,
    read_progressive_sync,
    steps_kubeconfig,
)

pytestmark = pytest.mark.integration


def test_a_marker_in_cluster_credentials_never_appears_anywhere(
    kube: Kube, namespace: str, control_plane: DevCluster, tmp_path: Path
) -> None:
    marker = f"MARKER-{uuid.uuid4().hex}"
    config_b64 = base64.b64encode(json.dumps({"bearerToken": marker}).encode()).decode()
    fleet = seed_fleet(kube, namespace, clusters=3, regions=["eu-west-1", "us-east-1"], revision=REVISION)
    for cluster in fleet.clusters:
        secret = kube.get(SECRETS, namespace, f"cluster-{cluster.name}")
        secret["data"]["config"] = config_b64
        kube.replace(SECRETS, namespace, secret)
    publish_inventory(kube, namespace)  # from the Secrets as they are now, marker included
    make_progressive_sync(kube, namespace)

    sim_log = tmp_path / "simulator.log"
    events_log = tmp_path / "events.jsonl"
    with sim_log.open("w") as handle:
        simulator = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "orchestrator.cli.main",
                "simulate",
                "run",
                "--namespace",
                namespace,
                "--sync-seconds",
                "0.2",
                "--health-seconds",
                "0.2",
                "--events-log",
                str(events_log),
            ],
            env={**os.environ, "KUBECONFIG": str(control_plane.kubeconfig)},
            stdout=handle,
            stderr=subprocess.STDOUT,
        )
    runner = StepRunner(
        kubeconfig=steps_kubeconfig(control_plane, kube),
        namespace=namespace,
        outputs_dir=tmp_path / "outputs",
        extra_env={"PROGRESSIVE_SYNC_LOG_LEVEL": "DEBUG"},
    )
    outputs: list[str] = []

    def step(*args: str) -> str:
        result = runner.run(*args)
        outputs.extend([result.stdout, result.stderr])
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout

    try:
        for stage in ("canary", "rest"):
            step("select", "--stage", stage)
            for cluster in json.loads(runner.targets()):
                step("sync", "--stage", stage, "--cluster", cluster)
                step("wait-healthy", "--stage", stage, "--cluster", cluster)
            step("record", "--stage", stage)
        step("finalize", "--workflow-name", "myservice-r1", "--workflow-status", "Succeeded")
    finally:
        simulator.send_signal(signal.SIGTERM)
        simulator.wait(timeout=30)
    status = read_progressive_sync(kube, namespace).status
    assert status is not None and status.phase == RolloutPhase.SUCCEEDED, status
    assert status.progress == "3/3"

    texts = {f"step output {i}": text for i, text in enumerate(outputs)}
    texts["simulator log"] = sim_log.read_text()
    texts["simulator events"] = events_log.read_text()
    for path in runner.outputs_dir.iterdir():
        texts[f"output file {path.name}"] = path.read_text()
    for resource in (PROGRESSIVE_SYNCS, APPLICATIONS, APPLICATION_SETS, WORKFLOWS, EVENTS, CONFIG_MAPS):
        items, _ = kube.list(resource, namespace)
        texts[resource.plural] = json.dumps(items)
    secrets, _ = kube.list(SECRETS, namespace)
    texts["other secrets"] = json.dumps(
        [s for s in secrets if not s["metadata"]["name"].startswith("cluster-")]
    )
    texts["audit log"] = control_plane.audit_log_path.read_text()

    assert sum(config_b64 in json.dumps(s) for s in secrets) == 3, "the marker was planted"
    ran = [json.loads(line)["event"] for line in texts["simulator events"].splitlines()]
    assert sorted(e for e in ran if e in ("sync-start", "sync-finish", "healthy")) == sorted(
        ["sync-start", "sync-finish", "healthy"] * 3
    ), "the rollout really ran (3 x start/finish/healthy)"
    for needle in (marker, config_b64, base64.b64encode(marker.encode()).decode()):
        leaks = [where for where, text in texts.items() if needle in text]
        assert leaks == [], f"{needle[:20]}... found in {leaks}"
