"""What the operator commands read and show: the view of a ProgressiveSync, its Workflow and its records.

`progressive-sync status` (and `status --watch`, the demo, and the other commands' refusals) read a
ProgressiveSync, the Workflow of its rollout and, for the per-cluster list, its ProgressiveSyncStage
objects; this module turns what the API server returned into a `RolloutView` and into what to
print (the header lines, the rows of the tables, the lines of a follow, the `-o json|yaml` data),
with no client and no clock: each function gets the objects and `now`. It decides nothing about
what to change: that is `orchestrator.ops.decisions`. How the tables are drawn is
`orchestrator.ops.tables`; the API calls are in `orchestrator.ops.actions`.

A ProgressiveSync this version cannot read is an `OpsRefused` (the operator commands' one refusal:
a message that names the object and the way forward, and the exit code).

Callers: `orchestrator.ops.decisions`, `orchestrator.ops.actions`, `orchestrator.ops.tables`,
`orchestrator.ops.live`, `orchestrator.cli.ops_cmd`, the demo, tests.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import IntEnum, StrEnum
from typing import Any

import pydantic

from orchestrator.api.groups import GROUP_SEPARATOR, describe_groups, group_phases, spec_stage
from orchestrator.api.models import (
    ApprovalMode,
    ClusterFailure,
    MoreClusters,
    ProgressiveSync,
    RollbackStatus,
    RolloutPhase,
    RolloutStatus,
    StageCounts,
    StagePhase,
    StageStatus,
)
from orchestrator.api.phases import FINISHED_ROLLOUT_PHASES, STOPPED_ROLLOUT_PHASES
from orchestrator.api.stage_records import (
    ClusterRollback,
    ClusterState,
    ProgressiveSyncStage,
    StageSummary,
    outcomes_of,
    summary_line,
)
from orchestrator.core.clock import format_time, parse_time
from orchestrator.ops.analysis_runs import AnalysisRunView, analysis_run_views, runs_data
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
    WIDE = "wide"  # `status`: the table and every cluster of the rollout, from its records
    JSON = "json"
    YAML = "yaml"
    NAME = "name"  # the object as `kubectl get -o name` prints it


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
    ROLLED_BACK = 6  # the rollout failed and its rollback restored every cluster it changed


def watch_exit_code(view: RolloutView) -> WatchExit:
    """How `status --watch` exits for a rollout it followed to its end."""
    if view.phase == RolloutPhase.SUCCEEDED:
        return WatchExit.SUCCEEDED
    if view.phase == RolloutPhase.CANCELLED:
        return WatchExit.CANCELLED
    if view.phase == RolloutPhase.ROLLED_BACK:
        return WatchExit.ROLLED_BACK
    return WatchExit.FAILED


class OpsRefused(Exception):
    """The command could not do what was asked; the message says why and what to do instead."""

    def __init__(self, message: str, *, exit_code: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


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
    """One stage as `status` shows it: its phase and its summary, as the ProgressiveSync holds them."""

    name: str
    phase: StagePhase
    message: str = ""
    summary: StageSummary = field(default_factory=lambda: summary_of(None))
    started_at: datetime | None = None
    finished_at: datetime | None = None
    approval: ApprovalMode = ApprovalMode.AUTOMATIC
    waiting_for_approval: bool = False
    # The stage's approvalWindowSeconds (None: the watcher's default), and while its gate waits, when
    # the gate closes: the Workflow's deadline (startedAt + activeDeadlineSeconds), which budgets it.
    approval_window_seconds: int | None = None
    approval_closes_at: datetime | None = None
    # The stage's analysis gate as the status holds it: `<run> <phase>: <message>` ("" without one).
    analysis: str = ""

    def duration(self, now: datetime) -> timedelta | None:
        """Started → finished, or → now while it runs; None before it starts."""
        return _duration(self.started_at, self.finished_at, now)

    @property
    def counts(self) -> StageCounts:
        """How many clusters the stage took and where they stand."""
        return self.summary.counts

    @property
    def syncing(self) -> tuple[str, ...]:
        """The first clusters in flight (the summary's list)."""
        return self.summary.syncing

    @property
    def failed(self) -> tuple[ClusterFailure, ...]:
        """The first clusters that failed, with reasons (the summary's list)."""
        return self.summary.failed

    @property
    def done_count(self) -> int:
        """Clusters that finished, well or badly."""
        return self.counts.completed + self.counts.failed + (self.counts.skipped or 0)

    @property
    def target_count(self) -> int:
        """Clusters the stage took."""
        return self.counts.targets


@dataclass(frozen=True)
class ClusterView:
    """One cluster of the current rollout, as its stage's ProgressiveSyncStage object records it."""

    name: str
    stage: str
    state: str
    """Syncing, Completed, Failed, or NotStarted (a target without a record)."""
    reason: str = ""
    note: str = ""
    revisions: tuple[str, ...] = ()
    started_at: datetime | None = None
    finished_at: datetime | None = None
    rollback: ClusterRollback | None = None
    """Its rollback, once the rollout rolled it back."""

    @property
    def state_text(self) -> str:
        """Its state, and its rollback's: `Completed, RolledBack` (the reasons in the wide rows)."""
        return f"{self.state}, {self.rollback.state.value}" if self.rollback else self.state


NOT_STARTED = "NotStarted"


@dataclass(frozen=True)
class RolloutView:
    """Everything `status` shows of one ProgressiveSync, read from its object, its Workflow and (for
    the per-cluster list) its records."""

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
    # Every cluster of the current rollout, from its records; None when they were not read (the
    # table and `--watch` read the ProgressiveSync alone).
    clusters: tuple[ClusterView, ...] | None = None
    # The rollout's AnalysisRuns (orchestrator.ops.analysis_runs); None when they were not read.
    analysis_runs: tuple[AnalysisRunView, ...] | None = None
    # The rollout's rollback (`status.rollback`), once one started.
    rollback: RollbackStatus | None = None

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


def summary_of(entry: StageStatus | None) -> StageSummary:
    """A stage's summary as the ProgressiveSync status holds it (what `apply_summary` put there)."""
    if entry is None:
        return StageSummary(StageCounts(), (), (), (), 0, 0, 0, ())
    more = entry.more or MoreClusters()
    return StageSummary(
        counts=entry.tally(),
        syncing=tuple(entry.syncing),
        failed=tuple(entry.failed),
        notes=tuple(entry.notes),
        more_syncing=more.syncing,
        more_failed=more.failed,
        more_notes=more.notes,
        records=tuple(entry.records),
        skipped=tuple(entry.skipped),
        more_skipped=more.skipped or 0,
    )


def cluster_views(
    stage_names: Sequence[str], records: Iterable[ProgressiveSyncStage]
) -> tuple[ClusterView, ...]:
    """Every cluster of the rollout whose `records` these are: stage by stage (in `stage_names`
    order, then any other by its index), each stage's targets in rollout order (a target without a
    record has not started), then any cluster recorded without being a target."""
    by_stage: dict[str, list[ProgressiveSyncStage]] = {}
    index: dict[str, int] = {}
    for part in records:
        by_stage.setdefault(part.spec.stage, []).append(part)
        index[part.spec.stage] = part.spec.stage_index
    position = {name: i for i, name in enumerate(stage_names)}
    order = sorted(by_stage, key=lambda stage: (position.get(stage, len(position)), index[stage], stage))
    views: list[ClusterView] = []
    for stage in order:
        outcomes = outcomes_of(stage, by_stage[stage])
        extra = [name for name in outcomes.ordered() if name not in set(outcomes.targets)]
        for name in (*outcomes.targets, *extra):
            record = outcomes.clusters.get(name)
            if record is None:
                views.append(ClusterView(name=name, stage=stage, state=NOT_STARTED))
                continue
            views.append(
                ClusterView(
                    name=name,
                    stage=stage,
                    state=record.state.value,
                    reason=record.reason,
                    note=record.note,
                    revisions=tuple(record.revisions or ()),
                    started_at=record.started_at,
                    finished_at=record.finished_at,
                    rollback=record.rollback,
                )
            )
    return tuple(views)


def rollout_view(
    ps: ProgressiveSync,
    workflow: Mapping[str, Any] | None = None,
    records: Sequence[ProgressiveSyncStage] | None = None,
    runs: Sequence[Mapping[str, Any]] | None = None,
) -> RolloutView:
    """Build the view: stages in rollout order from the status, else the spec's stages as Pending.

    `workflow` (the rollout's Workflow, when there is one) tells which approval gate waits.
    `records` (the ProgressiveSyncStage objects of the current rollout, when read) give every
    cluster (`cluster_views`); records of another rollout are left out. `runs` (the rollout's
    AnalysisRun objects, when read) give each run and its metrics (`analysis_run_views`).
    """
    status = ps.status
    # With spec.groupBy the status names each group's stages "<group>/<stage>" (docs/groups.md).
    run_names = [entry.name for entry in (status.stages if status and status.stages else [])]
    run_stages = {name: found for name in run_names if (found := spec_stage(ps.spec, name)) is not None}
    approvals = {stage.name: stage.approval for stage in ps.spec.stages}
    approvals.update({name: stage.approval for name, stage in run_stages.items()})
    windows = {stage.name: stage.approval_window_seconds for stage in ps.spec.stages}
    windows.update({name: stage.approval_window_seconds for name, stage in run_stages.items()})
    waiting = set(waiting_gates(workflow, ps)) if workflow is not None else set()
    closes_at = workflow_deadline(workflow) if waiting and workflow is not None else None
    if status is not None and status.stages:
        stages = tuple(
            StageView(
                name=entry.name,
                phase=entry.phase,
                message=entry.message,
                summary=summary_of(entry),
                started_at=entry.started_at,
                finished_at=entry.finished_at,
                approval=approvals.get(entry.name, ApprovalMode.AUTOMATIC),
                waiting_for_approval=entry.name in waiting,
                approval_window_seconds=windows.get(entry.name),
                approval_closes_at=closes_at if entry.name in waiting else None,
                analysis=f"{entry.analysis.run} {entry.analysis.phase}: {entry.analysis.message}"
                if entry.analysis is not None
                else "",
            )
            for entry in status.stages
        )
    else:
        stages = tuple(
            StageView(
                name=stage.name,
                phase=StagePhase.PENDING,
                approval=stage.approval,
                approval_window_seconds=stage.approval_window_seconds,
            )
            for stage in ps.spec.stages
        )
    clusters: tuple[ClusterView, ...] | None = None
    if records is not None:
        rollout_id = status.rollout.id if status is not None and status.rollout is not None else None
        ours = [record for record in records if record.spec.rollout_id == rollout_id]
        clusters = cluster_views([stage.name for stage in stages], ours)
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
        clusters=clusters,
        analysis_runs=analysis_run_views(runs, [stage.name for stage in stages])
        if runs is not None
        else None,
        rollback=status.rollback if status else None,
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


def cluster_state_text(state: str, reason: str = "", note: str = "") -> str:
    """A cluster's state as the tables say it: `updated`, `syncing` (with what holds it),
    `failed: <reason>`, `not started`."""
    if state == ClusterState.FAILED.value:
        return f"failed: {reason}" if reason else "failed"
    if state == ClusterState.SYNCING.value:
        return f"syncing: {note}" if note else "syncing"
    if state == ClusterState.COMPLETED.value:
        return "updated"
    if state == ClusterState.SKIPPED.value:
        return f"skipped: {reason}" if reason else "skipped"
    return "not started"


def cluster_rows(view: RolloutView) -> list[tuple[str, str, str]]:
    """(cluster, stage, state): every cluster of the rollout when its records were read (rollout
    order); else the clusters that matter now, from the summary: each stage's failed, then its
    clusters in flight (the first 20 of each; `left_out_lines` says how many more)."""
    if view.clusters is not None:
        return [(c.name, c.stage, cluster_state_text(c.state_text, c.reason, c.note)) for c in view.clusters]
    rows = []
    for stage in view.stages:
        notes = {note.name: note.note for note in stage.summary.notes}
        for failure in stage.failed:
            rows.append((failure.name, stage.name, cluster_state_text("Failed", failure.reason)))
        for name in stage.syncing:
            rows.append((name, stage.name, cluster_state_text("Syncing", note=notes.get(name, ""))))
        rows += [(s.name, stage.name, cluster_state_text("Skipped", s.reason)) for s in stage.summary.skipped]
    return rows


def wide_cluster_rows(view: RolloutView) -> list[tuple[str, ...]]:
    """One row per cluster of the rollout under `WIDE_CLUSTER_COLUMNS` (empty when the records
    were not read)."""
    return [
        (
            c.name,
            c.stage,
            c.state_text,
            ",".join(revision[:12] for revision in c.revisions) or "-",
            format_time(c.started_at) if c.started_at else "-",
            format_time(c.finished_at) if c.finished_at else "-",
            "; ".join(text for text in (c.reason or c.note, c.rollback.reason if c.rollback else "") if text),
        )
        for c in view.clusters or ()
    ]


def analysis_lines(view: RolloutView) -> list[str]:
    """Each stage's analysis gate (its AnalysisRun, phase, and each metric or the failing one)."""
    return [f"analysis of {stage.name!r}: {stage.analysis}" for stage in view.stages if stage.analysis]


def left_out_lines(view: RolloutView) -> list[str]:
    """What the summary's lists left out, per stage, and how to see every cluster (nothing when
    every cluster is shown)."""
    if view.clusters is not None:
        return []
    lines = []
    for stage in view.stages:
        summary = stage.summary
        parts = [
            f"{count} more {what}"
            for count, what in ((summary.more_failed, "failed"), (summary.more_syncing, "in flight"))
            if count
        ]
        if parts:
            lines.append(f"stage {stage.name!r}: {' and '.join(parts)} not listed")
    if lines:
        lines.append(f"every cluster: progressive-sync status {view.name} -n {view.namespace} --clusters")
    return lines


def next_step_hint(view: RolloutView) -> str:
    """What a person can do next, when there is an obvious next command."""
    if view.waiting_stages:
        stage = view.waiting_stages[0]
        return f"stage {stage!r} waits for approval: progressive-sync approve {view.name} --stage {stage!r}"
    if view.phase in RETRYABLE_PHASES and view.is_finished:
        return f"to run the rollout again: progressive-sync retry {view.name} -n {view.namespace}"
    if view.paused and view.phase not in FINISHED_ROLLOUT_PHASES:
        return f"paused: no new step starts until progressive-sync unpause {view.name} -n {view.namespace}"
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
    groups = describe_groups(view.stages)  # spec.groupBy: each group's phase (docs/groups.md)
    if groups:
        rows.append(("groups:", _with_group_rollbacks(groups.removeprefix("groups: "), view.rollback)))
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
    if view.rollback is not None:
        rows.append(("rollback:", rollback_text(view.rollback)))
    if view.message:
        rows.append(("message:", view.message))
    hint = next_step_hint(view)
    if hint:
        rows.append(("next:", hint))
    return rows


# How `status` names a group's part in the rollback (`status.rollback.groups`, docs/groups.md).
GROUP_ROLLING_BACK = "RollingBack"
GROUP_ROLLED_BACK = "RolledBack"
GROUP_LEFT = "Left"


def group_rollback_states(rollback: RollbackStatus | None) -> dict[str, str]:
    """Each group's part in the rollout's rollback: RollingBack (while it runs) or RolledBack, or
    Left (left as it is); {} without a grouped rollback."""
    if rollback is None or not rollback.groups:
        return {}
    back = GROUP_ROLLED_BACK if rollback.finished_at is not None else GROUP_ROLLING_BACK
    return {group.name: back if group.rolled_back else GROUP_LEFT for group in rollback.groups}


def _with_group_rollbacks(line: str, rollback: RollbackStatus | None) -> str:
    """The groups line with each group's part in the rollback: `eu-west-1 Failed, RolledBack,
    us-east-1 Succeeded, Left` (the line as it is without a grouped rollback)."""
    states = group_rollback_states(rollback)
    if not states:
        return line
    parts = []
    for part in line.split(", "):
        group = part.rpartition(" ")[0]
        parts.append(f"{part} ({states[group]})" if group in states else part)
    return ", ".join(parts)


def rollback_text(rollback: RollbackStatus) -> str:
    """The rollback in one line: `StageFailed, scope FailedStage (canary): 1 restored, 0 left alone,
    0 not restored` (counts once it ended; how many it looks at while it runs)."""
    where = f"{rollback.trigger}, scope {rollback.scope} ({', '.join(rollback.stages)})"
    if rollback.finished_at is None:
        return f"{where}: rolling back {rollback.targets} cluster(s)"
    not_restored = ", ".join(f"{c.name} ({c.reason})" for c in rollback.not_restored[:3])
    return (
        f"{where}: {rollback.rolled_back} restored, {rollback.left_alone} left alone, "
        f"{rollback.failed} not restored" + (f": {not_restored}" if not_restored else "")
    )


STAGE_COLUMNS = ("STAGE", "PHASE", "DONE", "FAILED", "DURATION", "MESSAGE")
CLUSTER_COLUMNS = ("CLUSTER", "STAGE", "STATE")
WIDE_CLUSTER_COLUMNS = ("CLUSTER", "STAGE", "STATE", "REVISIONS", "STARTED", "FINISHED", "REASON / NOTE")


def stage_rows(view: RolloutView, now: datetime) -> list[tuple[str, str, str, str, str, str]]:
    """One row per stage under `STAGE_COLUMNS` (the message cut to one line)."""
    return [
        (
            stage.name,
            stage_state_text(stage),
            stage_progress(stage),
            str(stage.counts.failed) if stage.counts.failed else "-",
            format_duration(stage.duration(now)),
            shorten(stage_message(stage), MESSAGE_COLUMN_WIDTH),
        )
        for stage in view.stages
    ]


def stage_message(stage: StageView) -> str:
    """The stage's message; while its gate waits, first when the gate closes (and its window)."""
    if not (stage.waiting_for_approval and stage.approval_closes_at is not None):
        return stage.message
    window = stage.approval_window_seconds
    closes = f"gate closes {format_time(stage.approval_closes_at)}" + (
        f" (approvalWindowSeconds {window})" if window else ""
    )
    return f"{closes}; {stage.message}" if stage.message else closes


def workflow_deadline(workflow: Mapping[str, Any]) -> datetime | None:
    """When Argo fails the Workflow (and a gate still waiting with it): its start plus its
    activeDeadlineSeconds, which budgets each gate's approval window; None when either is unknown."""
    started = parse_time((workflow.get("status") or {}).get("startedAt"))
    seconds = (workflow.get("spec") or {}).get("activeDeadlineSeconds")
    if started is None or not isinstance(seconds, int) or isinstance(seconds, bool):
        return None
    return started + timedelta(seconds=seconds)


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
        "rollback": view.rollback.model_dump(by_alias=True, exclude_none=True, mode="json")
        if view.rollback is not None
        else None,
        "workflowPhase": view.workflow_phase or None,
        "waitingForApproval": list(view.waiting_stages),
        **_groups_data(view),
        "stages": [
            {
                "name": stage.name,
                "phase": stage.phase.value,
                "approval": stage.approval.value,
                "waitingForApproval": stage.waiting_for_approval,
                "approvalWindowSeconds": stage.approval_window_seconds,
                "approvalClosesAt": stamp(stage.approval_closes_at),
                "message": stage.message,
                "counts": stage.counts.model_dump(by_alias=True, exclude_none=True),
                "syncing": list(stage.syncing),
                "failed": [{"name": f.name, "reason": f.reason} for f in stage.failed],
                "notes": [{"name": n.name, "note": n.note} for n in stage.summary.notes],
                "skipped": [{"name": s.name, "reason": s.reason} for s in stage.summary.skipped],
                "more": {
                    "syncing": stage.summary.more_syncing,
                    "failed": stage.summary.more_failed,
                    "notes": stage.summary.more_notes,
                    "skipped": stage.summary.more_skipped,
                },
                "records": list(stage.summary.records),
                "startedAt": stamp(stage.started_at),
                "finishedAt": stamp(stage.finished_at),
                "durationSeconds": seconds(stage.duration(now)),
            }
            for stage in view.stages
        ],
        **({"clusters": [_cluster_data(c) for c in view.clusters]} if view.clusters is not None else {}),
        **({"analysisRuns": runs_data(view.analysis_runs)} if view.analysis_runs is not None else {}),
    }


def _groups_data(view: RolloutView) -> dict[str, Any]:
    """`groups` of the `-o json` form with spec.groupBy: each group's phase and stages ({} without)."""
    phases = group_phases(view.stages)
    if not phases:
        return {}
    states = group_rollback_states(view.rollback)
    return {
        "groups": [
            {
                "name": group,
                "phase": phase.value,
                "stages": [s.name for s in view.stages if s.name.startswith(group + GROUP_SEPARATOR)],
                **({"rollback": states[group]} if group in states else {}),
            }
            for group, phase in phases.items()
        ]
    }


def _cluster_data(cluster: ClusterView) -> dict[str, Any]:
    return {
        "name": cluster.name,
        "stage": cluster.stage,
        "state": cluster.state,
        "reason": cluster.reason,
        "note": cluster.note,
        "revisions": list(cluster.revisions),
        "startedAt": format_time(cluster.started_at) if cluster.started_at else None,
        "finishedAt": format_time(cluster.finished_at) if cluster.finished_at else None,
        **(
            {"rollback": cluster.rollback.model_dump(by_alias=True, exclude_none=True, mode="json")}
            if cluster.rollback is not None
            else {}
        ),
    }


# --- following a rollout live ------------------------------------------------------------------


def _stage_line(stage: StageView) -> str:
    return f"stage {stage.name!r}: {stage_state_text(stage)} {summary_line(stage.summary)}"


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
