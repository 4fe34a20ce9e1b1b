"""The Workflow from start to end: waiting for its mutex, `activeDeadlineSeconds`, `shutdown`
(Stop, Terminate), `suspend` (the spec's, and suspend templates with or without a duration), the
exit handler, the progress and the final phase and message.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from orchestrator.core.clock import parse_time
from orchestrator.engine.expressions import parse_duration, substitute
from orchestrator.engine.interface import Operation, UnsupportedFeature
from orchestrator.engine.nodes import PassState, short_message
from orchestrator.engine.supported import check_supported
from orchestrator.workflows.phases import (
    FULFILLED,
    TERMINAL_WORKFLOW_PHASES,
    UNSUCCESSFUL,
    NodePhase,
    NodeType,
    Shutdown,
    WorkflowPhase,
)


class WorkflowLifecycle(PassState):
    """The Workflow's phase: start, stop, suspend, exit handler, end."""

    def execute_suspend(
        self,
        name: str,
        template: Mapping[str, Any],
        inputs: dict[str, str],
        *,
        boundary_id: str | None,
        display_name: str,
    ) -> dict[str, Any]:
        """A suspend template's node: with a `duration`, Succeeded once it passed (woken then)."""
        node = self.node_by_name(name) or self.new_node(
            name,
            NodeType.SUSPEND,
            display_name=display_name,
            template_name=str(template["name"]),
            boundary_id=boundary_id,
            inputs=inputs,
        )
        duration = (template.get("suspend") or {}).get("duration")
        if duration is not None and self.phase_of(node) not in FULFILLED:
            seconds = parse_duration(substitute(duration, self.scope(inputs)))
            started = parse_time(node.get("startedAt")) or self.now
            until = started + timedelta(seconds=seconds)
            if self.now >= until:
                self.finish(node, NodePhase.SUCCEEDED)
            else:
                self.wake(until)
        return node

    def fail_unfinished(self, message: str, *, exit_handler_too: bool) -> None:
        """Fail every node not yet fulfilled (and kill its process), the exit handler's only if asked."""
        exit_prefix = f"{self.name}.onExit"
        for node in self.nodes.values():
            if node["phase"] in FULFILLED:
                continue
            if not exit_handler_too and str(node["name"]).startswith(exit_prefix):
                continue
            if node["type"] == NodeType.POD and node["id"] in self.pods:
                self.op.kills.append(str(node["id"]))
            self.finish(node, NodePhase.FAILED, message)

    def run(self) -> Operation:
        """The pass: a finished Workflow only has its leftover processes killed; an unsupported one
        ends in Error; a new one waits for its mutex, then starts Running and advances."""
        phase = self.status.get("phase") or ""
        if phase in TERMINAL_WORKFLOW_PHASES:
            self.op.kills.extend(pid for pid, state in self.pods.items() if state.result is None)
            return self.op
        try:
            if self.load_error:
                raise UnsupportedFeature(self.load_error)
            check_supported(self.workflow)
        except UnsupportedFeature as exc:
            return self.end(WorkflowPhase.ERROR, f"unsupported by the local executor: {exc}", kill_all=True)
        if phase in ("", WorkflowPhase.PENDING):
            mutexes = (self.spec.get("synchronization") or {}).get("mutexes") or []
            if mutexes and not self.lock_held and self.shutdown == Shutdown.TERMINATE:
                # Argo (v3.7 releaseLocksForPendingShuttingdownWfs; seen on the real controller): a
                # Workflow terminated while it waits for its mutex leaves the queue and is marked
                # Succeeded at once; no container runs, no exit handler, the entry node is Failed.
                # (Stop leaves it waiting; it then runs, stopped, exit handler included.) Readers
                # must not take this Succeeded for a rollout that ran: the watcher looks at the
                # shutdown first (orchestrator/watcher/decide.py `_end_phase`).
                entry = self.new_node(
                    self.name,
                    NodeType.DAG,
                    display_name=self.name,
                    template_name=str(self.spec.get("entrypoint", "")),
                    boundary_id=None,
                )
                self.finish(entry, NodePhase.FAILED)
                return self.end(WorkflowPhase.SUCCEEDED, "")
            if mutexes and not self.lock_held:
                namespace = mutexes[0].get("namespace") or self.meta.get("namespace", "")
                self.op.needs_lock = f"{namespace}/Mutex/{mutexes[0]['name']}"
                self.status["phase"] = WorkflowPhase.PENDING.value
                self.status["message"] = f"Waiting for {self.op.needs_lock} lock"
                return self.op
            self.status["phase"] = WorkflowPhase.RUNNING.value
            self.status["startedAt"] = self.stamp
            self.status.pop("message", None)
        try:
            return self.advance()
        except UnsupportedFeature as exc:
            return self.end(WorkflowPhase.ERROR, f"unsupported by the local executor: {exc}", kill_all=True)

    def advance(self) -> Operation:
        """Advance a Running Workflow: deadline and shutdown, the entrypoint, then the exit handler."""
        entrypoint = str(self.spec.get("entrypoint", ""))
        main = self.node_by_name(self.name)
        deadline = self.workflow_deadline()
        stop_message = ""
        if self.shutdown:
            stop_message = f"Stopped with strategy '{self.shutdown}'"
        elif deadline is not None:
            if self.now >= deadline:
                stop_message = "Step exceeded its deadline"
            else:
                self.wake(deadline)
        if stop_message and (main is None or self.phase_of(main) not in FULFILLED):
            self.fail_unfinished(stop_message, exit_handler_too=self.shutdown == Shutdown.TERMINATE)
            main = main or self.new_node(
                self.name,
                NodeType.DAG,
                display_name=self.name,
                template_name=entrypoint,
                boundary_id=None,
            )
            self.finish(main, NodePhase.FAILED, stop_message)
        elif self.shutdown == Shutdown.TERMINATE:
            self.fail_unfinished(stop_message, exit_handler_too=True)
        if main is None or self.phase_of(main) not in FULFILLED:
            main = self.execute(self.name, entrypoint, {}, boundary_id=None, display_name=self.name)
            if main is None or self.phase_of(main) not in FULFILLED:
                self.update_progress()
                return self.op
        main_phase = NodePhase(main["phase"])
        workflow_phase = (
            WorkflowPhase.SUCCEEDED
            if main_phase is NodePhase.SUCCEEDED
            else (WorkflowPhase.ERROR if main_phase is NodePhase.ERROR else WorkflowPhase.FAILED)
        )
        message = "" if workflow_phase is WorkflowPhase.SUCCEEDED else str(main.get("message", ""))
        if workflow_phase is not WorkflowPhase.SUCCEEDED and self.shutdown:
            # Argo (v3.7 operate): a stopped Workflow says so, even when the stop came after its
            # entrypoint had ended (during the exit handler).
            message = f"Stopped with strategy '{self.shutdown}'"
        on_exit = self.spec.get("onExit")
        if on_exit and self.shutdown != Shutdown.TERMINATE:
            self.in_exit_handler = True
            self.globals["workflow.status"] = workflow_phase.value
            self.globals["workflow.failures"] = "[]"
            exit_name = f"{self.name}.onExit"
            exit_node = self.execute(exit_name, str(on_exit), {}, boundary_id=None, display_name=exit_name)
            if exit_node is None or self.phase_of(exit_node) not in FULFILLED:
                self.update_progress()
                return self.op
            if self.phase_of(exit_node) in UNSUCCESSFUL and workflow_phase is WorkflowPhase.SUCCEEDED:
                workflow_phase = WorkflowPhase.FAILED
                message = f"exit handler failed: {exit_node.get('message', '')}"
        return self.end(workflow_phase, message)

    def update_progress(self) -> None:
        """`status.progress`: fulfilled Pod nodes over all Pod nodes."""
        pods = [n for n in self.nodes.values() if n["type"] == NodeType.POD]
        done = sum(1 for n in pods if n["phase"] in FULFILLED)
        self.status["progress"] = f"{done}/{len(pods)}"

    def end(self, phase: WorkflowPhase, message: str, *, kill_all: bool = False) -> Operation:
        """Give the Workflow its final phase and message (killing what still runs, if asked)."""
        if kill_all:
            self.op.kills.extend(pid for pid, state in self.pods.items() if state.result is None)
            self.fail_unfinished(message, exit_handler_too=True)
        self.update_progress()
        self.status["phase"] = phase.value
        self.status.setdefault("startedAt", self.stamp)
        self.status["finishedAt"] = self.stamp
        if message:
            self.status["message"] = short_message(message)
        else:
            self.status.pop("message", None)
        self.op.launches.clear()
        self.op.wake_at = None
        return self.op
