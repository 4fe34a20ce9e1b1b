"""Keyword builders for the operator commands' tests: ProgressiveSyncs with a status, and Workflows.

`make_ps(...)` gives a ProgressiveSync object (wire form) whose status describes a rollout in the
phase and stages a test names; `make_workflow(...)` gives the rollout's Workflow with the node map
Argo (or the local executor) writes, where `gate=` adds a waiting manual-approval suspend node of a
stage. Both are plain dicts, usable for pure tests and for creating real objects. Nothing here
talks to a cluster.
"""

from __future__ import annotations

from typing import Any

from orchestrator.api.metadata import NAME_LABEL, ROLLOUT_ID_LABEL, label_value, workflow_name
from workflow_templates import names

PS_NAME = "myservice"
ROLLOUT_ID = "7f3c2a1"
STARTED = "2026-11-29T10:00:00Z"


def make_stage_spec(name: str, *, approval: str | None = None, region: str | None = None) -> dict[str, Any]:
    """A stage in wire form; `region` narrows its selector."""
    selector: dict[str, Any] = {"matchLabels": {"region": region}} if region else {}
    stage: dict[str, Any] = {"name": name, "targets": {"clusters": {"selector": selector}}, "maxParallel": 1}
    if approval:
        stage["approval"] = approval
    return stage


DEFAULT_STAGES = (
    make_stage_spec("canary", region="eu-west-1"),
    make_stage_spec("one per region"),
    make_stage_spec("everything else", approval="Manual"),
)


def make_stage_status(
    name: str,
    *,
    phase: str = "Pending",
    targets: tuple[str, ...] = (),
    completed: tuple[str, ...] = (),
    syncing: tuple[str, ...] = (),
    failed: tuple[tuple[str, str], ...] = (),
    started_at: str | None = None,
    finished_at: str | None = None,
    message: str = "",
) -> dict[str, Any]:
    """One `status.stages` entry; `failed` is ((cluster, reason), ...)."""
    entry: dict[str, Any] = {
        "name": name,
        "phase": phase,
        "message": message,
        "targets": list(targets),
        "syncing": list(syncing),
        "completed": list(completed),
        "failed": [{"name": cluster, "reason": reason} for cluster, reason in failed],
    }
    if started_at:
        entry["startedAt"] = started_at
    if finished_at:
        entry["finishedAt"] = finished_at
    return entry


def make_ps(
    name: str = PS_NAME,
    *,
    namespace: str = "argocd",
    stages: tuple[dict[str, Any], ...] = DEFAULT_STAGES,
    paused: bool = False,
    phase: str | None = None,
    rollout_id: str | None = ROLLOUT_ID,
    workflow: str | None = None,
    finished_at: str | None = None,
    stage_status: list[dict[str, Any]] | None = None,
    generation: int | None = None,
    observed_generation: int | None = None,
    attempt: int = 1,
    message: str = "",
) -> dict[str, Any]:
    """A ProgressiveSync; with `phase`, a status describing rollout `rollout_id` in that phase."""
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if generation is not None:
        metadata["generation"] = generation
    obj: dict[str, Any] = {
        "apiVersion": "progressivesync.io/v1alpha1",
        "kind": "ProgressiveSync",
        "metadata": metadata,
        "spec": {"appSetRef": {"name": name}, "stages": [dict(stage) for stage in stages], "paused": paused},
    }
    if phase is not None:
        status: dict[str, Any] = {"phase": phase, "message": message}
        if observed_generation is not None:
            status["observedGeneration"] = observed_generation
        if rollout_id is not None:
            rollout: dict[str, Any] = {
                "id": rollout_id,
                "revision": "4f1c2e9b7a3d",
                "workflow": workflow if workflow is not None else workflow_name(name, rollout_id),
                "attempt": attempt,
                "startedAt": STARTED,
            }
            if finished_at:
                rollout["finishedAt"] = finished_at
            status["rollout"] = rollout
        status["stages"] = stage_status if stage_status is not None else []
        obj["status"] = status
    return obj


def make_gate_node(
    workflow_name: str, stage: str, *, phase: str = "Running", with_input: bool = True
) -> dict[str, Any]:
    """The approval suspend node of `stage`, as Argo writes it into `status.nodes`."""
    task = names.sanitize_task_name(stage)
    node: dict[str, Any] = {
        "id": f"{workflow_name}-gate-{task}",
        "name": f"{workflow_name}.{task}.{names.APPROVE_TASK}",
        "displayName": names.APPROVE_TASK,
        "type": "Suspend",
        "templateName": names.APPROVAL_TEMPLATE,
        "phase": phase,
        "startedAt": STARTED,
    }
    if with_input:
        node["inputs"] = {"parameters": [{"name": "stage", "value": stage}]}
    return node


def make_bake_node(workflow_name: str, stage: str) -> dict[str, Any]:
    """A running bake wait after `stage` (a suspend node with a duration, not a gate)."""
    task = names.sanitize_task_name(stage)
    return {
        "id": f"{workflow_name}-bake-{task}",
        "name": f"{workflow_name}.{task}.{names.BAKE_TASK}",
        "displayName": names.BAKE_TASK,
        "type": "Suspend",
        "templateName": names.bake_template_name(60),
        "phase": "Running",
        "startedAt": STARTED,
    }


def make_workflow(
    ps_name: str = PS_NAME,
    *,
    namespace: str = "argocd",
    rollout_id: str = ROLLOUT_ID,
    phase: str = "Running",
    shutdown: str | None = None,
    suspend: bool = False,
    nodes: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The rollout Workflow with `nodes` in `status.nodes` (keyed by id)."""
    name = workflow_name(ps_name, rollout_id)
    spec: dict[str, Any] = {"entrypoint": names.ENTRYPOINT, "templates": []}
    if shutdown:
        spec["shutdown"] = shutdown
    if suspend:
        spec["suspend"] = True
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {NAME_LABEL: label_value(ps_name), ROLLOUT_ID_LABEL: rollout_id},
        },
        "spec": spec,
        "status": {
            "phase": phase,
            "startedAt": STARTED,
            "nodes": {node["id"]: node for node in nodes or []},
        },
    }
