"""`progressive-sync rollback`, run in-process: the exit handler's rollback by hand, for the last rollout.

The CLI (`orchestrator.cli.ops_cmd`) refuses what may not be rolled back (no rollout, one still
running: `orchestrator.ops.decisions.decide_manual_rollback`) and chooses the clusters
(`orchestrator.planning.rollback.manual_targets`); this module does the rest with the steps' own
parts, so a cluster is restored exactly as the Workflow's `rollback` pod restores it:

- `preview` (`--dry-run`): for each cluster of the targets (rollback order), each of its Applications
  (`steps.common.FleetLookup`) and what `orchestrator.argocd.rollback.decide_rollback` says of it.
  Reads only.
- `run`: stage by stage, later stages first, at most the stage's rollbackParallel clusters at once,
  each through `steps.rollback.rollback_cluster`, which records the cluster's outcome in its record
  (`steps.batch.run_clusters`: bounded, temporary errors retried; the stage's records and the fleet
  read once per stage); then `record_end` writes the end in the status as `finalize` does for the
  exit handler: `status.rollback` (trigger "Manual"), phase RolledBack, or Failed with RollbackFailed.

Why here and not in `orchestrator.ops`: the steps may not import `orchestrator.ops` (the import
contract "The steps import only what the step image runs"), and the runner needs the `rollback`
step; the CLI, at the top, calls both.

The rollout contract the `rollback` step needs is built from the spec and the recorded rollout
(`manual_contract`): the Workflow's contract is not kept anywhere the CLI can read it.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from orchestrator.api.groups import spec_stage
from orchestrator.api.models import ProgressiveSync, ProgressiveSyncStatus, RollbackStatus
from orchestrator.api.rollback import RollbackScope, RollbackTrigger, rollback_deadline_seconds
from orchestrator.api.rollout_status import finalize_rollout
from orchestrator.api.stage_records import StageOutcomes
from orchestrator.argocd import appsync
from orchestrator.argocd.rollback import RollbackAction, decide_rollback
from orchestrator.core.clock import Clock
from orchestrator.kube.client import Kube
from orchestrator.kube.stage_records import read_outcomes
from orchestrator.kube.status_writer import update_status
from orchestrator.planning.contract import RollbackContract, RolloutContract, StageContract
from orchestrator.planning.rollback import MANUAL, RollbackTargets, rollback_end
from orchestrator.planning.sizing import rollback_parallel, stage_size
from steps.batch import run_clusters
from steps.common import FleetLookup, RolloutRef, Tuning, run_view
from steps.context import Shared, StepContext
from steps.rollback import RollbackResult, rollback_cluster

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AppPreview:
    """One Application of a cluster in scope, and what the rollback would do to it (`--dry-run`)."""

    stage: str
    cluster: str
    application: str  # "" when the cluster has none (or is not in the inventory)
    action: str
    reason: str

    def to_data(self) -> dict[str, str]:
        """The `-o json|yaml` form."""
        return {
            "stage": self.stage,
            "cluster": self.cluster,
            "application": self.application,
            "action": self.action,
            "reason": self.reason,
        }


@dataclass
class ManualResult:
    """How the manual rollback ended: each cluster's result (in the order they ended) and the
    status it recorded."""

    results: list[RollbackResult] = field(default_factory=list)
    phase: str = ""
    message: str = ""

    @property
    def failed(self) -> bool:
        """True when a cluster is not restored (exit 1)."""
        return any(result.failed for result in self.results)


def rollout_ref(ps: ProgressiveSync, *, argocd_namespace: str | None = None) -> RolloutRef:
    """The recorded rollout of `ps` as the steps name it (the cluster inventory next to `ps` unless
    `argocd_namespace`, as the steps default)."""
    assert ps.status is not None and ps.status.rollout is not None  # the CLI refused otherwise
    namespace = ps.metadata.namespace or ""
    return RolloutRef(
        namespace=namespace,
        name=ps.metadata.name,
        rollout_id=ps.status.rollout.id,
        argocd_namespace=argocd_namespace or namespace,
        # With spec.groupBy the rollout's "<group>/<stage>" stages, as the status lists them.
        stage_names=tuple(rollout_stage_names(ps)) if ps.spec.group_by is not None else (),
    ).with_applications_of(ps)


def read_stage_outcomes(kube: Kube, ps: ProgressiveSync) -> dict[int, StageOutcomes]:
    """The recorded rollout's records, by stage index."""
    ref = rollout_ref(ps)
    return dict(read_outcomes(kube, ref.namespace, ref.name, ref.rollout_id))


def rollout_stage_names(ps: ProgressiveSync) -> list[str]:
    """The recorded rollout's stages, by index: with spec.groupBy its "<group>/<stage>" stages as
    the status lists them (docs/groups.md), else the spec's."""
    if ps.spec.group_by is not None:
        return [stage.name for stage in (ps.status.stages if ps.status else None) or []]
    return [stage.name for stage in ps.spec.stages]


def manual_contract(
    ps: ProgressiveSync, outcomes: dict[int, StageOutcomes], *, scope: str
) -> RolloutContract:
    """The rollout contract of the recorded rollout, as far as the rollback needs it: its id, each
    stage sized against its recorded clusters (maxParallel and rollbackParallel by the planner's
    sizing rule), and a rollback that every trigger starts, with `scope` and the spec's deadline."""
    assert ps.status is not None and ps.status.rollout is not None
    rollback = ps.spec.rollback
    stages = []
    for index, name in enumerate(rollout_stage_names(ps)):
        # With groups the spec stage of "<group>/<stage>"; a stage the spec no longer has rolls back
        # one at a time (kept in place: the records are by the rollout's stage index).
        stage = spec_stage(ps.spec, name)
        records = outcomes.get(index)
        targets = len(records.clusters) if records is not None else 0
        if stage is None:
            stages.append(StageContract(name=name, targets=targets, max_parallel=1, rollback_parallel=1))
            continue
        size = stage_size(stage, available=targets, targets=targets)
        parallel = max(1, size.max_parallel)
        stages.append(
            StageContract(
                name=name,
                targets=targets,
                max_parallel=parallel,
                rollback_parallel=rollback_parallel(rollback.max_parallel if rollback else None, size),
            )
        )
    return RolloutContract(
        rollout_id=ps.status.rollout.id,
        # The contract requires a pinned release; the rollback never reads it (it restores what each
        # Application recorded it ran before), so the recorded revision stands in for it.
        release=((ps.status.rollout.revision or "unrecorded",),),
        stages=tuple(stages),
        rollback=RollbackContract(
            on=tuple(RollbackTrigger),
            scope=RollbackScope(scope),
            progress_deadline_seconds=rollback_deadline_seconds(ps.spec),
        ),
    )


def preview(kube: Kube, ps: ProgressiveSync, targets: RollbackTargets, *, clock: Clock) -> list[AppPreview]:
    """What the rollback would do to each Application of each cluster in scope; writes nothing."""
    ref = rollout_ref(ps)
    since = ps.status.rollout.started_at if ps.status and ps.status.rollout else None
    names = rollout_stage_names(ps)
    fleet = FleetLookup(kube, ref, run_view(ps, ref), clock=clock)
    rows: list[AppPreview] = []
    for index in targets.stages:
        stage = names[index]
        for cluster in targets.clusters.get(index, ()):
            found, clusters = fleet.find(cluster)
            if found is None:
                rows.append(
                    AppPreview(
                        stage,
                        cluster,
                        "",
                        RollbackAction.REFUSED.value,
                        "no Argo CD cluster Secret has this name",
                    )
                )
                continue
            apps = fleet.apps_of(found, clusters)
            if not apps:
                rows.append(
                    AppPreview(
                        stage,
                        cluster,
                        "",
                        RollbackAction.NOT_OURS.value,
                        "no Application of the ApplicationSet",
                    )
                )
            for app in apps:
                decision = decide_rollback(app, ref.rollout_id, since=since)
                rows.append(
                    AppPreview(stage, cluster, appsync.app_name(app), decision.action.value, decision.reason)
                )
    return rows


def run(
    kube: Kube,
    ps: ProgressiveSync,
    targets: RollbackTargets,
    *,
    scope: str,
    clock: Clock,
    tuning: Tuning | None = None,
    on_result: Callable[[RollbackResult], None] = lambda _result: None,
) -> ManualResult:
    """Roll the targets back (see the module docstring) and record the end; `on_result` hears of
    each cluster as it ends (from the worker threads, one at a time)."""
    tuning = tuning or Tuning()
    outcomes = read_stage_outcomes(kube, ps)
    contract = manual_contract(ps, outcomes, scope=scope)
    ref = rollout_ref(ps)
    names = rollout_stage_names(ps)
    ps = run_view(ps, ref)  # with spec.groupBy the steps index the "<group>/<stage>" stages
    started = clock.now()
    result = ManualResult()
    lock = threading.Lock()

    def one(ctx: StepContext, shared: Shared, cluster: str) -> RollbackResult:
        ended = rollback_cluster(kube, ctx, cluster, shared)
        with lock:  # heard one at a time, as each ends
            result.results.append(ended)
            on_result(ended)
        return ended

    for index in targets.stages:
        sized = contract.stages[index]
        ctx = StepContext(rollout=ref, contract=contract, stage=sized, ps=ps, clock=clock, tuning=tuning)
        # One read of the stage's records and the fleet for all its clusters, as a batch shares them.
        shared = Shared(
            fleet=Shared().fleet_for(kube, ctx, max_age_seconds=tuning.fleet_lookup_seconds)
        ).with_records(kube, ctx)
        run_clusters(
            targets.clusters.get(index, ()),
            functools.partial(one, ctx, shared),
            slots=sized.rollback_parallel or 1,
            clock=clock,
            backoffs=tuning.batch_retry_backoffs,
        )
    result.phase, result.message = record_end(
        kube, ps, targets, names=names, scope=scope, started=started, clock=clock, tuning=tuning
    )
    return result


def record_end(
    kube: Kube,
    ps: ProgressiveSync,
    targets: RollbackTargets,
    *,
    names: Sequence[str],
    scope: str,
    started: datetime,
    clock: Clock,
    tuning: Tuning,
) -> tuple[str, str]:
    """`status.rollback` (trigger Manual) with the counts from the records, and the rollout's end
    (`rollback_end`, as `finalize` records it), in one status write; the phase and message written.
    Nothing is written when the status has moved on to another rollout meanwhile."""
    ref = rollout_ref(ps)
    outcomes = dict(read_outcomes(kube, ref.namespace, ref.name, ref.rollout_id))
    now = clock.now()
    order = [names[index] for index in targets.stages]
    generation = ps.metadata.generation

    def mutate(status: ProgressiveSyncStatus) -> ProgressiveSyncStatus:
        if status.rollout is None or status.rollout.id != ref.rollout_id:
            return status
        rollback = RollbackStatus(
            trigger=MANUAL,
            scope=scope,
            stages=order,
            targets=targets.total,
            groups=[group.to_status() for group in targets.groups] or None,
            started_at=started,
        )
        why = f"{targets.trigger.why} (progressive-sync rollback, scope {scope})"
        phase, reason, condition = rollback_end(rollback, names, outcomes, reason=why, now=now)
        status.rollback = rollback
        return finalize_rollout(
            status, phase=phase, reason=reason, now=now, generation=generation, condition_reason=condition
        )

    update = update_status(
        kube, ref.namespace, ref.name, mutate, what="record the manual rollback", settings=tuning.status
    )
    stored = update.status
    return (stored.phase.value if stored.phase else ""), stored.message or ""
