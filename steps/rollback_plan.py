"""The `rollback-plan` step: the first node of the exit handler of a rollout with `spec.rollback`.

It decides whether the rollout's end rolls it back and which clusters of which stages
(`orchestrator.planning.rollback`): the trigger from the Workflow (`spec.shutdown`: stopped; its
`activeDeadlineSeconds` from `status.startedAt`: the deadline), `--workflow-status` and the
stages' phases; the clusters from the stages' ProgressiveSyncStage records. It writes two outputs
per stage index, JSON lists that the Workflow's rollback fan-outs take, later stages first:
`rollback-<index>`, that stage's clusters to roll back, one pod each, and `rollback-batches-<index>`,
the batch pods to run instead (a stage in batches, or one with more clusters to restore than its
rollbackParallel: `orchestrator.planning.rollback.fanout_items`); `[]` for none, and everywhere
when there is no rollback.

When there is a rollback it records it in the ProgressiveSync status: phase RollingBack, its
message, and `status.rollback` (trigger, scope, the stages in rollback order, how many clusters),
one write; with spec.groupBy each group is decided on its own outcome (`plan_group_rollback`) and
`status.rollback.groups` says which groups roll back and which are left. Running it again writes
the same (a cluster whose rollback ended is left out of the outputs, so the fan-outs of a retried
exit handler restore only the rest). A Workflow whose
rollout was superseded writes nothing and rolls nothing back, nor does one whose rollout's end was
recorded Succeeded already (by its last cluster step, steps/rollout_end.py: a stop in the
Workflow's last seconds does not undo a release every cluster runs).

Caller: `python -m steps rollback-plan` (steps.cli), as the exit handler's first task.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from orchestrator.api.conditions import ConditionType
from orchestrator.api.metadata import STOPPED_BY_WATCHER_ANNOTATION
from orchestrator.api.models import (
    ConditionStatus,
    ProgressiveSync,
    ProgressiveSyncStatus,
    RollbackStatus,
    RolloutPhase,
)
from orchestrator.api.phases import FINISHED_ROLLOUT_PHASES
from orchestrator.api.reasons import Reason
from orchestrator.api.rollout_status import is_finalized, set_condition
from orchestrator.api.stage_records import StageOutcomes
from orchestrator.argocd.assess import WorkflowOutcome
from orchestrator.core.clock import Clock, parse_time
from orchestrator.kube.client import PROGRESSIVE_SYNCS, WORKFLOWS, Kube, NotFound
from orchestrator.kube.stage_records import read_outcomes
from orchestrator.kube.status_writer import update_status
from orchestrator.planning.contract import RolloutContract
from orchestrator.planning.rollback import (
    FanoutItems,
    RollbackTargets,
    StageView,
    batches_output,
    clusters_output,
    fanout_items,
    plan_group_rollback,
    plan_rollback,
    rollback_trigger,
)
from steps.common import RolloutRef, Tuning, UsageProblem

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RollbackPlanResult:
    """What the rollback does (nothing: every output `[]`), and why."""

    rollout_id: str
    message: str
    stages: int
    # Stage index -> what its fan-out runs (`orchestrator.planning.rollback.fanout_items`).
    items: dict[int, FanoutItems] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        """Deciding is never a failure of the exit handler: exit 0."""
        return False

    @property
    def outputs(self) -> dict[str, str]:
        """Two outputs per stage index, JSON lists: its clusters (`rollback-<i>`) and its batch
        pods (`rollback-batches-<i>`) to run; one of them, or both, `[]`."""
        outputs: dict[str, str] = {}
        for index in range(self.stages):
            items = self.items.get(index, FanoutItems())
            outputs[clusters_output(index)] = json.dumps(list(items.clusters))
            outputs[batches_output(index)] = json.dumps(list(items.batches))
        return outputs

    @property
    def summary(self) -> str:
        """One line for people."""
        return f"rollback-plan: rollout {self.rollout_id}: {self.message}"


def plan_rollout_rollback(
    kube: Kube,
    rollout: RolloutRef,
    contract: RolloutContract,
    *,
    workflow_name: str,
    workflow_status: WorkflowOutcome,
    clock: Clock,
    tuning: Tuning | None = None,
) -> RollbackPlanResult:
    """Decide the rollback and record it (see the module docstring)."""
    tuning = tuning or Tuning()
    stages = len(contract.stages)
    rollback = contract.rollback
    if rollback is None:
        raise UsageProblem(
            "the rollout contract has no rollback: spec.rollback was not set when it was built"
        )
    try:
        obj = kube.get(PROGRESSIVE_SYNCS, rollout.namespace, rollout.name)
    except NotFound:
        return RollbackPlanResult(
            rollout.rollout_id, f"ProgressiveSync {rollout.display} is gone; nothing to do", stages
        )
    ps = ProgressiveSync.model_validate(obj)
    status = ps.status or ProgressiveSyncStatus()
    if status.rollout is None or status.rollout.id != rollout.rollout_id:
        recorded = status.rollout.id if status.rollout else "none"
        return RollbackPlanResult(
            rollout.rollout_id, f"superseded (the status is on rollout {recorded}): no rollback", stages
        )
    if is_finalized(status) and status.phase == RolloutPhase.SUCCEEDED:
        # Recorded by its last cluster step (steps/rollout_end.py) before the Workflow ended: every
        # cluster runs the release, and a stop in the Workflow's last seconds does not undo that.
        return RollbackPlanResult(
            rollout.rollout_id, "no rollback: the rollout's end was recorded Succeeded already", stages
        )
    outcomes = read_outcomes(kube, rollout.namespace, rollout.name, rollout.rollout_id)
    end = _workflow_end(kube, rollout.namespace, workflow_name, clock.now())
    views = [
        StageView(stage.name, stage.phase, stage.analysis.phase if stage.analysis else "")
        for stage in status.stages or []
    ]
    on = [str(t) for t in rollback.on]
    if ps.spec.group_by is not None:
        # Each group on its own outcome (docs/groups.md, "Groups and rollback").
        targets = plan_group_rollback(
            views,
            on=on,
            scope=str(rollback.scope),
            stopped=end.stopped,
            stopped_by_watcher=end.watcher_reason,
            deadline_passed=end.deadline_passed,
            outcomes=outcomes,
        )
    else:
        trigger = rollback_trigger(
            views,
            succeeded=workflow_status == WorkflowOutcome.SUCCEEDED,
            stopped=end.stopped,
            stopped_by_watcher=end.watcher_reason,
            deadline_passed=end.deadline_passed,
            outcomes=outcomes,
        )
        targets = plan_rollback(trigger, on=on, scope=str(rollback.scope), outcomes=outcomes)
    log.info("%s", targets.why)
    if not targets.stages:
        return RollbackPlanResult(rollout.rollout_id, targets.why, stages)
    names = [stage.name for stage in contract.stages]
    _record_start(
        kube, ps, rollout, targets, names=names, scope=str(rollback.scope), now=clock.now(), tuning=tuning
    )
    return RollbackPlanResult(
        rollout.rollout_id, targets.why, stages, _fanout_items(contract, targets, outcomes)
    )


def _fanout_items(
    contract: RolloutContract, targets: RollbackTargets, outcomes: Mapping[int, StageOutcomes]
) -> dict[int, FanoutItems]:
    """What each stage's rollback fan-out runs: its clusters, or its batch pods (`fanout_items`)."""
    items: dict[int, FanoutItems] = {}
    for index, clusters in targets.clusters.items():
        stage = contract.stages[index]
        parallel = stage.rollback_parallel or stage.max_parallel
        items[index] = fanout_items(clusters, outcomes.get(index), batches=stage.batches, parallel=parallel)
    return items


def _record_start(
    kube: Kube,
    ps: ProgressiveSync,
    rollout: RolloutRef,
    targets: RollbackTargets,
    *,
    names: list[str],
    scope: str,
    now: datetime,
    tuning: Tuning,
) -> None:
    """Phase RollingBack, its message and `status.rollback`, in one write (the same when run again)."""
    order = [names[i] for i in targets.stages]
    message = f"{targets.why}; stages {', '.join(order)}, in this order"
    generation = ps.metadata.generation

    def mutate(status: ProgressiveSyncStatus) -> ProgressiveSyncStatus:
        if status.rollout is None or status.rollout.id != rollout.rollout_id:
            return status
        if status.rollout.finished_at is not None and status.phase in FINISHED_ROLLOUT_PHASES:
            return status  # the end was recorded already (finalize ran, or the watcher did)
        started = status.rollback.started_at if status.rollback else None
        status.rollback = RollbackStatus(
            trigger=targets.trigger.reason,
            scope=scope,
            stages=order,
            targets=targets.total,
            groups=[group.to_status() for group in targets.groups] or None,
            started_at=started or now,
        )
        status.phase = RolloutPhase.ROLLING_BACK
        status.message = message
        set_condition(
            status,
            ConditionType.PROGRESSING,
            value=ConditionStatus.TRUE,
            reason=Reason.ROLLING_BACK,
            message=message,
            now=now,
            generation=generation,
        )
        return status

    update_status(
        kube, rollout.namespace, rollout.name, mutate, what="record the rollback", settings=tuning.status
    )


@dataclass(frozen=True)
class _WorkflowEnd:
    stopped: bool = False  # `spec.shutdown` is set
    watcher_reason: str = ""  # the watcher stopped it, and why (`STOPPED_BY_WATCHER_ANNOTATION`)
    deadline_passed: bool = False  # `activeDeadlineSeconds` past `status.startedAt`


def _workflow_end(kube: Kube, namespace: str, workflow_name: str, now: datetime) -> _WorkflowEnd:
    """How the Workflow ended, from the Workflow (nothing known when it is gone)."""
    try:
        workflow = kube.get(WORKFLOWS, namespace, workflow_name)
    except NotFound:
        log.warning(
            "Workflow %s/%s not found; deciding from --workflow-status alone", namespace, workflow_name
        )
        return _WorkflowEnd()
    spec = workflow.get("spec") or {}
    annotations = (workflow.get("metadata") or {}).get("annotations") or {}
    started = parse_time((workflow.get("status") or {}).get("startedAt"))
    seconds = spec.get("activeDeadlineSeconds")
    passed = bool(started and isinstance(seconds, int) and now >= started + timedelta(seconds=seconds))
    return _WorkflowEnd(
        stopped=bool(spec.get("shutdown")),
        watcher_reason=str(annotations.get(STOPPED_BY_WATCHER_ANNOTATION) or ""),
        deadline_passed=passed,
    )
