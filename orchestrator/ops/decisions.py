"""What the operator commands decide and print, as pure functions of the objects they read.

`progressive-sync status|cancel|pause|resume|approve|retry` read a ProgressiveSync (and the
Workflow of its rollout), decide what to do, write at most one change, and print what happened.
The deciding and what to print live here (the rows of the tables, the lines of a follow), with no
client and no clock: each function gets the objects as the API server returned them and `now`.
How the tables are drawn is `orchestrator.ops.tables`. The API calls are in `orchestrator.ops.actions`
and the click wiring in `orchestrator.cli.ops_cmd`.

A refusal is an `OpsRefused` carrying a message that names the object and the way forward, and the
exit code (1: nothing to do for that object; the CLI maps usage errors to 2 itself).

Callers: `orchestrator.ops.actions`, `orchestrator.cli.ops_cmd`, the demo, tests.
"""

from __future__ import annotations

import base64
import gzip
import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import IntEnum, StrEnum
from typing import Any

import pydantic

from orchestrator.api.metadata import rollout_workflow_name
from orchestrator.api.models import (
    ApprovalMode,
    ClusterFailure,
    ProgressiveSync,
    RolloutPhase,
    RolloutStatus,
    StageCounts,
    StagePhase,
    StageStatus,
)
from orchestrator.api.phases import (
    FINISHED_ROLLOUT_PHASES,
    STOPPED_ROLLOUT_PHASES,
    STOPPED_STAGE_PHASES,
    UNFINISHED_ROLLOUT_PHASES,
)
from orchestrator.api.stage_records import StageOutcomes
from orchestrator.core.clock import format_time
from orchestrator.workflows.view import FINISHED_PHASES, workflow_nodes
from workflow_templates import names

# Rollouts a person may start again with `retry`: a failed one, and one someone cancelled (the
# watcher never restarts either on its own).
RETRYABLE_PHASES = STOPPED_ROLLOUT_PHASES


# Stage messages can carry a whole failure reason; the table keeps one line per stage (the cluster
# rows and `-o json` have the full text).
MESSAGE_COLUMN_WIDTH = 72


class OutputFormat(StrEnum):
    """What `-o` accepts on every operator command."""

    TABLE = "table"
    JSON = "json"
    YAML = "yaml"


class WatchExit(IntEnum):
    """The exit codes of `progressive-sync status NAME --watch`, one per way a follow can end.

    Scripts branch on them (docs: README, operator commands); 2 is click's usage error.
    """

    SUCCEEDED = 0
    FAILED = 1
    USAGE = 2
    CANCELLED = 3
    TIMEOUT = 4  # the rollout did not finish within --timeout
    UNREADABLE = 5  # no such ProgressiveSync, no rollout, or the API server refused or did not answer


def watch_exit_code(view: RolloutView) -> WatchExit:
    """How `status --watch` exits for a rollout it followed to its end."""
    if view.phase == RolloutPhase.SUCCEEDED:
        return WatchExit.SUCCEEDED
    if view.phase == RolloutPhase.CANCELLED:
        return WatchExit.CANCELLED
    return WatchExit.FAILED


class OpsRefused(Exception):
    """The command could not do what was asked; the message says why and what to do instead."""

    def __init__(self, message: str, *, exit_code: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


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


# --- reading a ProgressiveSync -----------------------------------------------------------------


def parse_progressive_sync(obj: Mapping[str, Any]) -> ProgressiveSync:
    """The object as the model; OpsRefused (exit 1) when it does not fit the API we know."""
    try:
        return ProgressiveSync.model_validate(obj)
    except pydantic.ValidationError as exc:
        meta = obj.get("metadata") or {}
        raise OpsRefused(
            f"ProgressiveSync {meta.get('namespace')}/{meta.get('name')} does not match this "
            f"progressive-sync version's API ({exc.error_count()} errors, first: {exc.errors()[0]['msg']}); "
            "use the CLI of the version the watcher runs"
        ) from exc


def display_name(ps: ProgressiveSync) -> str:
    """`namespace/name` for messages."""
    return f"{ps.metadata.namespace}/{ps.metadata.name}"


# --- the status view ---------------------------------------------------------------------------


@dataclass(frozen=True)
class StageView:
    """One stage as `status` shows it."""

    name: str
    phase: StagePhase
    message: str = ""
    targets: tuple[str, ...] = ()
    syncing: tuple[str, ...] = ()
    completed: tuple[str, ...] = ()
    failed: tuple[ClusterFailure, ...] = ()
    started_at: datetime | None = None
    finished_at: datetime | None = None
    approval: ApprovalMode = ApprovalMode.AUTOMATIC
    waiting_for_approval: bool = False
    # For a stage shown from its status summary alone (its records not read): the status's counts.
    counted: StageCounts | None = None

    def duration(self, now: datetime) -> timedelta | None:
        """Started → finished, or → now while it runs; None before it starts."""
        return _duration(self.started_at, self.finished_at, now)

    @property
    def done_count(self) -> int:
        """Clusters that finished, well or badly."""
        if self.counted is not None:
            return self.counted.completed + self.counted.failed
        return len(self.completed) + len(self.failed)

    @property
    def target_count(self) -> int:
        """Clusters the stage took."""
        return self.counted.targets if self.counted is not None else len(self.targets)


@dataclass(frozen=True)
class RolloutView:
    """Everything `status` shows of one ProgressiveSync, read from its object and its Workflow."""

    namespace: str
    name: str
    generation: int | None
    observed_generation: int | None
    paused: bool
    phase: RolloutPhase | None
    message: str
    current_stage: str
    progress: str
    rollout: RolloutStatus | None
    stages: tuple[StageView, ...]
    workflow_phase: str = ""

    @property
    def display(self) -> str:
        """`namespace/name`."""
        return f"{self.namespace}/{self.name}"

    @property
    def is_finished(self) -> bool:
        """The rollout the status describes has ended, and the watcher has seen the current spec.

        A status from before the latest spec change does not count: the watcher may be about to
        start a new rollout for it.
        """
        if self.phase not in FINISHED_ROLLOUT_PHASES or self.rollout is None:
            return False
        return (
            self.observed_generation is None
            or self.generation is None
            or (self.observed_generation >= self.generation)
        )

    @property
    def is_settled(self) -> bool:
        """Finished, and its Workflow (when one was found) has ended too: nothing runs any more.

        The rollout's phase is written by the Workflow's exit handler, a moment before the Workflow
        itself ends; a display that stops here shows both final.
        """
        return self.is_finished and (not self.workflow_phase or self.workflow_phase in FINISHED_PHASES)

    @property
    def waiting_stages(self) -> tuple[str, ...]:
        """Stages whose manual approval gate waits for a person right now."""
        return tuple(stage.name for stage in self.stages if stage.waiting_for_approval)

    def duration(self, now: datetime) -> timedelta | None:
        """How long the rollout ran (or runs)."""
        if self.rollout is None:
            return None
        return _duration(self.rollout.started_at, self.rollout.finished_at, now)


def rollout_view(
    ps: ProgressiveSync,
    workflow: Mapping[str, Any] | None = None,
    outcomes: Mapping[str, StageOutcomes] | None = None,
) -> RolloutView:
    """Build the view: stages in rollout order from the status, else the spec's stages as Pending.

    `workflow` (the rollout's Workflow, when there is one) tells which approval gate waits.
    `outcomes` (stage name -> the stage's ProgressiveSyncStage records read together) list every
    cluster of a stage; without them a stage shows what its status summary holds (its counts, the
    first clusters in flight and failed).
    """
    status = ps.status
    approvals = {stage.name: stage.approval for stage in ps.spec.stages}
    waiting = set(waiting_gates(workflow, ps)) if workflow is not None else set()
    found = outcomes or {}
    if status is not None and status.stages:

        def lists(entry: StageStatus) -> tuple[tuple[Any, ...], ...]:
            stage = found.get(entry.name)
            if stage is None:
                return (), tuple(entry.syncing), (), tuple(entry.failed)
            failed = tuple(
                ClusterFailure(name=name, reason=stage.clusters[name].reason) for name in stage.failed
            )
            return stage.targets, stage.syncing, stage.completed, failed

        stages = tuple(
            StageView(
                name=entry.name,
                phase=entry.phase,
                message=entry.message,
                targets=targets,
                syncing=syncing,
                completed=completed,
                failed=failed,
                started_at=entry.started_at,
                finished_at=entry.finished_at,
                approval=approvals.get(entry.name, ApprovalMode.AUTOMATIC),
                waiting_for_approval=entry.name in waiting,
                counted=entry.tally() if entry.name not in found and entry.counts is not None else None,
            )
            for entry in status.stages
            for targets, syncing, completed, failed in [lists(entry)]
        )
    else:
        stages = tuple(
            StageView(name=stage.name, phase=StagePhase.PENDING, approval=stage.approval)
            for stage in ps.spec.stages
        )
    workflow_status = (workflow or {}).get("status") or {}
    return RolloutView(
        namespace=ps.metadata.namespace or "",
        name=ps.metadata.name,
        generation=ps.metadata.generation,
        observed_generation=status.observed_generation if status else None,
        paused=ps.spec.paused,
        phase=status.phase if status else None,
        message=(status.message or "") if status else "",
        current_stage=(status.current_stage or "") if status else "",
        progress=(status.progress or "") if status else "",
        rollout=status.rollout if status else None,
        stages=stages,
        workflow_phase=str(workflow_status.get("phase") or ""),
    )


def _duration(start: datetime | None, end: datetime | None, now: datetime) -> timedelta | None:
    if start is None:
        return None
    return max((end or now) - start, timedelta(0))


def format_duration(value: timedelta | None) -> str:
    """`8s`, `1m05s`, `2h03m`; `-` when unknown."""
    if value is None:
        return "-"
    seconds = int(value.total_seconds())
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def stage_progress(stage: StageView) -> str:
    """`done/targets` (`-` before the stage has targets)."""
    if not stage.target_count:
        return "-"
    return f"{stage.done_count}/{stage.target_count}"


def phase_text(view: RolloutView) -> str:
    """The rollout phase as a person reads it, with pause and waiting gates made visible."""
    phase = view.phase.value if view.phase else "Pending"
    notes = []
    if view.paused and view.phase not in FINISHED_ROLLOUT_PHASES and view.phase != RolloutPhase.PAUSED:
        notes.append("paused")
    if view.waiting_stages:
        notes.append("waiting for approval")
    return f"{phase} ({', '.join(notes)})" if notes else phase


def stage_state_text(stage: StageView) -> str:
    """The stage's phase, or what it waits on."""
    if stage.waiting_for_approval:
        return "WaitingApproval"
    return stage.phase.value


def cluster_rows(view: RolloutView) -> list[tuple[str, str, str]]:
    """(cluster, stage, state) for every cluster a stage took, in rollout order."""
    rows = []
    for stage in view.stages:
        failed = {failure.name: failure.reason for failure in stage.failed}
        for cluster in stage.targets:
            if cluster in failed:
                state = f"failed: {failed[cluster]}" if failed[cluster] else "failed"
            elif cluster in stage.completed:
                state = "updated"
            elif cluster in stage.syncing:
                state = "syncing"
            elif stage.phase in STOPPED_STAGE_PHASES:
                state = "not started"
            else:
                state = "waiting"
            rows.append((cluster, stage.name, state))
    return rows


def next_step_hint(view: RolloutView) -> str:
    """What a person can do next, when there is an obvious next command."""
    if view.waiting_stages:
        stage = view.waiting_stages[0]
        return f"stage {stage!r} waits for approval: progressive-sync approve {view.name} --stage {stage!r}"
    if view.phase in RETRYABLE_PHASES and view.is_finished:
        return f"to run the rollout again: progressive-sync retry {view.name} -n {view.namespace}"
    if view.paused and view.phase not in FINISHED_ROLLOUT_PHASES:
        return f"paused: no new step starts until progressive-sync resume {view.name} -n {view.namespace}"
    return ""


def shorten(text: str, width: int) -> str:
    """`text` cut to `width` characters, ending in "..." when cut."""
    return text if len(text) <= width else text[: width - 3].rstrip() + "..."


def header_rows(view: RolloutView, now: datetime) -> list[tuple[str, str]]:
    """(label, value) lines above the `status` tables: phase, stage, progress, rollout, next step."""
    rows = [("phase:", phase_text(view))]
    if view.current_stage:
        rows.append(("stage:", view.current_stage))
    if view.progress:
        rows.append(("progress:", f"{view.progress} clusters"))
    if view.rollout is not None:
        rollout = view.rollout
        revision = f" to revision {rollout.revision[:12]}" if rollout.revision else ""
        rows.append(("rollout:", f"{rollout.id} (attempt {rollout.attempt}){revision}"))
        if rollout.workflow:
            workflow = (
                f"{rollout.workflow} ({view.workflow_phase})" if view.workflow_phase else rollout.workflow
            )
            rows.append(("workflow:", workflow))
        if rollout.started_at is not None:
            verb = "took" if rollout.finished_at else "running for"
            took = format_duration(view.duration(now))
            rows.append(("started:", f"{format_time(rollout.started_at)}, {verb} {took}"))
    if view.message:
        rows.append(("message:", view.message))
    hint = next_step_hint(view)
    if hint:
        rows.append(("next:", hint))
    return rows


STAGE_COLUMNS = ("STAGE", "PHASE", "DONE", "FAILED", "DURATION", "MESSAGE")
CLUSTER_COLUMNS = ("CLUSTER", "STAGE", "STATE")


def stage_rows(view: RolloutView, now: datetime) -> list[tuple[str, str, str, str, str, str]]:
    """One row per stage under `STAGE_COLUMNS` (the message cut to one line)."""
    return [
        (
            stage.name,
            stage_state_text(stage),
            stage_progress(stage),
            str(len(stage.failed)) if stage.failed else "-",
            format_duration(stage.duration(now)),
            shorten(stage.message, MESSAGE_COLUMN_WIDTH),
        )
        for stage in view.stages
    ]


def render_data(view: RolloutView, now: datetime) -> dict[str, Any]:
    """The `-o json|yaml` form of `status`: the status fields plus computed durations (seconds)."""

    def seconds(value: timedelta | None) -> float | None:
        return None if value is None else round(value.total_seconds(), 3)

    def stamp(value: datetime | None) -> str | None:
        return None if value is None else format_time(value)

    rollout: dict[str, Any] | None = None
    if view.rollout is not None:
        rollout = view.rollout.model_dump(by_alias=True, exclude_none=True, mode="json")
        rollout["durationSeconds"] = seconds(view.duration(now))
    return {
        "namespace": view.namespace,
        "name": view.name,
        "generation": view.generation,
        "observedGeneration": view.observed_generation,
        "paused": view.paused,
        "phase": view.phase.value if view.phase else None,
        "finished": view.is_finished,
        "message": view.message,
        "currentStage": view.current_stage or None,
        "progress": view.progress or None,
        "rollout": rollout,
        "workflowPhase": view.workflow_phase or None,
        "waitingForApproval": list(view.waiting_stages),
        "stages": [
            {
                "name": stage.name,
                "phase": stage.phase.value,
                "approval": stage.approval.value,
                "waitingForApproval": stage.waiting_for_approval,
                "message": stage.message,
                "targets": list(stage.targets),
                "syncing": list(stage.syncing),
                "completed": list(stage.completed),
                "failed": [{"name": f.name, "reason": f.reason} for f in stage.failed],
                **(
                    {
                        "counts": stage.counted.model_dump(by_alias=True),
                    }
                    if stage.counted is not None
                    else {}
                ),
                "startedAt": stamp(stage.started_at),
                "finishedAt": stamp(stage.finished_at),
                "durationSeconds": seconds(stage.duration(now)),
            }
            for stage in view.stages
        ],
    }


# --- following a rollout live ------------------------------------------------------------------


def _stage_line(stage: StageView) -> str:
    text = f"stage {stage.name!r}: {stage_state_text(stage)} {stage_progress(stage)}"
    if stage.syncing:
        text += f", syncing {', '.join(stage.syncing)}"
    if stage.failed:
        text += ", failed " + ", ".join(
            f"{f.name} ({f.reason})" if f.reason else f.name for f in stage.failed
        )
    return text


def change_lines(previous: RolloutView | None, current: RolloutView) -> list[str]:
    """The plain lines `status --watch` prints off a terminal: only what changed since `previous`."""
    lines = []
    before = _rollout_line(previous) if previous is not None else None
    now_line = _rollout_line(current)
    if now_line != before:
        lines.append(now_line)
    previous_stages = {stage.name: _stage_line(stage) for stage in previous.stages} if previous else {}
    for stage in current.stages:
        line = _stage_line(stage)
        if previous_stages.get(stage.name) != line and (
            previous is not None or stage.phase != StagePhase.PENDING
        ):
            lines.append(line)
    return lines


def _rollout_line(view: RolloutView) -> str:
    rollout = f" rollout {view.rollout.id}" if view.rollout else ""
    progress = f" {view.progress}" if view.progress else ""
    return f"{view.display}:{rollout} {phase_text(view)}{progress}"


def stage_durations(view: RolloutView, now: datetime) -> list[tuple[str, str, str]]:
    """(stage, phase, duration) for the demo's closing summary."""
    return [(stage.name, stage.phase.value, format_duration(stage.duration(now))) for stage in view.stages]


# --- decisions ---------------------------------------------------------------------------------


class WorkflowAction(StrEnum):
    """What `cancel` does to the rollout's Workflow."""

    STOP = "stop"
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
    """STOP the running Workflow; NONE when it is already being stopped; refuse when it finished."""
    _refuse_if_finished(ps, workflow, "cancel")
    shutdown = str((workflow.get("spec") or {}).get("shutdown") or "")
    if shutdown:
        return WorkflowAction.NONE
    return WorkflowAction.STOP


def decide_pause(ps: ProgressiveSync, *, paused: bool) -> bool:
    """True when `spec.paused` must change to `paused`; False when it already has that value."""
    return ps.spec.paused != paused


def decide_retry(ps: ProgressiveSync) -> RolloutStatus:
    """The rollout to retry; refuse unless it failed or was cancelled (and the watcher saw the spec)."""
    rollout = require_rollout(ps, "retry")
    status = ps.status
    phase = status.phase if status else None
    if phase not in RETRYABLE_PHASES:
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


def new_retry_token(now: datetime, entropy: str | None = None) -> str:
    """A fresh `progressivesync.io/retry` value: a UTC timestamp and a random suffix, never reused."""
    suffix = entropy if entropy is not None else secrets.token_hex(3)
    return f"{now.strftime('%Y%m%dT%H%M%SZ')}-{suffix}"


# --- approval gates ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Gate:
    """One waiting manual-approval suspend node of the rollout Workflow."""

    node_id: str
    stage: str


def _node_stage(node: Mapping[str, Any], task_to_stage: Mapping[str, str]) -> str:
    """The stage a gate belongs to: its `stage` input, else the stage task in its node name."""
    for parameter in (node.get("inputs") or {}).get("parameters") or []:
        if isinstance(parameter, Mapping) and parameter.get("name") == "stage" and parameter.get("value"):
            return str(parameter["value"])
    # Node names are `<workflow>.<stage task>.<task>`; the stage task maps back to the stage name.
    parts = str(node.get("name") or "").split(".")
    if len(parts) >= 3:
        return task_to_stage.get(parts[-2], parts[-2])
    return ""


def waiting_gates(workflow: Mapping[str, Any], ps: ProgressiveSync) -> dict[str, Gate]:
    """Stage name → the approval gate of that stage that waits now (a Running Suspend node).

    Bake waits are suspend nodes too, but they end by themselves; only the `approval` template
    (names.APPROVAL_TEMPLATE) is a gate a person opens.
    """
    stage_names = [stage.name for stage in ps.spec.stages]
    task_to_stage = dict(zip(names.stage_task_names(stage_names), stage_names, strict=True))
    gates: dict[str, Gate] = {}
    for node_id, node in workflow_nodes(workflow.get("status") or {}).items():
        if not isinstance(node, Mapping):
            continue
        if node.get("type") != "Suspend" or node.get("phase") != "Running":
            continue
        is_gate = node.get("templateName") == names.APPROVAL_TEMPLATE or (
            not node.get("templateName") and node.get("displayName") == names.APPROVE_TASK
        )
        if not is_gate:
            continue
        stage = _node_stage(node, task_to_stage)
        gates[stage] = Gate(node_id=str(node.get("id") or node_id), stage=stage)
    return gates


def decide_approve(ps: ProgressiveSync, workflow: Mapping[str, Any], stage: str | None) -> Gate:
    """The gate to open: the one of `stage`, or the only one waiting; refuse when none waits."""
    _refuse_if_finished(ps, workflow, "approve")
    gates = waiting_gates(workflow, ps)
    who = f"ProgressiveSync {display_name(ps)}"
    if stage is not None:
        spec_stage = next((s for s in ps.spec.stages if s.name == stage), None)
        if spec_stage is None:
            known = ", ".join(repr(s.name) for s in ps.spec.stages)
            raise OpsRefused(f"{who} has no stage {stage!r} (its stages: {known})", exit_code=2)
        if spec_stage.approval != ApprovalMode.MANUAL:
            raise OpsRefused(
                f"nothing to approve: stage {stage!r} of {who} has no manual approval gate "
                "(its approval is Automatic)"
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
    a paused rollout opens the gate and the stage starts once the rollout is resumed. Nodes Argo
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
