"""The reusable pieces of the rollout Workflow, and the WorkflowTemplates that publish them.

Each step of docs/design/CONTRACTS.md is one container template running `python -m steps <step> ...`;
`cluster` is the one pod per cluster (sync, then wait-healthy, in one process); `approval` is the
manual gate (a suspend without duration); `bake-<N>s` waits N seconds; `rollback-plan` and
`rollback` are the exit handler's rollback branch (`rollback_templates`). `build_workflow`
(builder.py) inlines the ones a rollout runs into every Workflow; `workflow_templates()` wraps
every step into the WorkflowTemplates committed as YAML next to this file (the chart installs
them), `sync` and `wait-healthy` too, for people who run one of them by hand.

Why inline rather than `templateRef`: Argo resolves a templateRef when each node starts, so a chart
upgrade in the middle of a rollout would run some clusters with the old steps and some with the
new; and the image, resources and retry policy would live in the chart while the watcher builds the
Workflow. Inlined, a Workflow is a complete record of what ran, `render` shows all of it, `argo
lint --offline` and the local executor need nothing from the cluster, and the cost is a few kB per
Workflow. The WorkflowTemplates serve people: `argo submit --from workflowtemplate/
progressive-sync-cluster -p ...` re-syncs one cluster by hand with the very same steps, and other
Workflows can reuse the steps by templateRef.

Every step container gets the rollout's identity through its environment (`PROGRESSIVE_SYNC_*`,
read by the steps as their options), from Workflow parameters, so the templates are the same for
every rollout and every ProgressiveSync: the ProgressiveSync's name, the Argo CD namespace and the
rollout contract (`PROGRESSIVE_SYNC_CONTRACT` from `{{workflow.parameters.contract}}`: the rollout
id, the release and every stage's sizing, `orchestrator.planning.contract`). A template passes a
step only what differs per node: the stage, the cluster, the batch index, the next stage.
"""

from __future__ import annotations

from dataclasses import dataclass

from hera.workflows import (
    DAG,
    Container,
    EmptyDirVolume,
    Env,
    Parameter,
    Resources,
    RetryStrategy,
    Suspend,
    Task,
    WorkflowTemplate,
)
from hera.workflows.models import (
    Backoff,
    Capabilities,
    SeccompProfile,
    SecurityContext,
    Template,
    TemplateRef,
    ValueFrom,
)
from hera.workflows.protocol import Templatable

from workflow_templates import names
from workflow_templates.settings import WorkflowSettings

STEPS_WORKFLOW_TEMPLATE = "progressive-sync-steps"
CLUSTER_WORKFLOW_TEMPLATE = "progressive-sync-cluster"

# Retried: a temporary error (exit 75, docs/design/CONTRACTS.md), or a node Argo marks Error (its pod was
# lost). `lastRetry.exitCode` is "-1" when a node has none (Argo v3.7 buildRetryStrategyLocalScope),
# so asInt never fails.
RETRY_EXPRESSION = 'lastRetry.status == "Error" || asInt(lastRetry.exitCode) == 75'

TARGETS_OUTPUT = "targets"
STAGE_INPUT = "stage"
NEXT_STAGE_INPUT = "next-stage"
CLUSTER_INPUT = "cluster"
BATCH_INPUT = "batch"
WHEN_INPUT = "when"
VERDICT_OUTPUT = "verdict"
# What the exit handler's steps are told: which Workflow ended, and how (Argo's `workflow.status`).
EXIT_ARGS = ("--workflow-name", "{{workflow.name}}", "--workflow-status", "{{workflow.status}}")
# The analyze step's --rollouts-instance-id, as every step's environment carries it (steps/cli.py).
ROLLOUTS_INSTANCE_ID_ENV = "PROGRESSIVE_SYNC_ROLLOUTS_INSTANCE_ID"


def _workflow_parameter(name: str) -> str:
    return "{{workflow.parameters." + name + "}}"


def _input(name: str) -> str:
    return "{{inputs.parameters." + name + "}}"


@dataclass(kw_only=True)
class StepContainer(Container):
    """A container template that may carry template annotations.

    Hera's `annotations` are the pod's (`metadata.annotations`); Argo reads a node's display name
    from the template's own `annotations` field, which `template_annotations` fills.
    """

    template_annotations: dict[str, str] | None = None

    def _build_template(self) -> Template:
        template = super()._build_template()
        if self.template_annotations:
            template.annotations = dict(self.template_annotations)
        return template


def step_env(settings: WorkflowSettings) -> list[Env]:
    """The environment of every step: the CONTRACTS.md options that are the same for a whole rollout."""
    env = [
        Env(name="PROGRESSIVE_SYNC_NAMESPACE", value="{{workflow.namespace}}"),
        Env(name="PROGRESSIVE_SYNC_NAME", value=_workflow_parameter(names.PARAM_PROGRESSIVE_SYNC)),
        Env(
            name="PROGRESSIVE_SYNC_ARGOCD_NAMESPACE", value=_workflow_parameter(names.PARAM_ARGOCD_NAMESPACE)
        ),
        Env(name="PROGRESSIVE_SYNC_CONTRACT", value=_workflow_parameter(names.PARAM_CONTRACT)),
        Env(name="PROGRESSIVE_SYNC_OUTPUTS_DIR", value=settings.outputs_dir),
    ]
    if settings.rollouts_instance_id:
        env.append(Env(name=ROLLOUTS_INSTANCE_ID_ENV, value=settings.rollouts_instance_id))
    env.extend(Env(name=key, value=value) for key, value in settings.extra_env)
    return env


def retry_strategy(settings: WorkflowSettings) -> RetryStrategy:
    """Retry temporary errors only (exit 75, a lost pod); a failure (exit 1) is final."""
    return RetryStrategy(
        limit=settings.retry_limit,
        retry_policy="Always",
        expression=RETRY_EXPRESSION,
        backoff=Backoff(
            duration=settings.retry_backoff,
            factor=settings.retry_factor,
            cap=settings.retry_backoff_cap,
        ),
    )


def _resources(settings: WorkflowSettings) -> Resources:
    r = settings.resources
    return Resources(
        cpu_request=r.cpu_request or None,
        memory_request=r.memory_request or None,
        cpu_limit=r.cpu_limit or None,
        memory_limit=r.memory_limit or None,
    )


OUTPUTS_VOLUME = "outputs"


def step_security_context(settings: WorkflowSettings) -> SecurityContext:
    """The step container's hardening: what the watcher's own container has (docs/security.md)."""
    return SecurityContext(
        run_as_non_root=True,
        run_as_user=settings.run_as_user,
        read_only_root_filesystem=True,
        allow_privilege_escalation=False,
        capabilities=Capabilities(drop=["ALL"]),
        seccomp_profile=SeccompProfile(type="RuntimeDefault"),
    )


def _step(
    name: str,
    args: list[str],
    settings: WorkflowSettings,
    *,
    inputs: tuple[str, ...] = (),
    outputs: tuple[str, ...] = (),
    output_default: str | None = None,
    display_input: str | None = None,
) -> StepContainer:
    display = None
    if display_input:
        display = {names.DISPLAY_NAME_ANNOTATION: names.display_name_of_input(display_input)}
    return StepContainer(
        name=name,
        template_annotations=display,
        image=settings.image,
        image_pull_policy=settings.image_pull_policy,
        command=list(settings.command),
        args=[name, *args],
        env=step_env(settings),
        resources=_resources(settings),
        security_context=step_security_context(settings),
        volumes=[EmptyDirVolume(name=OUTPUTS_VOLUME, mount_path=settings.outputs_dir)],
        inputs=[Parameter(name=item) for item in inputs] or None,
        outputs=[
            Parameter(
                name=item, value_from=ValueFrom(path=f"{settings.outputs_dir}/{item}", default=output_default)
            )
            for item in outputs
        ]
        or None,
        retry_strategy=retry_strategy(settings),
    )


def step_templates(settings: WorkflowSettings) -> list[StepContainer]:
    """The step containers of docs/design/CONTRACTS.md, in contract order."""
    stage = ("--stage", _input(STAGE_INPUT))
    cluster = ("--cluster", _input(CLUSTER_INPUT))
    per_cluster = (STAGE_INPUT, CLUSTER_INPUT)
    # The release, each stage's size and its first wave come from the rollout contract in the
    # environment (step_env), never from a template parameter.
    return [
        _step(names.SELECT_TEMPLATE, [*stage], settings, inputs=(STAGE_INPUT,), outputs=(TARGETS_OUTPUT,)),
        _step(names.SYNC_TEMPLATE, [*stage, *cluster], settings, inputs=per_cluster),
        _step(names.WAIT_HEALTHY_TEMPLATE, [*stage, *cluster], settings, inputs=per_cluster),
        # Its node shows the cluster's name in the Argo UI (names.display_name_of_input).
        _step(
            names.CLUSTER_TEMPLATE,
            [*stage, *cluster],
            settings,
            inputs=per_cluster,
            display_input=CLUSTER_INPUT,
        ),
        _step(
            names.BATCH_TEMPLATE,
            [*stage, "--batch", _input(BATCH_INPUT)],
            settings,
            inputs=(STAGE_INPUT, BATCH_INPUT),
        ),
        _step(names.RECORD_TEMPLATE, [*stage], settings, inputs=(STAGE_INPUT,)),
        _step(
            names.RECORD_AND_SELECT_TEMPLATE,
            [*stage, "--next-stage", _input(NEXT_STAGE_INPUT)],
            settings,
            inputs=(STAGE_INPUT, NEXT_STAGE_INPUT),
            outputs=(TARGETS_OUTPUT,),
        ),
        # The analysis gate: `--cluster ""` runs the stage's analysis; its `verdict` output opens the
        # approve-analysis gate when it says Inconclusive (steps/analyze.py).
        _step(
            names.ANALYZE_TEMPLATE,
            [*stage, *cluster, "--when", _input(WHEN_INPUT)],
            settings,
            inputs=(STAGE_INPUT, CLUSTER_INPUT, WHEN_INPUT),
            outputs=(VERDICT_OUTPUT,),
        ),
        _step(names.FINALIZE_TEMPLATE, [*EXIT_ARGS], settings),
        # The rollback branch (rollback_templates): the decision, then one pod per cluster restored.
        # In the library rollback-plan declares no outputs: a Workflow's copy declares one per stage.
        _step(names.ROLLBACK_PLAN_TEMPLATE, [*EXIT_ARGS], settings),
        _step(
            names.ROLLBACK_TEMPLATE,
            [*stage, *cluster],
            settings,
            inputs=per_cluster,
            display_input=CLUSTER_INPUT,
        ),
        _step(
            names.ROLLBACK_BATCH_TEMPLATE,
            [*stage, "--batch", _input(BATCH_INPUT)],
            settings,
            inputs=(STAGE_INPUT, BATCH_INPUT),
        ),
    ]


# The steps every rollout Workflow runs (sync and wait-healthy run inside `cluster`); a Workflow
# with a stage in batches also gets `batch_templates`.
ROLLOUT_STEPS = (
    names.SELECT_TEMPLATE,
    names.CLUSTER_TEMPLATE,
    names.RECORD_TEMPLATE,
    names.FINALIZE_TEMPLATE,
)


def select_for_batches_template(settings: WorkflowSettings) -> Container:
    """`select` for a stage that runs in batches: its `targets` output is not declared.

    Argo keeps a declared output parameter in the Workflow's node status; the targets of a stage
    of thousands of clusters would take hundreds of kB there. The batch pods read the targets
    `select` records in the ProgressiveSync status instead.
    """
    step = next(s for s in step_templates(settings) if s.name == names.SELECT_TEMPLATE)
    step.outputs = None
    step.name = names.SELECT_FOR_BATCHES_TEMPLATE
    return step


def hand_over_template(settings: WorkflowSettings, *, next_in_batches: bool) -> Container:
    """`record-and-select` (steps/hand_over.py), or for a next stage in batches its variant without
    the `targets` output (see `select_for_batches_template`)."""
    step = next(s for s in step_templates(settings) if s.name == names.RECORD_AND_SELECT_TEMPLATE)
    if next_in_batches:
        step.outputs = None
        step.name = names.RECORD_AND_SELECT_FOR_BATCHES_TEMPLATE
    return step


def batch_templates(settings: WorkflowSettings) -> list[Templatable]:
    """What a Workflow with a stage in batches inlines besides `reusable_templates`."""
    batch = next(step for step in step_templates(settings) if step.name == names.BATCH_TEMPLATE)
    return [select_for_batches_template(settings), batch]


def dependency_templates(settings: WorkflowSettings) -> list[Templatable]:
    """What a Workflow with a stage that waits for other ProgressiveSyncs inlines (spec.dependsOn):
    `wait-for-dependencies` (steps/depends.py). Not in the library WorkflowTemplate: it means
    something only inside a rollout whose contract has `dependsOn`."""
    return [
        _step(
            names.WAIT_FOR_DEPENDENCIES_TEMPLATE,
            ["--stage", _input(STAGE_INPUT)],
            settings,
            inputs=(STAGE_INPUT,),
        )
    ]


def follow_template(settings: WorkflowSettings) -> Templatable:
    """The rollout follower (steps/follow.py), inlined only into a Workflow that runs it. No
    retryStrategy: it always exits 0, and a lost follower only loses speed (its task has continueOn)."""
    step = _step(names.FOLLOW_TEMPLATE, [], settings)
    step.retry_strategy = None
    return step


def analysis_templates(settings: WorkflowSettings) -> list[Templatable]:
    """What a Workflow with an analysis gate inlines besides `reusable_templates`."""
    return [step for step in step_templates(settings) if step.name == names.ANALYZE_TEMPLATE]


def rollback_templates(settings: WorkflowSettings, *, stages: int) -> list[Templatable]:
    """What a Workflow with a rollback inlines: `rollback-plan`, with two outputs per stage index
    (`rollback-<i>`, the JSON list of that stage's clusters to restore one pod each, and
    `rollback-batches-<i>`, its `rollback-batch` pods; `[]` when the file is missing, so a plan that
    restores nothing there need not write it), `rollback` and `rollback-batch`."""
    plan = _step(
        names.ROLLBACK_PLAN_TEMPLATE,
        [*EXIT_ARGS],
        settings,
        outputs=tuple(
            output
            for index in range(stages)
            for output in (names.rollback_output(index), names.rollback_batches_output(index))
        ),
        output_default="[]",
    )
    rollback = [
        step
        for step in step_templates(settings)
        if step.name in (names.ROLLBACK_TEMPLATE, names.ROLLBACK_BATCH_TEMPLATE)
    ]
    return [plan, *rollback]


def approval_template() -> Suspend:
    """The manual gate: waits until resumed (`argo resume`, `progressive-sync approve`)."""
    return Suspend(name=names.APPROVAL_TEMPLATE, inputs=[Parameter(name=STAGE_INPUT)])


def bake_template(seconds: int) -> Suspend:
    """Waits `seconds` after a stage before the next one (resumable early like any suspend)."""
    return Suspend(name=names.bake_template_name(seconds), duration=seconds)


def reusable_templates(settings: WorkflowSettings) -> list[Templatable]:
    """What every rollout Workflow inlines besides its entry, stage and fan-out templates."""
    steps = [step for step in step_templates(settings) if step.name in ROLLOUT_STEPS]
    return [approval_template(), *steps]


def _rollout_parameters(*extra: str) -> list[Parameter]:
    declared = (
        names.PARAM_PROGRESSIVE_SYNC,
        names.PARAM_ARGOCD_NAMESPACE,
        names.PARAM_CONTRACT,
        *extra,
    )
    return [Parameter(name=name) for name in declared]


def steps_workflow_template(settings: WorkflowSettings) -> WorkflowTemplate:
    """`progressive-sync-steps`: the step containers and the approval gate.

    A library without an entrypoint; it declares the Workflow parameters the steps read.
    """
    return WorkflowTemplate(
        name=STEPS_WORKFLOW_TEMPLATE,
        labels={"app.kubernetes.io/part-of": "progressive-sync"},
        annotations={
            names.TITLE_ANNOTATION: "progressive-sync steps",
            names.DESCRIPTION_ANNOTATION: (
                "The steps of a progressive-sync rollout (select, sync, wait-healthy, cluster, batch, "
                "record, record-and-select, analyze, finalize, rollback-plan, rollback, rollback-batch) "
                "and the approval gate, for templateRef."
            ),
        },
        service_account_name=settings.service_account,
        arguments=_rollout_parameters(),
        templates=[approval_template(), *step_templates(settings)],
    )


def cluster_workflow_template(settings: WorkflowSettings) -> WorkflowTemplate:
    """`progressive-sync-cluster`: sync one cluster and wait until it is healthy, by hand.

    `argo submit --from workflowtemplate/progressive-sync-cluster -p progressive-sync=NAME
    -p argocd-namespace=NS -p contract="$(cat contract.json)" -p stage=STAGE -p cluster=CLUSTER`
    (the contract: orchestrator.planning.contract; a running rollout's is its Workflow's argument).
    """
    entry = DAG(
        name="main",
        tasks=[
            Task(
                name="cluster",
                template_ref=TemplateRef(name=STEPS_WORKFLOW_TEMPLATE, template=names.CLUSTER_TEMPLATE),
                arguments=[
                    Parameter(name=STAGE_INPUT, value=_workflow_parameter(STAGE_INPUT)),
                    Parameter(name=CLUSTER_INPUT, value=_workflow_parameter(CLUSTER_INPUT)),
                ],
            )
        ],
    )
    return WorkflowTemplate(
        name=CLUSTER_WORKFLOW_TEMPLATE,
        labels={"app.kubernetes.io/part-of": "progressive-sync"},
        annotations={
            names.TITLE_ANNOTATION: "progressive-sync: one cluster",
            names.DESCRIPTION_ANNOTATION: (
                "Sync one cluster's Applications to a revision and wait until they are healthy."
            ),
        },
        entrypoint="main",
        service_account_name=settings.service_account,
        arguments=_rollout_parameters(STAGE_INPUT, CLUSTER_INPUT),
        templates=[entry],
    )


def workflow_templates(settings: WorkflowSettings) -> list[WorkflowTemplate]:
    """Every WorkflowTemplate the chart installs, in file order."""
    return [steps_workflow_template(settings), cluster_workflow_template(settings)]
