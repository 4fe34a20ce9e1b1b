"""A rendered rollout Workflow run by the local executor, end to end on the real control plane.

Real: kube-apiserver + etcd with every CRD, the steps (`python -m steps ...` subprocesses with the
steps' restricted user), the Workflow as `build_workflow` makes it, the local executor, the audit
log. Simulated: Argo CD (the fleet simulator moves Applications through sync and health and logs
each transition with its time). The watcher is not running: the tests create the Workflow as it
would and act on it the way `argo stop|terminate|suspend|resume` do (orchestrator.workflows.control).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.api.models import RolloutPhase, StagePhase
from orchestrator.core.clock import SystemClock
from orchestrator.devenv.controlplane import DevCluster
from orchestrator.kube.client import Kube
from orchestrator.workflows import control as workflow_control
from tests.support.rollout_rig import RolloutRig, rollout_rig
from tests.support.wait import wait_for

pytestmark = pytest.mark.e2e

CANARY = {
    "name": "canary in eu-west-1",
    "targets": {"clusters": {"selector": {"matchLabels": {"region": "eu-west-1"}}}},
    "maxTargets": 1,
    "maxParallel": 1,
}
PER_REGION = {
    "name": "one per other region",
    "targets": {
        "clusters": {
            "selector": {
                "matchExpressions": [{"key": "region", "operator": "NotIn", "values": ["eu-west-1"]}]
            }
        }
    },
    "maxTargets": 2,
    "maxParallel": 2,
    "spreadBy": "region",
}
REST = {"name": "everything else", "targets": {"clusters": {"selector": {}}}, "maxParallel": "25%"}
THREE_STAGES = [CANARY, PER_REGION, REST]
# For the tests about control rather than scale: six clusters, the rest two at a time.
SMALL_STAGES = [CANARY, PER_REGION, {**REST, "maxParallel": 2}]


@pytest.fixture
def rig(control_plane: DevCluster, kube: Kube, namespace: str, tmp_path: Path) -> Iterator[RolloutRig]:
    with rollout_rig(control_plane, kube, namespace, tmp_path) as running:
        yield running


@pytest.fixture
def small_rig(control_plane: DevCluster, kube: Kube, namespace: str, tmp_path: Path) -> Iterator[RolloutRig]:
    with rollout_rig(control_plane, kube, namespace, tmp_path, clusters=6) as running:
        yield running


def stage_of(rig: RolloutRig, name: str) -> Any:
    status = rig.progressive_sync().status
    assert status is not None and status.stages is not None
    return next(s for s in status.stages if s.name == name)


def test_three_stages_over_twelve_clusters_succeed_in_order_within_max_parallel(rig: RolloutRig) -> None:
    mark = rig.control_plane.audit_mark()
    rig.start_rollout(THREE_STAGES)
    rig.start_executor()
    done = rig.wait_finished()
    assert done["status"]["phase"] == "Succeeded", done["status"].get("message")

    ps = rig.progressive_sync()
    assert ps.status is not None and ps.status.phase == RolloutPhase.SUCCEEDED
    assert rig.fleet is not None
    # Every Application synced exactly once: by the simulator's log and by the audit log.
    assert rig.sync_starts() == {app: 1 for app in rig.fleet.applications}
    app_updates: dict[str, int] = {}
    for event in rig.steps_writes(mark):
        if event.resource == "applications" and event.verb == "update" and event.code == 200:
            app_updates[event.name] = app_updates.get(event.name, 0) + 1
    assert app_updates == {app: 1 for app in rig.fleet.applications}

    targets = rig.stage_targets()
    assert [len(targets[s["name"]]) for s in THREE_STAGES] == [1, 2, 9]
    windows = [rig.window(targets[s["name"]]) for s in THREE_STAGES]
    for (_, earlier_end), (later_start, _) in itertools.pairwise(windows):
        assert later_start >= earlier_end, "a stage started before the one before it finished"
    assert [rig.in_flight(targets[s["name"]]) for s in THREE_STAGES] == [1, 2, 2]  # 25% of 9 is 2

    stage_nodes = {
        n["displayName"]: n for n in rig.nodes(type="DAG") if n.get("templateName", "").startswith("stage-")
    }
    assert set(stage_nodes) == {"canary-in-eu-west-1", "one-per-other-region", "everything-else"}
    assert rig.nodes(name=f"{rig.workflow_name}.onExit")[0]["phase"] == "Succeeded"


def test_stop_runs_the_exit_handler_and_the_rollout_is_cancelled(small_rig: RolloutRig) -> None:
    small_rig.start_rollout(SMALL_STAGES)
    small_rig.start_executor()
    wait_for(
        lambda: len(small_rig.sync_starts()) >= 2, timeout=120, interval=0.2, what="the second stage to start"
    )
    workflow_control.stop(small_rig.kube, small_rig.namespace, small_rig.workflow_name)
    done = small_rig.wait_finished()
    assert done["status"]["phase"] == "Failed"
    assert done["status"]["message"] == "Stopped with strategy 'Stop'"
    assert small_rig.nodes(name=f"{small_rig.workflow_name}.onExit")[0]["phase"] == "Succeeded"
    ps = small_rig.progressive_sync()
    assert ps.status is not None and ps.status.phase == RolloutPhase.CANCELLED
    assert stage_of(small_rig, "everything else").phase in (StagePhase.CANCELLED, StagePhase.PENDING)


def test_terminate_skips_the_exit_handler(small_rig: RolloutRig) -> None:
    small_rig.start_rollout(SMALL_STAGES)
    small_rig.start_executor()
    wait_for(lambda: len(small_rig.sync_starts()) >= 1, timeout=120, interval=0.2, what="the canary to start")
    workflow_control.terminate(small_rig.kube, small_rig.namespace, small_rig.workflow_name)
    done = small_rig.wait_finished()
    assert done["status"]["message"] == "Stopped with strategy 'Terminate'"
    assert small_rig.nodes(name=f"{small_rig.workflow_name}.onExit") == []
    ps = small_rig.progressive_sync()
    assert ps.status is not None and ps.status.phase != RolloutPhase.CANCELLED


def test_suspend_then_resume_continues_where_it_stood(small_rig: RolloutRig) -> None:
    small_rig.start_rollout(SMALL_STAGES)
    small_rig.start_executor()
    wait_for(lambda: len(small_rig.sync_starts()) >= 1, timeout=120, interval=0.2, what="the canary to start")
    workflow_control.suspend(small_rig.kube, small_rig.namespace, small_rig.workflow_name)
    canary_record = f"{small_rig.workflow_name}.canary-in-eu-west-1.record"
    wait_for(
        lambda: (
            any(n["phase"] == "Succeeded" for n in small_rig.nodes(name=canary_record))
            or stage_of(small_rig, "canary in eu-west-1").phase == StagePhase.PROGRESSING
        ),
        timeout=60,
        interval=0.2,
    )
    # While suspended, the canary finishes but the next stage does not start.
    synced_while_suspended = len(small_rig.sync_starts())
    wait_for(
        lambda: not small_rig.nodes(phase="Running", type="Pod"),
        timeout=60,
        interval=0.2,
        what="running steps to end",
    )
    assert len(small_rig.sync_starts()) == synced_while_suspended == 1
    assert small_rig.phase() == "Running"
    workflow_control.resume(small_rig.kube, small_rig.namespace, small_rig.workflow_name, clock=SystemClock())
    done = small_rig.wait_finished()
    assert done["status"]["phase"] == "Succeeded"
    assert small_rig.fleet is not None
    assert small_rig.sync_starts() == {app: 1 for app in small_rig.fleet.applications}


def test_manual_approval_waits_until_approved(small_rig: RolloutRig) -> None:
    gated = {**REST, "maxParallel": 3, "approval": "Manual"}
    small_rig.start_rollout([CANARY, gated])
    small_rig.start_executor()
    wait_for(
        lambda: small_rig.nodes(templateName="approval", phase="Running"),
        timeout=120,
        interval=0.2,
        what="the gate",
    )
    assert len(small_rig.sync_starts()) == 1  # only the canary
    assert stage_of(small_rig, "everything else").phase == StagePhase.PENDING
    # What `progressive-sync approve` / `argo resume` write: the gate node Succeeded.
    workflow_control.resume(small_rig.kube, small_rig.namespace, small_rig.workflow_name, clock=SystemClock())
    done = small_rig.wait_finished()
    assert done["status"]["phase"] == "Succeeded"
    assert small_rig.fleet is not None
    assert len(small_rig.sync_starts()) == len(small_rig.fleet.applications)


def test_a_failing_cluster_fails_its_stage_and_no_later_stage_starts(
    control_plane: DevCluster, kube: Kube, namespace: str, tmp_path: Path
) -> None:
    with rollout_rig(
        control_plane, kube, namespace, tmp_path, cluster_behaviour={"*-us-east-1*": {"degrade": True}}
    ) as rig:
        rig.start_rollout(THREE_STAGES, deadline_seconds=30, degraded_grace_seconds=0)
        rig.start_executor()
        done = rig.wait_finished()
        assert done["status"]["phase"] == "Failed"
        stage = stage_of(rig, "one per other region")
        assert stage.phase == StagePhase.FAILED
        assert stage.failed and all("us-east-1" in failure.name for failure in stage.failed)
        rest = stage_of(rig, "everything else")
        assert rest.phase in (StagePhase.PENDING, StagePhase.CANCELLED) and not rest.targets
        synced_clusters = {e["cluster"] for e in rig.events() if e["event"] == "sync-start"}
        assert len(synced_clusters) <= 3  # the canary and the second stage's two at most
        ps = rig.progressive_sync()
        assert ps.status is not None and ps.status.phase == RolloutPhase.FAILED


def test_executor_restarted_mid_rollout_completes_without_syncing_twice(small_rig: RolloutRig) -> None:
    small_rig.start_rollout(SMALL_STAGES)
    small_rig.start_executor()
    wait_for(
        lambda: len(small_rig.sync_starts()) >= 4, timeout=120, interval=0.2, what="the last stage to start"
    )
    small_rig.stop_executor()
    running = [n["name"] for n in small_rig.nodes(type="Pod", phase="Running")]
    small_rig.start_executor()
    done = small_rig.wait_finished()
    assert done["status"]["phase"] == "Succeeded", done["status"].get("message")
    assert small_rig.fleet is not None
    assert small_rig.sync_starts() == {app: 1 for app in small_rig.fleet.applications}
    restarted = [n for n in small_rig.nodes(type="Pod") if n["name"] in running]
    assert all(n["phase"] == "Succeeded" for n in restarted)
