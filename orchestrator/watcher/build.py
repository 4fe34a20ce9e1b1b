"""Build: turn the decision's `CreateWorkflow` (what to create, as data) into the Workflow object.

`decide` says which rollout to start (the ProgressiveSync, the release, the plan) and never calls
the Workflow builder; this module does, between `decide` and `act`, with the installation's
`WorkflowSettings` (step image, service account, retries, budgets; `Settings.workflow_settings`).
It stays a pure function of its inputs (no client, no clock), so the whole path is still tested
without an API server.

A Workflow that cannot be built (`WorkflowBuildError`: more nodes than the budget allows) starts
nothing: the decision is replaced by one that keeps the actions that came before the create (the
finalizer, stale Workflows stopped, syncs ended) and only sets `Valid=False` with reason
`WorkflowInvalid` and the builder's words, so the spec must change (or the limit be raised).

Callers: `orchestrator.watcher.loop` (observe → decide → build → act); tests.
"""

from __future__ import annotations

from dataclasses import replace

from orchestrator.api.conditions import ConditionType
from orchestrator.api.models import ConditionStatus
from orchestrator.api.reasons import Reason
from orchestrator.watcher.decision import CreateWorkflow, Decision, Observed, StatusPatch, UpdateStatus
from orchestrator.watcher.status_patch import condition
from workflow_templates.builder import WorkflowBuildError, build_workflow, workflow_object
from workflow_templates.settings import WorkflowSettings


def build_workflows(decision: Decision, obs: Observed, settings: WorkflowSettings) -> Decision:
    """`decision` with each `CreateWorkflow` carrying its built object (its identity annotations
    included); a Workflow that cannot be built turns the decision into `workflow-invalid`."""
    actions = list(decision.actions)
    for index, action in enumerate(actions):
        if not isinstance(action, CreateWorkflow):
            continue
        try:
            built = build_workflow(action.ps, release=action.release, plan=action.plan, settings=settings)
        except WorkflowBuildError as exc:
            patch = StatusPatch(
                observed_generation=obs.generation,
                conditions=(
                    condition(ConditionType.VALID, ConditionStatus.FALSE, Reason.WORKFLOW_INVALID, str(exc)),
                ),
            )
            return Decision(
                (*actions[:index], UpdateStatus(patch)),
                f"cannot build the Workflow: {exc}",
                "workflow-invalid",
            )
        actions[index] = replace(action, workflow=workflow_object(built))
    return replace(decision, actions=tuple(actions))
