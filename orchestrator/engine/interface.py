"""What the local executor and one pass of the operator exchange.

In: `PodState` (a process the executor runs for a Pod node) with its `PodResult` once it ended.
Out: an `Operation` (the new status, the `PodLaunch`es to start, the nodes to kill, when to look
again, the mutex a Pending Workflow waits for). `UnsupportedFeature` is how a pass refuses a
Workflow that uses something the local executor does not do.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from orchestrator.workflows.phases import TERMINAL_WORKFLOW_PHASES


class UnsupportedFeature(Exception):
    """The Workflow uses something the local executor does not do; the message names it."""


# --- what the executor tells us about processes, and what we tell it --------------------------


@dataclass(frozen=True)
class PodResult:
    """A finished process: exit code, output parameter values read from its files, a note."""

    exit_code: int
    outputs: Mapping[str, str] = field(default_factory=dict)
    missing_outputs: tuple[str, ...] = ()
    summary: str = ""
    error: str = ""  # the process could not run or was killed by the executor (timeout)


@dataclass(frozen=True)
class PodState:
    """What the executor knows about the process of one Pod node: waiting for a slot (`waiting`
    says why; no process yet), running, or its result."""

    started_at: datetime
    result: PodResult | None = None
    waiting: str = ""


@dataclass(frozen=True)
class PodLaunch:
    """A process to start for a Pod node, with the container's command, args and env resolved."""

    node_id: str
    node_name: str
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    # The directory the container writes its outputs to (`PROGRESSIVE_SYNC_OUTPUTS_DIR`), and the
    # output parameters by name with their path inside that directory.
    outputs_dir: str
    outputs: tuple[tuple[str, str], ...]


@dataclass
class Operation:
    """The result of one pass: the new status and what the executor must do."""

    status: dict[str, Any]
    launches: list[PodLaunch] = field(default_factory=list)
    kills: list[str] = field(default_factory=list)
    wake_at: datetime | None = None
    needs_lock: str | None = None  # the mutex a Pending Workflow waits for

    @property
    def finished(self) -> bool:
        """True once the Workflow reached a terminal phase."""
        return self.status.get("phase") in TERMINAL_WORKFLOW_PHASES
