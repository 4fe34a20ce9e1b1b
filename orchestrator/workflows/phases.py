"""Argo Workflows' vocabulary: Workflow and node phases, node types and `spec.shutdown` values.

Shared by everything that reads or writes a Workflow's status: the local engine (which writes it the
way Argo's operator does), the Workflow view the watcher and the operator commands read, and the
Workflow control actions (`argo stop`, `resume`, ...). Pure values; imports nothing of ours.
"""

from __future__ import annotations

from enum import StrEnum


class WorkflowPhase(StrEnum):
    """`status.phase` of a Workflow."""

    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    ERROR = "Error"


TERMINAL_WORKFLOW_PHASES = frozenset({WorkflowPhase.SUCCEEDED, WorkflowPhase.FAILED, WorkflowPhase.ERROR})


class NodePhase(StrEnum):
    """`status.nodes[*].phase`."""

    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    SKIPPED = "Skipped"
    FAILED = "Failed"
    ERROR = "Error"
    OMITTED = "Omitted"


FULFILLED = frozenset(
    {NodePhase.SUCCEEDED, NodePhase.SKIPPED, NodePhase.FAILED, NodePhase.ERROR, NodePhase.OMITTED}
)
UNSUCCESSFUL = frozenset({NodePhase.FAILED, NodePhase.ERROR})


class NodeType(StrEnum):
    """`status.nodes[*].type` (the ones our Workflows make)."""

    DAG = "DAG"
    POD = "Pod"
    SUSPEND = "Suspend"
    TASK_GROUP = "TaskGroup"
    RETRY = "Retry"
    SKIPPED = "Skipped"


class Shutdown(StrEnum):
    """`spec.shutdown`: what `argo stop` and `argo terminate` set."""

    STOP = "Stop"
    TERMINATE = "Terminate"
