"""Automatic rollback (issue 32), each scenario on both engines: the local executor and the real
Argo Workflows controller, with the Workflow as `build_workflow` makes it and the real steps.

Argo CD is the fleet simulator, whose `badRevisions` behaviour makes the release Degraded and the
revision before it Healthy: what a bad release and its rollback look like. Each scenario asserts
what the clusters ran (the simulator's log of every sync it picked up, with its revision), the
steps' Application writes (the API server's audit log: one forward and one rollback write per
Application, never more), the Workflow's rollback nodes, and the ProgressiveSync's end status.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from orchestrator.api.models import RolloutPhase
from orchestrator.cli.main import main
from orchestrator.devenv.node import PODS
from orchestrator.simulator.seed import PREVIOUS_REVISION
from tests.support.engines import ARGO, ENGINES, RolloutEngine, rollout_engine
from tests.support.rollout_rig import REVISION, RolloutRig, rollout_rig
from tests.support.wait import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

TIMEOUT = 600.0
CANARY = {
    "name": "canary",
    "targets": {"clusters": {"selector": {"matchLabels": {"region": "eu-west-1"}}}},
    "maxTargets": 1,
}
WAVE = {
    "name": "wave",
    "targets": {"clusters": {"selector": {"matchLabels": {"region": "us-east-1"}}}},
    "maxTargets": 2,
    "maxParallel": 2,
}
REST = {"name": "rest", "targets": {"clusters": {"selector": {}}}, "maxParallel": 2}


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[RolloutEngine]:
    with rollout_engine(request, request.param, tmp_path) as running:
        yield running


@pytest.fixture
def rig(engine: RolloutEngine) -> Iterator[RolloutRig]:
    """Six clusters, two per region."""
    with rollout_rig(engine, clusters=6) as running:
        yield running


def syncs(rig: RolloutRig) -> dict[str, list[str]]:
    """Cluster -> the revisions of the syncs the simulator picked up there, in order."""
    found: dict[str, list[str]] = {}
    for event in rig.events():
        if event["event"] == "sync-start":
            found.setdefault(event["cluster"], []).append(str(event.get("revision", "")))
    return found


def ended_by_steps(rig: RolloutRig) -> set[str]:
    """The Applications whose forward sync the steps ended while it ran: the simulator finished it
    "Operation terminated" after the steps' one Terminating update (steps/terminate.py)."""
    return {e["app"] for e in rig.events() if e["event"] == "sync-finish" and e.get("terminated")}


def rollback_starts(rig: RolloutRig) -> list[str]:
    """The clusters in the order their rollback syncs started (the simulator's clock)."""
    return [
        e["cluster"]
        for e in sorted(rig.events(), key=lambda e: e["time"])
        if e["event"] == "sync-start" and str(e.get("revision")) == PREVIOUS_REVISION
    ]


def rollback(**fields: Any) -> dict[str, Any]:
    return {"rollback": {"on": ["StageFailed", "Cancelled"], **fields}}


def test_a_rollout_with_rollback_that_succeeds_starts_no_pod_in_its_exit_handler(rig: RolloutRig) -> None:
    """The last stage's record recorded the end: the exit handler's rollback-plan, every stage's
    rollback and finalize are Skipped on a Workflow that Succeeded (workflow_templates/
    exit_handler.py), on the real controller as on the local engine."""
    rig.simulate({"*": {"healthSeconds": 0.5}})
    rig.run_engine()
    rig.start_rollout([CANARY, REST], deadline_seconds=60, **rollback())
    done = rig.wait_finished(timeout=TIMEOUT)

    assert done["status"]["phase"] == "Succeeded", done["status"].get("message")
    status = rig.progressive_sync().status
    assert status is not None and status.phase == RolloutPhase.SUCCEEDED and status.rollback is None
    assert status.rollout is not None and status.rollout.finished_at is not None
    assert all(revisions == [REVISION] for revisions in syncs(rig).values())
    exit_name = f"{rig.workflow_name}.onExit"
    [exit_node] = rig.nodes(name=exit_name)
    assert exit_node["phase"] == "Succeeded"
    under = [n for n in rig.nodes() if n["name"].startswith(f"{exit_name}.")]
    assert {n["name"].removeprefix(f"{exit_name}.") for n in under} == {
        "rollback-plan",
        "rollback-rest",
        "rollback-canary",
        "finalize",
    }, under
    assert {n["phase"] for n in under} == {"Skipped"}
    assert not [n for n in rig.nodes(type="Pod") if n["name"].startswith(exit_name)]


def test_a_failing_canary_is_rolled_back_to_what_it_ran_with_one_write(rig: RolloutRig) -> None:
    stages = [CANARY, REST]
    [canary] = rig.planned_targets(stages, "canary")
    rig.simulate({canary: {"badRevisions": REVISION, "healthSeconds": 0.5}})
    rig.run_engine()
    mark = rig.engine.cluster.audit_mark()
    rig.start_rollout(stages, deadline_seconds=60, **rollback())
    done = rig.wait_finished(timeout=TIMEOUT)

    status = rig.progressive_sync().status
    assert status is not None and status.phase == RolloutPhase.ROLLED_BACK, status.message if status else None
    assert done["status"]["phase"] == "Failed"  # the rollout failed; its rollback is what restored it
    assert syncs(rig) == {canary: [REVISION, PREVIOUS_REVISION]}
    assert rig.app_writes_by_steps(mark) == {f"{rig.fleet.app_set}-{canary}": 2}  # type: ignore[union-attr]
    assert status.rollback is not None
    assert (status.rollback.trigger, status.rollback.stages) == ("StageFailed", ["canary"])
    assert (status.rollback.rolled_back, status.rollback.failed) == (1, 0)
    # Drawn in the Argo UI: the canary's rollback node (its Retry node, over its pod) in the exit
    # handler, named as the cluster; Argo v3.7 names a node only when it evaluates it again, which
    # a one-cluster fan-out may finish before (docs/design/workflow.md, How the Argo UI draws it).
    # A stage in batches rolls back in batches: one rollback-batch node.
    template = "rollback-batch" if rig.batched else "rollback"
    nodes = [n for n in rig.nodes(type="Retry") if n.get("templateName") == template]
    if rig.batched:
        assert len(nodes) == 1, nodes
    else:
        assert [n.get("displayName") for n in nodes] in ([canary], [f"rollback(0:{canary})"]), nodes


@pytest.mark.batch_on_real_argo  # the real controller runs the stages, and so their rollback, in batches
def test_a_failure_in_the_third_stage_rolls_back_every_stage_it_reached_later_stages_first(
    rig: RolloutRig,
) -> None:
    stages = [CANARY, WAVE, REST]
    rest = rig.planned_targets(stages, "rest")
    bad = rest[0]
    rig.simulate({bad: {"badRevisions": REVISION}, "*": {"healthSeconds": 0.3}})
    rig.run_engine()
    mark = rig.engine.cluster.audit_mark()
    rig.start_rollout(stages, deadline_seconds=60, **rollback(scope="Reached"))
    rig.wait_finished(timeout=TIMEOUT)

    status = rig.progressive_sync().status
    assert status is not None and status.phase == RolloutPhase.ROLLED_BACK, status.message if status else None
    assert status.rollback is not None and status.rollback.stages == ["rest", "wave", "canary"]
    synced = syncs(rig)
    # Every cluster the rollout synced went back once; nothing was synced twice either way.
    assert all(revisions == [REVISION, PREVIOUS_REVISION] for revisions in synced.values()), synced
    # One forward and one rollback write per Application, and one more for a forward sync the steps
    # ended: a freed slot handed to the last rest cluster (steps/chain.py) just as the bad one
    # failed starts a sync that its own step then terminates (the stage failed) before it is
    # rolled back.
    writes = rig.app_writes_by_steps(mark)
    ended = ended_by_steps(rig)
    assert writes == {app: 3 if app in ended else 2 for app in writes}, (writes, ended)
    order = rollback_starts(rig)
    canary = rig.planned_targets(stages, "canary")
    wave = rig.planned_targets(stages, "wave")
    rest_done = [c for c in order if c not in canary + wave]
    # Later stages first: every rest cluster before any wave cluster, every wave one before the canary.
    assert order == rest_done + [c for c in order if c in wave] + canary, order


def test_more_clusters_to_restore_than_the_rollback_runs_at_once_are_restored_by_batch_pods(
    rig: RolloutRig,
) -> None:
    """Three clusters synced side by side, one of them bad, rolled back two at a time. Argo v3.7.18's
    controller exits (`level=fatal`, again after each restart) when template `parallelism` holds
    back a task of an exit handler, so the exit handler has none: rollback-plan gives the stage two
    `rollback-batch` pods instead of three `rollback` pods (docs/design/workflow.md, "No
    parallelism in the exit handler"). The Workflow ends, every cluster is restored once."""
    first = {"name": "first", "targets": {"clusters": {"selector": {}}}, "maxTargets": 3, "maxParallel": 3}
    stages = [first, REST]
    targets = rig.planned_targets(stages, "first")
    assert len(targets) == 3
    # The bad cluster turns Degraded only after the others are Healthy: all three are synced.
    rig.simulate({targets[0]: {"badRevisions": REVISION, "healthSeconds": 2}, "*": {"healthSeconds": 0.3}})
    rig.run_engine()
    mark = rig.engine.cluster.audit_mark()
    rig.start_rollout(stages, deadline_seconds=120, **rollback(maxParallel=2))
    rig.wait_finished(timeout=TIMEOUT)

    status = rig.progressive_sync().status
    assert status is not None and status.phase == RolloutPhase.ROLLED_BACK, status.message if status else None
    assert syncs(rig) == {cluster: [REVISION, PREVIOUS_REVISION] for cluster in targets}
    ended = ended_by_steps(rig)  # none unless a Healthy one was slower than the bad one (see above)
    writes = rig.app_writes_by_steps(mark)
    assert writes == {app: 3 if app in ended else 2 for app in writes}, (writes, ended)
    assert status.rollback is not None and status.rollback.rolled_back == 3
    batch_pods = [n for n in rig.nodes(type="Retry") if n.get("templateName") == "rollback-batch"]
    assert [n for n in rig.nodes(type="Retry") if n.get("templateName") == "rollback"] == []
    assert (1 <= len(batch_pods) <= 2) if rig.batched else len(batch_pods) == 2, batch_pods


def test_a_watcher_killed_during_the_rollback_leaves_one_rollback_write_each(rig: RolloutRig) -> None:
    """The watcher SIGKILLed while the exit handler rolls back, then started again: the rollback
    goes on, nothing is written twice, and the watcher neither restarts the release nor overwrites
    the RollingBack phase the steps recorded."""
    stages = [CANARY, REST]
    [canary] = rig.planned_targets(stages, "canary")
    # Health takes 2 s to settle, the rollback's too: a window to kill the watcher in.
    rig.simulate({canary: {"badRevisions": REVISION, "healthSeconds": 2}})
    rig.run_engine()
    watcher = rig.watcher_process().start()
    mark = rig.engine.cluster.audit_mark()
    rig.create_ps(stages, **rollback())
    rig.wait_phase("RollingBack", timeout=TIMEOUT)
    watcher.kill()
    watcher.start()
    rig.wait_phase("RolledBack", timeout=TIMEOUT)

    assert len(rig.workflows()) == 1
    assert syncs(rig) == {canary: [REVISION, PREVIOUS_REVISION]}
    assert rig.app_writes_by_steps(mark) == {f"{rig.fleet.app_set}-{canary}": 2}  # type: ignore[union-attr]


def test_cancel_during_the_rollback_stops_it_and_says_what_stays_restored(rig: RolloutRig) -> None:
    """`progressive-sync cancel` while the exit handler rolls back terminates the Workflow (a Stop
    would let the exit handler finish): the rollback stops, and the watcher records the rollout
    Cancelled saying the clusters it restored stay restored."""
    stages = [CANARY, REST]
    [canary] = rig.planned_targets(stages, "canary")
    # Health settles 20 s after each sync: the rollback is still waiting when the test cancels.
    rig.simulate({canary: {"badRevisions": REVISION, "healthSeconds": 20}})
    rig.run_engine()
    rig.watcher()
    rig.create_ps(stages, **rollback())
    rig.wait_phase("RollingBack", timeout=TIMEOUT)
    # Cancelled once its rollback sync started (a rollback pod takes seconds to start on real pods).
    wait_for(
        lambda: syncs(rig).get(canary) == [REVISION, PREVIOUS_REVISION],
        timeout=TIMEOUT,
        interval=0.5,
        what="the canary's rollback sync to start",
    )
    result = CliRunner().invoke(
        main, ["cancel", "myservice", "-n", rig.namespace, "--kubeconfig", str(rig.engine.kubeconfig)]
    )
    assert result.exit_code == 0, result.output
    assert "terminated Workflow" in result.output and "during its rollback" in result.output
    status = rig.wait_phase("Cancelled", timeout=TIMEOUT)

    assert "its rollback was stopped before it finished" in status["message"], status["message"]
    [workflow] = rig.workflows()
    assert workflow["spec"]["shutdown"] == "Terminate"
    assert syncs(rig) == {canary: [REVISION, PREVIOUS_REVISION]}  # nothing was written after the stop


WORKFLOW_LABEL = "workflows.argoproj.io/workflow"
NODE_NAME_ANNOTATION = "workflows.argoproj.io/node-name"


def _rollback_pod(rig: RolloutRig) -> dict[str, Any] | None:
    """The running pod of a `rollback` step (real engine)."""
    pods, _ = rig.kube.list(PODS, rig.namespace, label_selector=f"{WORKFLOW_LABEL}={rig.workflow_name}")
    for pod in pods:
        node = (pod["metadata"].get("annotations") or {}).get(NODE_NAME_ANNOTATION, "")
        if ".rollback(" in node and (pod.get("status") or {}).get("phase") == "Running":
            return pod  # type: ignore[no-any-return]
    return None


@pytest.mark.parametrize(
    "engine", [pytest.param(ARGO, id=ARGO, marks=pytest.mark.realstack)], indirect=True
)  # a step pod exists there only
def test_a_rollback_pod_deleted_mid_wait_writes_no_second_rollback(rig: RolloutRig) -> None:
    """The canary's rollback pod is deleted while it waits for the restored revision to turn
    Healthy: Argo runs the step again (a retry, or the pod made again), which finds our rollback
    sync on the Application and writes nothing: one rollback write, the rollout RolledBack."""
    stages = [CANARY, REST]
    [canary] = rig.planned_targets(stages, "canary")
    rig.simulate({canary: {"badRevisions": REVISION, "healthSeconds": 15}})
    rig.run_engine()
    mark = rig.engine.cluster.audit_mark()
    rig.start_rollout(stages, deadline_seconds=120, **rollback())
    wait_for(
        lambda: syncs(rig).get(canary) == [REVISION, PREVIOUS_REVISION],
        timeout=TIMEOUT,
        interval=0.5,
        what="the canary's rollback sync to start",
    )
    pod = wait_for(lambda: _rollback_pod(rig), timeout=60, interval=0.3, what="the canary's rollback pod")
    rig.kube.delete(PODS, rig.namespace, pod["metadata"]["name"])
    rig.wait_finished(timeout=TIMEOUT)

    status = rig.progressive_sync().status
    assert status is not None and status.phase == RolloutPhase.ROLLED_BACK, status.message if status else None
    assert syncs(rig) == {canary: [REVISION, PREVIOUS_REVISION]}
    assert rig.app_writes_by_steps(mark) == {f"{rig.fleet.app_set}-{canary}": 2}  # type: ignore[union-attr]


# --- groups and rollback (docs/groups.md, "Groups and rollback") -------------------------------------

GROUP_STAGES = [
    {"name": "canary", "targets": {"clusters": {"selector": {}}}, "maxTargets": 1, "maxParallel": 1},
    {"name": "rest", "targets": {"clusters": {"selector": {}}}, "maxParallel": 2},
]


def test_a_failed_group_rolls_back_only_its_own_clusters_the_others_finish(rig: RolloutRig) -> None:
    """groupBy region (three groups, two clusters each): eu-west-1's canary fails, StageFailed is
    listed, so only eu-west-1's synced canary goes back to what it ran (scope Reached: its only
    reached stage); us-east-1 and ap-south-1 finish Succeeded and keep the release."""
    assert rig.fleet is not None
    group_spec = {"groupBy": "region", "maxParallelGroups": 2}
    plan = rig.plan(rig.progressive_sync_model(GROUP_STAGES, **group_spec, **rollback(scope="Reached")))
    [eu_canary] = plan.stage("eu-west-1/canary").targets
    rig.simulate({eu_canary: {"badRevisions": REVISION, "healthSeconds": 0.5}})
    rig.run_engine()
    rig.start_rollout(GROUP_STAGES, deadline_seconds=60, **group_spec, **rollback(scope="Reached"))
    done = rig.wait_finished(timeout=TIMEOUT)

    status = rig.progressive_sync().status
    assert status is not None and status.phase == RolloutPhase.ROLLED_BACK, status.message if status else None
    assert done["status"]["phase"] == "Failed"
    started = syncs(rig)
    assert started[eu_canary] == [REVISION, PREVIOUS_REVISION], "eu-west-1's canary is put back"
    others = [c.name for c in rig.fleet.clusters if c.region != "eu-west-1"]
    assert {c: started[c] for c in others} == {c: [REVISION] for c in others}, "the other groups keep it"
    assert status.rollback is not None and status.rollback.groups is not None
    assert {g.name: g.rolled_back for g in status.rollback.groups} == {
        "ap-south-1": False,
        "eu-west-1": True,
        "us-east-1": False,
    }
    assert status.rollback.stages == ["eu-west-1/canary"]
    assert (status.rollback.rolled_back, status.rollback.failed) == (1, 0)
    assert "groups rolled back: eu-west-1; groups left: ap-south-1, us-east-1" in (status.message or "")
    phases = {stage.name: stage.phase for stage in status.stages or []}
    assert phases["us-east-1/rest"] == "Succeeded" and phases["ap-south-1/rest"] == "Succeeded"
