"""The operator commands on real rollouts: a gate approved, a failure retried, a rollout paused and cancelled.

Real: the session control plane, the watcher (in this process) with the local executor running the
real step programs, the fleet simulator playing Argo CD, and the CLI as a person runs it. This is
where `approve` meets the executor's approval node, `cancel` its shutdown handling and exit
handler, and `retry` the watcher's retry token. Waiting is `wait_for` with deadlines.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from orchestrator.cli.main import main
from orchestrator.devenv import controlplane as devcluster
from orchestrator.kube.client import APPLICATIONS, Kube
from orchestrator.ops import actions as ops_actions
from orchestrator.simulator.config import ANNOTATION_PREFIX
from tests.support.wait import wait_for
from tests.support.watcher_harness import (
    FAST_FLEET,
    Fleet,
    create_ps,
    in_process_watcher,
    phase_of,
    running_actors,
    seed,
    status_of,
    sync_starts,
)

pytestmark = pytest.mark.e2e

ROLLOUT_TIMEOUT = 120.0
QUICK_RETRY = {"retry": {"limit": 1, "backoff": {"duration": "1s"}}}


def stages(*, manual_rest: bool = False) -> list[dict[str, Any]]:
    """A canary (the one cluster of zone eua, the first seeded), then the rest (behind a gate when asked)."""
    rest: dict[str, Any] = {"name": "rest", "targets": {"clusters": {"selector": {}}}, "maxParallel": 2}
    if manual_rest:
        rest["approval"] = "Manual"
    return [
        {
            "name": "canary",
            "targets": {"clusters": {"selector": {"matchLabels": {"zone": "eua"}}}},
            "maxTargets": 1,
        },
        rest,
    ]


class Rig:
    """One test's fleet, actors and CLI."""

    def __init__(self, kube: Kube, namespace: str, kubeconfig: Path, events_log: Path) -> None:
        self.kube = kube
        self.namespace = namespace
        self.kubeconfig = kubeconfig
        self.events_log = events_log
        # Argo CD retries a failed sync (5 times by default, from 5 s apart): one quick retry here, so a
        # failure is final within the tests' timeouts.
        self.fleet: Fleet = seed(kube, namespace, clusters=3, sync_policy=QUICK_RETRY)
        self.canary = self.fleet.clusters[0]  # cells-1-eua, alone in zone eua
        self._stack = ExitStack()

    def start(self, simulator_config: str = FAST_FLEET) -> Rig:
        self._stack.enter_context(
            running_actors(self.kube, self.namespace, self.kubeconfig, self.events_log, simulator_config)
        )
        self._stack.enter_context(in_process_watcher(self.kube, self.namespace))
        return self

    def close(self) -> None:
        self._stack.close()

    def cli(self, *args: str) -> Result:
        return CliRunner().invoke(main, [*args, "-n", self.namespace, "--kubeconfig", str(self.kubeconfig)])

    def view(self, name: str) -> Any:
        return ops_actions.read_view(self.kube, ops_actions.Target(self.namespace, name))

    def wait_phase(self, name: str, phase: str) -> None:
        wait_for(
            lambda: phase_of(self.kube, self.namespace, name) == phase,
            timeout=ROLLOUT_TIMEOUT,
            interval=0.2,
            what=f"{name} {phase} (status: {status_of(self.kube, self.namespace, name)})",
        )


@pytest.fixture
def rig(control_plane: devcluster.DevCluster, kube: Kube, namespace: str, tmp_path: Path) -> Iterator[Rig]:
    """A 3-cluster fleet in the test namespace; `rig.start(config)` runs the simulator and the watcher."""
    built = Rig(kube, namespace, control_plane.kubeconfig, tmp_path / "simulator-events.jsonl")
    try:
        yield built
    finally:
        built.close()


def test_approve_opens_the_gate_the_executor_waits_on(rig: Rig) -> None:
    rig.start()
    create_ps(rig.kube, rig.namespace, "gated", rig.fleet.app_set, stages=stages(manual_rest=True))
    wait_for(
        lambda: rig.view("gated").waiting_stages == ("rest",),
        timeout=ROLLOUT_TIMEOUT,
        interval=0.2,
        what="the gate of stage rest waiting",
    )

    shown = rig.cli("status", "gated")
    assert shown.exit_code == 0, shown.output
    assert re.search(r"^rest +WaitingApproval", shown.output, re.MULTILINE)
    assert "progressive-sync approve gated --stage 'rest'" in shown.output

    automatic = rig.cli("approve", "gated", "--stage", "canary")
    assert automatic.exit_code == 1
    assert "has no manual approval gate" in automatic.stderr

    approved = rig.cli("approve", "gated")
    assert approved.exit_code == 0, approved.output
    assert "approved stage 'rest'" in approved.output

    followed = rig.cli("status", "gated", "--watch", "--timeout", str(ROLLOUT_TIMEOUT))
    assert followed.exit_code == 0, followed.output
    assert phase_of(rig.kube, rig.namespace, "gated") == "Succeeded"
    assert sync_starts(rig.events_log) == dict.fromkeys(rig.fleet.apps, 1)

    late = rig.cli("approve", "gated")
    assert late.exit_code == 1
    assert "already finished (Succeeded" in late.stderr
    too_late = rig.cli("cancel", "gated")
    assert too_late.exit_code == 1
    assert "already finished" in too_late.stderr


def test_retry_runs_a_failed_rollout_again(rig: Rig) -> None:
    rig.start(FAST_FLEET + f"\nclusters: {{{rig.canary}: {{fail: true}}}}")
    create_ps(rig.kube, rig.namespace, "flaky", rig.fleet.app_set, stages=stages())
    failed = rig.cli("status", "flaky", "--watch", "--timeout", str(ROLLOUT_TIMEOUT))
    assert failed.exit_code == 1, failed.output
    assert phase_of(rig.kube, rig.namespace, "flaky") == "Failed"
    assert "progressive-sync retry flaky" in failed.output
    assert set(sync_starts(rig.events_log)) == {
        f"{rig.fleet.app_set}-{rig.canary}"
    }  # nothing past the canary

    # The cause is fixed (the canary's Application no longer fails); a person asks for a retry.
    canary_app = f"{rig.fleet.app_set}-{rig.canary}"
    rig.kube.patch(
        APPLICATIONS,
        rig.namespace,
        canary_app,
        {"metadata": {"annotations": {f"{ANNOTATION_PREFIX}fail": "false"}}},
    )
    retried = rig.cli("retry", "flaky")
    assert retried.exit_code == 0, retried.output
    assert "(attempt 2" in retried.output
    rig.wait_phase("flaky", "Succeeded")
    assert status_of(rig.kube, rig.namespace, "flaky")["rollout"]["attempt"] == 2

    again = rig.cli("retry", "flaky")
    assert again.exit_code == 1
    assert "did not fail: it succeeded" in again.stderr


def test_pause_resume_and_cancel_a_running_rollout(rig: Rig) -> None:
    # The canary's sync never finishes, so the rollout stays in its first stage until cancelled.
    rig.start(FAST_FLEET + f"\nclusters: {{{rig.canary}: {{hang: true}}}}")
    create_ps(rig.kube, rig.namespace, "stuck", rig.fleet.app_set, stages=stages())
    wait_for(
        lambda: rig.view("stuck").stages[0].syncing == (rig.canary,),
        timeout=ROLLOUT_TIMEOUT,
        interval=0.2,
        what="the canary syncing",
    )

    paused = rig.cli("pause", "stuck")
    assert paused.exit_code == 0, paused.output
    rig.wait_phase("stuck", "Paused")
    resumed = rig.cli("unpause", "stuck")
    assert resumed.exit_code == 0, resumed.output
    rig.wait_phase("stuck", "Progressing")

    cancelled = rig.cli("cancel", "stuck")
    assert cancelled.exit_code == 0, cancelled.output
    assert "stopped Workflow stuck-" in cancelled.output
    rig.wait_phase("stuck", "Cancelled")
    assert set(sync_starts(rig.events_log)) == {f"{rig.fleet.app_set}-{rig.canary}"}

    again = rig.cli("cancel", "stuck")
    assert again.exit_code == 1
    assert "already finished (Cancelled" in again.stderr
