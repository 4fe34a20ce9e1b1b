"""Reading and writing ProgressiveSyncStage objects, the per-cluster records of a rollout's stages.

The model, names, parts, merge rule and summary are pure, in `orchestrator.api.stage_records`;
this adapter is the only place that sends them to the API server:

- `create_records`: `select` creates a stage's parts before it records the stage Progressing in
  the ProgressiveSync. Owned by the ProgressiveSync (garbage collected with it). Idempotent: a part
  that exists already (a `select` run again, a lost answer to a create) is read back, and its
  recorded targets win: a `select` run again adopts them, so each cluster is recorded once.
- `list_records` / `read_outcomes`: a rollout's records by label (one stage's, or all of them),
  read together per stage (`stage_records.outcomes_of`); with `failed`, only the records that hold
  a Failed cluster (`stage_records.FAILED_LABEL`, set by the patch that records it).
- `claim_cluster` / `withdraw_claim`: the chained hand-off (`steps.chain`) records the next cluster
  Syncing, and takes that back, only with the object's resourceVersion (a Conflict when anyone
  wrote since); `claim_boundary`: the cluster step that closes its stage early marks the record
  the same way. These are the conditional writes to these objects.
- `delete_record`: the watcher's rollout history deletes the records of old rollouts, each by
  name with a precondition on its uid (a record created again under that name is not deleted).
- `patch_clusters`: a JSON merge patch of `status.clusters` (`stage_records.clusters_patch`), with
  no resourceVersion: each key is one cluster's, so writers of a stage never conflict, and no
  cluster step writes the ProgressiveSync.

Every call goes through `orchestrator.kube.client.Kube`, with its timeouts and retries.
Callers: the steps, the watcher (its live summary, rollout history), `progressive-sync status`, tests.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from orchestrator.api.models import API_VERSION, KIND, ObjectMeta
from orchestrator.api.stage_records import (
    CLOSED_BY_ANNOTATION,
    ClusterRecord,
    ProgressiveSyncStage,
    StageOutcomes,
    clusters_patch,
    outcomes_of,
    record_selector,
)
from orchestrator.kube.client import PROGRESSIVE_SYNC_STAGES, AlreadyExists, Conflict, Kube, NotFound


def owner_reference(owner: ObjectMeta) -> dict[str, Any]:
    """The ownerReference a record carries: its ProgressiveSync (not a controller; deleting the
    ProgressiveSync deletes its records, and nothing waits on them)."""
    if not owner.uid:
        raise ValueError(f"ProgressiveSync {owner.name} has no uid: read it from the API server first")
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": owner.name,
        "uid": owner.uid,
        "controller": False,
        "blockOwnerDeletion": False,
    }


def create_records(
    kube: Kube, owner: ObjectMeta, records: Sequence[ProgressiveSyncStage]
) -> list[ProgressiveSyncStage]:
    """Create each record owned by `owner` (its ProgressiveSync); a record that exists already is
    read back as stored (its targets win). The stored records, in the order given."""
    stored = []
    for record in records:
        body = record.to_api()
        body["metadata"]["ownerReferences"] = [owner_reference(owner)]
        namespace = record.metadata.namespace or owner.namespace
        try:
            created = kube.create(PROGRESSIVE_SYNC_STAGES, namespace, body)
        except AlreadyExists:
            created = kube.get(PROGRESSIVE_SYNC_STAGES, namespace, record.metadata.name)
        stored.append(parse_record(created))
    return stored


def parse_record(obj: Mapping[str, Any]) -> ProgressiveSyncStage:
    """A record as read from the API server (its managedFields left out: nobody reads them here)."""
    metadata = {key: value for key, value in (obj.get("metadata") or {}).items() if key != "managedFields"}
    return ProgressiveSyncStage.model_validate({**obj, "metadata": metadata})


def list_records(
    kube: Kube,
    namespace: str,
    progressive_sync: str,
    rollout_id: str,
    *,
    stage_index: int | None = None,
    failed: bool = False,
) -> list[ProgressiveSyncStage]:
    """The records of a rollout (of one of its stages when `stage_index` is given; with `failed`,
    only those labelled as holding a Failed cluster)."""
    items, _ = kube.list(
        PROGRESSIVE_SYNC_STAGES,
        namespace,
        label_selector=record_selector(progressive_sync, rollout_id, stage_index, failed=failed),
        transform=parse_record,
    )
    return items


def group_outcomes(records: Sequence[ProgressiveSyncStage]) -> dict[int, StageOutcomes]:
    """Records read together per stage: stage index -> that stage's outcomes."""
    by_stage: dict[int, list[ProgressiveSyncStage]] = {}
    for record in records:
        by_stage.setdefault(record.spec.stage_index, []).append(record)
    return {index: outcomes_of(parts[0].spec.stage, parts) for index, parts in sorted(by_stage.items())}


def read_outcomes(
    kube: Kube, namespace: str, progressive_sync: str, rollout_id: str, *, stage_index: int | None = None
) -> dict[int, StageOutcomes]:
    """A rollout's records read together: stage index -> its outcomes (stages without records are
    absent). One list request."""
    return group_outcomes(
        list_records(kube, namespace, progressive_sync, rollout_id, stage_index=stage_index)
    )


def read_record(kube: Kube, namespace: str, name: str) -> ProgressiveSyncStage:
    """One record; NotFound when it does not exist."""
    return parse_record(kube.get(PROGRESSIVE_SYNC_STAGES, namespace, name))


def patch_clusters(
    kube: Kube, namespace: str, name: str, records: Mapping[str, ClusterRecord]
) -> ProgressiveSyncStage:
    """Write these clusters' records into the record `name` (a JSON merge patch, no resourceVersion:
    other clusters' keys are left as they are); the record as stored after it."""
    return parse_record(
        kube.patch(PROGRESSIVE_SYNC_STAGES, namespace, name, clusters_patch(records), patch_type="merge")
    )


def claim_cluster(
    kube: Kube, namespace: str, name: str, *, resource_version: str, cluster: str, record: ClusterRecord
) -> ProgressiveSyncStage:
    """Write `cluster`'s record into the record `name` only if the object is still at
    `resource_version` (the merge patch carries it: Conflict when anyone wrote since): the chained
    hand-off's claim of the next cluster (`steps.chain`). Not retried on Conflict: the caller reads
    again and decides again. The record as stored after it."""
    patch = clusters_patch({cluster: record})
    patch.setdefault("metadata", {})["resourceVersion"] = resource_version
    return parse_record(kube.patch(PROGRESSIVE_SYNC_STAGES, namespace, name, patch, patch_type="merge"))


def claim_boundary(kube: Kube, namespace: str, name: str, *, resource_version: str, cluster: str) -> bool:
    """Mark the record `name` closed by `cluster`'s step (`CLOSED_BY_ANNOTATION`) only if the object
    is still at `resource_version`: True when this write made the mark, False on Conflict (another
    writer came first: it decides again on a fresh read)."""
    patch = {
        "metadata": {"resourceVersion": resource_version, "annotations": {CLOSED_BY_ANNOTATION: cluster}}
    }
    try:
        kube.patch(PROGRESSIVE_SYNC_STAGES, namespace, name, patch, patch_type="merge")
    except Conflict:
        return False
    return True


def withdraw_claim(kube: Kube, namespace: str, name: str, *, resource_version: str, cluster: str) -> bool:
    """Remove `cluster`'s record from the record `name` only if the object is still at
    `resource_version` (nobody wrote since the claim); False on Conflict (then it stays)."""
    patch = {"metadata": {"resourceVersion": resource_version}, "status": {"clusters": {cluster: None}}}
    try:
        kube.patch(PROGRESSIVE_SYNC_STAGES, namespace, name, patch, patch_type="merge")
    except Conflict:
        return False
    return True


def delete_record(kube: Kube, namespace: str, name: str, uid: str) -> bool:
    """Delete the record `name` if it is still the object `uid`; False when it was gone already or
    another object has that name now (the precondition failed: 409): nothing of ours to delete."""
    try:
        kube.delete(PROGRESSIVE_SYNC_STAGES, namespace, name, uid=uid)
    except (NotFound, Conflict):
        return False
    return True
