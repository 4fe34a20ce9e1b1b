"""Rollout history: the watcher keeps the records of the current rollout and `--rollout-history`
rollouts before it, and deletes the rest.

Real: the control plane (its audit log counts each user's requests), the watcher in this process as
its own user, the ProgressiveSyncStage CRD and the adapter the steps use. No Workflow runs: the test
plays the steps' part (`select` creates a stage's records, `record` and `finalize` close the stage
and the rollout, the Workflow is marked Succeeded), so which records exist, and how old they are,
is the test's. A new spec (`progressDeadlineSeconds`) makes the watcher start the next rollout.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from orchestrator.api.metadata import NAME_LABEL, label_value
from orchestrator.api.models import ObjectMeta, ProgressiveSyncStatus, RolloutPhase, StagePhase
from orchestrator.api.rollout_status import apply_summary, close_stage, finalize_rollout, start_stage
from orchestrator.api.stage_records import new_records, outcomes_of, summarize
from orchestrator.core.clock import SystemClock
from orchestrator.devenv import controlplane as devcluster
from orchestrator.kube.client import PROGRESSIVE_SYNC_STAGES, PROGRESSIVE_SYNCS, WORKFLOWS, Kube, NotFound
from orchestrator.kube.stage_records import create_records, delete_record, read_record
from orchestrator.kube.status_writer import update_status
from orchestrator.watcher.history import DELETES_PER_PASS
from orchestrator.watcher.loop import Watcher
from tests.support.wait import wait_for
from tests.support.watcher_harness import (
    create_ps,
    in_process_watcher,
    patch_spec,
    seed,
    status_of,
    watcher_idle,
)

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

WATCHER_USER = "progressive-sync-watcher"
STAGE = "all"
STAGES = [{"name": STAGE, "targets": {"clusters": {"selector": {}}}}]


@pytest.fixture(scope="module")
def watcher_kube(control_plane: devcluster.DevCluster) -> Iterator[Kube]:
    """The adapter as the watcher's own user (its requests are told apart in the audit log)."""
    client = Kube.from_kubeconfig(str(control_plane.mint_user(WATCHER_USER, ["system:masters"])))
    yield client
    client.close()


# --- the steps' part ---------------------------------------------------------------------------------


def owner_of(kube: Kube, namespace: str, ps: str) -> ObjectMeta:
    return ObjectMeta.model_validate(kube.get(PROGRESSIVE_SYNCS, namespace, ps)["metadata"])


def current_rollout(kube: Kube, namespace: str, ps: str) -> str:
    return str((status_of(kube, namespace, ps).get("rollout") or {}).get("id") or "")


def play_rollout(kube: Kube, namespace: str, ps: str, targets: list[str]) -> str:
    """The steps of the current rollout: `select` creates the stage's records and starts it,
    `record` and `finalize` close it Succeeded, the Workflow ends. Returns the rollout id."""
    rollout_id = wait_for(lambda: current_rollout(kube, namespace, ps), what=f"{ps}'s rollout recorded")
    records = create_records(
        kube,
        owner_of(kube, namespace, ps),
        new_records(ps, rollout_id, STAGE, stage_index=0, targets=targets, namespace=namespace),
    )
    summary = summarize(outcomes_of(STAGE, records))
    now = SystemClock().now()

    def select_record_finalize(status: ProgressiveSyncStatus) -> ProgressiveSyncStatus:
        status = start_stage(status, stage=STAGE, summary=summary, message="", now=now)
        status = apply_summary(status, STAGE, summary)
        status = close_stage(status, stage=STAGE, phase=StagePhase.SUCCEEDED, message="done", now=now)
        return finalize_rollout(status, phase=RolloutPhase.SUCCEEDED, reason="rollout succeeded", now=now)

    update_status(kube, namespace, ps, select_record_finalize, what="test steps")
    workflow = status_of(kube, namespace, ps)["rollout"]["workflow"]
    wait_for(lambda: _exists(kube, namespace, workflow), what=f"the Workflow {workflow}")
    kube.patch(
        WORKFLOWS, namespace, workflow, {"status": {"phase": "Succeeded", "finishedAt": now.isoformat()}}
    )
    return rollout_id


def next_rollout(kube: Kube, namespace: str, ps: str, deadline: int) -> str:
    """A new spec: the watcher starts the next rollout. Returns its id."""
    before = current_rollout(kube, namespace, ps)
    patch_spec(kube, namespace, ps, {"progressDeadlineSeconds": deadline})
    wait_for(lambda: current_rollout(kube, namespace, ps) != before, timeout=60, what=f"{ps}'s next rollout")
    return current_rollout(kube, namespace, ps)


def old_records(kube: Kube, namespace: str, ps: str, rollout_id: str, count: int) -> list[str]:
    """`count` records of a made-up earlier rollout of `ps` (one per stage index), as a `select` of
    it would have left them. Returns their names."""
    owner = owner_of(kube, namespace, ps)
    names = []
    for index in range(count):
        (record,) = new_records(ps, rollout_id, STAGE, stage_index=index, targets=["c1"], namespace=namespace)
        create_records(kube, owner, [record])
        names.append(record.metadata.name)
    return names


def next_second() -> None:
    """Wait until the clock is in the next second: creationTimestamp counts whole seconds, so
    records created after this are younger than those created before."""
    start = int(time.time())
    wait_for(lambda: int(time.time()) > start, what="the next second")


# --- readers -----------------------------------------------------------------------------------------


def records_of(kube: Kube, namespace: str, ps: str) -> dict[str, dict[str, Any]]:
    """Every record of `ps` by name (any rollout)."""
    items, _ = kube.list(PROGRESSIVE_SYNC_STAGES, namespace, label_selector=f"{NAME_LABEL}={label_value(ps)}")
    return {item["metadata"]["name"]: item for item in items}


def rollouts_of(kube: Kube, namespace: str, ps: str) -> set[str]:
    return {item["spec"]["rolloutId"] for item in records_of(kube, namespace, ps).values()}


def watcher_requests(control_plane: devcluster.DevCluster, mark: Any, verb: str | None = None) -> list[Any]:
    return [
        event
        for event in control_plane.audit_events_since(mark)
        if event.user == WATCHER_USER and (verb is None or event.verb == verb)
    ]


def _exists(kube: Kube, namespace: str, workflow: str) -> bool:
    try:
        kube.get(WORKFLOWS, namespace, workflow)
    except NotFound:
        return False
    return True


# --- the tests ---------------------------------------------------------------------------------------


def test_three_rollouts_leave_the_current_and_history_rollouts_records_and_no_one_elses(
    kube: Kube, watcher_kube: Kube, control_plane: devcluster.DevCluster, namespace: str
) -> None:
    web = seed(kube, namespace, clusters=2)
    beta = seed(kube, namespace, clusters=1, app_set="beta")
    create_ps(kube, namespace, "other", beta.app_set, stages=STAGES)
    create_ps(kube, namespace, "web", web.app_set, stages=STAGES)
    mark = control_plane.audit_mark()
    with in_process_watcher(watcher_kube, namespace, rollout_history=1) as watcher:
        # Another ProgressiveSync's records, the oldest in the namespace: never touched.
        play_rollout(kube, namespace, "other", list(beta.clusters))
        others = {
            name: item["metadata"]["uid"] for name, item in records_of(kube, namespace, "other").items()
        }
        assert others
        next_second()
        first = play_rollout(kube, namespace, "web", list(web.clusters))
        next_second()
        second = next_rollout(kube, namespace, "web", 601)
        play_rollout(kube, namespace, "web", list(web.clusters))
        assert watcher_idle(watcher, 30)
        assert rollouts_of(kube, namespace, "web") == {first, second}  # within the history: all kept
        next_second()
        third = next_rollout(kube, namespace, "web", 602)
        # The current rollout and the one before it stay; the first goes, before or after the
        # current one's records exist.
        wait_for(
            lambda: rollouts_of(kube, namespace, "web") == {second},
            timeout=30,
            what="the first rollout's records deleted",
        )
        play_rollout(kube, namespace, "web", list(web.clusters))
        assert watcher_idle(watcher, 30)
    assert rollouts_of(kube, namespace, "web") == {second, third}
    assert {n: i["metadata"]["uid"] for n, i in records_of(kube, namespace, "other").items()} == others
    deletes = watcher_requests(control_plane, mark, "delete")
    assert sorted((e.resource, e.name, e.code) for e in deletes) == [
        ("progressivesyncstages", f"web-{first}-0-0", 200)
    ]


def test_a_backlog_goes_in_bounded_passes_a_restart_applies_a_new_history_and_converged_costs_nothing(
    kube: Kube, watcher_kube: Kube, control_plane: devcluster.DevCluster, namespace: str
) -> None:
    fleet = seed(kube, namespace, clusters=1)
    create_ps(kube, namespace, "web", fleet.app_set, stages=STAGES)
    # Records of three earlier rollouts, a second apart, left by an older watcher (or none at all).
    backlog = old_records(kube, namespace, "web", "old1", DELETES_PER_PASS + 5)
    next_second()
    kept = old_records(kube, namespace, "web", "old2", 2)
    next_second()
    kept += old_records(kube, namespace, "web", "old3", 2)
    next_second()

    mark = control_plane.audit_mark()
    with in_process_watcher(watcher_kube, namespace, rollout_history=2) as watcher:
        current = play_rollout(kube, namespace, "web", list(fleet.clusters))
        wait_for(
            lambda: rollouts_of(kube, namespace, "web") == {"old2", "old3", current},
            timeout=60,
            what="the oldest rollout's records deleted (more than one pass)",
        )
        assert watcher_idle(watcher, 30)
    deleted = [e.name for e in watcher_requests(control_plane, mark, "delete")]
    assert sorted(deleted) == sorted(backlog), "each record of the oldest rollout deleted exactly once"

    # A restart with a history of 0: its first pass deletes the earlier rollouts, though the
    # rollout did not change (nothing of the last watcher's memory is needed).
    mark = control_plane.audit_mark()
    with in_process_watcher(watcher_kube, namespace, rollout_history=0) as watcher:
        wait_for(
            lambda: rollouts_of(kube, namespace, "web") == {current},
            timeout=30,
            what="the earlier rollouts' records deleted at start",
        )
        assert watcher_idle(watcher, 30)
        assert sorted(e.name for e in watcher_requests(control_plane, mark, "delete")) == sorted(kept)

        # Converged: reconciling again costs no delete and no write.
        mark = control_plane.audit_mark()
        before = watcher.reconciles
        for informer in watcher.caches.informers:
            informer.resync()
        wait_for(lambda: watcher.reconciles > before and watcher_idle(watcher, 5), what="a reconcile")
        assert watcher_requests(control_plane, mark) == []
        settings = watcher.settings

    # Nor does a fresh watcher's first pass on the converged state.
    mark = control_plane.audit_mark()
    restarted = Watcher(watcher_kube, settings).start()
    try:
        wait_for(lambda: restarted.reconciles >= 1 and watcher_idle(restarted, 5), what="the first reconcile")
    finally:
        restarted.stop()
    assert watcher_requests(control_plane, mark) == []
    assert rollouts_of(kube, namespace, "web") == {current}


def test_a_record_created_again_under_the_same_name_is_not_deleted(kube: Kube, namespace: str) -> None:
    fleet = seed(kube, namespace, clusters=1)
    create_ps(kube, namespace, "web", fleet.app_set, stages=STAGES)
    (name,) = old_records(kube, namespace, "web", "old1", 1)
    first_uid = read_record(kube, namespace, name).metadata.uid
    assert first_uid
    assert delete_record(kube, namespace, name, first_uid) is True
    wait_for(lambda: name not in records_of(kube, namespace, "web"), what="the record gone")
    assert delete_record(kube, namespace, name, first_uid) is False  # gone already: done
    old_records(kube, namespace, "web", "old1", 1)
    again = read_record(kube, namespace, name).metadata.uid
    assert again != first_uid
    assert delete_record(kube, namespace, name, first_uid) is False  # another object now: not ours
    assert read_record(kube, namespace, name).metadata.uid == again
