"""What `argo stop`, `argo terminate`, `argo suspend` and `argo resume` do, through our adapter.

These write the same fields the argo CLI writes, so they work the same under Argo Workflows and
under the local executor, and the tests can drive a Workflow where the argo CLI does not build:

- stop: `spec.shutdown: Stop` (running steps are killed, the exit handler runs);
- terminate: `spec.shutdown: Terminate` (no exit handler);
- suspend: `spec.suspend: true` (no new step starts; running ones finish);
- resume: clears `spec.suspend` and marks every waiting suspend node Succeeded in `status.nodes`
  (so it also passes manual approval gates, exactly like `argo resume`: `progressive-sync
  approve` (orchestrator.ops.actions) opens one stage's gate only).

The merge-patch bodies are built here and nowhere else (`shutdown_patch`, `suspend_patch`,
`lift_watcher_suspend_patch`): the watcher suspends for `spec.paused` with our
`suspended-by` annotation in the same patch, and lifts only a suspend it made.

Callers: the watcher, the operator commands and the tests (where the argo CLI does not build).
Writes to status are read-modify-PUT with the resourceVersion (the Workflow CRD has no status
subresource), retried a bounded number of times on conflicts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from orchestrator.api.metadata import SUSPENDED_BY_ANNOTATION, SUSPENDED_BY_WATCHER
from orchestrator.core.clock import Clock, format_time
from orchestrator.kube.client import WORKFLOWS, Conflict, Kube, KubeError
from orchestrator.workflows.phases import NodePhase, NodeType, Shutdown

WRITE_ATTEMPTS = 5


def shutdown_patch(strategy: Shutdown) -> dict[str, Any]:
    """The merge patch of `spec.shutdown` (Stop: the exit handler runs; Terminate: it does not)."""
    return {"spec": {"shutdown": strategy.value}}


def suspend_patch(*, by_watcher: bool) -> dict[str, Any]:
    """The merge patch of `spec.suspend: true`; the watcher's also says the suspend is its own."""
    patch: dict[str, Any] = {"spec": {"suspend": True}}
    if by_watcher:
        patch["metadata"] = {"annotations": {SUSPENDED_BY_ANNOTATION: SUSPENDED_BY_WATCHER}}
    return patch


def lift_watcher_suspend_patch() -> dict[str, Any]:
    """The merge patch removing `spec.suspend` and the watcher's mark (the watcher's resume)."""
    return {"metadata": {"annotations": {SUSPENDED_BY_ANNOTATION: None}}, "spec": {"suspend": None}}


def stop(kube: Kube, namespace: str, name: str) -> None:
    """`argo stop`: running steps end, the exit handler runs, the Workflow ends Failed."""
    kube.patch(WORKFLOWS, namespace, name, shutdown_patch(Shutdown.STOP))


def terminate(kube: Kube, namespace: str, name: str) -> None:
    """`argo terminate`: running steps end, no exit handler."""
    kube.patch(WORKFLOWS, namespace, name, shutdown_patch(Shutdown.TERMINATE))


def suspend(kube: Kube, namespace: str, name: str) -> None:
    """`argo suspend`: no new step starts until resumed."""
    kube.patch(WORKFLOWS, namespace, name, suspend_patch(by_watcher=False))


def waiting_suspend_nodes(workflow: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Suspend nodes still waiting (phase Running), in name order."""
    nodes = ((workflow.get("status") or {}).get("nodes") or {}).values()
    waiting = [n for n in nodes if n.get("type") == NodeType.SUSPEND and n.get("phase") == NodePhase.RUNNING]
    return sorted(waiting, key=lambda n: str(n.get("name")))


def _update(kube: Kube, namespace: str, name: str, change: Callable[[dict[str, Any]], int]) -> int:
    """Read, apply `change` (returns how many things it changed), PUT; again on conflict."""
    for _ in range(WRITE_ATTEMPTS):
        workflow = kube.get(WORKFLOWS, namespace, name)
        changed = change(workflow)
        if not changed:
            return 0
        try:
            kube.replace(WORKFLOWS, namespace, workflow)
        except Conflict:
            continue
        return changed
    raise KubeError(f"workflow {namespace}/{name}: gave up after {WRITE_ATTEMPTS} conflicting writes")


def _mark_resumed(node: dict[str, Any], clock: Clock, message: str) -> None:
    node["phase"] = NodePhase.SUCCEEDED.value
    node["finishedAt"] = format_time(clock.now())
    node["message"] = message


def resume(kube: Kube, namespace: str, name: str, *, clock: Clock) -> int:
    """`argo resume`: clear `spec.suspend`, pass every waiting suspend node. Returns what changed."""

    def change(workflow: dict[str, Any]) -> int:
        changed = 0
        spec = workflow.setdefault("spec", {})
        if spec.get("suspend"):
            spec.pop("suspend")
            changed += 1
        for node in waiting_suspend_nodes(workflow):
            live = workflow["status"]["nodes"][node["id"]]
            _mark_resumed(live, clock, "resumed")
            changed += 1
        return changed

    return _update(kube, namespace, name, change)
