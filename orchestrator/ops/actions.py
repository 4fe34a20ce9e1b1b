"""The API side of the operator commands: read, decide, write once.

Each action reads the ProgressiveSync (and, where it matters, its rollout's Workflow), lets the
pure decision in `orchestrator.ops.decisions` say what to do (`status` builds the pure view of
`orchestrator.ops.view` instead), makes at most one write through
`orchestrator.kube.client.Kube`, and returns an `ops.Outcome` saying what happened. A write that carries a
resourceVersion and loses a race (409) is decided again on a fresh read, a bounded number of times.

What each command writes, and who acts on it:
- `cancel`: `spec.shutdown: Stop` on the Workflow (what `argo stop` does); Argo or the local
  executor stops it and runs the exit handler, which marks the rollout Cancelled.
- `pause` / `unpause`: `spec.paused` on the ProgressiveSync; the watcher suspends / resumes the
  Workflow.
- `approve`: the stage's waiting approval node in `status.nodes` marked Succeeded (what `argo
  resume` does to a suspend node), in one update carrying the resourceVersion.
- `rollback`: `read_for_rollback` only reads and refuses; the rollback itself runs in-process in
  `steps.manual_rollback` (the CLI calls it), writing what the exit handler's rollback writes.
- `retry`: the `progressivesync.io/retry` annotation set to a fresh token; the watcher starts a
  new attempt of the release when it sees a token it has not acted on.

Callers: `orchestrator.cli.ops_cmd`, the demo, tests.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from orchestrator.analysis.check import has_analysis
from orchestrator.api.groups import unfinished_groups
from orchestrator.api.metadata import paused_patch, retry_patch
from orchestrator.api.models import ProgressiveSync
from orchestrator.api.stage_records import ProgressiveSyncStage
from orchestrator.core.clock import Clock
from orchestrator.kube.client import (
    ANALYSIS_RUNS,
    PROGRESSIVE_SYNCS,
    WORKFLOWS,
    Conflict,
    Forbidden,
    Kube,
    NotFound,
)
from orchestrator.kube.stage_records import list_records
from orchestrator.ops import decisions as ops
from orchestrator.ops import view as ops_view
from orchestrator.ops.analysis_runs import run_selector
from orchestrator.workflows import control

log = logging.getLogger(__name__)

# Sleeps between attempts of a conditional write that lost a race (len + 1 attempts).
CONFLICT_BACKOFFS = (0.05, 0.1, 0.2, 0.5, 1.0)


@dataclass(frozen=True)
class Target:
    """Which ProgressiveSync a command acts on, and where its Workflows live."""

    namespace: str
    name: str
    # The watcher may create Workflows in another namespace; by default they sit next to the object.
    workflow_namespace: str | None = None

    @property
    def display(self) -> str:
        """`namespace/name`."""
        return f"{self.namespace}/{self.name}"

    @property
    def workflows_in(self) -> str:
        """The namespace of the rollout Workflows."""
        return self.workflow_namespace or self.namespace


# --- reading -----------------------------------------------------------------------------------


def read_progressive_sync(kube: Kube, target: Target) -> tuple[dict[str, Any], ProgressiveSync]:
    """The object and its model; OpsRefused naming the object and the fix when it is missing."""
    try:
        obj = kube.get(PROGRESSIVE_SYNCS, target.namespace, target.name)
    except NotFound as exc:
        raise ops_view.OpsRefused(
            f"ProgressiveSync {target.display} not found: check the name and the namespace (-n); "
            "`kubectl get progressivesyncs -A` lists them"
        ) from exc
    except Forbidden as exc:
        raise ops_view.OpsRefused(f"not allowed to read ProgressiveSync {target.display}: {exc}") from exc
    return obj, ops_view.parse_progressive_sync(obj)


def read_workflow(kube: Kube, target: Target, ps: ProgressiveSync, doing: str) -> dict[str, Any]:
    """The current rollout's Workflow; OpsRefused when there is no rollout or its Workflow is gone."""
    name = ops.workflow_name_of(ps, doing)
    try:
        return kube.get(WORKFLOWS, target.workflows_in, name)
    except NotFound as exc:
        raise ops_view.OpsRefused(
            f"the Workflow {target.workflows_in}/{name} of ProgressiveSync {target.display} does not exist "
            f"(deleted, or in another namespace: pass --workflow-namespace): nothing to {doing}"
        ) from exc


def read_view(kube: Kube, target: Target, *, clusters: bool = False) -> ops_view.RolloutView:
    """The status view of the ProgressiveSync, with its Workflow when there is one; with `clusters`,
    every cluster of the current rollout too, from its ProgressiveSyncStage objects (one list); with
    analysis in the spec, the rollout's AnalysisRuns (one list by label; not shown when they cannot
    be read: Argo Rollouts' CRDs absent, no permission)."""
    _, ps = read_progressive_sync(kube, target)
    workflow = None
    records: list[ProgressiveSyncStage] | None = None
    runs: list[dict[str, Any]] | None = None
    rollout = ps.status.rollout if ps.status is not None else None
    if rollout is not None:
        try:
            workflow = kube.get(WORKFLOWS, target.workflows_in, ops.workflow_name_of(ps))
        except NotFound:
            workflow = None
        if clusters:
            records = list_records(kube, target.namespace, target.name, rollout.id)
        if has_analysis(ps.spec):
            try:
                runs, _ = kube.list(
                    ANALYSIS_RUNS, target.namespace, label_selector=run_selector(target.name, rollout.id)
                )
            except (NotFound, Forbidden):
                runs = None
    elif clusters:
        records = []
    return ops_view.rollout_view(ps, workflow, records, runs)


# --- actions -----------------------------------------------------------------------------------


def cancel(kube: Kube, target: Target) -> ops.Outcome:
    """Stop the running rollout's Workflow (`spec.shutdown: Stop`, like `argo stop`); while it
    rolls back, terminate it (`argo terminate`: a Stop lets the exit handler, the rollback, go on)."""
    _, ps = read_progressive_sync(kube, target)
    workflow = read_workflow(kube, target, ps, "cancel")
    action = ops.decide_cancel(ps, workflow)
    workflow_name = workflow["metadata"]["name"]
    rollout_id = ps.status.rollout.id if ps.status and ps.status.rollout else ""
    which = f"Workflow {workflow_name} (rollout {rollout_id} of ProgressiveSync {target.display})"
    if action is ops.WorkflowAction.NONE:
        message = (
            f"rollout {rollout_id} of ProgressiveSync {target.display} is already being stopped "
            f"(Workflow {workflow_name} has spec.shutdown: {workflow['spec']['shutdown']})"
        )
    elif action is ops.WorkflowAction.TERMINATE:
        control.terminate(kube, target.workflows_in, workflow_name)
        message = (
            f"terminated {which} during its rollback: the rollback stops, its syncs in flight are "
            "ended by the watcher, and the clusters it restored stay restored (`progressive-sync "
            f"status {target.name} -o wide` shows each cluster's rollback)"
        )
    else:
        control.stop(kube, target.workflows_in, workflow_name)
        message = f"stopped {which}; running steps end and its exit handler marks the rollout Cancelled"
    details: dict[str, Any] = {"workflow": f"{target.workflows_in}/{workflow_name}", "rollout": rollout_id}
    groups = groups_touched(ps)
    if groups is not None and action is not ops.WorkflowAction.NONE:
        # spec.groupBy: a cancel acts on the rollout, so on every group not ended yet (docs/groups.md).
        message += f"; groups it stops: {', '.join(groups) or 'none (every group had ended)'}"
        details["groups"] = groups
    return ops.Outcome(
        "cancel",
        target.namespace,
        target.name,
        changed=action is not ops.WorkflowAction.NONE,
        message=message,
        details=details,
    )


def groups_touched(ps: ProgressiveSync) -> list[str] | None:
    """With spec.groupBy, the groups of the recorded rollout not ended yet (a cancel or a pause
    acts on all of them); None without groupBy."""
    if ps.spec.group_by is None:
        return None
    return unfinished_groups((ps.status.stages if ps.status else None) or [])


def set_paused(kube: Kube, target: Target, *, paused: bool) -> ops.Outcome:
    """Set `spec.paused` (pause: no new step starts; unpause: carry on where it stood)."""
    action = "pause" if paused else "unpause"
    _, ps = read_progressive_sync(kube, target)
    if not ops.decide_pause(ps, paused=paused):
        already = "already paused" if paused else "not paused"
        return ops.Outcome(
            action,
            target.namespace,
            target.name,
            changed=False,
            message=f"ProgressiveSync {target.display} is {already}; nothing changed",
            details={"paused": paused},
        )
    kube.patch(PROGRESSIVE_SYNCS, target.namespace, target.name, paused_patch(paused))
    if paused:
        message = (
            f"paused ProgressiveSync {target.display}: no new step starts, running syncs finish "
            f"(undo with progressive-sync unpause {target.name} -n {target.namespace})"
        )
    else:
        message = f"unpaused ProgressiveSync {target.display}: the rollout carries on where it stood"
    details: dict[str, Any] = {"paused": paused}
    groups = groups_touched(ps)
    if groups:
        # spec.groupBy: the pause holds (or the unpause lets go) every group not ended yet.
        message += f"; groups: {', '.join(groups)}"
        details["groups"] = groups
    return ops.Outcome(action, target.namespace, target.name, changed=True, message=message, details=details)


def approve(kube: Kube, target: Target, stage: str | None, clock: Clock) -> ops.Outcome:
    """Open the waiting manual-approval gate of `stage` (or the only one waiting)."""
    attempts = len(CONFLICT_BACKOFFS) + 1
    for attempt in range(1, attempts + 1):
        _, ps = read_progressive_sync(kube, target)
        workflow = read_workflow(kube, target, ps, "approve")
        gate = ops.decide_approve(ps, workflow, stage)
        try:
            kube.replace(WORKFLOWS, target.workflows_in, ops.approve_gate(workflow, gate, clock.now()))
        except Conflict:
            if attempt == attempts:
                raise
            delay = CONFLICT_BACKOFFS[attempt - 1]
            log.info(
                "approve: attempt %d/%d lost a race on the Workflow; retrying in %.2fs",
                attempt,
                attempts,
                delay,
            )
            time.sleep(delay)
            continue
        note = (
            "; the ProgressiveSync is paused, so the stage starts after "
            f"progressive-sync unpause {target.name}"
            if ps.spec.paused
            else "; the stage starts now"
        )
        return ops.Outcome(
            "approve",
            target.namespace,
            target.name,
            changed=True,
            message=f"approved stage {gate.stage!r} of ProgressiveSync {target.display}{note}",
            details={"stage": gate.stage, "workflow": workflow["metadata"]["name"], "node": gate.node_id},
        )
    raise AssertionError("unreachable")


def retry(kube: Kube, target: Target, clock: Clock) -> ops.Outcome:
    """Ask the watcher for a new attempt of the failed (or cancelled) rollout."""
    _, ps = read_progressive_sync(kube, target)
    rollout = ops.decide_retry(ps)
    token = ops.new_retry_token(clock.now())
    kube.patch(PROGRESSIVE_SYNCS, target.namespace, target.name, retry_patch(token))
    return ops.Outcome(
        "retry",
        target.namespace,
        target.name,
        changed=True,
        message=(
            f"requested a retry of rollout {rollout.id} of ProgressiveSync {target.display} "
            f"(attempt {rollout.attempt + 1}, token {token}); the watcher starts it"
        ),
        details={"rollout": rollout.id, "token": token, "attempt": rollout.attempt + 1},
    )


def read_for_rollback(kube: Kube, target: Target) -> ProgressiveSync:
    """The ProgressiveSync whose recorded rollout `progressive-sync rollback` may act on; OpsRefused
    when there is none, or it or its Workflow still runs (`decisions.decide_manual_rollback`)."""
    _, ps = read_progressive_sync(kube, target)
    workflow: dict[str, Any] | None = None
    if ps.status is not None and ps.status.rollout is not None:
        try:
            workflow = kube.get(WORKFLOWS, target.workflows_in, ops.workflow_name_of(ps))
        except NotFound:
            workflow = None  # removed after it ended: nothing runs
    ops.decide_manual_rollback(ps, workflow)
    return ps


# --- following ---------------------------------------------------------------------------------


class FollowTimeout(Exception):
    """The rollout did not finish within the time given; carries the last view."""

    def __init__(self, view: ops_view.RolloutView, seconds: float) -> None:
        super().__init__(f"ProgressiveSync {view.display} did not finish within {seconds:g}s")
        self.view = view


def follow(
    kube: Kube,
    target: Target,
    *,
    clock: Clock,
    timeout: float,
    on_view: Callable[[ops_view.RolloutView], None],
    until: Callable[[ops_view.RolloutView], bool] = lambda view: view.is_settled,
    interval: float = 0.5,
) -> ops_view.RolloutView:
    """Show every view until `until(view)` (by default: the rollout and its Workflow ended).

    FollowTimeout after `timeout` seconds.

    It reads every `interval` seconds rather than watching: the display redraws running durations
    on every tick anyway, the approval gates live on another object, and one small GET per tick
    costs the API server nothing.
    """
    deadline = time.monotonic() + timeout
    while True:
        view = read_view(kube, target)
        on_view(view)
        if until(view):
            return view
        if time.monotonic() >= deadline:
            raise FollowTimeout(view, timeout)
        clock.sleep(min(interval, max(0.0, deadline - time.monotonic())))
