"""The one reader of per-cluster outcomes for tests: the rollout's ProgressiveSyncStage records,
read through the API as any client reads them (issue 30).

The ProgressiveSync status holds each stage's summary (counts, the first clusters in flight and
failed); every cluster's record is in the stage's ProgressiveSyncStage objects. Tests that check
per-cluster outcomes read them here:

- `stage_outcomes(kube, ps_name, namespace)`: stage name -> `StageOutcomes` of the rollout in the
  status (`status.rollout.id`), or of `rollout_id`;
- `status_with_outcomes(kube, namespace, name)`: the status as stored, each stage with every
  cluster listed from its records (`targets`, `syncing`, `completed`, `failed` with reasons,
  `notes`), the shape the rigs' `status()` gives their tests;
- `stage_lists(kube, namespace, ps_name, stage)`: one stage's status entry with the same lists;
- `record_failed` / `record_cluster`: write a cluster's record as a step would (a sibling's failure);
- `seed_progressive_sync`: a ProgressiveSync whose status starts with stages that listed their
  clusters (the tests' seeds), those clusters written into records as the steps would have.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orchestrator.api.models import (
    ClusterFailure,
    ClusterNote,
    ProgressiveSync,
    ProgressiveSyncStatus,
    StagePhase,
    StageStatus,
)
from orchestrator.api.rollout_status import apply_summary, find_stage
from orchestrator.api.stage_records import StageOutcomes, new_records, summarize
from orchestrator.kube.client import PROGRESSIVE_SYNCS, Kube, NotFound
from orchestrator.kube.stage_records import create_records, patch_clusters, read_outcomes
from orchestrator.kube.status_writer import update_status
from steps.common import RolloutRef
from steps.status_sink import Change, DirectSink, failed, read_stage_records
from tests.support.builders import make_stage_outcomes
from tests.support.steps_harness import make_progressive_sync


def stage_outcomes(
    kube: Kube, ps_name: str, namespace: str, *, rollout_id: str | None = None
) -> dict[str, StageOutcomes]:
    """Stage name -> its outcomes, for the rollout `rollout_id` (default: the one the status
    describes); {} when there is none."""
    if rollout_id is None:
        try:
            status = kube.get(PROGRESSIVE_SYNCS, namespace, ps_name).get("status") or {}
        except NotFound:
            return {}
        rollout_id = str((status.get("rollout") or {}).get("id") or "")
    if not rollout_id:
        return {}
    found = read_outcomes(kube, namespace, ps_name, rollout_id)
    return {outcomes.stage: outcomes for outcomes in found.values()}


def expand(status: dict[str, Any], outcomes: dict[str, StageOutcomes]) -> dict[str, Any]:
    """`status` (as stored) with each stage's clusters listed from its records."""
    data = dict(status)
    stages = []
    for wire in data.get("stages") or []:
        found = outcomes.get(str(wire.get("name")))
        stage = dict(wire)
        if found is None:
            stage.update(targets=[], syncing=[], completed=[], failed=[], notes=[])
        else:
            stage.update(
                targets=list(found.targets),
                syncing=list(found.syncing),
                completed=list(found.completed),
                failed=[{"name": name, "reason": found.clusters[name].reason} for name in found.failed],
                notes=[
                    {"name": name, "note": found.clusters[name].note}
                    for name in found.ordered()
                    if found.clusters[name].note
                ],
            )
        stages.append(stage)
    if "stages" in data:
        data["stages"] = stages
    return data


def status_with_outcomes(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    """The ProgressiveSync's status with every cluster of each stage listed from its records ({}
    when it has no status, or is gone)."""
    try:
        status = kube.get(PROGRESSIVE_SYNCS, namespace, name).get("status") or {}
    except NotFound:
        return {}
    rollout_id = str((status.get("rollout") or {}).get("id") or "")
    if not status or not rollout_id:
        return dict(status)
    return expand(status, stage_outcomes(kube, name, namespace, rollout_id=rollout_id))


@dataclass(frozen=True)
class StageLists:
    """One stage as the tests read it: its entry in the status (phase, message, summary) with
    every cluster listed from its records."""

    entry: StageStatus
    targets: list[str]
    syncing: list[str]
    completed: list[str]
    failed: list[ClusterFailure]  # the first to fail first
    notes: list[ClusterNote]

    @property
    def name(self) -> str:
        return self.entry.name

    @property
    def phase(self) -> StagePhase:
        return self.entry.phase

    @property
    def message(self) -> str:
        return self.entry.message

    def __getattr__(self, name: str) -> Any:
        return getattr(self.entry, name)  # startedAt, finishedAt, counts, records, ...


def lists_of(entry: StageStatus, outcomes: StageOutcomes | None) -> StageLists:
    """`entry` with every cluster of `outcomes` (none when the stage has no records)."""
    if outcomes is None:
        return StageLists(entry, [], [], [], [], [])
    return StageLists(
        entry,
        targets=list(outcomes.targets),
        syncing=list(outcomes.syncing),
        completed=list(outcomes.completed),
        failed=[ClusterFailure(name=name, reason=outcomes.clusters[name].reason) for name in outcomes.failed],
        notes=[
            ClusterNote(name=name, note=outcomes.clusters[name].note)
            for name in outcomes.ordered()
            if outcomes.clusters[name].note
        ],
    )


def stage_lists(kube: Kube, namespace: str, ps_name: str, stage: str) -> StageLists:
    """The stage of the rollout the status describes, every cluster listed from its records."""
    ps = ProgressiveSync.model_validate(kube.get(PROGRESSIVE_SYNCS, namespace, ps_name))
    entry = find_stage(ps.status, stage)
    assert entry is not None, ps.status
    rollout_id = ps.status.rollout.id if ps.status and ps.status.rollout else ""
    return lists_of(entry, stage_outcomes(kube, ps_name, namespace, rollout_id=rollout_id).get(stage))


def record_cluster(
    kube: Kube, namespace: str, ps_name: str, *, stage: str, cluster: str, change: Change
) -> None:
    """Write one cluster's record of the stage as a step would (a sibling failing, say)."""
    ps = ProgressiveSync.model_validate(kube.get(PROGRESSIVE_SYNCS, namespace, ps_name))
    rollout_id = ps.status.rollout.id if ps.status and ps.status.rollout else ""
    rollout = RolloutRef(namespace=namespace, name=ps_name, rollout_id=rollout_id, argocd_namespace=namespace)
    DirectSink(kube, read_stage_records(kube, rollout, ps, stage)).record(
        cluster, change, what="a test's write"
    )


def record_failed(kube: Kube, namespace: str, ps_name: str, *, stage: str, cluster: str, reason: str) -> None:
    """The cluster recorded Failed for `reason` in its stage's records (a sibling failed)."""
    record_cluster(kube, namespace, ps_name, stage=stage, cluster=cluster, change=failed(None, reason))


_LISTS = ("targets", "syncing", "completed", "failed", "notes")


def seed_progressive_sync(
    kube: Kube, namespace: str, *, status: dict[str, Any], **kwargs: Any
) -> ProgressiveSync:
    """`make_progressive_sync` with a status whose stages may list their clusters (`targets`,
    `syncing`, `completed`, `failed` as [{name, reason}]): those clusters go into each stage's
    records, as the steps would have written them, and the stage's summary into the status."""
    lists: dict[str, dict[str, Any]] = {}
    stages = []
    for stage in status.get("stages") or []:
        kept = {key: value for key, value in stage.items() if key not in _LISTS}
        picked = {key: stage[key] for key in _LISTS if key in stage}
        if picked:
            lists[str(stage["name"])] = picked
        stages.append(kept)
    ps = make_progressive_sync(kube, namespace, status={**status, "stages": stages}, **kwargs)
    rollout_id = str(status["rollout"]["id"])
    names = [stage.name for stage in ps.spec.stages]
    summaries = {}
    for name, picked in lists.items():
        if name not in names:
            continue
        wanted = make_stage_outcomes(
            name,
            targets=picked.get("targets", ()),
            syncing=picked.get("syncing", ()),
            completed=picked.get("completed", ()),
            failed={f["name"]: f.get("reason", "") for f in picked.get("failed", ())},
        )
        records = new_records(
            ps.metadata.name,
            rollout_id,
            name,
            stage_index=names.index(name),
            targets=wanted.targets or tuple(wanted.clusters),
            namespace=namespace,
        )
        stored = create_records(kube, ps.metadata, records)
        for record in stored:
            clusters = {c: r for c, r in wanted.clusters.items() if c in record.spec.targets}
            if clusters:
                patch_clusters(kube, namespace, record.metadata.name, clusters)
        summaries[name] = summarize(
            read_outcomes(kube, namespace, ps.metadata.name, rollout_id)[names.index(name)]
        )

    def put(current: ProgressiveSyncStatus) -> ProgressiveSyncStatus:
        for name, summary in summaries.items():
            current = apply_summary(current, name, summary)
        return current

    if summaries:
        update_status(kube, namespace, ps.metadata.name, put, what="seed the stages' records")
    return ProgressiveSync.model_validate(kube.get(PROGRESSIVE_SYNCS, namespace, ps.metadata.name))
