"""What the step's own Workflow says about new work: ending, suspended, or gone (one GET).

A step that starts a cluster other than by its own node (a hand-off, a stage closed early, a pod
that claims its own slot) first asks whether the Workflow will run what follows: not when it is
being stopped, terminated or deleted, nor while it is suspended (`argo suspend`: no new step
starts until `argo resume`). A Workflow that cannot be found is a step run by hand.

Callers: `steps.chain` (hand-off, early close), `steps.turn` (a pod's own claim), `steps.follow`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from orchestrator.kube.client import WORKFLOWS, Kube, NotFound


@dataclass(frozen=True)
class WorkflowState:
    """The Workflow `name` as read: why it is ending ("" when it is not), whether it is suspended,
    whether it exists."""

    name: str
    ending: str = ""
    suspended: bool = False
    found: bool = True

    @property
    def no_step_follows(self) -> str:
        """Why no new step of this Workflow will run ("" when one will): ending, suspended, gone."""
        if not self.found:
            return f"Workflow {self.name} not found (a step run by hand: no pod follows)"
        if self.ending:
            return self.ending
        if self.suspended:
            return f"Workflow {self.name} is suspended (no new step starts until it is resumed)"
        return ""


def read_workflow_state(kube: Kube, namespace: str, name: str) -> WorkflowState:
    """Read the Workflow `name` once (see the module)."""
    try:
        workflow = kube.get(WORKFLOWS, namespace, name)
    except NotFound:
        return WorkflowState(name, found=False)
    return WorkflowState(
        name,
        ending=workflow_stopping(workflow, name),
        suspended=bool((workflow.get("spec") or {}).get("suspend")),
    )


def workflow_stopping(workflow: Mapping[str, Any], name: str) -> str:
    """Why the Workflow `name` (the object as read) is ending: stopped or terminated, or being
    deleted; "" when neither."""
    shutdown = (workflow.get("spec") or {}).get("shutdown")
    if shutdown:
        return f"Workflow {name} is being shut down ({shutdown})"
    if (workflow.get("metadata") or {}).get("deletionTimestamp"):
        return f"Workflow {name} is being deleted"
    return ""
