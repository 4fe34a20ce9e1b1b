"""`argo stop`, `argo terminate`, `argo suspend` and `argo resume` for tests that drive a Workflow
where the argo CLI does not build: the same fields the argo CLI writes, through our adapter, so they
work the same under Argo Workflows and under the local executor.

`stop` and the patch bodies are the product's (`orchestrator.workflows.control`; `progressive-sync
cancel` stops); the others only tests use. `resume` is a read-modify-PUT with the resourceVersion
(the Workflow CRD has no status subresource), retried a bounded number of times on conflicts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from orchestrator.core.clock import Clock, format_time
from orchestrator.kube.client import WORKFLOWS, Conflict, Kube, KubeError
from orchestrator.workflows.control import shutdown_patch, stop, suspend_patch
from orchestrator.workflows.phases import NodePhase, NodeType, Shutdown

__all__ = ["WRITE_ATTEMPTS", "resume", "stop", "suspend", "terminate", "waiting_suspend_nodes"]

WRITE_ATTEMPTS = 5


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
