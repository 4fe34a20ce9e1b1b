"""The one reader of per-cluster outcomes for tests: the rollout's ProgressiveSyncStage records,
read through the API as any client reads them (issue 30).

The ProgressiveSync status holds each stage's summary (counts, the first clusters in flight and
failed); every cluster's record is in the stage's ProgressiveSyncStage objects. Tests that check
per-cluster outcomes read them here:

- `stage_outcomes(kube, ps_name, namespace)`: stage name -> `StageOutcomes` of the rollout in the
  status (`status.rollout.id`), or of `rollout_id`;
- `status_with_outcomes(kube, namespace, name)`: the status as stored, each stage with every
  cluster listed from its records (`targets`, `syncing`, `completed`, `failed` with reasons,
  `notes`), the shape the rigs' `status()` gives their tests.
"""

from __future__ import annotations

from typing import Any

from orchestrator.api.stage_records import StageOutcomes
from orchestrator.kube.client import PROGRESSIVE_SYNCS, Kube, NotFound
from orchestrator.kube.stage_records import read_outcomes


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
