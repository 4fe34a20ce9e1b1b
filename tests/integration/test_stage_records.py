"""ProgressiveSyncStage against the real API server: the CRD accepts what the model writes, a
create is idempotent (the recorded targets win), clusters are merge-patched one key at a time,
spec is immutable, and the ProgressiveSync owns its records (orchestrator/kube/stage_records.py)."""

from __future__ import annotations

import pytest

from orchestrator.api.stage_records import ClusterRecord, ClusterState, new_records, summarize
from orchestrator.kube.client import PROGRESSIVE_SYNC_STAGES, Invalid, Kube
from orchestrator.kube.stage_records import (
    create_records,
    list_records,
    patch_clusters,
    read_outcomes,
    read_record,
)
from tests.support.steps_harness import make_progressive_sync

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
