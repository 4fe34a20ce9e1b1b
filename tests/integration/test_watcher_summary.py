"""The watcher's live summary: a running stage's counts in the ProgressiveSync follow its records.

Real: the control plane (its audit log counts each user's writes), the watcher in this process as
its own user, the ProgressiveSyncStage CRD and the kube adapter the steps use. No Workflow runs:
the test plays the steps' part (`select` creates the records and starts the stage; the cluster
steps merge-patch the records), so what changes under the running stage, and when, is the test's.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from orchestrator.api.models import ObjectMeta, ProgressiveSyncStatus, RolloutPhase, StagePhase
from orchestrator.api.rollout_status import apply_summary, close_stage, finalize_rollout, start_stage
from orchestrator.api.stage_records import ClusterRecord, ClusterState, new_records, outcomes_of, summarize
from orchestrator.core.clock import SystemClock
from orchestrator.devenv import controlplane as devcluster
from orchestrator.kube.client import PROGRESSIVE_SYNCS, WORKFLOWS, Kube
from orchestrator.kube.stage_records import create_records, list_records, patch_clusters
from orchestrator.kube.status_writer import update_status
from tests.support.wait import wait_for
from tests.support.watcher_harness import (
    create_ps,
    in_process_watcher,
    seed,
    stage_of,
    status_of,
    watcher_idle,
)

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

WATCHER_USER = "progressive-sync-watcher"
PS = "web"
STAGE = "all"
INTERVAL = 1.0
# What a write may take beyond the interval on a loaded machine (the informer's event, a reconcile).
SLACK = 4.0


@pytest.fixture(scope="module")
def watcher_kube(control_plane: devcluster.DevCluster) -> Iterator[Kube]:
    """The adapter as the watcher's own user (its writes are told apart in the audit log)."""
    client = Kube.from_kubeconfig(str(control_plane.mint_user(WATCHER_USER, ["system:masters"])))
    yield client
    client.close()


def start_the_stage(kube: Kube, namespace: str, targets: list[str]) -> str:
    """What `select` does: the stage's records first, then the stage Progressing with their
    summary. Returns the rollout id."""
    obj = kube.get(PROGRESSIVE_SYNCS, namespace, PS)
    rollout_id = obj["status"]["rollout"]["id"]
    owner = ObjectMeta.model_validate(obj["metadata"])
    records = create_records(
        kube, owner, new_records(PS, rollout_id, STAGE, stage_index=0, targets=targets, namespace=namespace)
    )
    summary = summarize(outcomes_of(STAGE, records))
    update_status(
        kube,
        namespace,
        PS,
        lambda status: start_stage(status, stage=STAGE, summary=summary, message="", now=SystemClock().now()),
        what="test select",
    )
    return rollout_id


def record(kube: Kube, namespace: str, rollout_id: str, clusters: dict[str, ClusterRecord]) -> None:
    """What a cluster step does: merge-patch these clusters' records (one part: every target)."""
    (part,) = list_records(kube, namespace, PS, rollout_id)
    patch_clusters(kube, namespace, part.metadata.name, clusters)


def counts_of(kube: Kube, namespace: str) -> dict[str, Any]:
    return stage_of(status_of(kube, namespace, PS), STAGE).get("counts") or {}


def watcher_writes(control_plane: devcluster.DevCluster, mark: Any) -> list[Any]:
    return [event for event in control_plane.audit_events_since(mark) if event.user == WATCHER_USER]


def test_a_running_stage_summary_follows_its_records_within_the_interval(
    kube: Kube, watcher_kube: Kube, control_plane: devcluster.DevCluster, namespace: str
) -> None:
    fleet = seed(kube, namespace, clusters=4)
    create_ps(
        kube,
        namespace,
        PS,
        fleet.app_set,
        stages=[{"name": STAGE, "targets": {"clusters": {"selector": {}}}}],
    )
    targets = list(fleet.clusters)
    syncing = ClusterRecord(state=ClusterState.SYNCING)
    with in_process_watcher(watcher_kube, namespace, summary_interval_seconds=INTERVAL) as watcher:
        wait_for(
            lambda: (status_of(kube, namespace, PS).get("rollout") or {}).get("id"),
            what="the rollout recorded",
        )
        rollout_id = start_the_stage(kube, namespace, targets)
        assert counts_of(kube, namespace) == {"targets": 4, "syncing": 0, "completed": 0, "failed": 0}

        # Records change under the running stage: the parent's counts follow within the interval.
        record(kube, namespace, rollout_id, {targets[0]: syncing, targets[1]: syncing})
        changed = time.monotonic()
        wait_for(
            lambda: counts_of(kube, namespace).get("syncing") == 2,
            timeout=INTERVAL + SLACK,
            what="two clusters in flight in the summary",
        )
        record(
            kube,
            namespace,
            rollout_id,
            {
                targets[0]: ClusterRecord(state=ClusterState.COMPLETED),
                targets[1]: ClusterRecord(
                    state=ClusterState.FAILED, reason="Degraded for 120s after the sync"
                ),
                targets[2]: ClusterRecord(state=ClusterState.SYNCING, note="sync window: deny until 14:00"),
            },
        )
        wait_for(
            lambda: counts_of(kube, namespace) == {"targets": 4, "syncing": 1, "completed": 1, "failed": 1},
            timeout=INTERVAL + SLACK,
            what="one completed, one failed, one in flight",
        )
        entry = stage_of(status_of(kube, namespace, PS), STAGE)
        assert entry["failed"] == [{"name": targets[1], "reason": "Degraded for 120s after the sync"}]
        assert entry["syncing"] == [targets[2]]
        assert entry["notes"] == [{"name": targets[2], "note": "sync window: deny until 14:00"}]
        assert entry["phase"] == "Progressing" and entry["message"] == ""  # the steps' fields, untouched
        assert time.monotonic() - changed < 2 * INTERVAL + 2 * SLACK

        # A burst of changes costs at most one summary write per interval.
        assert watcher_idle(watcher, 10)
        mark = control_plane.audit_mark()
        began = time.monotonic()
        for index in range(6):
            state = ClusterState.COMPLETED if index % 2 else ClusterState.SYNCING
            record(
                kube, namespace, rollout_id, {targets[3]: ClusterRecord(state=state, note=f"step {index}")}
            )
        wait_for(
            lambda: any(
                n["note"] == "step 5" for n in stage_of(status_of(kube, namespace, PS), STAGE)["notes"]
            ),
            timeout=INTERVAL + SLACK,
            what="the last change in the summary",
        )
        assert watcher_idle(watcher, 10)
        summary_writes = [e for e in watcher_writes(control_plane, mark) if e.subresource == "status"]
        assert len(summary_writes) <= (time.monotonic() - began) / INTERVAL + 1, summary_writes

        # Records that do not change cost no write, however often the ProgressiveSync is reconciled.
        mark = control_plane.audit_mark()
        before = watcher.reconciles
        for informer in watcher.caches.ps_informers:
            informer.resync()
        wait_for(lambda: watcher.reconciles > before and watcher_idle(watcher, 5), what="a reconcile")
        assert watcher_writes(control_plane, mark) == []


def test_a_converged_progressive_sync_with_records_costs_the_watcher_no_write(
    kube: Kube, watcher_kube: Kube, control_plane: devcluster.DevCluster, namespace: str
) -> None:
    fleet = seed(kube, namespace, clusters=2)
    create_ps(
        kube,
        namespace,
        PS,
        fleet.app_set,
        stages=[{"name": STAGE, "targets": {"clusters": {"selector": {}}}}],
    )
    targets = list(fleet.clusters)
    with in_process_watcher(watcher_kube, namespace, summary_interval_seconds=INTERVAL) as watcher:
        wait_for(
            lambda: (status_of(kube, namespace, PS).get("rollout") or {}).get("id"),
            what="the rollout recorded",
        )
        rollout_id = start_the_stage(kube, namespace, targets)
        done = {name: ClusterRecord(state=ClusterState.COMPLETED) for name in targets}
        record(kube, namespace, rollout_id, done)
        # What `record` and `finalize` do: the stage closed with the exact summary, the rollout ended
        # (and its Workflow with it).
        summary = summarize(outcomes_of(STAGE, list_records(kube, namespace, PS, rollout_id)))
        now = SystemClock().now()

        def close(status: ProgressiveSyncStatus) -> ProgressiveSyncStatus:
            status = apply_summary(status, STAGE, summary)
            status = close_stage(
                status, stage=STAGE, phase=StagePhase.SUCCEEDED, message="2 of 2 clusters updated", now=now
            )
            return finalize_rollout(status, phase=RolloutPhase.SUCCEEDED, reason="rollout succeeded", now=now)

        update_status(kube, namespace, PS, close, what="test record and finalize")
        workflow = status_of(kube, namespace, PS)["rollout"]["workflow"]
        kube.patch(
            WORKFLOWS, namespace, workflow, {"status": {"phase": "Succeeded", "finishedAt": now.isoformat()}}
        )
        wait_for(
            lambda: phase_is(kube, namespace, "Succeeded") and watcher_idle(watcher, 5), what="converged"
        )

        mark = control_plane.audit_mark()
        before = watcher.reconciles
        for informer in watcher.caches.informers:
            informer.resync()
        wait_for(lambda: watcher.reconciles >= before + 1 and watcher_idle(watcher, 5), what="reconciles")
        assert watcher_writes(control_plane, mark) == []
    assert counts_of(kube, namespace) == {"targets": 2, "syncing": 0, "completed": 2, "failed": 0}


def phase_is(kube: Kube, namespace: str, phase: str) -> bool:
    return status_of(kube, namespace, PS).get("phase") == phase
