"""What the operator commands decide, as pure functions of the objects they read.

`progressive-sync cancel|pause|unpause|approve|retry` read a ProgressiveSync (and the Workflow of
its rollout), decide what to do and write at most one change. The rules live here, with no client
and no clock: each function gets the objects as the API server returned them (and `now` where a
write carries a time) and returns what to do, or raises `OpsRefused` saying why not and what to do
instead (exit 1: nothing to do for that object; 2: bad usage, e.g. an unknown stage). What a
command reads and shows is `orchestrator.ops.view`; the API calls are in `orchestrator.ops.actions`.

Callers: `orchestrator.ops.actions`, `orchestrator.cli.ops_cmd`, tests.
"""

from __future__ import annotations

import base64
import gzip
import json
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from orchestrator.api.analysis import OnInconclusive, resolve_analysis
from orchestrator.api.groups import group_phases
from orchestrator.api.groups import spec_stage as stage_of_spec
from orchestrator.api.metadata import rollout_workflow_name
from orchestrator.api.models import (
    ApprovalMode,
    ProgressiveSync,
    RolloutPhase,
    RolloutStatus,
)
from orchestrator.api.phases import (
    FINISHED_ROLLOUT_PHASES,
    UNFINISHED_ROLLOUT_PHASES,
)
from orchestrator.core.clock import format_time
from orchestrator.ops.view import (
    RETRYABLE_PHASES,
    Gate,
    OpsRefused,
    display_name,
    waiting_gates,
)
from orchestrator.workflows.phases import Shutdown
from orchestrator.workflows.view import FINISHED_PHASES, workflow_nodes


@dataclass(frozen=True)
class Outcome:
    """What a command did (or found already done), for people and for `-o json|yaml`."""

    action: str
    namespace: str
    name: str
    changed: bool
    message: str
    details: Mapping[str, Any] = field(default_factory=dict)

    def to_data(self) -> dict[str, Any]:
        """The machine-readable form (stable keys)."""
        return {
            "action": self.action,
            "namespace": self.namespace,
            "name": self.name,
            "changed": self.changed,
            "message": self.message,
            **dict(self.details),
        }


class WorkflowAction(StrEnum):
    """What `cancel` does to the rollout's Workflow."""

    STOP = "stop"
    TERMINATE = "terminate"  # the rollout is rolling back: Stop would let the exit handler go on
    NONE = "none"


def require_rollout(ps: ProgressiveSync, doing: str) -> RolloutStatus:
    """The status's rollout, or OpsRefused saying there is none to `doing`."""
    status = ps.status
    if status is None or status.rollout is None:
        raise OpsRefused(
            f"ProgressiveSync {display_name(ps)} has no rollout to {doing}: none has started "
            "(is the watcher running, and is an Application of its ApplicationSet out of date?)"
        )
    return status.rollout


def workflow_name_of(ps: ProgressiveSync, doing: str = "act on") -> str:
    """The name of the current rollout's Workflow, from the status or derived like the watcher does."""
    return rollout_workflow_name(ps.metadata.name, require_rollout(ps, doing))


def _workflow_phase(workflow: Mapping[str, Any]) -> str:
    return str((workflow.get("status") or {}).get("phase") or "")


def _refuse_if_finished(ps: ProgressiveSync, workflow: Mapping[str, Any], doing: str) -> None:
    rollout = require_rollout(ps, doing)
    workflow_phase = _workflow_phase(workflow)
    status = ps.status
    ps_phase = status.phase if status else None
    if workflow_phase in FINISHED_PHASES or (ps_phase in FINISHED_ROLLOUT_PHASES and rollout.finished_at):
        shown = ps_phase.value if ps_phase in FINISHED_ROLLOUT_PHASES and ps_phase else workflow_phase
        when = f" at {format_time(rollout.finished_at)}" if rollout.finished_at else ""
        hint = (
            f"; to run it again: progressive-sync retry {ps.metadata.name} -n {ps.metadata.namespace}"
            if ps_phase in RETRYABLE_PHASES
            else ""
        )
        raise OpsRefused(
            f"rollout {rollout.id} of ProgressiveSync {display_name(ps)} already finished "
            f"({shown}{when}): nothing to {doing}{hint}"
        )


def decide_cancel(ps: ProgressiveSync, workflow: Mapping[str, Any]) -> WorkflowAction:
    """STOP the running Workflow; while it rolls back, TERMINATE it (the rollback runs in the exit
    handler, which a Stop lets finish); NONE when it is already being stopped so; refuse when it
    finished."""
    _refuse_if_finished(ps, workflow, "cancel")
    shutdown = str((workflow.get("spec") or {}).get("shutdown") or "")
    rolling_back = ps.status is not None and ps.status.phase == RolloutPhase.ROLLING_BACK
    if rolling_back:
        return WorkflowAction.NONE if shutdown == Shutdown.TERMINATE else WorkflowAction.TERMINATE
    if shutdown:
        return WorkflowAction.NONE
    return WorkflowAction.STOP


def decide_pause(ps: ProgressiveSync, *, paused: bool) -> bool:
    """True when `spec.paused` must change to `paused`; False when it already has that value."""
    return ps.spec.paused != paused


def decide_retry(ps: ProgressiveSync) -> RolloutStatus:
    """The rollout to retry; refuse unless it failed or was cancelled (and the watcher saw the spec),
    or it succeeded leaving clusters out (`status.stages[].skipped`, docs/skip.md): the next attempt
    takes the ones whose skip mark is gone, as it takes late clusters."""
    rollout = require_rollout(ps, "retry")
    status = ps.status
    phase = status.phase if status else None
    left_out = (
        phase == RolloutPhase.SUCCEEDED and status is not None and any(s.skipped for s in status.stages or [])
    )
    if phase not in RETRYABLE_PHASES and not left_out:
        shown = phase.value if phase else "Pending"
        if phase == RolloutPhase.SUCCEEDED:
            why = "it succeeded"
        elif phase is None or phase in UNFINISHED_ROLLOUT_PHASES:
            why = f"it is still running ({shown}); wait for it, or cancel it first"
        else:
            why = f"its phase is {shown}"
        raise OpsRefused(
            f"rollout {rollout.id} of ProgressiveSync {display_name(ps)} did not fail: {why}; "
            "nothing to retry"
        )
    return rollout


def decide_manual_rollback(ps: ProgressiveSync, workflow: Mapping[str, Any] | None) -> RolloutStatus:
    """The recorded rollout `progressive-sync rollback` may act on (its Workflow: None when gone);
    refuse while it, or its Workflow, still runs."""
    rollout = require_rollout(ps, "roll back")
    status = ps.status
    phase = status.phase if status else None
    where = f"rollout {rollout.id} of ProgressiveSync {display_name(ps)}"
    if phase is None or phase in UNFINISHED_ROLLOUT_PHASES:
        shown = phase.value if phase else "Pending"
        raise OpsRefused(
            f"{where} is still running ({shown}): cancel it first "
            f"(progressive-sync cancel {ps.metadata.name} -n {ps.metadata.namespace}), "
            "wait for it to end, then roll back"
        )
    if workflow is not None and _workflow_phase(workflow) not in FINISHED_PHASES:
        name = (workflow.get("metadata") or {}).get("name", "")
        raise OpsRefused(
            f"{where} ended {phase.value}, but its Workflow {name} still runs "
            f"({_workflow_phase(workflow) or 'not started'}; its exit handler may be rolling back): "
            "wait for it to finish, then roll back"
        )
    return rollout


def decide_rollback_groups(ps: ProgressiveSync, groups: Sequence[str]) -> list[str]:
    """The groups `progressive-sync rollback --group` names, checked against the recorded rollout's
    groups (spec.groupBy, docs/groups.md); [] when none is named (the command picks them). Refused
    (exit 2) for --group without groupBy, and for a group the rollout does not have, naming its groups."""
    if not groups:
        return []
    who = f"ProgressiveSync {display_name(ps)}"
    if ps.spec.group_by is None:
        raise OpsRefused(
            f"--group: {who} has no groups (spec.groupBy is not set): roll back without --group",
            exit_code=2,
        )
    known = list(group_phases((ps.status.stages if ps.status else None) or []))
    unknown = [group for group in groups if group not in known]
    if unknown:
        there = ", ".join(known) or "none: no stage of the rollout is recorded"
        raise OpsRefused(
            f"--group: the rollout of {who} has no group {', '.join(unknown)} (its groups: {there})",
            exit_code=2,
        )
    return list(dict.fromkeys(groups))


def new_retry_token(now: datetime, entropy: str | None = None) -> str:
    """A fresh `progressivesync.io/retry` value: a UTC timestamp and a random suffix, never reused."""
    suffix = entropy if entropy is not None else secrets.token_hex(3)
    return f"{now.strftime('%Y%m%dT%H%M%SZ')}-{suffix}"


def decide_approve(ps: ProgressiveSync, workflow: Mapping[str, Any], stage: str | None) -> Gate:
    """The gate to open: the one of `stage`, or the only one waiting; refuse when none waits."""
    _refuse_if_finished(ps, workflow, "approve")
    gates = waiting_gates(workflow, ps)
    who = f"ProgressiveSync {display_name(ps)}"
    if stage is not None:
        # With spec.groupBy a gate is a group's: "<group>/<stage>" (docs/groups.md).
        spec_stage = stage_of_spec(ps.spec, stage)
        if spec_stage is None:
            known = ", ".join(
                repr(s.name)
                for s in (ps.status.stages if ps.status and ps.status.stages else [])
                if ps.spec.group_by
            ) or ", ".join(repr(s.name) for s in ps.spec.stages)
            raise OpsRefused(f"{who} has no stage {stage!r} (its stages: {known})", exit_code=2)
        analysis = resolve_analysis(ps.spec.analysis, spec_stage.analysis)
        analysis_gate = analysis is not None and analysis.on_inconclusive is OnInconclusive.APPROVE
        if spec_stage.approval != ApprovalMode.MANUAL and not analysis_gate:
            raise OpsRefused(
                f"nothing to approve: stage {stage!r} of {who} has no manual approval gate "
                "(its approval is Automatic, and its analysis does not wait on Inconclusive)"
            )
        if stage in gates:
            return gates[stage]
        waiting = f"; the gate of {_quoted(gates)} waits" if gates else ""
        raise OpsRefused(
            f"nothing to approve: no approval gate of stage {stage!r} of {who} waits right now"
            f" ({_where(ps)}){waiting}"
        )
    if not gates:
        raise OpsRefused(f"nothing to approve: no approval gate of {who} waits right now ({_where(ps)})")
    if len(gates) > 1:
        raise OpsRefused(
            f"several approval gates of {who} wait ({_quoted(gates)}); pick one with --stage", exit_code=2
        )
    return next(iter(gates.values()))


def _quoted(gates: Mapping[str, Gate]) -> str:
    return ", ".join(repr(name) for name in gates)


def _where(ps: ProgressiveSync) -> str:
    status = ps.status
    if status is None or status.phase is None:
        return "the rollout has not started"
    stage = f", stage {status.current_stage!r}" if status.current_stage else ""
    return f"the rollout is {status.phase.value}{stage}"


def approve_gate(workflow: dict[str, Any], gate: Gate, now: datetime) -> dict[str, Any]:
    """The Workflow with the gate's node marked Succeeded, the way `argo resume` opens a suspend node.

    Only the gate changes: `spec.suspend` is the watcher's (it mirrors `spec.paused`), so approving
    a paused rollout opens the gate and the stage starts once the rollout is unpaused. Nodes Argo
    stored compressed are written back compressed.
    """
    updated = json.loads(json.dumps(workflow))
    status = updated.setdefault("status", {})
    compressed = not isinstance(status.get("nodes"), Mapping) or not status.get("nodes")
    nodes = dict(workflow_nodes(status))
    node = dict(nodes[gate.node_id])
    node["phase"] = "Succeeded"
    node["finishedAt"] = format_time(now)
    node["message"] = f"approved by progressive-sync approve at {format_time(now)}"
    nodes[gate.node_id] = node
    if compressed and status.get("compressedNodes"):
        status["compressedNodes"] = base64.b64encode(gzip.compress(json.dumps(nodes).encode())).decode()
    else:
        status["nodes"] = nodes
    return updated
