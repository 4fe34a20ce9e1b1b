"""`build_workflow`: the Argo Workflow of one rollout of one ProgressiveSync, built with Hera.

Called by the watcher when a rollout is due and by `progressive-sync render`. Pure: the same
ProgressiveSync, rollout id, revision, plan and settings always give the same Workflow, so creating
it twice yields AlreadyExists, never a second rollout.

The shape (DESIGN.md §4, with the changes docs/design/workflow.md explains), for stages A, B and C where
C has a manual gate:

    rollout (DAG)                       entry; one task per stage, each depending on the one before
    ├── A  -> stage-A (DAG)             output `targets`: B's, from record-and-select
    │   ├── wait-for-dependencies       only with spec.dependsOn, in the stage that waits (the first
    │   │                               unless beforeStage says): steps/depends.py
    │   ├── select                      writes the output parameter `targets` (JSON list)
    │   ├── clusters -> fanout-A (DAG)  parallelism = A's resolved maxParallel; continueOn failed
    │   │   └── cluster                 withParam over the targets: one pod per cluster (sync, wait)
    │   └── record-and-select           closes A (exits 1 when it failed), then selects B
    ├── B  -> stage-B (DAG)             input `targets` = A's output; no select of its own
    │   ├── clusters -> fanout-B ...
    │   ├── record                      closes the stage; exits 1 when it failed
    │   └── bake -> bake-600s           only with `bakeSeconds`, after a stage that succeeded
    └── C  -> stage-C (DAG)
        ├── approve -> approval         only with `approval: Manual`; resumed by `argo resume`
        ├── select                      a stage behind a gate or a bake selects itself
        └── clusters, record ...
    onExit: finalize --workflow-status {{workflow.status}}
            or, when the contract has a `rollback`, the DAG `exit`: rollback-plan, one rollback fan-out
            per stage (C, B, A), finalize (workflow_templates/rollback.py); when the last stage's
            `record` records the rollout's end (`endsRollout`), the exit handler's steps run only
            on a Workflow that did not succeed (workflow_templates/exit_handler.py)

A stage with analysis (its contract's `analysis`) gets an `analysis-<templates>` node (the `analyze`
step) after `clusters` and before its closing step (continueOn failed, so `record` closes the
stage), or with `perCluster` one per cluster after that cluster's pod (`analyzed-<stage>`, a DAG
per loop item; a stage in batches runs every cluster's run from the one node after the batches),
an `approve-analysis` gate that runs only when the verdict is Inconclusive (onInconclusive:
Approve), and with `duringBake` a bake that is the analysis' run rather than a suspend.

Decisions worth knowing:

- **One rollout contract** (`orchestrator.planning.contract`, made by `contract_for`): the rollout
  id, the release's revisions and each stage's resolved sizing (targets, maxParallel, batches, the
  first wave, deadline waves), computed once from the plan by `orchestrator.planning.sizing`. Every
  number here comes from it (the fan-out's `parallelism`, the batch loop, the deadline, the
  description), and it is the Workflow's `contract` argument, which every step reads: no size
  travels as a template parameter.
- **maxParallel as a percentage** becomes an integer in the contract, from the plan of the fleet
  at build time (Argo's template `parallelism` is an integer, never an expression), by the one
  sizing rule (`orchestrator.planning.sizing.stage_size`, which the planner uses too). If `select` takes more
  clusters at run time than the plan foresaw, the bound stays the planned one; so the watcher
  builds it only once Argo CD compared the whole fleet against the release (bounded: its rule 12,
  `orchestrator.watcher.fleet_compare`).
- **No failFast; the steps decide.** Argo v3.7's template `failFast` marks the template Failed from
  `checkParallelism` without setting its outbound nodes, so whatever depends on it is never
  reached and the Workflow hangs Running (exit handler never run, mutex held). Instead every
  cluster pod first looks at its stage in the ProgressiveSync status: once the stage's failed
  clusters exceed `maxFailedClusters`, a cluster not yet started exits 1 at once without syncing
  (steps/cluster.py). The fan-out task is `continueOn: failed`, so `record` always closes the
  stage (Failed when failures exceed the tolerance: it exits 1, and nothing after it runs). The
  loop task inside the fan-out is `continueOn: failed` too, so in the Argo UI a failed cluster is
  the only red node of a stage that tolerates it (`TOLERATED`).
- **One pod per cluster.** `cluster` runs sync then wait-healthy in one process, retried as one
  step: the fan-out's children are Retry nodes with one Pod each (2 nodes per cluster, not 5).
- **activeDeadlineSeconds** is derived from the spec and the plan (see
  `active_deadline_seconds`): a budget for every step, one progress deadline per wave of
  `maxParallel` clusters, the bake times, and for each manual gate its approval window (the
  stage's `approvalWindowSeconds` from the contract, else `approval_window_seconds`; a rollout
  waiting past its deadline for a person fails, and the exit handler records it). Argo counts
  suspended time too, so the approval window must be part of it. The window is the gate's share of
  the deadline: a gate that opens with the stages before it inside their budgets has at least its
  window before the deadline (more when they finished early). The description says
  `manual approval within <N>s` where the stage sets one.
- **Display names**: Argo shows DAG task names, which allow only `[a-zA-Z0-9-]`; stage names may
  hold spaces and dots. The task name is the sanitized stage name (unique even when two stages
  sanitize alike); where the stage name passes Argo's display-name rule the template annotation
  `workflows.argoproj.io/display-name` shows it exactly; the stage node always carries the exact
  name as its `stage` input parameter. A cluster's node shows the cluster's name where Argo's rule
  allows it (`names.display_name_of_input`; docs/design/workflow.md, How the Argo UI draws it).
- **One step per stage boundary**: between two stages with nothing in between (no gate on the
  next, no bake after this one) `record-and-select` closes one and selects the next in one pod
  (`opens_itself`; steps/hand_over.py): one step pod fewer on the critical path per boundary.
- **Size**: a stage of N clusters makes about 2N + 7 nodes (a Retry node and a pod per cluster),
  2N + 5 when the stage before selects it.
  Argo keeps node status in the object (compressed past ~1 MiB), so a plan above
  `settings.max_nodes` (default 4000, about 1,990 clusters in one rollout) is refused with a
  message.
- **Rollback** (the contract's `rollback`) is the exit handler, not a stage after the failed one:
  Argo runs the exit handler after a failure, after `argo stop` and past the Workflow's deadline
  (its pods are exempt from it, v3.7.18 workflowpod.go), which are exactly the ends that trigger a
  rollback; `argo terminate` skips it. It adds at most 2 nodes per planned cluster (`rollback_nodes`)
  and nothing to the deadline.
- A stage that the plan says has no target gets no bake: waiting after a stage that changed
  nothing only delays the rollout.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from hera.workflows import Parameter, Workflow
from hera.workflows.models import (
    Arguments,
    ContinueOn,
    DAGTask,
    DAGTemplate,
    Inputs,
    Mutex,
    Outputs,
    OwnerReference,
    PodGC,
    Synchronization,
    Template,
    ValueFrom,
)
from hera.workflows.models import Parameter as ModelParameter

from orchestrator.analysis.run import OPEN_ENDED_SECONDS
from orchestrator.api.analysis import AnalysisWhen, OnInconclusive, StageAnalysis
from orchestrator.api.metadata import (
    NAME_ANNOTATION,
    NAME_LABEL,
    ROLLOUT_ID_LABEL,
    label_value,
    rollout_annotations,
    workflow_name,
)
from orchestrator.api.models import API_VERSION, KIND, ApprovalMode, ProgressiveSync, Stage
from orchestrator.api.release import Release
from orchestrator.planning.contract import ContractError, RolloutContract, StageContract, make_contract
from orchestrator.planning.follow import followed
from orchestrator.planning.groups import with_run_stages
from orchestrator.planning.plan import split_stage_name
from orchestrator.planning.planner import planned_sizes
from orchestrator.planning.sizing import StageSize, stage_size
from workflow_templates import exit_handler, names, pieces, rollback
from workflow_templates.settings import WorkflowSettings

if TYPE_CHECKING:
    from orchestrator.planning.planner import RolloutPlan

# Nominal node counts (see the module docstring); retries add one node per extra attempt.
NODES_PER_CLUSTER = 2  # retry + pod
NODES_PER_STAGE = 7  # stage DAG + select (retry + pod) + fan-out DAG + task group + record (retry + pod)
NODES_PER_SELECT = 2  # retry + pod: not there in a stage the one before selects (record-and-select)
NODES_PER_WAIT = 2  # retry + pod: wait-for-dependencies, in a stage that waits (spec.dependsOn)
TARGETS_INPUT = "targets"
NODES_FIXED = 3  # root DAG + exit handler (retry + pod)


class WorkflowBuildError(ValueError):
    """The Workflow cannot be built as asked (a plan that does not fit the spec, too many nodes)."""


StageSizes = Mapping[str, StageSize]


def sizes_from_plan(ps: ProgressiveSync, plan: RolloutPlan) -> dict[str, StageSize]:
    """Each stage's planned target count and its maxParallel (>= 1) by the one sizing rule."""
    try:
        return planned_sizes(ps.spec, plan)
    except KeyError as exc:
        raise WorkflowBuildError(
            f"the plan has no stage {exc.args[0]!r}: it was made for another spec"
        ) from exc


def assumed_sizes(ps: ProgressiveSync, clusters_per_stage: int) -> dict[str, StageSize]:
    """Sizes without a fleet: every stage has `clusters_per_stage` clusters available."""
    return {stage.name: stage_size(stage, available=clusters_per_stage) for stage in ps.spec.stages}


def contract_for(
    ps: ProgressiveSync, *, release: Release, plan: RolloutPlan | StageSizes, settings: WorkflowSettings
) -> RolloutContract:
    """The rollout contract of `release` of `ps` (orchestrator.planning.contract): each stage's sizing
    resolved once, from the plan (or ready-made sizes), by the rules of `orchestrator.planning.sizing`.

    WorkflowBuildError when the plan does not match the spec or the release has no revision."""
    sizes: StageSizes = plan if isinstance(plan, Mapping) else sizes_from_plan(ps, plan)
    ps = _run_by(ps, list(sizes))
    missing = [stage.name for stage in ps.spec.stages if stage.name not in sizes]
    if missing:
        raise WorkflowBuildError(f"no size for stage(s) {', '.join(map(repr, missing))}")
    try:
        return make_contract(
            ps.spec,
            rollout_id=release.rollout_id,
            release=release.revisions,
            sizes=sizes,
            batch_threshold=settings.batch_threshold,
            per_batch=settings.batch_clusters,
            pods_at_once_limit=settings.pods_at_once_limit,
        )
    except ContractError as exc:
        raise WorkflowBuildError(f"no rollout contract for this release: {exc}") from exc


def _run_by(ps: ProgressiveSync, names: list[str]) -> ProgressiveSync:
    """With spec.groupBy, `ps` listing the rollout's "<group>/<stage>" stages (`names`, from the
    plan's sizes or the contract) in place of its own (orchestrator.planning.groups); else `ps`."""
    if ps.spec.group_by is None:
        return ps
    if not any(split_stage_name(name)[0] is not None for name in names):
        raise WorkflowBuildError(
            f"spec.groupBy: the stages run once per value of cluster label {ps.spec.group_by!r}, so the "
            "Workflow needs the fleet's groups (render with --fleet)"
        )
    try:
        return with_run_stages(ps, names)
    except KeyError as exc:
        raise WorkflowBuildError(
            f"no stage {exc.args[0]!r} in the spec: the plan was made for another spec"
        ) from exc


def estimate_nodes(ps: ProgressiveSync, contract: RolloutContract) -> int:
    """The nominal number of status nodes the Workflow makes (no retries); with rollback, as if
    every planned cluster were rolled back."""
    total = NODES_FIXED + rollback.rollback_nodes(contract)
    # The exit DAG's own node when it is there without rollback (the rollback branch counts its own).
    total += 1 if contract.rollback is None and exit_handler.skips_on_success(contract) else 0
    stages = list(ps.spec.stages)
    total += len({split_stage_name(stage.name)[0] for stage in stages} - {None})  # a DAG per group
    total += 1 if followed(contract) else 0  # the follower's pod, when the settings run it
    for index, (stage, sized) in enumerate(zip(stages, contract.stages, strict=True)):
        total += NODES_PER_STAGE + NODES_PER_CLUSTER * (sized.batches or sized.targets)
        total -= 0 if opens_itself(contract, index) else NODES_PER_SELECT
        total += 1 if stage.approval is ApprovalMode.MANUAL else 0
        total += 1 if stage.bake_seconds and sized.targets else 0
        total += _analysis_nodes(sized)
        total += NODES_PER_WAIT if contract.dependencies_before(stage.name) else 0
    return total


def _analysis_nodes(sized: StageContract) -> int:
    """The nodes a stage's analysis adds: a Retry and a Pod per analysis (and its approval gate),
    per cluster (with the cluster's DAG node) when each cluster is analyzed; one more for a bake
    that is an analysis rather than a suspend."""
    analysis = sized.analysis
    if analysis is None:
        return 0
    per_run = 2 + (1 if analysis.on_inconclusive is OnInconclusive.APPROVE else 0)
    total = 1 if analysis.during_bake and sized.targets else 0
    if analysis.after_healthy:
        total += (1 + per_run) * sized.targets if _analyzed_per_cluster(sized) else per_run
    return total


def _analyzed_per_cluster(sized: StageContract) -> bool:
    """Each cluster is analyzed by its own node after its wait-healthy (perCluster, not in batches:
    a stage in batches runs its per-cluster runs from one node after the batches)."""
    analysis = sized.analysis
    return bool(analysis and analysis.after_healthy and analysis.per_cluster and not sized.batches)


def active_deadline_seconds(
    ps: ProgressiveSync, contract: RolloutContract, settings: WorkflowSettings
) -> int:
    """The Workflow's whole budget in seconds; see WorkflowSettings for the terms."""
    step = settings.step_budget_seconds
    total = step  # the exit handler
    for stage, sized in zip(ps.spec.stages, contract.stages, strict=True):
        total += 2 * step  # select, record
        total += sized.deadline_waves * (step + ps.spec.progress_deadline_seconds)
        total += stage.bake_seconds or 0
        if stage.approval is ApprovalMode.MANUAL:
            total += approval_window(sized, settings)
        total += _analysis_seconds(sized, step, settings.approval_window_seconds)
        total += _dependency_seconds(contract, stage.name, step)
    return math.ceil(total * settings.deadline_factor)


def _dependency_seconds(contract: RolloutContract, stage: str, step: int) -> int:
    """What a stage that waits for other ProgressiveSyncs adds to the budget: a step and the longest
    of its dependencies' timeoutSeconds (they are waited for at once); nothing for the others."""
    timeouts = [dependency.timeout_seconds for dependency in contract.dependencies_before(stage)]
    return step + max(timeouts) if timeouts else 0


def approval_window(sized: StageContract, settings: WorkflowSettings) -> int:
    """How long a stage's manual gate may wait: the stage's approvalWindowSeconds (carried by the
    contract), else the watcher's setting."""
    return sized.approval_window_seconds or settings.approval_window_seconds


def _analysis_seconds(sized: StageContract, step: int, approval_window: int) -> int:
    """What a stage's analysis adds to the budget: its timeoutSeconds (else `OPEN_ENDED_SECONDS`, the
    longest the step gives a run without one) and a step, per wave when each cluster is analyzed;
    the approval window when an Inconclusive run waits for a person; a step for a bake's analysis."""
    analysis = sized.analysis
    if analysis is None:
        return 0
    total = step if analysis.during_bake else 0
    if analysis.after_healthy:
        waves = sized.deadline_waves if _analyzed_per_cluster(sized) else 1
        total += waves * (step + (analysis.timeout_seconds or OPEN_ENDED_SECONDS))
        if analysis.on_inconclusive is OnInconclusive.APPROVE:
            total += approval_window
    return total


def _parameter(name: str, value: str) -> ModelParameter:
    return ModelParameter(name=name, value=value)


# The fan-out's loop task: a failed cluster (or batch) does not fail the fan-out DAG (Argo v3.7
# dag.go assessDAGPhase skips a target task whose continueOn covers its phase). The failed cluster's
# node is red, its `clusters` node and the stage stay green while the failures are within
# maxFailedClusters; a stage that fails shows it on its closing step (record exits 1), not on the
# fan-out. An Error (retries exhausted) still marks the fan-out.
TOLERATED = ContinueOn(failed=True)


def _fanout_template(task_name: str, size: StageContract) -> Template:
    """The loop over one stage's clusters, alone in its template so `parallelism` bounds only it."""
    bounded = size.max_parallel < size.targets
    return Template(
        name=names.fanout_template_name(task_name),
        # A large stage reads "clusters-3-at-a-time" above its "N hidden nodes" in the Argo UI.
        annotations={names.DISPLAY_NAME_ANNOTATION: names.fanout_display_name(size.max_parallel)}
        if bounded
        else None,
        inputs=Inputs(
            parameters=[ModelParameter(name=pieces.STAGE_INPUT), ModelParameter(name=TARGETS_INPUT)]
        ),
        parallelism=size.fanout_parallelism,
        dag=DAGTemplate(
            tasks=[
                DAGTask(
                    name=names.CLUSTER_LOOP_TASK,
                    template=names.analyzed_cluster_template_name(task_name)
                    if _analyzed_per_cluster(size)
                    else names.CLUSTER_TEMPLATE,
                    with_param="{{inputs.parameters." + TARGETS_INPUT + "}}",
                    arguments=Arguments(
                        parameters=[
                            _parameter(
                                pieces.STAGE_INPUT, "{{inputs.parameters." + pieces.STAGE_INPUT + "}}"
                            ),
                            _parameter(pieces.CLUSTER_INPUT, "{{item}}"),
                        ]
                    ),
                    continue_on=TOLERATED,
                )
            ],
        ),
    )


def _analysis_tasks(
    analysis: StageAnalysis,
    *,
    stage: str,
    cluster: str,
    when: AnalysisWhen,
    after: list[str],
    keep_going: bool,
    name: str | None = None,
) -> list[DAGTask]:
    """The analysis node (`analysis-<templates>`, the `analyze` step) after `after`, and with
    onInconclusive: Approve the `approve-analysis` gate that runs only when its verdict is
    Inconclusive. `keep_going`: a failed analysis lets the stage's closing step run."""
    task = name or names.analysis_task_name(ref.name for ref in analysis.templates)
    tasks = [
        DAGTask(
            name=task,
            template=names.ANALYZE_TEMPLATE,
            dependencies=after,
            arguments=Arguments(
                parameters=[
                    _parameter(pieces.STAGE_INPUT, stage),
                    _parameter(pieces.CLUSTER_INPUT, cluster),
                    _parameter(pieces.WHEN_INPUT, when.value),
                ]
            ),
            continue_on=ContinueOn(failed=True, error=True) if keep_going else None,
        )
    ]
    if analysis.on_inconclusive is OnInconclusive.APPROVE and when is AnalysisWhen.AFTER_HEALTHY:
        verdict = "{{tasks." + task + ".outputs.parameters." + pieces.VERDICT_OUTPUT + "}}"
        tasks.append(
            DAGTask(
                name=names.APPROVE_ANALYSIS_TASK,
                template=names.APPROVAL_TEMPLATE,
                dependencies=[task],
                arguments=Arguments(parameters=[_parameter(pieces.STAGE_INPUT, stage)]),
                when=f"{verdict} == Inconclusive",
            )
        )
    return tasks


def _analyzed_cluster_template(task_name: str, analysis: StageAnalysis) -> Template:
    """One cluster of a stage whose clusters are each analyzed: `cluster` (sync, wait-healthy), then
    its analysis; the node shows the cluster's name where Argo's rule allows it."""
    stage_ref = "{{inputs.parameters." + pieces.STAGE_INPUT + "}}"
    cluster_ref = "{{inputs.parameters." + pieces.CLUSTER_INPUT + "}}"
    cluster = DAGTask(
        name=names.CLUSTER_LOOP_TASK,
        template=names.CLUSTER_TEMPLATE,
        arguments=Arguments(
            parameters=[
                _parameter(pieces.STAGE_INPUT, stage_ref),
                _parameter(pieces.CLUSTER_INPUT, cluster_ref),
            ]
        ),
    )
    return Template(
        name=names.analyzed_cluster_template_name(task_name),
        annotations={names.DISPLAY_NAME_ANNOTATION: names.display_name_of_input(pieces.CLUSTER_INPUT)},
        inputs=Inputs(
            parameters=[ModelParameter(name=pieces.STAGE_INPUT), ModelParameter(name=pieces.CLUSTER_INPUT)]
        ),
        dag=DAGTemplate(
            tasks=[
                cluster,
                *_analysis_tasks(
                    analysis,
                    stage=stage_ref,
                    cluster=cluster_ref,
                    when=AnalysisWhen.AFTER_HEALTHY,
                    after=[names.CLUSTER_LOOP_TASK],
                    keep_going=False,
                ),
            ]
        ),
    )


def _batch_fanout_template(task_name: str, batches: int) -> Template:
    """A large stage's loop over its batches: `batches` pods, all at once, sharing maxParallel (each
    batch reads its share, and the stage's batch count, from the rollout contract)."""
    items = json.dumps([str(index) for index in range(batches)])
    return Template(
        name=names.fanout_template_name(task_name),
        inputs=Inputs(parameters=[ModelParameter(name=pieces.STAGE_INPUT)]),
        parallelism=batches,
        dag=DAGTemplate(
            tasks=[
                DAGTask(
                    name=names.BATCH_LOOP_TASK,
                    template=names.BATCH_TEMPLATE,
                    with_param=items,
                    arguments=Arguments(
                        parameters=[
                            _parameter(
                                pieces.STAGE_INPUT, "{{inputs.parameters." + pieces.STAGE_INPUT + "}}"
                            ),
                            _parameter(pieces.BATCH_INPUT, "{{item}}"),
                        ]
                    ),
                    continue_on=TOLERATED,
                )
            ],
        ),
    )


def opens_itself(contract: RolloutContract, index: int) -> bool:
    """Does stage `index` run its own `select`? Unless the contract says the stage before it selects
    it (`selectsNext`: `record-and-select`, steps/hand_over.py; the rule is
    `orchestrator.planning.contract.opens_itself`)."""
    return index == 0 or contract.stages[index - 1].selects_next != contract.stages[index].name


def _stage_template(
    stage: Stage,
    task_name: str,
    size: StageContract,
    *,
    opens: bool = True,
    next_stage: str | None = None,
    next_batches: int = 0,
    waits: bool = False,
) -> Template:
    """One stage's DAG. `opens`: it selects its own clusters (else they come in as the input
    `targets`, or from the status for a stage in batches); `next_stage`: its closing step selects
    that stage too, and the DAG's output `targets` carries them (unless that stage runs in batches);
    `waits`: it first waits for other ProgressiveSyncs (`wait-for-dependencies`, spec.dependsOn)."""
    batches = size.batches
    stage_ref = "{{inputs.parameters." + pieces.STAGE_INPUT + "}}"
    stage_arg = Arguments(parameters=[_parameter(pieces.STAGE_INPUT, stage_ref)])
    tasks: list[DAGTask] = []
    previous: list[str] = []
    inputs = [ModelParameter(name=pieces.STAGE_INPUT)]
    if waits:
        tasks.append(
            DAGTask(
                name=names.WAIT_FOR_DEPENDENCIES_TASK,
                template=names.WAIT_FOR_DEPENDENCIES_TEMPLATE,
                arguments=stage_arg,
            )
        )
        previous = [names.WAIT_FOR_DEPENDENCIES_TASK]
    if stage.approval is ApprovalMode.MANUAL:
        tasks.append(
            DAGTask(
                name=names.APPROVE_TASK,
                template=names.APPROVAL_TEMPLATE,
                arguments=stage_arg,
                dependencies=previous or None,
            )
        )
        previous = [names.APPROVE_TASK]
    if opens:
        tasks.append(
            DAGTask(
                name=names.SELECT_TASK,
                template=names.SELECT_FOR_BATCHES_TEMPLATE if batches else names.SELECT_TEMPLATE,
                # It starts the syncs of the first wave (the contract's `startSyncs`).
                arguments=stage_arg,
                dependencies=previous or None,
            )
        )
        previous = [names.SELECT_TASK]
        targets = "{{tasks." + names.SELECT_TASK + ".outputs.parameters." + pieces.TARGETS_OUTPUT + "}}"
    else:
        targets = "{{inputs.parameters." + TARGETS_INPUT + "}}"
        if not batches:
            inputs.append(ModelParameter(name=TARGETS_INPUT))
    fanout_arguments = [_parameter(pieces.STAGE_INPUT, stage_ref)]
    if not batches:
        fanout_arguments.append(_parameter(TARGETS_INPUT, targets))
    tasks.append(
        DAGTask(
            name=names.CLUSTERS_TASK,
            template=names.fanout_template_name(task_name),
            dependencies=previous or None,
            arguments=Arguments(parameters=fanout_arguments),
            # A failed cluster fails the fan-out (a lost one errors it); record still closes the stage.
            continue_on=ContinueOn(failed=True, error=True),
        )
    )
    closing_after = [names.CLUSTERS_TASK]
    analysis = size.analysis
    if analysis is not None and analysis.after_healthy and not _analyzed_per_cluster(size):
        # The gate of the whole stage (or, in batches, every cluster's run from one node), after its
        # clusters; a failed analysis still lets the closing step close the stage.
        gate = _analysis_tasks(
            analysis,
            stage=stage_ref,
            cluster="",
            when=AnalysisWhen.AFTER_HEALTHY,
            after=closing_after,
            keep_going=True,
        )
        tasks += gate
        closing_after = [gate[-1].name]
    outputs = None
    if next_stage is None:
        close = DAGTask(
            name=names.RECORD_TASK,
            template=names.RECORD_TEMPLATE,
            arguments=stage_arg,
            dependencies=closing_after,
        )
    else:
        close = DAGTask(
            name=names.RECORD_AND_SELECT_TASK,
            template=names.RECORD_AND_SELECT_FOR_BATCHES_TEMPLATE
            if next_batches
            else names.RECORD_AND_SELECT_TEMPLATE,
            arguments=Arguments(
                parameters=[
                    _parameter(pieces.STAGE_INPUT, stage_ref),
                    _parameter(pieces.NEXT_STAGE_INPUT, next_stage),
                ]
            ),
            dependencies=closing_after,
        )
        if not next_batches:
            # Argo sets a DAG's outputs only when it Succeeded: a failed stage hands nothing on.
            handed = (
                "{{tasks." + names.RECORD_AND_SELECT_TASK + ".outputs.parameters." + pieces.TARGETS_OUTPUT
            )
            outputs = Outputs(
                parameters=[
                    ModelParameter(name=pieces.TARGETS_OUTPUT, value_from=ValueFrom(parameter=handed + "}}"))
                ]
            )
    tasks.append(close)
    if stage.bake_seconds and size.targets and analysis is not None and analysis.during_bake:
        # The bake is the analysis' background run: it ends with the bake (Successful unless a metric
        # failed), or fails the stage the moment a metric fails (steps/analyze.py).
        tasks += _analysis_tasks(
            analysis,
            stage=stage_ref,
            cluster="",
            when=AnalysisWhen.DURING_BAKE,
            after=[names.RECORD_TASK],
            keep_going=False,
            name=names.BAKE_TASK,
        )
    elif stage.bake_seconds and size.targets:
        # After record: only a stage that succeeded bakes (record exits 1 on a failed one).
        tasks.append(
            DAGTask(
                name=names.BAKE_TASK,
                template=names.bake_template_name(stage.bake_seconds),
                dependencies=[names.RECORD_TASK],
            )
        )
    display_name = names.display_name_for(stage.name, task_name)
    return Template(
        name=names.stage_template_name(task_name),
        annotations={names.DISPLAY_NAME_ANNOTATION: display_name} if display_name else None,
        inputs=Inputs(parameters=inputs),
        outputs=outputs,
        dag=DAGTemplate(tasks=tasks),
    )


def _entry_template(
    stages: list[Stage],
    task_names: list[str],
    handed_targets: list[bool],
    *,
    max_parallel_groups: int | None = None,
    follower: bool = False,
) -> list[Template]:
    """One task per stage, each after the one before; `handed_targets[i]`: stage i takes its
    targets from the output of stage i-1 (selected by that stage's `record-and-select`).

    With groups ("<group>/<stage>" names, spec.groupBy) the entrypoint has one task per group
    instead, each running its group's chain of stages in a DAG of its own (`group-<group>`), side by
    side: `failFast: false`, so a failed group lets the others run to their end (Argo's default fails
    the DAG at the first failed branch, v3.7 dag.go assessDAGPhase) and the entrypoint ends Failed
    once every group ended, when any failed; `parallelism` is maxParallelGroups (Argo counts the
    running group DAG nodes, v3.7 getActiveChildren).

    `follower`: the entrypoint also runs the rollout follower (steps/follow.py) beside the stages,
    with no dependency, `continueOn` failed and error (it never fails the rollout); not with groups."""
    tasks_of: dict[str | None, list[DAGTask]] = {}
    for index, (stage, task_name) in enumerate(zip(stages, task_names, strict=True)):
        parameters = [_parameter(pieces.STAGE_INPUT, stage.name)]
        if handed_targets[index]:
            before = task_names[index - 1]
            parameters.append(
                _parameter(
                    TARGETS_INPUT, "{{tasks." + before + ".outputs.parameters." + pieces.TARGETS_OUTPUT + "}}"
                )
            )
        group = split_stage_name(stage.name)[0]
        chain = tasks_of.setdefault(group, [])
        chain.append(
            DAGTask(
                name=task_name,
                template=names.stage_template_name(task_name),
                arguments=Arguments(parameters=parameters),
                dependencies=[chain[-1].name] if chain else None,
            )
        )
    if list(tasks_of) == [None]:
        tasks = list(tasks_of[None])
        if follower:
            tasks.append(
                DAGTask(
                    name=names.FOLLOW_TASK,
                    template=names.FOLLOW_TEMPLATE,
                    continue_on=ContinueOn(failed=True, error=True),
                )
            )
        return [Template(name=names.ENTRYPOINT, dag=DAGTemplate(tasks=tasks))]
    groups = [group for group in tasks_of if group is not None]
    group_tasks = names.stage_task_names(groups, reserved=task_names)
    templates = [
        Template(
            name=names.ENTRYPOINT,
            parallelism=max_parallel_groups,
            dag=DAGTemplate(
                fail_fast=False,
                tasks=[DAGTask(name=task, template=names.group_template_name(task)) for task in group_tasks],
            ),
        )
    ]
    for group, task in zip(groups, group_tasks, strict=True):
        display_name = names.display_name_for(group, task)
        templates.append(
            Template(
                name=names.group_template_name(task),
                annotations={names.DISPLAY_NAME_ANNOTATION: display_name} if display_name else None,
                dag=DAGTemplate(tasks=tasks_of[group]),
            )
        )
    return templates


def runs_follower(ps: ProgressiveSync, contract: RolloutContract, settings: WorkflowSettings) -> bool:
    """Whether the Workflow runs the rollout follower (steps/follow.py): the setting is on, the
    spec has no groupBy (the entrypoint then runs groups under maxParallelGroups) and a stage of
    the contract is one it follows (`orchestrator.planning.follow.followed`)."""
    return settings.follower and ps.spec.group_by is None and followed(contract)


def _short_revision(revision: str) -> str:
    """A Git commit as people quote it (7 hex digits); anything else (a chart version) as it is."""
    return revision[:7] if re.fullmatch(r"[0-9a-f]{40}", revision) else revision


def _title(ps_name: str, release: Release) -> str:
    """The Argo UI's list shows this first, in a narrow column: what rolls out, short.

    `myservice: 4f1c2e9`; several revision sets as `4f1c2e9 +1`; a retry of the same release
    as `(attempt 2)`.
    """
    first, *more = [",".join(map(_short_revision, revisions)) for revisions in release.revisions]
    title = f"{ps_name}: {first}" + (f" +{len(more)}" if more else "")
    return title + (f" (attempt {release.attempt})" if release.attempt > 1 else "")


def _describe(ps: ProgressiveSync, release: Release, contract: RolloutContract) -> str:
    """The stages in order with their sizes, then the full revisions (the list shows its start)."""
    parts = []
    for stage, size in zip(ps.spec.stages, contract.stages, strict=True):
        details = [f"{size.targets} cluster" + ("" if size.targets == 1 else "s")]
        if size.max_parallel < size.targets:
            details.append(f"{size.max_parallel} at a time")
        batches = size.batches
        if batches:
            details.append(f"in {batches} batch" + ("" if batches == 1 else "es"))
        if stage.approval is ApprovalMode.MANUAL:
            window = size.approval_window_seconds
            details.append(f"manual approval within {window}s" if window else "manual approval")
        if stage.bake_seconds:
            details.append(f"bake {stage.bake_seconds}s")
        if size.analysis is not None:
            scope = " per cluster" if size.analysis.per_cluster else ""
            moments = " and ".join(moment.value for moment in size.analysis.when)
            details.append(f"analysis {size.analysis.label}{scope} {moments}")
        parts.append(f"{stage.name} ({', '.join(details)})")
    chains: dict[str | None, list[str]] = {}
    for stage, part in zip(ps.spec.stages, parts, strict=True):
        chains.setdefault(split_stage_name(stage.name)[0], []).append(part)
    stages = "; ".join(" -> ".join(chain) for chain in chains.values())
    if ps.spec.group_by is not None:
        # One chain per group, side by side (docs/groups.md).
        at_once = ps.spec.max_parallel_groups or len(chains)
        stages = (
            f"{len(chains)} groups by {ps.spec.group_by}, {min(at_once, len(chains))} at a time: {stages}"
        )
    described = f"{stages}. Revision {release.display}, rollout {release.rollout_id}."
    if contract.rollback is not None:
        described += f" Rollback on {', '.join(contract.rollback.on)} ({contract.rollback.scope})."
    said: set[str] = set()
    for dependency in contract.depends_on or ():
        passes = f"passes {dependency.stage}" if dependency.stage else "succeeds"
        group, waits = split_stage_name(dependency.before_stage)
        sentence = (
            f" {waits}{' of each group' if group is not None else ''} waits until {dependency.name} {passes}."
        )
        if sentence not in said:  # with groups, once for every group (each waits on its own)
            said.add(sentence)
            described += sentence
    return described


def build_workflow(
    ps: ProgressiveSync,
    *,
    release: Release,
    plan: RolloutPlan | StageSizes,
    settings: WorkflowSettings,
) -> Workflow:
    """The Workflow that runs `release` (the attempt it names) of `ps`.

    `plan` is the planner's RolloutPlan of the fleet now (it resolves percentage maxParallel and
    sizes the deadline), or ready-made StageSizes (render without a fleet, tests). The release's
    identity goes into the Workflow's annotations (`orchestrator.api.metadata.rollout_annotations`,
    so a restarted watcher rebuilds the rollout's status from the Workflow alone); the rollout
    contract (`contract_for`: the rollout id, the release's revisions as data, each stage's sizing)
    is made once here, every number of the Workflow is taken from it, and it is the Workflow's
    `contract` argument, which every step reads.
    Raises WorkflowBuildError when the plan does not match the spec or the Workflow would be too big.
    """
    contract = contract_for(ps, release=release, plan=plan, settings=settings)
    return build_workflow_of_contract(ps, release=release, contract=contract, settings=settings)


def _shared_templates(
    ps: ProgressiveSync,
    contract: RolloutContract,
    settings: WorkflowSettings,
    stages: list[Stage],
    task_names: list[str],
    *,
    bake_seconds: list[int],
    hand_overs: set[bool],
    follower: bool,
) -> list[Any]:
    """The templates the stages share: the steps, and those only some rollouts need (batches,
    hand-overs, bakes, analysis, dependencies, the follower, the rollback branch)."""
    sized = contract.stages
    templates: list[Any] = list(pieces.reusable_templates(settings))
    if any(size.batches for size in sized):
        templates += pieces.batch_templates(settings)
    templates += [pieces.hand_over_template(settings, next_in_batches=kind) for kind in sorted(hand_overs)]
    templates += [pieces.bake_template(seconds) for seconds in bake_seconds]
    if any(size.analysis is not None for size in sized):
        templates += pieces.analysis_templates(settings)
    if contract.depends_on:
        templates += pieces.dependency_templates(settings)
    if follower:
        templates.append(pieces.follow_template(settings))
    if contract.rollback is not None:
        templates += rollback.exit_templates(
            stages, task_names, contract, max_parallel_groups=ps.spec.max_parallel_groups
        )
        templates += pieces.rollback_templates(settings, stages=len(stages))
    elif exit_handler.skips_on_success(contract):
        templates.append(exit_handler.finalize_only_template())
    return templates


def build_workflow_of_contract(
    ps: ProgressiveSync, *, release: Release, contract: RolloutContract, settings: WorkflowSettings
) -> Workflow:
    """The Workflow that runs `release` of `ps` by this rollout contract (`build_workflow` makes the
    contract from a plan first). WorkflowBuildError when the Workflow would be too big."""
    rollout_id = release.rollout_id
    ps = _run_by(ps, [stage.name for stage in contract.stages])
    node_count = estimate_nodes(ps, contract)
    if node_count > settings.max_nodes:
        per_cluster = [s.name for s in contract.stages if not s.batches]
        advice = (
            f"lower the batch threshold (now {settings.batch_threshold} clusters, "
            "PROGRESSIVE_SYNC_WORKFLOW_BATCH_THRESHOLD) so that stage(s) "
            + ", ".join(map(repr, per_cluster[:5]))
            + " run in batches, "
            if per_cluster
            else ""
        )
        raise WorkflowBuildError(
            f"the rollout would make about {node_count} Workflow nodes, above the limit of "
            f"{settings.max_nodes} ({len(ps.spec.stages)} stages{_rollback_share(contract)}); "
            f"{advice}raise the batch size (now "
            f"{settings.batch_clusters} clusters per batch, PROGRESSIVE_SYNC_WORKFLOW_BATCH_CLUSTERS), "
            "use fewer stages, or raise the limit (PROGRESSIVE_SYNC_WORKFLOW_MAX_NODES)"
        )
    meta = ps.metadata
    namespace = meta.namespace
    stages = list(ps.spec.stages)
    task_names = names.stage_task_names(stage.name for stage in stages)
    sized = contract.stages
    bake_seconds = sorted(
        {
            stage.bake_seconds
            for stage, size in zip(stages, sized, strict=True)
            if stage.bake_seconds and size.targets and not (size.analysis and size.analysis.during_bake)
        }
    )
    batch_counts = [size.batches for size in sized]
    opens = [opens_itself(contract, index) for index in range(len(stages))]
    handed_targets = [not opens[i] and not batch_counts[i] for i in range(len(stages))]
    follower = runs_follower(ps, contract, settings)
    templates: list[Any] = _entry_template(
        stages, task_names, handed_targets, max_parallel_groups=ps.spec.max_parallel_groups, follower=follower
    )
    hand_overs: set[bool] = set()  # whether the next stage runs in batches, per hand-over kind used
    for index, (stage, task_name) in enumerate(zip(stages, task_names, strict=True)):
        size = sized[index]
        batches = batch_counts[index]
        hands_over = index + 1 < len(stages) and not opens[index + 1]
        if hands_over:
            hand_overs.add(bool(batch_counts[index + 1]))
        templates.append(
            _stage_template(
                stage,
                task_name,
                size,
                opens=opens[index],
                next_stage=stages[index + 1].name if hands_over else None,
                next_batches=batch_counts[index + 1] if hands_over else 0,
                waits=bool(contract.dependencies_before(stage.name)),
            )
        )
        if batches:
            templates.append(_batch_fanout_template(task_name, batches))
        else:
            templates.append(_fanout_template(task_name, size))
        if _analyzed_per_cluster(size) and size.analysis is not None:
            templates.append(_analyzed_cluster_template(task_name, size.analysis))
    templates += _shared_templates(
        ps,
        contract,
        settings,
        stages,
        task_names,
        bake_seconds=bake_seconds,
        hand_overs=hand_overs,
        follower=follower,
    )

    annotations = {
        names.TITLE_ANNOTATION: _title(meta.name, release),
        names.DESCRIPTION_ANNOTATION: _describe(ps, release, contract),
        **rollout_annotations(release),
    }
    if label_value(meta.name) != meta.name:
        annotations[NAME_ANNOTATION] = meta.name
    owner_references = None
    if meta.uid:
        owner_references = [
            OwnerReference(api_version=API_VERSION, kind=KIND, name=meta.name, uid=meta.uid, controller=True)
        ]
    return Workflow(
        api_version="argoproj.io/v1alpha1",
        kind="Workflow",
        name=workflow_name(meta.name, rollout_id),
        namespace=namespace,
        labels={NAME_LABEL: label_value(meta.name), ROLLOUT_ID_LABEL: rollout_id},
        annotations=annotations,
        owner_references=owner_references,
        entrypoint=names.ENTRYPOINT,
        on_exit=exit_handler.on_exit(contract),
        service_account_name=settings.service_account,
        active_deadline_seconds=active_deadline_seconds(ps, contract, settings),
        synchronization=Synchronization(mutexes=[Mutex(name=f"progressivesync-{label_value(meta.name)}")]),
        pod_gc=PodGC(strategy="OnPodSuccess"),
        arguments=[
            Parameter(name=names.PARAM_PROGRESSIVE_SYNC, value=meta.name),
            Parameter(name=names.PARAM_ARGOCD_NAMESPACE, value=settings.argocd_namespace or namespace or ""),
            Parameter(name=names.PARAM_CONTRACT, value=contract.to_json()),
        ],
        templates=templates,
    )


def _rollback_share(contract: RolloutContract) -> str:
    """`, 2013 of them for the rollback` when the rollback branch counts (batches do not shrink it:
    it restores one pod per cluster), else nothing."""
    nodes = rollback.rollback_nodes(contract)
    return f", {nodes} of them for the rollback" if nodes else ""


def workflow_object(workflow: Workflow) -> dict[str, Any]:
    """The Workflow as the JSON object the API server takes (what the watcher creates)."""
    return workflow.to_dict()  # type: ignore[no-any-return]
