"""Argo CD's contract (issue 12), one rule at a time, with Argo CD played by hand on the real API server.

The steps run as a container runs them (`python -m steps ...`, the chart's RBAC for step pods); the
test writes each Application exactly as Argo CD's ApplicationSet controller and application
controller would, one write at a time (tests/support/argocd_play.py), and checks what the steps did
in between: their writes (the API server's audit log), their exit codes and the stage status.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from orchestrator.argocd import appsync
from orchestrator.devenv.controlplane import DevCluster
from orchestrator.kube.client import APPLICATIONS, PROGRESSIVE_SYNCS, WORKFLOWS, Kube
from tests.support.argocd_play import ArgoWorld
from tests.support.builders import NEW_REVISION as REVISION
from tests.support.builders import OLD_REVISION
from tests.support.outcomes import stage_lists
from tests.support.steps_harness import (
    StepRunner,
    describe,
    make_progressive_sync,
    publish_inventory,
    read_progressive_sync,
    steps_kubeconfig,
    writes_by,
)
from tests.support.wait import wait_for

pytestmark = pytest.mark.integration

ALL = [{"name": "all", "targets": {"clusters": {"selector": {}}}, "maxParallel": 2}]


def now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


@dataclass
class Rig:
    kube: Kube
    namespace: str
    world: ArgoWorld
    runner: StepRunner
    control_plane: DevCluster
    tmp_path: Path

    def run(self, step: str, cluster: str, *extra: str, code: int = 0) -> str:
        result = self.runner.run(step, "--stage", "all", "--cluster", cluster, *extra)
        assert result.returncode == code, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
        return result.stdout

    def start(self, step: str, cluster: str) -> tuple[Any, Path]:
        log = self.tmp_path / f"{step}-{cluster}.log"
        process = self.runner.start(step, "--stage", "all", "--cluster", cluster, log_path=log)
        return process, log

    def stage(self) -> Any:
        """The stage's status entry with every cluster listed from its records."""
        return stage_lists(self.kube, self.namespace, "myservice", "all")

    def app_writes(self, mark: int) -> list[str]:
        return describe([w for w in writes_by(self.control_plane, mark) if w.resource == "applications"])


@pytest.fixture
def rig(control_plane: DevCluster, kube: Kube, namespace: str, tmp_path: Path) -> Iterator[Rig]:
    world = ArgoWorld.create(
        kube, namespace, clusters=["c1", "c2"], revision=REVISION, previous=OLD_REVISION, now=now()
    )
    publish_inventory(kube, namespace)  # what the watcher does from the cluster Secrets
    runner = StepRunner(
        kubeconfig=steps_kubeconfig(control_plane, kube),
        namespace=namespace,
        outputs_dir=tmp_path / "outputs",
        extra_env={"PROGRESSIVE_SYNC_WATCH_WINDOW_SECONDS": "2"},
    )
    yield Rig(kube, namespace, world, runner, control_plane, tmp_path)


def select(rig: Rig, **env: str) -> list[str]:
    result = rig.runner.run("select", "--stage", "all", **env)
    assert result.returncode == 0, result.stdout + result.stderr
    return list(json.loads(rig.runner.targets()))


def select_answered(rig: Rig, cluster: str, *, sync: str, revision: str) -> list[str]:
    """`select`, with Argo CD's answer played for the comparison it asks of `cluster`'s Application
    (`sync` at `revision`): nothing waits out `--compare-wait-seconds`."""
    log = rig.tmp_path / "select.log"
    process = rig.runner.start("select", "--stage", "all", log_path=log)
    try:
        wait_for(
            lambda: appsync.refresh_requested(rig.world.get(cluster)),
            timeout=30,
            what=f"select to ask about {cluster}",
        )
        rig.world.compares(cluster, now(), sync=sync, revision=revision)  # consumes the annotation
    except BaseException:
        process.kill()
        raise
    code, output = finish(process, log)
    assert code == 0, output
    return list(json.loads(rig.runner.targets()))


def finish(process: Any, log: Path, timeout: float = 60) -> tuple[int, str]:
    try:
        code = process.wait(timeout=timeout)
    finally:
        if process.poll() is None:
            process.kill()
    return code, log.read_text()


# --- finding 1: our sync is known by what Argo CD keeps, not by annotations ---------------------


def test_our_sync_is_known_by_its_operation_after_the_applicationset_controller_rewrites_annotations(
    rig: Rig,
) -> None:
    make_progressive_sync(rig.kube, rig.namespace, stages=ALL)
    assert "c1" in select(rig)
    rig.run("sync", "c1")
    world = rig.world
    world.appset_reconciles("c1")  # whatever we might have put there is gone within seconds
    started = now()
    world.takes_up("c1", started)
    world.appset_reconciles("c1")
    assert world.get("c1")["metadata"]["annotations"] == {"team": "payments"}

    # A retried sync step while Argo CD runs our operation: nothing is written, nothing synced twice.
    mark = rig.control_plane.audit_mark()
    assert "already synced by this rollout" in rig.run("sync", "c1")
    assert rig.app_writes(mark) == []

    world.completes("c1", started + timedelta(seconds=1))
    world.compares("c1", started + timedelta(seconds=2), sync="Synced", revision=REVISION)
    world.appset_reconciles("c1")
    assert "cluster c1 done" in rig.run("wait-healthy", "c1")
    assert rig.stage().completed == ["c1"]

    # Alice syncs it again afterwards: the state is hers now, our sync is in the history.
    world.someone_syncs("c1", "alice", REVISION)
    world.takes_up("c1", started + timedelta(seconds=3))
    world.completes("c1", started + timedelta(seconds=4))
    assert not appsync.state_is_ours(world.get("c1"), "r1")
    mark = rig.control_plane.audit_mark()
    assert "already synced by this rollout" in rig.run("sync", "c1")
    assert rig.app_writes(mark) == [], "hooks never run twice"


# --- finding 6: done and failed --------------------------------------------------------------


def test_the_stale_in_between_state_is_not_done_and_a_refresh_is_asked_for(rig: Rig) -> None:
    make_progressive_sync(rig.kube, rig.namespace, stages=ALL)
    select(rig)
    rig.run("sync", "c1")
    world = rig.world
    finished = now()
    world.takes_up("c1", finished - timedelta(seconds=2))
    # Argo CD writes the operation state first; its last comparison (same second, whole seconds)
    # still names the old commit, and the Healthy is the previous revision's.
    world.completes("c1", finished)
    world.compares("c1", finished, sync="Synced", revision=OLD_REVISION)
    process, log = rig.start("wait-healthy", "c1")
    try:
        wait_for(
            lambda: "health not observed since the sync finished" in log.read_text(),
            timeout=30,
            what="wait-healthy to see the stale state",
        )
        assert process.poll() is None, log.read_text()
        assert rig.stage().completed == []
        # It asks Argo CD for a new comparison instead of waiting minutes for the periodic one.
        wait_for(lambda: appsync.refresh_requested(world.get("c1")), timeout=30, what="a refresh request")
        world.compares("c1", now() + timedelta(seconds=1), sync="Synced", revision=REVISION)
        code, output = finish(process, log)
    finally:
        if process.poll() is None:
            process.kill()
    assert code == 0, output
    assert rig.stage().completed == ["c1"]


def test_running_with_finished_at_between_argo_cd_retries_is_not_final(rig: Rig) -> None:
    make_progressive_sync(rig.kube, rig.namespace, stages=ALL)
    select(rig)
    rig.run("sync", "c1")
    world = rig.world
    started = now()
    world.takes_up("c1", started)
    world.attempt_fails_with_retries_left("c1", started + timedelta(seconds=1), "the server timed out")
    process, log = rig.start("wait-healthy", "c1")
    try:
        wait_for(lambda: "Argo CD retries it" in log.read_text(), timeout=30, what="the retry to be seen")
        assert process.poll() is None, log.read_text()
        world.completes("c1", started + timedelta(seconds=2))
        world.compares("c1", started + timedelta(seconds=3), sync="Synced", revision=REVISION)
        code, output = finish(process, log)
    finally:
        if process.poll() is None:
            process.kill()
    assert code == 0, output


def test_a_stored_failed_is_final(rig: Rig) -> None:
    make_progressive_sync(rig.kube, rig.namespace, stages=ALL)
    select(rig)
    rig.run("sync", "c1")
    started = now()
    rig.world.takes_up("c1", started)
    rig.world.completes("c1", started, phase="Failed", message="one or more objects failed to apply")
    output = rig.run("wait-healthy", "c1", code=1)
    assert "sync operation Failed: one or more objects failed to apply" in output
    assert [f.name for f in rig.stage().failed] == ["c1"]


def test_an_application_being_deleted_is_not_synced(rig: Rig) -> None:
    make_progressive_sync(rig.kube, rig.namespace, stages=ALL)
    select(rig)
    rig.world.write("c1", lambda app: app["metadata"].update(finalizers=["example.test/hold"]))
    rig.kube.delete(APPLICATIONS, rig.namespace, rig.world.app("c1"))
    assert rig.world.get("c1")["metadata"].get("deletionTimestamp")
    try:
        mark = rig.control_plane.audit_mark()
        output = rig.run("sync", "c1", code=1)
        assert "being deleted" in output
        assert rig.app_writes(mark) == []
        assert "being deleted" in rig.stage().failed[0].reason
    finally:
        rig.world.write("c1", lambda app: app["metadata"].update(finalizers=[]))


# --- finding 7: adopt a sync someone else already made ------------------------------------------


def test_a_sync_someone_else_made_is_adopted_not_repeated(rig: Rig) -> None:
    world = rig.world
    done = now() - timedelta(seconds=30)
    # Alice synced c1 to the release revision in the UI; it is still Progressing.
    world.someone_syncs("c1", "alice", REVISION)
    world.takes_up("c1", done - timedelta(seconds=5))
    world.completes("c1", done)
    world.compares("c1", done + timedelta(seconds=1), sync="Synced", revision=REVISION, health="Progressing")
    make_progressive_sync(rig.kube, rig.namespace, stages=ALL)
    assert "c1" in select(rig), "Synced but not Healthy yet: the cluster is still to be watched"

    mark = rig.control_plane.audit_mark()
    output = rig.run("sync", "c1")
    assert "adopted" in output
    assert rig.app_writes(mark) == [], "no second sync"
    process, log = rig.start("wait-healthy", "c1")
    try:
        wait_for(lambda: "health Progressing" in log.read_text(), timeout=30, what="the wait for health")
        world.health_moves("c1", "Healthy")
        code, output = finish(process, log)
    finally:
        if process.poll() is None:
            process.kill()
    assert code == 0, output
    assert "adopted, not synced again" in output


# --- finding 2: the Application's own sync policy is carried into the operation ------------------


def test_the_operation_carries_the_applications_sync_options_and_retry(rig: Rig) -> None:
    def own_policy(app: dict[str, Any]) -> None:
        app["spec"]["syncPolicy"] = {
            "syncOptions": ["ServerSideApply=true", "CreateNamespace=true"],
            "retry": {
                "limit": 3,
                "backoff": {"duration": "10s", "factor": 2, "maxDuration": "2m"},
                "refresh": True,
            },
        }

    rig.world.write("c1", own_policy)
    make_progressive_sync(rig.kube, rig.namespace, stages=ALL)
    ps = rig.kube.get(PROGRESSIVE_SYNCS, rig.namespace, "myservice")
    ps["spec"]["syncOptions"] = {"prune": True, "options": ["PruneLast=true", "CreateNamespace=false"]}
    rig.kube.replace(PROGRESSIVE_SYNCS, rig.namespace, ps)
    select(rig)
    rig.run("sync", "c1")
    operation = rig.world.get("c1")["operation"]
    assert operation["sync"]["syncOptions"] == [
        "ServerSideApply=true",
        "PruneLast=true",
        "CreateNamespace=false",
    ]
    assert operation["sync"]["prune"] is True
    assert operation["retry"] == {
        "limit": 3,
        "backoff": {"duration": "10s", "factor": 2, "maxDuration": "2m"},
    }
    # An Application without a policy gets Argo CD's automated default.
    rig.run("sync", "c2")
    assert rig.world.get("c2")["operation"]["retry"] == {"limit": 5}


# --- finding 4: mixed revisions, each Application to its own ------------------------------------


def test_two_stale_applications_at_new_and_old_each_sync_to_their_own_revision(rig: Rig) -> None:
    # c2's Application tracks a ref still at OLD: Argo CD compared it against OLD and found it out of sync.
    rig.world.compares("c2", now(), sync="OutOfSync", revision=OLD_REVISION)
    make_progressive_sync(rig.kube, rig.namespace, stages=ALL)
    # select asks Argo CD to compare c2 again (not against the release): its ref is still at OLD.
    assert sorted(select_answered(rig, "c2", sync="OutOfSync", revision=OLD_REVISION)) == ["c1", "c2"]
    # The release the watcher's contract carries: both revision sets, as data.
    contract = rig.runner.contract(revisions=[(REVISION,), (OLD_REVISION,)]).to_json()
    for cluster in ("c1", "c2"):
        result = rig.runner.run("sync", "--stage", "all", "--cluster", cluster, "--contract", contract)
        assert result.returncode == 0, result.stdout + result.stderr
    assert rig.world.get("c1")["operation"]["sync"]["revision"] == REVISION
    assert rig.world.get("c2")["operation"]["sync"]["revision"] == OLD_REVISION


# --- finding 3: terminate what we start; sync windows -----------------------------------------


def test_a_sync_held_by_a_sync_window_past_the_deadline_is_terminated_not_left_to_apply_later(
    rig: Rig,
) -> None:
    make_progressive_sync(rig.kube, rig.namespace, stages=ALL, deadline_seconds=4)
    select(rig)
    rig.run("sync", "c1")
    world = rig.world
    world.takes_up("c1", now())
    world.held_by_sync_window("c1")
    process, log = rig.start("wait-healthy", "c1")
    try:
        wait_for(
            lambda: "Argo CD holds the sync" in log.read_text(), timeout=30, what="the window to be seen"
        )
        # The deadline keeps running while the window denies the sync; then our sync is terminated.
        wait_for(
            lambda: world.get("c1")["status"]["operationState"]["phase"] == "Terminating",
            timeout=30,
            what="our sync set to Terminating",
        )
        assert process.poll() is None, "it waits (bounded) until Argo CD ended the sync"
        world.ends_terminated("c1", now())
        code, output = finish(process, log)
    finally:
        if process.poll() is None:
            process.kill()
    assert code == 1, output
    reason = rig.stage().failed[0].reason
    assert "progress deadline of 4s passed" in reason and "blocked by sync window" in reason
    assert "running sync of myservice-c1 terminated" in reason
    assert "operation" not in world.get("c1"), "nothing of ours is left to run when the window opens"


def make_workflow(rig: Rig, name: str, *, shutdown: str | None = None) -> None:
    spec: dict[str, Any] = {"entrypoint": "main", "templates": [{"name": "main", "suspend": {}}]}
    if shutdown:
        spec["shutdown"] = shutdown
    rig.kube.create(
        WORKFLOWS,
        rig.namespace,
        {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "metadata": {"name": name}, "spec": spec},
    )


def test_a_cancelled_rollout_ends_every_sync_it_started_and_nothing_else(rig: Rig) -> None:
    make_progressive_sync(rig.kube, rig.namespace, stages=ALL)
    select(rig)
    world = rig.world
    rig.run("sync", "c1")
    world.takes_up("c1", now())  # running
    rig.run("sync", "c2")  # requested, not taken up yet
    make_workflow(rig, "myservice-r1", shutdown="Stop")  # argo stop: the exit handler runs
    log = rig.tmp_path / "finalize.log"
    process = rig.runner.start(
        "finalize", "--workflow-name", "myservice-r1", "--workflow-status", "Failed", log_path=log
    )
    try:
        wait_for(
            lambda: world.get("c1")["status"]["operationState"]["phase"] == "Terminating",
            timeout=30,
            what="the running sync set to Terminating",
        )
        world.ends_terminated("c1", now())
        code, output = finish(process, log)
    finally:
        if process.poll() is None:
            process.kill()
    assert code == 0, output
    assert "operation" not in world.get("c2"), "the request Argo CD never took up is withdrawn"
    status = read_progressive_sync(rig.kube, rig.namespace).status
    assert status is not None and status.phase is not None and status.phase.value == "Cancelled"
    assert "running sync of myservice-c1 terminated" in (status.message or "")
    assert "sync request of myservice-c2 withdrawn" in (status.message or "")


# --- finding 5: refresh lag ------------------------------------------------------------------------


def test_select_asks_argo_cd_to_compare_what_it_has_not_compared_against_the_release(rig: Rig) -> None:
    """c2 still reads Synced at the old commit from a comparison an hour ago: Argo CD has not looked
    at the release yet. select asks for a fresh comparison of c2 only, once, waits for the answer
    (bounded: nothing answers here) and plans c1."""
    make_progressive_sync(rig.kube, rig.namespace, stages=ALL)
    rig.world.compares("c2", now() - timedelta(hours=1), sync="Synced", revision=OLD_REVISION)
    mark = rig.control_plane.audit_mark()
    assert select(rig, PROGRESSIVE_SYNC_COMPARE_WAIT_SECONDS="1") == ["c1"]
    assert appsync.refresh_requested(rig.world.get("c2")), "c2 is asked for a fresh comparison"
    assert not appsync.refresh_requested(rig.world.get("c1")), "c1 was compared against the release"
    message = rig.stage().message
    assert "asked Argo CD to compare 1 Application(s)" in message
    assert "1 not answered within 1 s: myservice-c2" in message
    assert rig.app_writes(mark) == ["patch applications/myservice-c2 -> 200"]


def test_select_plans_with_argo_cds_answer_for_one_compared_in_the_rollouts_first_second_at_the_old_commit(
    rig: Rig,
) -> None:
    """Issue 13, seen on real Argo CD: c2's last comparison (the one after its previous sync) is
    stamped in the very second the rollout starts, but was made against the commit before the
    release. Whole-second reconciledAt cannot tell it from a comparison with the release: select
    asks by revision, waits for Argo CD's answer (played here: OutOfSync at the release) and plans
    c2 in the same stage."""
    make_progressive_sync(rig.kube, rig.namespace, stages=ALL)
    rig.world.compares("c2", now(), sync="Synced", revision=OLD_REVISION)
    assert sorted(select_answered(rig, "c2", sync="OutOfSync", revision=REVISION)) == ["c1", "c2"]
    assert "asked Argo CD to compare 1 Application(s)" in rig.stage().message
    assert "not answered" not in rig.stage().message
