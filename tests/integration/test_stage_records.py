"""ProgressiveSyncStage against the real API server: the CRD accepts what the model writes, a
create is idempotent (the recorded targets win, and a select run again adopts them), clusters are
merge-patched one key at a time, spec is immutable, the ProgressiveSync owns its records
(orchestrator/kube/stage_records.py), and a 10,000-cluster stage's records each stay small."""

from __future__ import annotations

import json
import random
import string
from datetime import UTC, datetime
from typing import cast

import pytest

from orchestrator.api.models import ProgressiveSync, StagePhase
from orchestrator.api.stage_records import (
    FAILED_LABEL,
    RECORD_MAX_CLUSTERS,
    RECORD_TEXT_MAX_CHARS,
    ClusterRecord,
    ClusterState,
    new_records,
    record_name,
    summarize,
)
from orchestrator.core.clock import SystemClock
from orchestrator.kube.client import PROGRESSIVE_SYNC_STAGES, PROGRESSIVE_SYNCS, Invalid, Kube
from orchestrator.kube.stage_records import (
    create_records,
    list_records,
    patch_clusters,
    read_outcomes,
    read_record,
)
from orchestrator.simulator.seed import seed_fleet
from steps.common import RolloutRef, Tuning
from steps.context import StepContext
from steps.select_stage import SelectResult, create_stage_records, select_stage
from tests.support.builders import NEW_REVISION as REVISION
from tests.support.builders import make_contract, make_stage
from tests.support.steps_harness import CountingKube, make_progressive_sync, publish_inventory

pytestmark = pytest.mark.integration


def test_records_are_created_once_patched_per_cluster_and_owned(kube: Kube, namespace: str) -> None:
    ps = make_progressive_sync(kube, namespace)
    targets = [f"cluster-{i:04d}" for i in range(501)]
    records = new_records("myservice", "r1", "canary", stage_index=0, targets=targets, namespace=namespace)
    stored = create_records(kube, ps.metadata, records)
    assert [r.spec.targets for r in stored] == [targets[:500], targets[500:]]
    # A select run again with other targets adopts the recorded ones.
    again = new_records(
        "myservice", "r1", "canary", stage_index=0, targets=targets[::-1], namespace=namespace
    )
    assert [r.spec.targets for r in create_records(kube, ps.metadata, again)] == [
        targets[:500],
        targets[500:],
    ]

    first = stored[0].metadata.name
    patch_clusters(
        kube, namespace, first, {"cluster-0000": ClusterRecord(state=ClusterState.SYNCING, note="held")}
    )
    patch_clusters(
        kube, namespace, first, {"cluster-0001": ClusterRecord(state=ClusterState.FAILED, reason="x")}
    )
    patch_clusters(kube, namespace, first, {"cluster-0000": ClusterRecord(state=ClusterState.COMPLETED)})
    record = read_record(kube, namespace, first)
    assert record.clusters == {
        "cluster-0000": ClusterRecord(state=ClusterState.COMPLETED),  # the note sent empty is removed
        "cluster-0001": ClusterRecord(state=ClusterState.FAILED, reason="x"),
    }
    outcomes = read_outcomes(kube, namespace, "myservice", "r1")
    assert list(outcomes) == [0]
    summary = summarize(outcomes[0])
    assert (summary.counts.targets, summary.counts.completed, summary.counts.failed) == (501, 1, 1)
    assert summary.records == tuple(r.metadata.name for r in stored)
    assert len(list_records(kube, namespace, "myservice", "r1", stage_index=1)) == 0

    owner = kube.get(PROGRESSIVE_SYNC_STAGES, namespace, first)["metadata"]["ownerReferences"]
    assert [(o["kind"], o["name"], o["uid"]) for o in owner] == [
        ("ProgressiveSync", "myservice", ps.metadata.uid)
    ]

    changed = kube.get(PROGRESSIVE_SYNC_STAGES, namespace, first)
    changed["spec"]["targets"] = ["someone-else"]
    with pytest.raises(Invalid, match="spec is immutable"):
        kube.replace(PROGRESSIVE_SYNC_STAGES, namespace, changed)


def test_the_write_that_records_a_failure_labels_its_record_and_a_failure_check_lists_only_those(
    kube: Kube, namespace: str
) -> None:
    """The patch that records a cluster Failed sets `progressivesync.io/failed` on that record in
    the same request (the object it returns has both); a list by that label answers only the parts
    holding a failure (none before the first), and a later write of the part keeps the label."""
    ps = make_progressive_sync(kube, namespace)
    targets = [f"cluster-{i:04d}" for i in range(RECORD_MAX_CLUSTERS + 2)]
    first, second = create_records(
        kube,
        ps.metadata,
        new_records("myservice", "r1", "canary", stage_index=0, targets=targets, namespace=namespace),
    )
    done = ClusterRecord(state=ClusterState.COMPLETED)
    patch_clusters(kube, namespace, first.metadata.name, {"cluster-0000": done})
    assert list_records(kube, namespace, "myservice", "r1", stage_index=0, failed=True) == []
    counting = CountingKube(kube)
    stored = patch_clusters(
        cast(Kube, counting),
        namespace,
        second.metadata.name,
        {targets[-1]: ClusterRecord(state=ClusterState.FAILED, reason="Degraded"), targets[-2]: done},
    )
    assert sum(counting.calls.values()) == counting.calls[("patch", "progressivesyncstages", False)] == 1
    assert stored.metadata.labels is not None and stored.metadata.labels[FAILED_LABEL] == "true"
    assert stored.clusters[targets[-1]].state == ClusterState.FAILED
    patch_clusters(
        kube, namespace, second.metadata.name, {targets[-2]: ClusterRecord(state=ClusterState.SYNCING)}
    )
    failing = list_records(kube, namespace, "myservice", "r1", stage_index=0, failed=True)
    assert [r.metadata.name for r in failing] == [second.metadata.name]
    assert FAILED_LABEL not in (read_record(kube, namespace, first.metadata.name).metadata.labels or {})


def test_a_select_run_again_adopts_the_targets_its_records_hold(kube: Kube, namespace: str) -> None:
    """Restart safety: a select that created the stage's records and died before it wrote the stage
    in the status is run again: it adopts the recorded targets (not a new plan's), and a third run
    answers from the status and the records without writing."""
    fleet = seed_fleet(kube, namespace, clusters=3, regions=["eu-west-1"], revision=REVISION)
    publish_inventory(kube, namespace)
    ps = make_progressive_sync(kube, namespace, stages=[make_stage("rest", max_parallel=3)])
    recorded = sorted(c.name for c in fleet.clusters)[:2][::-1]  # not what the planner would pick
    rollout = RolloutRef(namespace, "myservice", "r1", namespace)
    create_stage_records(kube, rollout, ps, "rest", recorded)

    contract = make_contract(
        ["rest"], rollout_id="r1", revisions=[(REVISION,)], sizing={"rest": {"max_parallel": 3}}
    )

    def select() -> SelectResult:
        ctx = StepContext.open(
            kube,
            rollout,
            contract,
            stage="rest",
            clock=SystemClock(),
            tuning=Tuning(compare_wait_seconds=0),
            taking_over=True,
        )
        return select_stage(kube, ctx)

    first = select()
    assert first.phase == StagePhase.PROGRESSING and first.targets == tuple(recorded)
    assert not first.from_status
    status = ProgressiveSync.model_validate(kube.get(PROGRESSIVE_SYNCS, namespace, "myservice")).status
    assert status is not None and status.stages is not None
    (stage,) = status.stages
    assert stage.records == [record_name("myservice", "r1", 0, 0)]
    assert stage.counts is not None and stage.counts.targets == 2
    again = select()
    assert again.from_status and again.targets == tuple(recorded)
    assert len(list_records(kube, namespace, "myservice", "r1")) == 1


RECORD_BOUND = 400 * 1024


def test_the_records_of_a_10000_cluster_stage_each_stay_under_400_kib_as_stored(
    kube: Kube, namespace: str
) -> None:
    """Issue 30: every part of a 10,000-cluster stage, each cluster recorded with every field set
    (a third failed with a reason of the longest kept, a third done, a third in flight with a
    note), is under 400 KiB as the API server stores and serves it, managedFields included."""
    ps = make_progressive_sync(kube, namespace)
    rng = random.Random(30)
    suffix = string.ascii_lowercase + string.digits
    names = [
        f"cell-{i:05d}-region-{i % 20:02d}-{''.join(rng.choice(suffix) for _ in range(16))}"
        for i in range(10_000)
    ]
    stored = create_records(
        kube,
        ps.metadata,
        new_records("myservice", "r1", "rest", stage_index=1, targets=names, namespace=namespace),
    )
    assert len(stored) == 10_000 // RECORD_MAX_CLUSTERS
    now = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
    for record in stored:
        clusters = {}
        for index, name in enumerate(record.spec.targets):
            if index % 3 == 0:
                clusters[name] = ClusterRecord(
                    state=ClusterState.FAILED,
                    reason="r" * RECORD_TEXT_MAX_CHARS,
                    revisions=["4f1c2e9b7a3d" * 3 + "abcd"],
                    started_at=now,
                    finished_at=now,
                )
            elif index % 3 == 1:
                clusters[name] = ClusterRecord(
                    state=ClusterState.COMPLETED,
                    revisions=["4f1c2e9b7a3d" * 3 + "abcd"],
                    started_at=now,
                    finished_at=now,
                )
            else:
                clusters[name] = ClusterRecord(state=ClusterState.SYNCING, note="n" * 120, started_at=now)
        patch_clusters(kube, namespace, record.metadata.name, clusters)
    sizes = []
    for record in stored:
        served = kube.get(PROGRESSIVE_SYNC_STAGES, namespace, record.metadata.name)
        assert served["metadata"].get("managedFields"), "measured with what the API server keeps"
        assert len(served["status"]["clusters"]) == RECORD_MAX_CLUSTERS
        sizes.append(len(json.dumps(served, separators=(",", ":")).encode()))
    assert max(sizes) < RECORD_BOUND, f"largest part {max(sizes):,} bytes"
    print(f"10,000-cluster stage: {len(sizes)} records, largest {max(sizes):,} bytes")
    outcomes = read_outcomes(kube, namespace, "myservice", "r1")[1]
    assert outcomes.targets == tuple(names)
