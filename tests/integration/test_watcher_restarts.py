"""Restart safety: `progressive-sync watch` SIGKILLed at many points of a rollout, then started again.

Real: the control plane, the watcher as a child process (killed with SIGKILL, never warned), the
local executor running the real steps, the fleet simulator. The executor and the simulator run in
this test process and are not killed: the subject is the watcher. Each actor has its own user, so
the API server's audit log says who wrote what.

What must hold however often the watcher dies: exactly one Workflow per release, every
Application synced exactly once (the simulator's log of operations it picked up), the
ProgressiveSync ends Succeeded, and a failed rollout is never re-created.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.devenv import controlplane as devcluster
from orchestrator.kube.client import APPLICATIONS, PROGRESSIVE_SYNCS, WORKFLOWS, Kube
from orchestrator.simulator.appcontroller import FleetSimulator
from orchestrator.simulator.config import SimulatorConfig
from tests.support.wait import wait_for
from tests.support.watcher_harness import (
    WatcherProcess,
    completed_count,
    create_ps,
    phase_of,
    running_actors,
    seed,
    stage_of,
    status_of,
    sync_starts,
    workflows_of,
)

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

WATCHER_USER = "progressive-sync-watcher"
STEPS_USER = "progressive-sync-steps"
SLOW_FLEET = "defaults: {syncSeconds: 1.0, healthSeconds: 1.0}"


@pytest.fixture(scope="module")
def users(control_plane: devcluster.DevCluster) -> dict[str, Path]:
    """Kubeconfigs of the watcher's and the steps' own users (cluster admins, told apart in the audit log)."""
    return {user: control_plane.mint_user(user, ["system:masters"]) for user in (WATCHER_USER, STEPS_USER)}


@pytest.fixture
def watcher_process(users: dict[str, Path], namespace: str, tmp_path: Path) -> Iterator[WatcherProcess]:
    process = WatcherProcess(users[WATCHER_USER], namespace, tmp_path / "watcher.log")
    yield process
    process.stop()


def _decided(key: str, *steps: str) -> Callable[[dict[str, Any]], bool]:
    return lambda entry: entry.get("ps") == key and entry.get("step") in steps


@pytest.mark.timeout(900)
def test_killed_at_thirteen_points_of_a_rollout_it_still_runs_it_exactly_once(  # noqa: PLR0917 - fixtures
    kube: Kube,
    control_plane: devcluster.DevCluster,
    namespace: str,
    users: dict[str, Path],
    watcher_process: WatcherProcess,
    tmp_path: Path,
) -> None:
    fleet = seed(kube, namespace, clusters=3)
    events = tmp_path / "simulator.jsonl"
    mark = control_plane.audit_mark()

    def app_picked_up() -> bool:
        return any(
            (kube.get(APPLICATIONS, namespace, app).get("status") or {}).get("operationState")
            for app in fleet.apps
        )

    kill_points: list[tuple[str, Callable[[], Any]]] = [
        (
            "started",
            lambda: watcher_process.wait_logged(
                lambda e: "watching ProgressiveSyncs" in e.get("message", "")
            ),
        ),
        (
            "finalizer added",
            lambda: (
                "progressivesync.io/workflow"
                in (kube.get(PROGRESSIVE_SYNCS, namespace, "web")["metadata"].get("finalizers") or [])
            ),
        ),
        ("Workflow created", lambda: workflows_of(kube, namespace, "web")),
        (
            "rollout recorded",
            lambda: (status_of(kube, namespace, "web").get("rollout") or {}).get("workflow"),
        ),
        ("canary selected", lambda: stage_of(status_of(kube, namespace, "web"), "canary").get("targets")),
        ("canary sync picked up", app_picked_up),
        ("canary cluster done", lambda: completed_count(status_of(kube, namespace, "web")) >= 1),
        (
            "canary stage done",
            lambda: stage_of(status_of(kube, namespace, "web"), "canary").get("phase") == "Succeeded",
        ),
        ("rest selected", lambda: stage_of(status_of(kube, namespace, "web"), "rest").get("targets")),
        ("second cluster done", lambda: completed_count(status_of(kube, namespace, "web")) >= 2),
        ("third cluster done", lambda: completed_count(status_of(kube, namespace, "web")) >= 3),
        (
            "Workflow finished",
            lambda: any(
                (w.get("status") or {}).get("phase") == "Succeeded"
                for w in workflows_of(kube, namespace, "web")
            ),
        ),
        ("rollout Succeeded", lambda: phase_of(kube, namespace, "web") == "Succeeded"),
    ]
    with running_actors(kube, namespace, users[STEPS_USER], events, SLOW_FLEET):
        watcher_process.start()
        create_ps(kube, namespace, "web", fleet.app_set)
        kills = []
        for point, reached in kill_points:
            wait_for(reached, timeout=180, interval=0.05, what=point)
            watcher_process.kill()
            kills.append(point)
            watcher_process.start()
        # The last start sees the converged rollout and decides there is nothing to do.
        watcher_process.wait_logged(
            _decided(f"{namespace}/web", "already-rolled-out", "up-to-date"), timeout=60
        )

    assert len(kills) >= 10
    workflows = workflows_of(kube, namespace, "web")
    assert len(workflows) == 1, [w["metadata"]["name"] for w in workflows]
    rollout_id = workflows[0]["metadata"]["labels"]["progressivesync.io/rollout-id"]
    status = status_of(kube, namespace, "web")
    assert status["phase"] == "Succeeded"
    assert status["rollout"]["id"] == rollout_id
    assert status["progress"] == "3/3"
    assert sync_starts(events) == dict.fromkeys(fleet.apps, 1), "every Application synced exactly once"
    for app in fleet.apps:
        operation = kube.get(APPLICATIONS, namespace, app)["status"]["operationState"]["operation"]
        assert {"name": "rollout-id", "value": rollout_id} in operation["info"], "synced by this rollout"
    creates = [
        e
        for e in control_plane.audit_events_since(mark)
        if e.user == WATCHER_USER and e.verb == "create" and e.resource == "workflows"
    ]
    assert [e.code for e in creates if e.code == 201] == [201], "one Workflow created, by the watcher"
    assert watcher_process.starts == len(kills) + 1


def test_a_failed_rollout_is_not_re_created_after_restarts(
    kube: Kube,
    namespace: str,
    users: dict[str, Path],
    watcher_process: WatcherProcess,
    tmp_path: Path,
) -> None:
    fleet = seed(kube, namespace, clusters=2)
    events = tmp_path / "simulator.jsonl"
    with running_actors(
        kube,
        namespace,
        users[STEPS_USER],
        events,
        "defaults: {syncSeconds: 0.3, healthSeconds: 0.3, degrade: true}",
    ):
        watcher_process.start()
        # The canary fails once Degraded for 2 s (the default grace, 120 s, was most of this test's time).
        create_ps(kube, namespace, "web", fleet.app_set, degradedGraceSeconds=2)
        wait_for(
            lambda: phase_of(kube, namespace, "web") == "Failed", timeout=180, what="the rollout to fail"
        )
        for _ in range(3):
            watcher_process.kill()
            watcher_process.start()
            watcher_process.wait_logged(_decided(f"{namespace}/web", "already-rolled-out"), timeout=60)

    assert len(workflows_of(kube, namespace, "web")) == 1
    assert phase_of(kube, namespace, "web") == "Failed"
    failed = stage_of(status_of(kube, namespace, "web"), "canary").get("failed") or []
    assert len(failed) == 1 and "health Degraded" in failed[0]["reason"], failed
    assert sum(sync_starts(events).values()) == 1, "only the canary was synced, once"


def test_sigterm_stops_the_watcher_cleanly(
    kube: Kube, namespace: str, watcher_process: WatcherProcess
) -> None:
    watcher_process.start()
    watcher_process.wait_logged(lambda e: "watching ProgressiveSyncs" in e.get("message", ""))
    assert watcher_process.terminate(timeout=20) == 0
    assert any(e.get("message") == "stopped" for e in watcher_process.log_entries(current_run_only=True))


@pytest.mark.timeout(900)
def test_with_the_local_engine_in_the_same_process_kills_still_run_the_rollout_once(
    kube: Kube, namespace: str, users: dict[str, Path], tmp_path: Path
) -> None:
    """The watcher and its in-process executor die together; the steps they ran are orphaned."""
    fleet = seed(kube, namespace, clusters=3)
    events = tmp_path / "simulator.jsonl"
    watcher = WatcherProcess(
        users[WATCHER_USER], namespace, tmp_path / "watcher.log", extra_args=("--engine=local",)
    )
    status = lambda: status_of(kube, namespace, "web")  # noqa: E731 - a short reader for the table below
    kill_points: list[tuple[str, Callable[[], Any]]] = [
        ("canary selected", lambda: stage_of(status(), "canary").get("targets")),
        ("canary cluster done", lambda: completed_count(status()) >= 1),
        ("rest selected", lambda: stage_of(status(), "rest").get("targets")),
        ("second cluster done", lambda: completed_count(status()) >= 2),
    ]
    simulator = FleetSimulator(
        kube, namespace, SimulatorConfig.from_yaml(SLOW_FLEET), events_log=events
    ).start()
    try:
        watcher.start()
        create_ps(kube, namespace, "web", fleet.app_set)
        for point, reached in kill_points:
            wait_for(reached, timeout=240, interval=0.05, what=point)
            watcher.kill()
            watcher.start()
        wait_for(lambda: phase_of(kube, namespace, "web") == "Succeeded", timeout=300, what="Succeeded")
    finally:
        watcher.stop()
        simulator.stop()
    assert len(workflows_of(kube, namespace, "web")) == 1
    assert sync_starts(events) == dict.fromkeys(fleet.apps, 1)
    assert status_of(kube, namespace, "web")["progress"] == "3/3"


def test_a_workflow_deleted_while_the_watcher_was_down_still_has_its_syncs_ended(
    kube: Kube, namespace: str, users: dict[str, Path], watcher_process: WatcherProcess, tmp_path: Path
) -> None:
    """Issue 29, point 7: once the restarted watcher sees the Workflow gone, it ends what we started."""
    fleet = seed(kube, namespace, clusters=2)
    events = tmp_path / "simulator.jsonl"
    hanging = "defaults: {syncSeconds: 0.3, healthSeconds: 0.3, hang: true}"

    def running_sync() -> str:
        for app in fleet.apps:
            state = (kube.get(APPLICATIONS, namespace, app).get("status") or {}).get("operationState") or {}
            if state.get("phase") == "Running":
                return app
        return ""

    def terminated(app: str) -> bool:
        state = (kube.get(APPLICATIONS, namespace, app).get("status") or {}).get("operationState") or {}
        return state.get("phase") == "Failed" and "terminated" in str(state.get("message", "")).lower()

    with running_actors(kube, namespace, users[STEPS_USER], events, hanging):
        watcher_process.start()
        create_ps(kube, namespace, "web", fleet.app_set)
        app = wait_for(running_sync, timeout=180, what="a sync of ours running")
        watcher_process.kill()
        (workflow,) = workflows_of(kube, namespace, "web")
        kube.delete(WORKFLOWS, namespace, workflow["metadata"]["name"])
        assert not terminated(app)
        watcher_process.start()
        wait_for(lambda: terminated(app), timeout=60, what=f"{app}'s sync terminated")
        wait_for(lambda: phase_of(kube, namespace, "web") == "Cancelled", what="the end recorded")
    assert app in status_of(kube, namespace, "web")["message"]
    assert sync_starts(events) == {app: 1}
