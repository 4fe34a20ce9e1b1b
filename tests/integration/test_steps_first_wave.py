"""The first wave (steps/first_wave.py): the step that selects a stage starts its first syncs, the
cluster steps write no second sync, a pause starts nothing, a foreign contract or operation is
left alone; and the issue 29 cases: several Applications on a cluster, an Application compared
before the release, a sync whose listing was lost, a pause read late.

The world (seeded fleet, steps' runner, simulator) is tests/support/steps_rig.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import pytest

import steps.batch
from orchestrator.argocd import appsync
from orchestrator.kube.client import (
    APPLICATIONS,
    PROGRESSIVE_SYNC_STAGES,
    Conflict,
    Kube,
    Retryable,
)
from steps.batch import run_batch
from steps.common import Tuning
from steps.select_stage import select_stage
from tests.support.builders import NEW_REVISION as REVISION
from tests.support.builders import OLD_REVISION, foreign_operation, make_contract
from tests.support.outcomes import record_failed
from tests.support.steps_harness import (
    CountingKube,
    describe,
    make_progressive_sync,
    writes_by,
)
from tests.support.steps_rig import (
    REST,
    UPDATE_ATTEMPTS,
    Rig,
    add_second_app,
    assert_ok,
    canary_done_rest_pending,
    finish,
    first_wave_args,
    hang,
    opened,
    ours,
    requested,
    select_canary,
    set_paused,
)
from tests.support.wait import wait_for

pytestmark = pytest.mark.integration


# --- the first wave: started by the step that selected the stage (steps/first_wave.py) -------


def test_select_starts_the_first_wave_and_the_cluster_steps_write_no_second_sync(rig: Rig) -> None:
    make_progressive_sync(rig.kube, rig.namespace, stages=[REST])
    mark = rig.control_plane.audit_mark()
    result = rig.runner.run("select", "--stage", "rest", *first_wave_args(rig, 2))
    assert_ok(result)
    assert "started the sync of 2 cluster(s)" in result.stdout
    targets = rig.stage("rest").targets
    writes = writes_by(rig.control_plane, mark)
    # The stage's record and the stage in the status, the first two clusters' syncs, then one write
    # of the record saying them Syncing.
    assert sorted((w.resource, w.verb) for w in writes) == [
        ("applications", "update"),
        ("applications", "update"),
        ("progressivesyncs", "update"),
        ("progressivesyncstages", "create"),
        ("progressivesyncstages", "patch"),
    ], describe(writes)
    assert [ours(rig, cluster) for cluster in targets] == [True, True, False]
    assert rig.stage("rest").syncing == targets[:2]
    assert rig.app(targets[0])["operation"]["sync"]["revision"] == REVISION

    rig.simulate()
    mark = rig.control_plane.audit_mark()
    assert_ok(rig.runner.run("cluster", "--stage", "rest", "--cluster", targets[0]))
    writes = writes_by(rig.control_plane, mark)
    # No second sync write (wait-healthy may still patch a refresh request on the Application).
    assert [w for w in writes if (w.resource, w.verb) == ("applications", "update")] == [], describe(writes)
    assert targets[0] in rig.stage("rest").completed

    mark = rig.control_plane.audit_mark()
    again = rig.runner.run("select", "--stage", "rest", *first_wave_args(rig, 2))
    assert_ok(again)
    assert "already selected" in again.stdout and "started the sync" not in again.stdout
    assert writes_by(rig.control_plane, mark) == []


def test_record_and_select_starts_the_next_stages_first_wave(rig: Rig) -> None:
    first, _, third = (c.name for c in rig.fleet.clusters)
    canary_done_rest_pending(rig, first)
    args = ("--stage", "canary", "--next-stage", "rest", *first_wave_args(rig, 3))
    result = rig.runner.run("record-and-select", *args)
    assert_ok(result)
    assert "started the sync of 2 cluster(s)" in result.stdout  # the rest has two clusters
    rest = rig.stage("rest")
    assert sorted(rest.syncing) == sorted(rest.targets) and third in rest.targets
    assert all(ours(rig, cluster) for cluster in rest.targets)
    assert not ours(rig, first)


def test_nothing_starts_while_the_progressive_sync_is_paused(rig: Rig) -> None:
    make_progressive_sync(rig.kube, rig.namespace, stages=[REST])
    set_paused(rig, True)
    mark = rig.control_plane.audit_mark()
    assert_ok(rig.runner.run("select", "--stage", "rest", *first_wave_args(rig, 3)))
    writes = writes_by(rig.control_plane, mark)
    assert sorted((w.resource, w.subresource) for w in writes) == [
        ("progressivesyncs", "status"),
        ("progressivesyncstages", ""),
    ], describe(writes)
    assert rig.stage("rest").syncing == []
    assert not any(ours(rig, cluster) for cluster in rig.stage("rest").targets)


def test_a_contract_made_for_another_spec_is_a_usage_error_that_writes_nothing(rig: Rig) -> None:
    make_progressive_sync(rig.kube, rig.namespace, stages=[REST])
    other = make_contract(["canary"], sizing={"canary": {"start_syncs": 2}}).to_json()
    mark = rig.control_plane.audit_mark()
    result = rig.runner.run("select", "--stage", "rest", "--contract", other)
    assert_ok(result, 2)
    assert "--stage 'rest' is not in the rollout contract (stages: canary)" in result.stdout
    assert writes_by(rig.control_plane, mark) == []
    assert not any(ours(rig, c.name) for c in rig.fleet.clusters)


class RefusingKube(CountingKube):
    """Behind a CountingKube: the Application `refused`'s replace answers 409, as if someone wrote it."""

    def __init__(self, kube: Kube, refused: str) -> None:
        super().__init__(kube)
        self.refused = refused

    def replace(self, resource: Any, namespace: str | None, body: dict[str, Any], **kwargs: Any) -> Any:
        if resource is APPLICATIONS and body["metadata"]["name"] == self.refused:
            raise Conflict(f"applications {self.refused}: the object has been modified")
        return self._kube.replace(resource, namespace, body, **kwargs)


def test_a_conflict_or_someone_elses_operation_is_left_to_the_cluster_step(rig: Rig) -> None:
    make_progressive_sync(rig.kube, rig.namespace, stages=[REST])
    busy, conflicting, free = (c.name for c in rig.fleet.clusters)
    rig.update_app(busy, lambda app: app.update(operation=foreign_operation("alice")))
    kube = RefusingKube(rig.kube, f"{rig.fleet.app_set}-{conflicting}")
    result = select_rest_in_process(rig, kube, 3)
    assert result.first_wave.started == (free,)
    assert sorted(result.first_wave.left) == sorted([busy, conflicting])
    assert rig.stage("rest").syncing == [free]
    assert rig.app(busy)["operation"] == foreign_operation("alice"), "never overwritten"
    assert [ours(rig, c) for c in (busy, conflicting, free)] == [False, False, True]


def test_a_first_wave_cluster_of_a_stage_that_failed_is_stopped_not_left_syncing(rig: Rig) -> None:
    """Its sync was started by select; a sibling failed the stage before its step ran. The step
    ends what was started (not "not started": it was) and records the cluster failed."""
    make_progressive_sync(rig.kube, rig.namespace, stages=[REST])
    targets = sorted(c.name for c in rig.fleet.clusters)
    for cluster in targets:
        rig.update_app(cluster, hang)
    assert_ok(rig.runner.run("select", "--stage", "rest", *first_wave_args(rig, 2)))
    first, second, third = rig.stage("rest").targets
    assert rig.stage("rest").syncing == [first, second]
    rig.simulate()
    assert_ok(rig.runner.run("sync", "--stage", "rest", "--cluster", third))
    record_failed(rig.kube, rig.namespace, "myservice", stage="rest", cluster=third, reason="Degraded")
    result = rig.runner.run("cluster", "--stage", "rest", "--cluster", first)
    assert_ok(result, 1)
    assert f"cluster {first}: stopped before it finished: stage 'rest' has failed already" in result.stdout
    stage = rig.stage("rest")
    assert first in {f.name for f in stage.failed} and first not in stage.syncing
    assert not appsync.operation_is_ours(appsync.operation(rig.app(first)), "r1") or (
        (rig.app(first)["status"].get("operationState") or {}).get("phase") in {"Terminating", "Failed"}
    ), "what select started is ended"


def test_a_paused_batch_lets_its_first_wave_go_on_and_starts_no_other_cluster(rig: Rig) -> None:
    make_progressive_sync(rig.kube, rig.namespace, stages=[REST])
    assert_ok(rig.runner.run("select", "--stage", "rest", *first_wave_args(rig, 2)))
    first, second, third = rig.stage("rest").targets
    set_paused(rig, True)
    rig.simulate()
    with pytest.raises(steps.batch.PausedTooLong):
        run_batch(
            rig.kube,
            opened(
                rig,
                rig.kube,
                "rest",
                sizing={"rest": {"batches": 1, "max_parallel": 2}},
                tuning=Tuning(watch_window_seconds=2, pause_poll_seconds=0.1, pause_hold_seconds=1),
            ),
            0,
        )
    stage = rig.stage("rest")
    assert sorted(stage.completed) == sorted([first, second]), "the syncs select started finish"
    assert not requested(rig, third), "no new cluster starts while paused"


# --- issue 29: several Applications on a cluster, syncs not listed, a pause read late -----------


# What Argo CD reports of an Application it has not compared since the release: Synced and Healthy
# at the commit before it.
COMPARED_BEFORE_THE_RELEASE: dict[str, Any] = {
    "sync": {"status": "Synced", "revision": OLD_REVISION},
    "health": {"status": "Healthy"},
    "reconciledAt": "2030-01-01T11:00:00Z",
}


def update_named_app(rig: Rig, name: str, change: Callable[[dict[str, Any]], None]) -> None:
    """`Rig.update_app` for an Application named `name` (read, change, replace; again on 409)."""
    for _ in range(UPDATE_ATTEMPTS):
        app = rig.kube.get(APPLICATIONS, rig.namespace, name)
        change(app)
        try:
            rig.kube.replace(APPLICATIONS, rig.namespace, app)
            return
        except Conflict:
            continue
    raise AssertionError(f"Application {name}: still conflicting after {UPDATE_ATTEMPTS} attempts")


def answer_compare_with_the_release(app: dict[str, Any]) -> None:
    """Play Argo CD answering a refresh: the annotation consumed, compared against the release."""
    for key in appsync.REFRESH_ANNOTATIONS:
        app["metadata"].get("annotations", {}).pop(key, None)
    app["status"]["sync"] = {"status": "OutOfSync", "revision": REVISION}


def refresh_stamp(rig: Rig, name: str) -> str | None:
    """The `refresh-timestamp` of the pending refresh request of `name` (None when none is pending)."""
    annotations = rig.kube.get(APPLICATIONS, rig.namespace, name)["metadata"].get("annotations") or {}
    return annotations.get(appsync.REFRESH_TIMESTAMP_ANNOTATION)


def test_an_application_compared_before_the_release_is_compared_again_and_synced(rig: Rig) -> None:
    """Issue 29 point 4: the cluster's second Application still reads Synced and Healthy at the commit
    before the release (its refresh went unanswered). It is not left alone (the cluster would count
    done and the Application never be synced once Argo CD compares it): the step asks Argo CD to
    compare it again, and syncs it when the answer is the release."""
    make_progressive_sync(rig.kube, rig.namespace)
    cluster = select_canary(rig.runner)
    worker = add_second_app(rig, cluster, status=COMPARED_BEFORE_THE_RELEASE)
    log = rig.tmp_path / "sync.log"
    process = rig.runner.start("sync", "--stage", "canary", "--cluster", cluster, log_path=log)
    try:
        wait_for(
            lambda: appsync.refresh_requested(rig.kube.get(APPLICATIONS, rig.namespace, worker)),
            timeout=20,
            what=f"the sync step to ask Argo CD to compare {worker} again",
        )
        notes = {n.name: n.note for n in rig.stage().notes}
        assert f"{worker}: Synced and Healthy at {OLD_REVISION}" in notes.get(cluster, ""), notes
        update_named_app(rig, worker, answer_compare_with_the_release)
    finally:
        code, output = finish(process, log)
    assert code == 0, output
    synced = rig.kube.get(APPLICATIONS, rig.namespace, worker)
    assert appsync.requested_by_rollout(synced, "r1"), output
    assert synced["operation"]["sync"]["revision"] == REVISION
    assert appsync.requested_by_rollout(rig.app(cluster), "r1")
    assert cluster not in {n.name for n in rig.stage().notes}, "the note goes once Argo CD answered"


def test_a_comparison_request_left_unanswered_is_asked_again_with_a_new_stamp(rig: Rig) -> None:
    """A request the application controller missed would stay pending until the deadline if asking
    again wrote the same annotation (a no-op write: no event). Each request carries a new
    `refresh-timestamp`, so the second one is a change Argo CD is told of; its answer then lets the
    step sync the Application."""
    make_progressive_sync(rig.kube, rig.namespace, deadline_seconds=60)
    cluster = select_canary(rig.runner)
    worker = add_second_app(rig, cluster, status=COMPARED_BEFORE_THE_RELEASE)
    log = rig.tmp_path / "sync.log"
    process = rig.runner.start("sync", "--stage", "canary", "--cluster", cluster, log_path=log)
    try:
        first = wait_for(
            lambda: refresh_stamp(rig, worker), timeout=20, what=f"a stamped request for {worker}"
        )
        second = wait_for(
            lambda: (stamp := refresh_stamp(rig, worker)) != first and stamp,
            timeout=30,
            what=f"the sync step to ask again for {worker} with a new stamp",
        )
        assert second > first, (first, second)
        update_named_app(rig, worker, answer_compare_with_the_release)
    finally:
        code, output = finish(process, log)
    assert code == 0, output
    assert "Argo CD has not compared it yet; asking again" in output
    assert appsync.requested_by_rollout(rig.kube.get(APPLICATIONS, rig.namespace, worker), "r1"), output


def test_an_application_argo_cd_does_not_compare_again_fails_the_cluster_naming_it(rig: Rig) -> None:
    """Issue 29 point 4: no answer to the comparison by the progress deadline: the cluster is not done
    (it fails), and the reason names the Application and why; what we started there is ended."""
    make_progressive_sync(rig.kube, rig.namespace, deadline_seconds=2)
    cluster = select_canary(rig.runner)
    worker = add_second_app(rig, cluster, status=COMPARED_BEFORE_THE_RELEASE)
    result = rig.runner.run("sync", "--stage", "canary", "--cluster", cluster)
    assert_ok(result, 1)
    expected = (
        f"{worker}: Synced and Healthy at {OLD_REVISION}, which is not a revision of this release, and "
        "Argo CD did not answer our request to compare it again within the progress deadline"
    )
    assert expected in result.stdout
    failures = {f.name: f.reason for f in rig.stage().failed}
    assert expected in failures[cluster]
    assert not appsync.requested_by_rollout(rig.app(cluster), "r1"), "the request written was withdrawn"


class RefusingKubeOf(CountingKube):
    """Behind a CountingKube: the replace of each Application in `refused` answers 409, and (with
    `fail_record_patches`) every patch of a stage's record answers a temporary error."""

    def __init__(self, kube: Kube, refused: set[str], *, fail_record_patches: bool = False) -> None:
        super().__init__(kube)
        self.refused = refused
        self.fail_record_patches = fail_record_patches

    def replace(self, resource: Any, namespace: str | None, body: dict[str, Any], **kwargs: Any) -> Any:
        if resource is APPLICATIONS and body["metadata"]["name"] in self.refused:
            raise Conflict(f"applications {body['metadata']['name']}: the object has been modified")
        return self._kube.replace(resource, namespace, body, **kwargs)

    def patch(self, resource: Any, namespace: str | None, name: str, *args: Any, **kwargs: Any) -> Any:
        if resource is PROGRESSIVE_SYNC_STAGES and self.fail_record_patches:
            raise Retryable(f"progressivesyncstages/{name}: connection reset by peer")
        return self._kube.patch(resource, namespace, name, *args, **kwargs)


def select_rest_in_process(rig: Rig, kube: Any, start_syncs: int) -> Any:
    ctx = opened(
        rig,
        kube,
        "rest",
        sizing={"rest": {"start_syncs": start_syncs, "max_parallel": max(start_syncs, 1)}},
        tuning=Tuning(compare_wait_seconds=0),
        taking_over=True,
    )
    return select_stage(cast(Kube, kube), ctx)


def fail_a_sibling(rig: Rig, cluster: str) -> None:
    record_failed(rig.kube, rig.namespace, "myservice", stage="rest", cluster=cluster, reason="Degraded")


def test_a_cluster_step_of_a_failed_stage_writes_no_sync_the_first_wave_left(rig: Rig) -> None:
    """Issue 29 point 4: the first wave wrote the cluster's first Application and met a 409 on its
    second, and listed the cluster syncing; then a sibling failed the stage. The cluster's step
    writes no sync for the second (a failed stage writes nothing new) and ends the first."""
    make_progressive_sync(rig.kube, rig.namespace, stages=[REST])
    workers = {c.name: add_second_app(rig, c.name) for c in rig.fleet.clusters}
    partial = sorted(workers)[0]
    kube = RefusingKubeOf(rig.kube, {workers[partial]})
    result = select_rest_in_process(rig, kube, 3)
    assert partial in result.first_wave.started
    assert partial in rig.stage("rest").syncing
    assert not appsync.requested_by_rollout(rig.kube.get(APPLICATIONS, rig.namespace, workers[partial]), "r1")
    fail_a_sibling(rig, next(c for c in sorted(workers) if c != partial))

    mark = rig.control_plane.audit_mark()
    step = rig.runner.run("cluster", "--stage", "rest", "--cluster", partial)
    assert_ok(step, 1)
    assert f"cluster {partial}: stopped before it finished: stage 'rest' has failed already" in step.stdout
    writes = writes_by(rig.control_plane, mark)
    assert [w for w in writes if w.resource == "applications" and w.name == workers[partial]] == [], describe(
        writes
    )
    assert not appsync.requested_by_rollout(rig.app(partial), "r1"), "the first Application's sync is ended"
    assert partial in {f.name for f in rig.stage("rest").failed}


def test_a_first_wave_sync_whose_listing_was_lost_is_ended_not_reported_not_started(rig: Rig) -> None:
    """Issue 29 point 5: the first wave wrote two syncs, then its one write recording them Syncing
    failed (logged, not raised). A sibling fails the stage: the cluster step finds the sync ours on
    the Application, ends it and records the cluster failed, instead of "not started"."""
    make_progressive_sync(rig.kube, rig.namespace, stages=[REST])
    kube = RefusingKubeOf(rig.kube, set(), fail_record_patches=True)  # select's own writes go through
    result = select_rest_in_process(rig, kube, 2)
    first, second, third = rig.stage("rest").targets
    assert result.first_wave.started == (first, second)
    assert rig.stage("rest").syncing == [], "the listing was lost"
    assert ours(rig, first)
    fail_a_sibling(rig, third)

    step = rig.runner.run("cluster", "--stage", "rest", "--cluster", first)
    assert_ok(step, 1)
    assert f"cluster {first}: stopped before it finished" in step.stdout, step.stdout
    assert "not started" not in step.stdout
    assert not ours(rig, first), "the sync we wrote is withdrawn"
    assert first in {f.name for f in rig.stage("rest").failed}


class PausingKube(CountingKube):
    """Behind a CountingKube: `select`'s first list of the Applications (after its read of the
    ProgressiveSync, before the first wave) runs `meanwhile` first: someone acts in that window."""

    def __init__(self, kube: Kube, meanwhile: Callable[[], None]) -> None:
        super().__init__(kube)
        self.meanwhile: Callable[[], None] | None = meanwhile

    def list(self, resource: Any, *args: Any, **kwargs: Any) -> Any:
        act = self.meanwhile
        if resource is APPLICATIONS and act is not None:
            self.meanwhile = None
            act()
        return self._kube.list(resource, *args, **kwargs)


def test_a_pause_after_select_read_the_progressive_sync_starts_no_first_wave(rig: Rig) -> None:
    """Issue 29 point 6: paused between select's read of the ProgressiveSync and the first wave's
    writes (listing, planning and the compare wait lie between): no sync starts."""
    make_progressive_sync(rig.kube, rig.namespace, stages=[REST])
    result = select_rest_in_process(rig, PausingKube(rig.kube, lambda: set_paused(rig, True)), 3)
    assert result.first_wave.started == ()
    assert result.first_wave.reason == "the ProgressiveSync is paused"
    assert rig.stage("rest").syncing == []
    assert not any(ours(rig, cluster) for cluster in rig.stage("rest").targets)
