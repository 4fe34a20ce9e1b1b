"""The rollout Workflow's exit handler: which template `onExit` names, and when its steps run.

The exit handler records how the rollout ended (`finalize`) and, with the contract's `rollback`,
decides and runs the rollback first (workflow_templates/rollback.py). On a Workflow that Succeeded
it has nothing left to do when the last stage's `record` step already recorded the end: that step
does so for a stage that `endsRollout` (steps/rollout_end.py, `record_step`), and exits 1 when it
could not, so a Workflow that Succeeded has its end recorded (or its rollout superseded, or its
ProgressiveSync gone). For such a contract (`skips_on_success`) the exit handler is a DAG whose
steps run only `when` the Workflow did not succeed, Argo's own pattern for exit handlers; on a
success its nodes are Skipped and no pod starts: one step pod (~6 s on the real node,
docs/design/dev-stack.md) off the end of every rollout that succeeds, and `rollback-plan`'s too
with rollback.

    onExit: exit (DAG)
    └── finalize       when: {{workflow.status}} != Succeeded

Without `endsRollout` (spec.groupBy: the groups end side by side; a bake after the last stage: the
bake runs after its `record`) the exit handler is `finalize` itself, as before, or the rollback DAG
without the `when`. Checked against Argo v3.7.18: `{{workflow.status}}` is set before the exit
handler runs (operator.go, `executeTemplate` of `onExit` with the global scope), a false `when`
gives a Skipped node, and a DAG whose tasks are all Skipped Succeeds; the Workflow keeps the
phase of its entrypoint.

Called by `builder.build_workflow_of_contract` and `rollback.exit_templates`.
"""

from __future__ import annotations

from hera.workflows.models import DAGTask, DAGTemplate, Template

from orchestrator.planning.contract import RolloutContract
from workflow_templates import names

# The `when` of the exit handler's steps when they may be skipped (see the module).
UNLESS_SUCCEEDED = "{{workflow.status}} != Succeeded"


def skips_on_success(contract: RolloutContract) -> bool:
    """Does the last stage's `record` record the rollout's end (`endsRollout`), so that the exit
    handler has nothing to do on a Workflow that Succeeded?"""
    return bool(contract.stages) and bool(contract.stages[-1].ends_rollout)


def on_exit(contract: RolloutContract) -> str:
    """The template `onExit` names: the DAG `exit` with rollback or when its steps may be skipped,
    else `finalize` itself."""
    if contract.rollback is None and not skips_on_success(contract):
        return names.FINALIZE_TEMPLATE
    return names.EXIT_TEMPLATE


def finalize_only_template() -> Template:
    """The exit DAG without rollback: `finalize`, skipped on a Workflow that Succeeded."""
    return Template(
        name=names.EXIT_TEMPLATE,
        dag=DAGTemplate(
            tasks=[DAGTask(name=names.FINALIZE_TASK, template=names.FINALIZE_TEMPLATE, when=UNLESS_SUCCEEDED)]
        ),
    )
