"""`progressive-sync demo`, end to end: what a newcomer runs first must work, fast and clean.

Real: everything the demo starts (its own etcd + kube-apiserver, the CRDs, the seeded fleet, the
fleet simulator, the watcher with the local executor running every step as a subprocess). The
simulated syncs are shortened. One run goes through the console command exactly as `make demo`
does; the `--fail-cluster` and `--bad-metrics` runs call `run_demo` in-process to read the
simulator's records of which clusters received a sync. The `--bad-metrics` run adds the real Argo
Rollouts analysis controller, a real Prometheus and the metrics endpoint (marker `analysis`).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest

from orchestrator.api.models import RolloutPhase, StagePhase
from orchestrator.core.clock import SystemClock
from orchestrator.devenv.demo import DemoSettings, demo_cluster_names, run_demo, summary
from orchestrator.simulator.events import read_events

pytestmark = pytest.mark.e2e

# Bounds the subprocess only. How long the demo takes is measured (and reported by the demo
# itself, and by `make bench` figures), never asserted: timing asserts flake on a loaded machine.
DEMO_TIMEOUT_SECONDS = 300.0


def processes_mentioning(text: str) -> list[str]:
    """Command lines of live processes that mention `text`."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(process.info["cmdline"] or [])
        if text in cmdline:
            found.append(cmdline)
    return found


@pytest.mark.timeout(DEMO_TIMEOUT_SECONDS + 60)
def test_demo_succeeds_in_stage_order(tmp_path: Path, record_property: Any) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli.main", "demo", "--sync-seconds", "0.2", "--timeout", "240"],
        capture_output=True,
        text=True,
        timeout=DEMO_TIMEOUT_SECONDS,
        check=False,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    output = result.stdout
    assert result.returncode == 0, f"{output}\n{result.stderr}"
    assert "Rollout Succeeded in" in output
    timings = output[output.index("How long each stage took:") :].splitlines()[1:4]
    assert [line.split()[0] for line in timings] == ["canary", "one", "the"]
    assert all("Succeeded" in line for line in timings)
    assert "12 of 12 clusters synced in stage order, each exactly once." in output
    wall = float(re.search(r"demo wall time ([0-9.]+)s", output).group(1))  # type: ignore[union-attr]
    record_property("demo_wall_seconds", wall)
    # Nothing it started is left: no process (etcd and the steps run from its temporary
    # directories, under TMPDIR), no temporary directory.
    assert processes_mentioning(str(tmp_path)) == []
    assert list(tmp_path.iterdir()) == []


# The failing canary's sync is retried once, 1 s later, instead of Argo CD's default 5 retries
# backing off 5 s to 80 s (155 s of waiting, most of this test's 3 minutes): what is checked is that
# a canary whose sync fails after Argo CD's retries stops the rollout, not how long Argo CD retries.
QUICK_RETRY = {"limit": 1, "backoff": {"duration": "1s", "factor": 2, "maxDuration": "2s"}}


def test_fail_cluster_stops_the_rollout_at_the_canary(tmp_path: Path) -> None:
    failing = demo_cluster_names()[5]  # not the default canary: the flag must make it the canary
    settings = DemoSettings(
        workdir=tmp_path, sync_seconds=0.2, health_seconds=0.1, fail_cluster=failing, sync_retry=QUICK_RETRY
    )
    output: list[str] = []
    result = run_demo(settings, output.append, SystemClock())
    assert result.phase == RolloutPhase.FAILED
    assert result.exit_code == 1
    assert result.canary == failing
    # The simulator's records: the canary is the only cluster that ever received a sync, and its
    # operation failed after Argo CD's one retry, not before.
    assert result.synced_clusters == [failing]
    events = read_events(tmp_path / "simulator-events.jsonl")
    assert [(e["event"], e["cluster"]) for e in events if e["event"].startswith("sync-")] == [
        ("sync-start", failing),
        ("sync-attempt-failed", failing),
        ("sync-retry", failing),
        ("sync-finish", failing),
    ]
    assert [e["phase"] for e in events if e["event"] == "sync-finish"] == ["Failed"]
    assert result.view is not None
    phases = {stage.name: stage.phase for stage in result.view.stages}
    assert phases["canary"] == StagePhase.FAILED
    assert phases["one per region"] not in (StagePhase.PROGRESSING, StagePhase.SUCCEEDED)
    assert phases["the rest"] not in (StagePhase.PROGRESSING, StagePhase.SUCCEEDED)
    assert result.view.stages[1].counts.targets == 0  # the stage took no cluster
    text = summary(result, SystemClock().now())
    assert "Stage 'canary' failed" in text
    assert "The rollout stopped before stage 'one per region'" in text
    assert f"1 of 12 clusters received a sync ({failing}); the other 11 kept the old revision." in text


@pytest.mark.analysis
def test_bad_metrics_stops_the_rollout_at_the_healthy_but_bad_canary(tmp_path: Path) -> None:
    """`demo --bad-metrics NAME`: Argo CD (the simulator) says NAME is Synced + Healthy, but its
    service fails a third of its requests; the real analysis controller, asking the real Prometheus,
    fails NAME's gate and no other cluster gets a sync. Real here on top of the demo: the Argo
    Rollouts analysis controller, Prometheus and the metrics endpoint the demo starts."""
    bad = demo_cluster_names()[4]  # not the default canary: the flag must make it the canary
    settings = DemoSettings(workdir=tmp_path, sync_seconds=0.2, health_seconds=0.1, bad_metrics=bad)
    output: list[str] = []
    result = run_demo(settings, output.append, SystemClock())
    assert result.phase == RolloutPhase.FAILED
    assert result.canary == bad
    # The simulator's records: the bad canary synced fine (Argo CD has nothing against it) and is the
    # only cluster that ever received a sync.
    assert result.synced_clusters == [bad]
    events = read_events(tmp_path / "simulator-events.jsonl")
    assert [e["phase"] for e in events if e["event"] == "sync-finish"] == ["Succeeded"]
    assert result.view is not None
    phases = {stage.name: stage.phase for stage in result.view.stages}
    assert phases["canary"] == StagePhase.FAILED
    assert result.view.stages[1].counts.targets == 0  # the next stage took no cluster
    # The real controller's measurement: the error rate the endpoint serves, against its condition.
    (failed,) = result.failed_metrics
    assert (failed.cluster, failed.metric, failed.phase) == (bad, "error-rate", "Failed")
    assert failed.condition == "successCondition result[0] < 0.05"
    assert abs(float(failed.value) - 0.35) < 0.05
    text = summary(result, SystemClock().now())
    assert f"1 of 12 clusters received a sync ({bad}); the other 11 kept the old revision." in text
    assert f"Analysis gate on {bad}: metric 'error-rate' measured {failed.value}, which fails its " in text
    assert "Argo CD says Healthy, but the service's own metrics say the release is bad" in text
    assert "kubectl get analysisrun -n argocd -l progressivesync.io/name=myservice" in text
