"""Names inside the rollout Workflow: Argo's annotations, template, task and parameter names.

Everything here is a pure function of its arguments, shared by the builder (`builder.py`), the
reusable templates (`pieces.py`), the local executor and whoever reads Workflow nodes (the
watcher, `progressive-sync approve`). The Workflow's own name and our labels and annotations on it
are in `orchestrator.api.metadata`. Argo's rules these functions respect (checked against the
argo-workflows v3.7 sources, `workflow/validate` and `workflow/controller/operator.go`):

- template and DAG task names: `[a-zA-Z0-9][-a-zA-Z0-9]*`, at most 128 characters, unique within
  their list; a task name may not start with a digit when the DAG uses dependencies;
- a node display name set through the template annotation `workflows.argoproj.io/display-name`
  must match `^[a-zA-Z0-9][a-zA-Z0-9-.]{0,61}[a-zA-Z0-9]$`, or Argo marks the node Error;
- label values: at most 63 characters, `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from orchestrator.planning.rollback import batches_output, clusters_output

# --- Argo Workflows' annotations ----------------------------------------------------------------

TITLE_ANNOTATION = "workflows.argoproj.io/title"
DESCRIPTION_ANNOTATION = "workflows.argoproj.io/description"
DISPLAY_NAME_ANNOTATION = "workflows.argoproj.io/display-name"

# --- template names (fixed; stage templates are `stage-<task name>`) ----------------------------

ENTRYPOINT = "rollout"
CLUSTER_TEMPLATE = "cluster"
BATCH_TEMPLATE = "batch"
APPROVAL_TEMPLATE = "approval"
SELECT_TEMPLATE = "select"
# select for a stage in batches: the same step, its `targets` output not kept in the Workflow
SELECT_FOR_BATCHES_TEMPLATE = "select-for-batches"
SYNC_TEMPLATE = "sync"
WAIT_HEALTHY_TEMPLATE = "wait-healthy"
RECORD_TEMPLATE = "record"
# record of one stage, then select of the next, in one step (steps/hand_over.py), and its variant
# for a next stage in batches (no `targets` output, as select-for-batches)
RECORD_AND_SELECT_TEMPLATE = "record-and-select"
RECORD_AND_SELECT_FOR_BATCHES_TEMPLATE = "record-and-select-for-batches"
FINALIZE_TEMPLATE = "finalize"
# The rollout follower (steps/follow.py): one task of the entrypoint beside the stages, its template
# inlined only into a Workflow that runs it (WorkflowSettings.follower, no spec.groupBy). No stage's
# task is ever given its name.
FOLLOW_TEMPLATE = "follow"
FOLLOW_TASK = "follow"
# The wait of a stage for other ProgressiveSyncs (spec.dependsOn, steps/depends.py): its first task,
# only in a stage that waits; the template is inlined only into a Workflow that has one.
WAIT_FOR_DEPENDENCIES_TEMPLATE = "wait-for-dependencies"
# The exit handler DAG `exit`: with the contract's `rollback` the rollback branch (rollback-plan, one
# fan-out per stage in reverse order, finalize); `rollback-plan` decides, one `rollback` pod
# restores one cluster; a stage's fan-out template is named as its task in `exit`. Without rollback,
# `finalize` alone, when its steps are skipped on a success (workflow_templates/exit_handler.py).
EXIT_TEMPLATE = "exit"
ROLLBACK_PLAN_TEMPLATE = "rollback-plan"
ROLLBACK_TEMPLATE = "rollback"
ROLLBACK_BATCH_TEMPLATE = "rollback-batch"
ROLLBACK_PREFIX = "rollback-"
# The analysis gate (steps/analyze.py), and a stage's per-cluster DAG when each cluster is analyzed
# after its own wait-healthy (`analyzed-<stage task>`: cluster, then its analysis).
ANALYZE_TEMPLATE = "analyze"
ANALYZED_CLUSTER_TEMPLATE_PREFIX = "analyzed-"
STAGE_TEMPLATE_PREFIX = "stage-"
FANOUT_TEMPLATE_PREFIX = "fanout-"
GROUP_TEMPLATE_PREFIX = "group-"  # one group's chain of stages (spec.groupBy)
BAKE_TEMPLATE_PREFIX = "bake-"

# Task names inside a stage DAG and inside the per-cluster DAG.
APPROVE_TASK = "approve"
WAIT_FOR_DEPENDENCIES_TASK = "wait-for-dependencies"
SELECT_TASK = "select"
CLUSTERS_TASK = "clusters"
BAKE_TASK = "bake"
RECORD_TASK = "record"
RECORD_AND_SELECT_TASK = "record-and-select"
CLUSTER_LOOP_TASK = "cluster"
BATCH_LOOP_TASK = "batch"
SYNC_TASK = "sync"
WAIT_HEALTHY_TASK = "wait-healthy"
# Tasks of the exit handler DAG with rollback, and the loop task inside a rollback fan-out.
ROLLBACK_PLAN_TASK = "rollback-plan"
FINALIZE_TASK = "finalize"
ROLLBACK_LOOP_TASK = "rollback"
ROLLBACK_BATCH_LOOP_TASK = "rollback-batch"
# The approval an Inconclusive analysis waits for (onInconclusive: Approve): the `approval` template,
# run only when the analysis task's `verdict` output says Inconclusive.
APPROVE_ANALYSIS_TASK = "approve-analysis"
ANALYSIS_TASK_PREFIX = "analysis"
ANALYSIS_TASK_MAX = 63

# Workflow parameters every step reads (through its environment, see pieces.step_env).
PARAM_PROGRESSIVE_SYNC = "progressive-sync"
PARAM_ARGOCD_NAMESPACE = "argocd-namespace"
# The rollout contract as JSON (orchestrator.planning.contract): rollout id, release, stage sizing.
PARAM_CONTRACT = "contract"

MAX_FIELD_NAME = 128

FIELD_NAME_RE = re.compile(r"^[a-zA-Z0-9][-a-zA-Z0-9]*$")
DISPLAY_NAME_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9-.]{0,61}[a-zA-Z0-9]$")
LABEL_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def sanitize_task_name(stage_name: str) -> str:
    """A stage name as Argo accepts it for a DAG task: runs of other characters become one '-'.

    A name that would start with a digit gets an `s-` prefix (Argo refuses task names starting with
    a digit in DAGs with dependencies).
    """
    name = re.sub(r"[^a-zA-Z0-9]+", "-", stage_name).strip("-")
    if not name:
        name = "stage"
    if name[0].isdigit():
        name = f"s-{name}"
    return name[:MAX_FIELD_NAME].rstrip("-")


def stage_task_names(stage_names: Iterable[str], *, reserved: Iterable[str] = ()) -> list[str]:
    """One unique, valid task name per stage, in order.

    Two stages whose names sanitize alike ("eu west" and "eu-west") get `-2`, `-3`, ... suffixes in
    spec order, so a stage keeps its task name as long as the stages before it do not change. A
    name in `reserved` (another task of the same DAG) is never given, nor `FOLLOW_TASK` (the
    follower's task beside the stages).
    """
    taken: set[str] = {name.lower() for name in (*reserved, FOLLOW_TASK)}
    result: list[str] = []
    for stage_name in stage_names:
        base = sanitize_task_name(stage_name)
        candidate = base
        counter = 2
        while candidate.lower() in taken:
            suffix = f"-{counter}"
            candidate = base[: MAX_FIELD_NAME - len(suffix)] + suffix
            counter += 1
        taken.add(candidate.lower())
        result.append(candidate)
    return result


def rollback_task_names(task_names: Iterable[str]) -> list[str]:
    """The exit handler's task per stage, from the stages' task names: `rollback-<task name>`.

    Unique and never `rollback-plan` (a stage named "plan" gets `rollback-plan-2`); each is also the
    name of the stage's rollback fan-out template, which no other template name starts like.
    """
    return stage_task_names((ROLLBACK_PREFIX + name for name in task_names), reserved=(ROLLBACK_PLAN_TASK,))


def rollback_display_name(stage_name: str, task_name: str) -> str | None:
    """The display name of a stage's rollback node where Argo's default (the task name) is not
    the stage's own name: `rollback-eu-west-1.canary`. Argo's display-name rule allows no spaces,
    so `rollback <stage>` is never possible; a name another exit task shows is not used either."""
    display = display_name_for(ROLLBACK_PREFIX + stage_name, task_name)
    return None if display == ROLLBACK_PLAN_TASK else display


def rollback_output(index: int) -> str:
    """rollback-plan's output parameter (and file) with the clusters of stage `index` to restore,
    one `rollback` pod each."""
    return clusters_output(index)


def rollback_batches_output(index: int) -> str:
    """rollback-plan's output parameter (and file) with the `rollback-batch` pods of stage `index`."""
    return batches_output(index)


def stage_template_name(task_name: str) -> str:
    """The DAG template of the stage whose entry task is `task_name`."""
    return f"{STAGE_TEMPLATE_PREFIX}{task_name}"[:MAX_FIELD_NAME]


def group_template_name(task_name: str) -> str:
    """The template of one group's chain of stages (spec.groupBy), by the group's task name."""
    return GROUP_TEMPLATE_PREFIX + task_name


def fanout_template_name(task_name: str) -> str:
    """The DAG template that fans a stage out over its selected clusters."""
    return f"{FANOUT_TEMPLATE_PREFIX}{task_name}"[:MAX_FIELD_NAME]


def fanout_display_name(max_parallel: int) -> str:
    """The display name of a stage's `clusters` node when it bounds the stage: `clusters-3-at-a-time`.

    In the Argo UI a stage of more than three clusters shows the first, "N hidden nodes" and the
    last; the node above them then says how many run at once (the template's `parallelism`, fixed
    when the Workflow is built). It passes DISPLAY_NAME_RE for any count.
    """
    return f"{CLUSTERS_TASK}-{max_parallel}-at-a-time"


def bake_template_name(seconds: int) -> str:
    """The suspend template that waits `seconds` (one per distinct bake duration)."""
    return f"{BAKE_TEMPLATE_PREFIX}{seconds}s"


def display_name_of_input(input_name: str) -> str:
    """A display-name annotation that shows the template's input `input_name` where Argo allows it.

    For the cluster step: its node then reads `cells-1-eu-west-1a` instead of Argo's default
    `cluster(0:cells-1-eu-west-1a)`, which the UI cuts to `cluster(0:ce..`. A display name that
    breaks `DISPLAY_NAME_RE` makes Argo mark the node Error, and cluster names are free text (Argo
    CD names a cluster after its kubectl context: EKS ARNs, GKE's `gke_project_zone_name`), so the
    value is shown only when it passes the rule: an expression Argo evaluates for each node. Its
    result is empty otherwise, and Argo keeps the default name. No braces in the pattern: the
    length is checked apart (`{{...}}` parsers stop at the first `}`).
    """
    value = f"inputs.parameters.{input_name}"
    allowed = "'^[a-zA-Z0-9][a-zA-Z0-9.-]*[a-zA-Z0-9]$'"
    return "{{=" + f"len({value}) <= 63 && {value} matches {allowed} ? {value} : ''" + "}}"


def display_name_for(stage_name: str, task_name: str) -> str | None:
    """The display-name annotation for a stage node, or None when Argo's default is as good.

    Argo shows the task name. The annotation can bring back the exact stage name only when that
    name passes Argo's display-name rule (no spaces or underscores): then "eu-west-1.canary" shows
    as itself instead of "eu-west-1-canary". Otherwise the task name is the closest Argo allows, and
    the stage name is on the node's `stage` input parameter.
    """
    if stage_name == task_name or not DISPLAY_NAME_RE.fullmatch(stage_name):
        return None
    return stage_name


def analysis_task_name(templates: Iterable[str]) -> str:
    """The analysis node's task name, named by its templates for the Argo UI:
    `analysis-error-rate-latency` (sanitized, at most `ANALYSIS_TASK_MAX` characters)."""
    joined = "-".join(templates)
    name = re.sub(r"[^a-zA-Z0-9]+", "-", f"{ANALYSIS_TASK_PREFIX}-{joined}").strip("-")
    return name[:ANALYSIS_TASK_MAX].rstrip("-")


def analyzed_cluster_template_name(task_name: str) -> str:
    """The per-cluster DAG of a stage whose clusters are each analyzed: `analyzed-<stage task>`."""
    return ANALYZED_CLUSTER_TEMPLATE_PREFIX + task_name
