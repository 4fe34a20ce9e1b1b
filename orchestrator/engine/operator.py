"""The decisions of the local executor: one pass over a Workflow, the way Argo's operator does it.

`operate(workflow, now=..., pods=..., lock_held=...)` is a pure function: it reads the Workflow
object (spec and `status.nodes`) and what the executor knows about the processes it runs, and
returns the new status, the processes to start and to kill, and when to look again. The executor
(`orchestrator/engine/executor.py`) owns the API calls, the processes and the clock. Because every
decision is recomputed from `status.nodes`, an executor that restarts picks a Workflow up where it
stood: finished nodes are never run again.

It supports exactly the features our rollout Workflows use (workflow_templates/builder.py) and
answers anything else with the Workflow in phase Error and a message naming the feature:

- templates: `dag` (tasks with `dependencies`, `arguments.parameters`, `withParam`,
  `continueOn`, `when`; Omitted nodes for tasks whose dependency failed; output parameters from
  `valueFrom.parameter`, set when the DAG Succeeded), `container` (command + args +
  env; output parameters from `valueFrom.path`, read whatever the exit code, a missing file
  taking `valueFrom.default` where there is one), `suspend` (with or without `duration`); template
  `parallelism` (`failFast` is refused: on Argo v3.7 it hangs nested templates),
  `retryStrategy` (`limit`, `retryPolicy` Always/OnFailure/OnError, `backoff` with `duration`,
  `factor` and `cap`, an `expression` over `lastRetry.exitCode`/`lastRetry.status` joined by
  `||`/`&&`; decided in the order of Argo's `processNodeRetries`), the display-name annotation
  (plain, or the one expression we write: `names.display_name_of_input`);
- the Workflow: `entrypoint`, `arguments.parameters`, `onExit` (any template, a DAG too; sees
  `{{workflow.status}}`), `activeDeadlineSeconds` (the exit handler's nodes are exempt),
  `synchronization.mutexes` (the executor holds the locks; Terminate while waiting for one ends the
  Workflow Succeeded at once, as Argo does), `shutdown: Stop` (running nodes fail, the exit handler
  runs) and `Terminate` (it does not), `suspend` (no new node starts, exit handler included;
  running ones finish); once stopped or past the deadline a failed attempt is not retried;
- variables: `inputs.parameters.*`, `workflow.parameters.*`, `workflow.name|namespace|uid|
  serviceAccountName|status`, `tasks.<t>.outputs.parameters.*`, `tasks.<t>.status`, `item` (and
  `item.<key>`).

Status is written in Argo's shape: node ids are `<workflow>-<fnv32a(node name)>` (the root's is the
Workflow name), node names are `<parent>.<task>`, loop items `<task>(<i>:<item>)`, retry attempts
`<name>(<n>)`, the exit handler `<workflow>.onExit`; node types DAG, Pod, Suspend, TaskGroup,
Retry and Skipped (an empty loop, an Omitted task); no message on DAG and TaskGroup nodes.

Where it knowingly differs from Argo (docs/design/workflow.md has the whole comparison):

- A Pod node that was Running when its executor stopped is run again in place (the steps are
  idempotent, docs/design/CONTRACTS.md), with a note in its message, rather than failed and retried.

The pass is put together from one module per job: `nodes` (state and bookkeeping), `pods`,
`retries`, `dag`, `lifecycle` (mutex, deadline, stop, suspend, exit handler, end); `expressions`
and `supported` hold the pure parts; `interface` the types the executor exchanges with a pass.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from orchestrator.engine.dag import DagNodes
from orchestrator.engine.expressions import (
    Unresolved,
    input_display_name,
    substitute,
    without_input_display_name,
)
from orchestrator.engine.interface import Operation, PodState
from orchestrator.engine.lifecycle import WorkflowLifecycle
from orchestrator.engine.retries import RetryNodes
from orchestrator.workflows.phases import FULFILLED, NodePhase, NodeType
from workflow_templates.names import DISPLAY_NAME_ANNOTATION


class _Pass(WorkflowLifecycle, DagNodes, RetryNodes):
    """One pass over one Workflow; `run()` returns the Operation."""

    def execute(
        self,
        name: str,
        template_name: str,
        arguments: Mapping[str, str],
        *,
        boundary_id: str | None,
        display_name: str,
    ) -> dict[str, Any] | None:
        """Advance (or start) the node `name` running `template_name`; None when it may not start yet."""
        node = self.node_by_name(name)
        if node is not None and self.phase_of(node) in FULFILLED:
            return node
        template = self.template(template_name)
        if node is None and not self.can_start(boundary_id):
            return None
        try:
            inputs = self.resolve_inputs(template, arguments)
            annotations = substitute(without_input_display_name(template, inputs), self.scope(inputs))
        except Unresolved as exc:
            if node is None:
                node = self.new_node(
                    name,
                    NodeType.POD,
                    display_name=display_name,
                    template_name=template_name,
                    boundary_id=boundary_id,
                )
            self.finish(node, NodePhase.ERROR, str(exc))
            return node
        # Argo names a retry's attempts after the node's default name, not its display name.
        default_display_name = display_name
        display_name = str(
            annotations.get(DISPLAY_NAME_ANNOTATION) or input_display_name(template, inputs) or display_name
        )
        if "dag" in template:
            return self.execute_dag(
                name, template, inputs, boundary_id=boundary_id, display_name=display_name
            )
        if "suspend" in template:
            return self.execute_suspend(
                name, template, inputs, boundary_id=boundary_id, display_name=display_name
            )
        if template.get("retryStrategy"):
            return self.execute_retry(
                name,
                template,
                inputs,
                boundary_id=boundary_id,
                display_name=display_name,
                attempt_display_name=default_display_name,
            )
        return self.execute_pod(name, template, inputs, boundary_id=boundary_id, display_name=display_name)


def operate(
    workflow: Mapping[str, Any],
    *,
    now: datetime,
    pods: Mapping[str, PodState],
    lock_held: bool = True,
    executor_id: str = "local-executor",
) -> Operation:
    """One pass over `workflow`: the new status, processes to start and kill, when to look again.

    `pods` are the processes this executor runs for the Workflow's Pod nodes, by node id: running
    (no result yet) or finished. `lock_held` says whether the executor holds the Workflow's
    mutex for it (a Workflow that has not started waits in phase Pending without it).
    """
    return _Pass(workflow, now=now, pods=pods, lock_held=lock_held, executor_id=executor_id).run()
