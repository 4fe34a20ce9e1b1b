"""The state of one pass and its node bookkeeping: node ids and names in Argo's shape, creating
and finishing nodes, the limits on starting one (suspend, shutdown, template `parallelism`), the
templates and the variables in scope. The job-specific parts of a pass (pods, retries, DAGs, the
Workflow's lifecycle) build on `PassState`; `operator._Pass` puts them together.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from orchestrator.core.clock import format_time, parse_time
from orchestrator.engine.expressions import Unresolved
from orchestrator.engine.interface import Operation, PodState, UnsupportedFeature
from orchestrator.workflows.phases import FULFILLED, NodePhase, NodeType, Shutdown
from orchestrator.workflows.view import decode_compressed_nodes

MESSAGE_LIMIT = 512


def node_id(workflow_name: str, node_name: str) -> str:
    """Argo's deterministic node id: the Workflow name for the root, else name-fnv32a(node name)."""
    if node_name == workflow_name:
        return workflow_name
    value = 0x811C9DC5
    for byte in node_name.encode():
        value ^= byte
        value = (value * 0x01000193) & 0xFFFFFFFF
    return f"{workflow_name}-{value}"


def decompress_nodes(compressed: str) -> dict[str, Any]:
    """`status.compressedNodes` as a node map; a form that does not decode is an unsupported feature."""
    try:
        return decode_compressed_nodes(compressed)
    except ValueError as exc:
        raise UnsupportedFeature(str(exc)) from exc


def short_message(text: str) -> str:
    """`text`, cut to `MESSAGE_LIMIT` characters."""
    return text if len(text) <= MESSAGE_LIMIT else text[: MESSAGE_LIMIT - 3] + "..."


class PassState:
    """One pass's view of one Workflow: its status being rewritten, the processes, the clock."""

    def __init__(
        self,
        workflow: Mapping[str, Any],
        *,
        now: datetime,
        pods: Mapping[str, PodState],
        lock_held: bool,
        executor_id: str,
    ) -> None:
        self.workflow = workflow
        self.meta = workflow.get("metadata") or {}
        self.name = str(self.meta.get("name", ""))
        self.spec = workflow.get("spec") or {}
        self.status: dict[str, Any] = copy.deepcopy(workflow.get("status") or {})
        self.load_error = ""
        if not self.status.get("nodes") and self.status.get("compressedNodes"):
            # Argo compresses big node maps; this executor writes them back uncompressed.
            try:
                self.status["nodes"] = decompress_nodes(str(self.status["compressedNodes"]))
            except UnsupportedFeature as exc:
                self.load_error = str(exc)
        self.status.pop("compressedNodes", None)
        self.nodes: dict[str, dict[str, Any]] = self.status.setdefault("nodes", {})
        self.now = now
        self.stamp = format_time(now)
        self.pods = pods
        self.lock_held = lock_held
        self.executor_id = executor_id
        self.templates = {str(t.get("name")): t for t in self.spec.get("templates") or []}
        self.op = Operation(status=self.status)
        self.globals: dict[str, str] = {
            "workflow.name": self.name,
            "workflow.namespace": str(self.meta.get("namespace", "")),
            "workflow.uid": str(self.meta.get("uid", "")),
            "workflow.serviceAccountName": str(self.spec.get("serviceAccountName", "")),
        }
        for param in (self.spec.get("arguments") or {}).get("parameters") or []:
            value = param.get("value", param.get("default"))
            if value is not None:
                self.globals[f"workflow.parameters.{param['name']}"] = str(value)
        self.shutdown = self.spec.get("shutdown")
        self.suspended = bool(self.spec.get("suspend"))
        self.in_exit_handler = False

    # -- node bookkeeping ------------------------------------------------------------------

    def node_by_name(self, name: str) -> dict[str, Any] | None:
        """The node with this name, if it exists."""
        return self.nodes.get(node_id(self.name, name))

    def new_node(
        self,
        name: str,
        node_type: NodeType,
        *,
        display_name: str,
        template_name: str | None,
        boundary_id: str | None,
        phase: NodePhase = NodePhase.RUNNING,
        inputs: Mapping[str, str] | None = None,
        message: str = "",
    ) -> dict[str, Any]:
        """Create the node `name` in Argo's shape and add it to `status.nodes`."""
        node: dict[str, Any] = {
            "id": node_id(self.name, name),
            "name": name,
            "displayName": display_name,
            "type": node_type.value,
            "phase": phase.value,
            "startedAt": self.stamp,
        }
        if template_name:
            node["templateName"] = template_name
        if boundary_id:
            node["boundaryID"] = boundary_id
        if inputs:
            node["inputs"] = {"parameters": [{"name": k, "value": v} for k, v in inputs.items()]}
        if message:
            node["message"] = message
        if phase in FULFILLED:
            node["finishedAt"] = self.stamp
        self.nodes[node["id"]] = node
        return node

    def finish(self, node: dict[str, Any], phase: NodePhase, message: str = "") -> None:
        """End `node` in `phase`, with `message` (a Succeeded node without one loses its old one)."""
        node["phase"] = phase.value
        node.setdefault("finishedAt", self.stamp)
        if message:
            node["message"] = short_message(message)
        elif phase is NodePhase.SUCCEEDED:
            node.pop("message", None)

    @staticmethod
    def add_child(parent: dict[str, Any], child_id: str) -> None:
        """Add `child_id` to the parent's `children`, once."""
        children = parent.setdefault("children", [])
        if child_id not in children:
            children.append(child_id)

    @staticmethod
    def phase_of(node: Mapping[str, Any] | None) -> NodePhase | None:
        """The node's phase, None for no node."""
        return NodePhase(node["phase"]) if node else None

    def wake(self, when: datetime) -> None:
        """Look again at `when` at the latest."""
        if self.op.wake_at is None or when < self.op.wake_at:
            self.op.wake_at = when

    def workflow_deadline(self) -> datetime | None:
        """When `activeDeadlineSeconds` ends, counted from the Workflow's start; None without one."""
        seconds = self.spec.get("activeDeadlineSeconds")
        if seconds is None:
            return None
        started = parse_time(self.status.get("startedAt")) or self.now
        return started + timedelta(seconds=int(seconds))

    # -- limits ------------------------------------------------------------------------------

    @property
    def halted(self) -> bool:
        """No new process or node may start: shut down, or suspended. The exit handler runs on Stop,
        not on Terminate, and waits while the Workflow is suspended (Argo v3.7 `operate` returns
        before anything runs while `spec.suspend` is true)."""
        if self.in_exit_handler:
            return self.shutdown == Shutdown.TERMINATE or self.suspended
        return bool(self.shutdown) or self.suspended

    def can_start(self, boundary_id: str | None, *, limits: bool = True) -> bool:
        """May a new node start inside this boundary now? (suspend, shutdown, parallelism).

        A retry attempt is checked without the boundary's limits, as Argo does: its Retry node
        already holds the place.
        """
        if self.halted:
            return False
        if not boundary_id or not limits:
            return True
        boundary = self.nodes.get(boundary_id)
        template = self.templates.get(str((boundary or {}).get("templateName", "")))
        if not template:
            return True
        counted = (NodeType.POD.value, NodeType.DAG.value, "Steps")
        inside = [
            n for n in self.nodes.values() if n.get("boundaryID") == boundary_id and n["type"] in counted
        ]
        parallelism = template.get("parallelism")
        if parallelism is not None:
            active = sum(1 for n in inside if n["phase"] in (NodePhase.PENDING, NodePhase.RUNNING))
            if active >= int(parallelism):
                return False
        return True

    # -- templates ---------------------------------------------------------------------------

    def template(self, name: str) -> Mapping[str, Any]:
        """The template by name; one not in `spec.templates` is unsupported."""
        template = self.templates.get(name)
        if template is None:
            raise UnsupportedFeature(
                f"template {name!r} (not in spec.templates; templateRef is not supported)"
            )
        return template

    def resolve_inputs(self, template: Mapping[str, Any], arguments: Mapping[str, str]) -> dict[str, str]:
        """The template's input parameters from `arguments` or their defaults; a missing one is Unresolved."""
        values: dict[str, str] = {}
        for param in (template.get("inputs") or {}).get("parameters") or []:
            name = str(param["name"])
            if name in arguments:
                values[name] = arguments[name]
            elif "value" in param or "default" in param:
                values[name] = str(param.get("value", param.get("default")))
            else:
                raise Unresolved(
                    f"input parameter {name!r} of template {template.get('name')!r} was not supplied"
                )
        return values

    def scope(self, inputs: Mapping[str, str]) -> dict[str, str]:
        """The variables a template sees: the Workflow's and its `inputs.parameters.*`."""
        scope = dict(self.globals)
        scope.update({f"inputs.parameters.{k}": v for k, v in inputs.items()})
        return scope

    def execute(
        self,
        name: str,
        template_name: str,
        arguments: Mapping[str, str],
        *,
        boundary_id: str | None,
        display_name: str,
    ) -> dict[str, Any] | None:
        """Advance (or start) the node `name` running `template_name`; None when it may not start yet.

        Dispatched on the template's type by `operator._Pass.execute`.
        """
        raise NotImplementedError
