"""The rollback branch of the rollout Workflow: its exit handler when the contract has a `rollback`.

Called by `builder.build_workflow_of_contract` (and its node count by `builder.estimate_nodes`).
Without the contract's `rollback` nothing here is used and the exit handler is `finalize` alone,
as it always was. With it, `onExit` is the DAG `exit` (docs/design/workflow.md, The rollback branch):

    exit (DAG)
    ├── rollback-plan                  decides; outputs `rollback-<i>` and `rollback-batches-<i>`
    │                                  per stage index (default [])
    ├── rollback-<stage N-1>           the last stage first, each after the one before it: a fan-out
    │   ├── rollback (loop)            one `rollback` pod per cluster of rollback-plan's list, or
    │   └── rollback-batch (loop)      one `rollback-batch` pod per batch index of its other list
    ├── ...                            (a stage in batches has only this loop)
    ├── rollback-<stage 0>
    └── finalize                       last; runs whatever happened before it

When the last stage's `record` records the rollout's end (`endsRollout`), rollback-plan and
finalize run only when the Workflow did not succeed (workflow_templates/exit_handler.py): on a
success every node of the branch is Skipped.

With spec.groupBy (docs/groups.md, "Groups and rollback") the stages' rollbacks are one such chain
per group, each group's later stages first, every chain after rollback-plan, at most
maxParallelGroups side by side (with more groups, a chain waits for the one maxParallelGroups
before it), and finalize after every chain.

No parallelism in the exit handler. Argo v3.7.18's controller exits with `level=fatal` ("was unable
to get child node name", workflow/controller/taskset.go) when template `parallelism` holds back a
task of the exit handler: the DAG adds the task's node id to its parent's children before it checks
the parallelism (dag.go, `connectDependencies`), and after each pass over the exit handler the
controller walks its nodes' children (`nodeRequiresTaskSetReconciliation`), which it cannot do
for a node that was never made. It exits again on the same Workflow after every restart. So no
template here has `parallelism`: rollback-plan never gives a fan-out more items than may run at
once (`orchestrator.planning.rollback.fanout_items`: a pod per cluster up to rollbackParallel, else
rollbackParallel batch pods, each restoring its share one cluster at a time), and groups beyond
maxParallelGroups wait in fixed lanes.

Why each piece is as it is (checked against Argo v3.7.18, workflow/controller/dag.go):

- `rollback-plan` and every `rollback-<stage>` task are `continueOn: {failed, error}`: a task after
  a Failed or Errored one without it is Omitted, and so would be everything after it, finalize too.
- Every `rollback-<stage>` task runs only `when` rollback-plan Succeeded. A plan that could not
  decide must not be half acted on; and a rollback-plan whose last pod was lost (Error) has no
  outputs, and Argo requeues a task whose `{{tasks.X.outputs.parameters.Y}}` does not resolve for
  ever (`resolveDependencyReferences`: ErrRequeue), so the exit handler, and the Workflow, would
  never end. A false `when` is resolved before the arguments, which are then never looked at: the
  task is Skipped, and a Skipped task lets the ones after it run.
- The output `default: "[]"`: Argo's wait container takes the default for a missing file instead
  of failing the pod, so rollback-plan writes a file only for a stage that has something to restore.
- The fan-out is a template of its own, one per stage, so each stage's two loops are one node in
  the Argo UI. An empty list is a Skipped loop node ("Skipped, empty params"), and a fan-out whose
  loops are both Skipped Succeeds.
"""

from __future__ import annotations

from hera.workflows.models import Arguments, ContinueOn, DAGTask, DAGTemplate, Inputs, Template
from hera.workflows.models import Parameter as ModelParameter

from orchestrator.api.groups import split_stage_name
from orchestrator.api.models import Stage
from orchestrator.planning.contract import RolloutContract, StageContract
from orchestrator.planning.sizing import rollback_batch_count
from workflow_templates import exit_handler, names, pieces

# Nominal status nodes of the branch (retries add one per extra attempt): the exit DAG and
# rollback-plan's Retry node and pod; per stage its fan-out DAG and its (at most two) loop nodes
# (TaskGroup, or the Skipped node of an empty list); per pod a Retry node and a pod, at most one pod
# per cluster restored. finalize's two nodes are there with or without rollback (builder.NODES_FIXED).
NODES_ROLLBACK_FIXED = 3
NODES_PER_ROLLBACK_STAGE = 3
NODES_PER_ROLLED_BACK_CLUSTER = 2
TARGETS_INPUT = "targets"
BATCHES_INPUT = "batches"
# The `when` of every rollback-<stage> task: only a plan that Succeeded is acted on.
PLAN_SUCCEEDED = "{{tasks." + names.ROLLBACK_PLAN_TASK + ".status}} == Succeeded"
# A stage's clusters to restore, as rollback-plan decided (`{output}`: names.rollback_output).
PLAN_OUTPUT = "{{{{tasks." + names.ROLLBACK_PLAN_TASK + ".outputs.parameters.{output}}}}}"


def rollback_nodes(contract: RolloutContract) -> int:
    """The most status nodes the branch makes: every cluster of every stage restored (scope Reached
    after a failure in the last stage). 0 without rollback."""
    if contract.rollback is None:
        return 0
    total = NODES_ROLLBACK_FIXED
    for stage in contract.stages:
        batches = _batches(stage)
        pods = batches if batches else stage.targets
        total += NODES_PER_ROLLBACK_STAGE + NODES_PER_ROLLED_BACK_CLUSTER * pods
    return total


def _batches(size: StageContract) -> int:
    """How many batch pods the stage's rollback runs (0: one pod per cluster), as `rollback-plan`
    and `rollback-batch` count them (`sizing.rollback_batch_count`)."""
    return rollback_batch_count(size.batches, size.rollback_parallel or size.max_parallel)


def _parameter(name: str, value: str) -> ModelParameter:
    return ModelParameter(name=name, value=value)


def _loop_task(name: str, template: str, item_input: str, items_input: str) -> DAGTask:
    """A fan-out's loop: one `template` pod per item of its input `items_input` (a JSON list)."""
    return DAGTask(
        name=name,
        template=template,
        with_param="{{inputs.parameters." + items_input + "}}",
        arguments=Arguments(
            parameters=[
                _parameter(pieces.STAGE_INPUT, "{{inputs.parameters." + pieces.STAGE_INPUT + "}}"),
                _parameter(item_input, "{{item}}"),
            ]
        ),
    )


def _fanout_template(stage: Stage, task_name: str, size: StageContract) -> Template:
    """One stage's rollback: a `rollback` pod per cluster of its input `targets`, or a
    `rollback-batch` pod per batch index of its input `batches` (a stage in batches has only the
    second), every item at once: rollback-plan never gives more items than may run at once
    (`fanout_items`), and there is no `parallelism` here (see the module doc)."""
    display_name = names.rollback_display_name(stage.name, task_name)
    loops = [
        _loop_task(
            names.ROLLBACK_BATCH_LOOP_TASK, names.ROLLBACK_BATCH_TEMPLATE, pieces.BATCH_INPUT, BATCHES_INPUT
        )
    ]
    if not _batches(size):
        loops.insert(
            0,
            _loop_task(
                names.ROLLBACK_LOOP_TASK, names.ROLLBACK_TEMPLATE, pieces.CLUSTER_INPUT, TARGETS_INPUT
            ),
        )
    return Template(
        name=task_name,
        annotations={names.DISPLAY_NAME_ANNOTATION: display_name} if display_name else None,
        inputs=Inputs(
            parameters=[
                ModelParameter(name=pieces.STAGE_INPUT),
                ModelParameter(name=TARGETS_INPUT, default="[]"),
                ModelParameter(name=BATCHES_INPUT, default="[]"),
            ]
        ),
        dag=DAGTemplate(tasks=loops),
    )


def _exit_template(
    stages: list[Stage],
    task_names: list[str],
    *,
    max_parallel_groups: int | None = None,
    skip_on_success: bool = False,
) -> Template:
    """The exit handler DAG: rollback-plan, the stages' rollbacks last stage first, finalize. With
    groups ("<group>/<stage>" stages, spec.groupBy) one such chain per group, each after
    rollback-plan; at most maxParallelGroups chains side by side: with more groups, each chain
    waits for the one maxParallelGroups before it (a fixed lane each, not Argo `parallelism`: see
    the module doc), and finalize comes after every chain."""
    keep_going = ContinueOn(failed=True, error=True)
    # On a Workflow that Succeeded with its end recorded by the last `record`, nothing here runs:
    # rollback-plan and finalize are Skipped, and so is every rollback fan-out (PLAN_SUCCEEDED).
    unless = exit_handler.UNLESS_SUCCEEDED if skip_on_success else None
    plan = DAGTask(
        name=names.ROLLBACK_PLAN_TASK,
        template=names.ROLLBACK_PLAN_TEMPLATE,
        continue_on=keep_going,
        when=unless,
    )
    tasks = [plan]
    chains: dict[str | None, list[int]] = {}
    for index, stage in enumerate(stages):
        chains.setdefault(split_stage_name(stage.name)[0], []).append(index)
    lanes = len(chains) if None in chains or not max_parallel_groups else max_parallel_groups
    ends: list[str] = [plan.name] * min(lanes, len(chains))
    for number, chain in enumerate(chains.values()):
        lane = number % len(ends)
        before = ends[lane]
        for index in reversed(chain):
            task = _stage_task(stages[index], task_names[index], index, before, keep_going)
            tasks.append(task)
            before = task.name
        ends[lane] = before
    tasks.append(
        DAGTask(name=names.FINALIZE_TASK, template=names.FINALIZE_TEMPLATE, dependencies=ends, when=unless)
    )
    return Template(name=names.EXIT_TEMPLATE, dag=DAGTemplate(tasks=tasks))


def _stage_task(stage: Stage, task_name: str, index: int, after: str, keep_going: ContinueOn) -> DAGTask:
    """The exit DAG's task that rolls back stage `index` once `after` ended."""
    return DAGTask(
        name=task_name,
        template=task_name,
        dependencies=[after],
        when=PLAN_SUCCEEDED,
        arguments=Arguments(
            parameters=[
                _parameter(pieces.STAGE_INPUT, stage.name),
                _parameter(TARGETS_INPUT, PLAN_OUTPUT.format(output=names.rollback_output(index))),
                _parameter(BATCHES_INPUT, PLAN_OUTPUT.format(output=names.rollback_batches_output(index))),
            ]
        ),
        # A cluster not restored fails its stage's fan-out (a lost pod errors it): the stages
        # before it are still restored, and finalize still runs.
        continue_on=keep_going,
    )


def exit_templates(
    stages: list[Stage],
    stage_task_names: list[str],
    contract: RolloutContract,
    *,
    max_parallel_groups: int | None = None,
) -> list[Template]:
    """The exit DAG and one rollback fan-out per stage, in stage order (the steps they run are
    `pieces.rollback_templates`); `max_parallel_groups` bounds the groups rolling back at once."""
    task_names = names.rollback_task_names(stage_task_names)
    fanouts = [
        _fanout_template(stage, task_name, size)
        for stage, task_name, size in zip(stages, task_names, contract.stages, strict=True)
    ]
    exit_dag = _exit_template(
        stages,
        task_names,
        max_parallel_groups=max_parallel_groups,
        skip_on_success=exit_handler.skips_on_success(contract),
    )
    return [exit_dag, *fanouts]
