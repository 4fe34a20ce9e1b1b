"""The decisions of the local executor: one pass over a Workflow, the way Argo's operator does it.

`operate(workflow, now=..., pods=..., lock_held=...)` is a pure function: it reads the Workflow
object (spec and `status.nodes`) and what the executor knows about the processes it runs, and
returns the new status, the processes to start and to kill, and when to look again. The executor
(`orchestrator/engine/executor.py`) owns the API calls, the processes and the clock. Because every
decision is recomputed from `status.nodes`, an executor that restarts picks a Workflow up where it
stood: finished nodes are never run again.

It supports exactly the features our rollout Workflows use (workflow_templates/builder.py) and
answers anything else with the Workflow in phase Error and a message naming the feature:

- templates: `dag` (tasks with `dependencies`, `arguments.parameters`, `withParam`,
  `continueOn`; Omitted nodes for tasks whose dependency failed), `container` (command + args +
  env; output parameters from `valueFrom.path`), `suspend` (with or without `duration`); template
  `parallelism` (`failFast` is refused: on Argo v3.7 it hangs nested templates),
  `retryStrategy` (`limit`, `retryPolicy` Always/OnFailure/OnError, `backoff` with `duration`,
  `factor` and `cap`, an `expression` over `lastRetry.exitCode`/`lastRetry.status` joined by
  `||`/`&&`; decided in the order of Argo's `processNodeRetries`), the display-name annotation
  (plain, or the one expression we write: `names.display_name_of_input`);
- the Workflow: `entrypoint`, `arguments.parameters`, `onExit` (sees `{{workflow.status}}`),
  `activeDeadlineSeconds`, `synchronization.mutexes` (the executor holds the locks; Terminate
  while waiting for one ends the Workflow Succeeded at once, as Argo does),
  `shutdown: Stop` (running nodes fail, the exit handler runs) and `Terminate` (it does not),
  `suspend` (no new node starts; running ones finish);
- variables: `inputs.parameters.*`, `workflow.parameters.*`, `workflow.name|namespace|uid|
  serviceAccountName|status`, `tasks.<t>.outputs.parameters.*`, `item` (and `item.<key>`).

Status is written in Argo's shape: node ids are `<workflow>-<fnv32a(node name)>` (the root's is the
Workflow name), node names are `<parent>.<task>`, loop items `<task>(<i>:<item>)`, retry attempts
`<name>(<n>)`, the exit handler `<workflow>.onExit`; node types DAG, Pod, Suspend, TaskGroup,
Retry and Skipped (an empty loop, an Omitted task); no message on DAG and TaskGroup nodes.

Where it knowingly differs from Argo (docs/workflow.md has the whole comparison):

- A Pod node that was Running when its executor stopped is run again in place (the steps are
  idempotent, docs/CONTRACTS.md), with a note in its message, rather than failed and retried.
"""

from __future__ import annotations

import copy
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from orchestrator.core.clock import format_time, parse_time
from orchestrator.workflows.phases import (
    FULFILLED,
    TERMINAL_WORKFLOW_PHASES,
    UNSUCCESSFUL,
    NodePhase,
    NodeType,
    Shutdown,
    WorkflowPhase,
)
from orchestrator.workflows.view import decode_compressed_nodes
from workflow_templates.names import DISPLAY_NAME_ANNOTATION, DISPLAY_NAME_RE, display_name_of_input

OUTPUTS_DIR_ENV = "PROGRESSIVE_SYNC_OUTPUTS_DIR"
DEFAULT_OUTPUTS_DIR = "/tmp/outputs"
MESSAGE_LIMIT = 512


class UnsupportedFeature(Exception):
    """The Workflow uses something the local executor does not do; the message names it."""


class Unresolved(Exception):
    """A `{{variable}}` that has no value where it is used."""


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
    """What the executor knows about the process of one Pod node: running, or its result."""

    started_at: datetime
    result: PodResult | None = None


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


# --- small helpers -----------------------------------------------------------------------------


def node_id(workflow_name: str, node_name: str) -> str:
    """Argo's deterministic node id: the Workflow name for the root, else name-fnv32a(node name)."""
    if node_name == workflow_name:
        return workflow_name
    value = 0x811C9DC5
    for byte in node_name.encode():
        value ^= byte
        value = (value * 0x01000193) & 0xFFFFFFFF
    return f"{workflow_name}-{value}"


_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")


def parse_duration(value: Any) -> float:
    """Seconds from an Argo duration: an int, "30" (seconds), or Go-style "1m30s", "500ms"."""
    text = str(value).strip()
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(number + unit for number, unit in parts) != text:
        raise UnsupportedFeature(f"duration {text!r} (use seconds or Go durations like 1m30s)")
    scale = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    return sum(float(number) * scale[unit] for number, unit in parts)


_VAR = re.compile(r"{{\s*([^{}]*?)\s*}}")


def substitute(value: Any, scope: Mapping[str, str], *, strict: bool = True) -> Any:
    """Replace `{{name}}` in every string of `value` from `scope`.

    Strict: an unknown name raises Unresolved. Not strict: it is left as it is (a DAG template's
    task references resolve later, per task). `{{=expression}}` is not supported.
    """
    if isinstance(value, str):

        def replace(match: re.Match[str]) -> str:
            name = match.group(1)
            if name.startswith("="):
                raise UnsupportedFeature(f"expression template tag {{{{{name}}}}}")
            if name in scope:
                return scope[name]
            if strict:
                raise Unresolved(f"{{{{{name}}}}} does not resolve")
            return match.group(0)

        return _VAR.sub(replace, value)
    if isinstance(value, Mapping):
        return {key: substitute(item, scope, strict=strict) for key, item in value.items()}
    if isinstance(value, list):
        return [substitute(item, scope, strict=strict) for item in value]
    return value


def input_display_name(template: Mapping[str, Any], inputs: Mapping[str, str]) -> str | None:
    """The display name of a template whose annotation is `names.display_name_of_input(X)`.

    That expression is the one expression tag our Workflows carry (the cluster step's node shows
    the cluster's name): Argo evaluates it to input X when X passes its display-name rule, else to
    "" (the node keeps its default name). The same here, without an expression evaluator.
    """
    annotation = (template.get("annotations") or {}).get(DISPLAY_NAME_ANNOTATION)
    for name, value in inputs.items():
        if annotation == display_name_of_input(name):
            return value if DISPLAY_NAME_RE.fullmatch(value) and len(value) <= 63 else None
    return None


def _without_input_display_name(template: Mapping[str, Any], inputs: Mapping[str, str]) -> dict[str, Any]:
    """The template's annotations, less a display name `input_display_name` reads."""
    annotations = dict(template.get("annotations") or {})
    if any(annotations.get(DISPLAY_NAME_ANNOTATION) == display_name_of_input(name) for name in inputs):
        del annotations[DISPLAY_NAME_ANNOTATION]
    return annotations


def decompress_nodes(compressed: str) -> dict[str, Any]:
    """`status.compressedNodes` as a node map; a form that does not decode is an unsupported feature."""
    try:
        return decode_compressed_nodes(compressed)
    except ValueError as exc:
        raise UnsupportedFeature(str(exc)) from exc


def _short(text: str) -> str:
    return text if len(text) <= MESSAGE_LIMIT else text[: MESSAGE_LIMIT - 3] + "..."


# --- the retry expression ----------------------------------------------------------------------

_EXIT_CODE_ATOM = re.compile(r"asInt\(lastRetry\.exitCode\)\s*(==|!=|<=|>=|<|>)\s*(-?\d+)")
_STATUS_ATOM = re.compile(r'lastRetry\.status\s*(==|!=)\s*"([A-Za-z]+)"')
_COMPARE = {
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    ">": lambda a, b: a > b,
    "<=": lambda a, b: a <= b,
    ">=": lambda a, b: a >= b,
}


def _atoms(expression: str) -> list[list[str]]:
    if any(ch in expression for ch in "()") and "asInt(" not in expression:
        raise UnsupportedFeature(f"retryStrategy.expression {expression!r}")
    return [[atom.strip() for atom in clause.split("&&")] for clause in expression.split("||")]


def check_retry_expression(expression: str) -> None:
    """Raise UnsupportedFeature unless every term is one the executor evaluates."""
    for clause in _atoms(expression):
        for atom in clause:
            if not (_EXIT_CODE_ATOM.fullmatch(atom) or _STATUS_ATOM.fullmatch(atom)):
                raise UnsupportedFeature(f"retryStrategy.expression term {atom!r}")


def retry_expression_holds(expression: str, *, exit_code: int, status: str) -> bool:
    """Evaluate a checked expression: `||` of `&&` of exit-code and status comparisons."""
    for clause in _atoms(expression):
        holds = True
        for atom in clause:
            if match := _EXIT_CODE_ATOM.fullmatch(atom):
                holds = holds and _COMPARE[match.group(1)](exit_code, int(match.group(2)))
            elif match := _STATUS_ATOM.fullmatch(atom):
                holds = holds and _COMPARE[match.group(1)](status, match.group(2))
            else:
                raise UnsupportedFeature(f"retryStrategy.expression term {atom!r}")
        if holds:
            return True
    return False


# --- what is supported ---------------------------------------------------------------------------

# Fields that mean something only for pods on a cluster: accepted, and without effect locally.
_IGNORED_SPEC = {
    "serviceAccountName",
    "podGC",
    "ttlStrategy",
    "podMetadata",
    "securityContext",
    "imagePullSecrets",
    "nodeSelector",
    "tolerations",
    "affinity",
    "podPriorityClassName",
    "schedulerName",
    "podDisruptionBudget",
    "workflowMetadata",
    "archiveLogs",
}
_SUPPORTED_SPEC = {
    "entrypoint",
    "templates",
    "arguments",
    "onExit",
    "activeDeadlineSeconds",
    "synchronization",
    "shutdown",
    "suspend",
}
_IGNORED_TEMPLATE = {
    "metadata",
    "securityContext",
    "serviceAccountName",
    "nodeSelector",
    "tolerations",
    "affinity",
}
_SUPPORTED_TEMPLATE = {
    "name",
    "inputs",
    "outputs",
    "dag",
    "container",
    "suspend",
    "retryStrategy",
    "parallelism",
    "annotations",
}
_SUPPORTED_CONTAINER = {
    "name",
    "image",
    "imagePullPolicy",
    "command",
    "args",
    "env",
    "resources",
    "securityContext",
}
_SUPPORTED_TASK = {"name", "template", "arguments", "dependencies", "withParam", "continueOn"}
_SUPPORTED_RETRY = {"limit", "retryPolicy", "expression", "backoff"}
_SUPPORTED_BACKOFF = {"duration", "factor", "cap"}


def _only(kind: str, obj: Mapping[str, Any], allowed: set[str]) -> None:
    extra = sorted(set(obj) - allowed)
    if extra:
        raise UnsupportedFeature(f"{kind}.{extra[0]}")


def _check_parameters(kind: str, holder: Mapping[str, Any] | None, *, outputs: bool = False) -> None:
    if not holder:
        return
    _only(kind, holder, {"parameters"})
    for param in holder.get("parameters") or []:
        if outputs:
            value_from = param.get("valueFrom") or {}
            if set(value_from) != {"path"}:
                raise UnsupportedFeature(f"{kind}.parameters.valueFrom other than path")
        elif "valueFrom" in param:
            raise UnsupportedFeature(f"{kind}.parameters.valueFrom")


def _check_retry_strategy(kind: str, retry: Mapping[str, Any]) -> None:
    _only(kind, retry, _SUPPORTED_RETRY)
    if "limit" not in retry:
        raise UnsupportedFeature(f"{kind} without limit (Argo then retries for ever)")
    if retry.get("expression"):
        check_retry_expression(str(retry["expression"]))
    if (retry.get("retryPolicy") or "OnFailure") not in ("Always", "OnFailure", "OnError"):
        raise UnsupportedFeature(f"{kind}.retryPolicy {retry['retryPolicy']}")
    backoff = retry.get("backoff")
    if backoff is not None:
        if "maxDuration" in backoff:
            # Argo counts it from the first attempt's start, fails the node once it passed, and
            # kills every retried attempt at that time (the pod's ARGO_DEADLINE): not a cap per wait.
            raise UnsupportedFeature(f"{kind}.backoff.maxDuration (use backoff.cap to cap one wait)")
        _only(f"{kind}.backoff", backoff, _SUPPORTED_BACKOFF)
        if not backoff.get("duration"):
            raise UnsupportedFeature(f"{kind}.backoff without duration (Argo refuses it)")
        parse_duration(backoff["duration"])
        if backoff.get("cap"):
            parse_duration(backoff["cap"])


def check_supported(workflow: Mapping[str, Any]) -> None:
    """Raise UnsupportedFeature naming the first thing the local executor does not do."""
    spec = workflow.get("spec") or {}
    _only("spec", spec, _SUPPORTED_SPEC | _IGNORED_SPEC)
    if spec.get("workflowTemplateRef"):
        raise UnsupportedFeature("spec.workflowTemplateRef")
    _check_parameters("spec.arguments", spec.get("arguments"))
    sync = spec.get("synchronization") or {}
    _only("spec.synchronization", sync, {"mutexes"})
    for mutex in sync.get("mutexes") or []:
        _only("spec.synchronization.mutexes", mutex, {"name", "namespace"})
    shutdown = spec.get("shutdown")
    if shutdown and shutdown not in (Shutdown.STOP, Shutdown.TERMINATE):
        raise UnsupportedFeature(f"spec.shutdown: {shutdown}")
    for template in spec.get("templates") or []:
        name = template.get("name", "?")
        kind = f"templates[{name}]"
        if "failFast" in template:
            # Argo v3.7 fails such a template from checkParallelism without its outbound nodes:
            # the tasks after it are never reached and the Workflow hangs Running.
            raise UnsupportedFeature(f"{kind}.failFast (it hangs nested templates on Argo v3.7)")
        _only(kind, template, _SUPPORTED_TEMPLATE | _IGNORED_TEMPLATE)
        bodies = [key for key in ("dag", "container", "suspend") if key in template]
        if len(bodies) != 1:
            raise UnsupportedFeature(f"{kind}: a template type other than dag, container or suspend")
        _check_parameters(f"{kind}.inputs", template.get("inputs"))
        _check_parameters(f"{kind}.outputs", template.get("outputs"), outputs=True)
        if "dag" in template:
            if "failFast" in template["dag"]:
                raise UnsupportedFeature(f"{kind}.dag.failFast")
            _only(f"{kind}.dag", template["dag"], {"tasks"})
            for task in template["dag"].get("tasks") or []:
                _only(f"{kind}.dag.tasks[{task.get('name')}]", task, _SUPPORTED_TASK)
                _check_parameters(f"{kind}.dag.tasks[{task.get('name')}].arguments", task.get("arguments"))
        if "container" in template:
            container = template["container"]
            _only(f"{kind}.container", container, _SUPPORTED_CONTAINER)
            for env in container.get("env") or []:
                if "valueFrom" in env:
                    raise UnsupportedFeature(f"{kind}.container.env[{env.get('name')}].valueFrom")
        if "suspend" in template:
            _only(f"{kind}.suspend", template["suspend"], {"duration"})
            duration = template["suspend"].get("duration")
            if duration is not None and "{{" not in str(duration):
                parse_duration(duration)
        if retry := template.get("retryStrategy"):
            _check_retry_strategy(f"{kind}.retryStrategy", retry)
        parallelism = template.get("parallelism")
        if parallelism is not None and not isinstance(parallelism, int):
            raise UnsupportedFeature(f"{kind}.parallelism as a string")


# --- the pass ------------------------------------------------------------------------------------


class _Pass:
    """One pass over one Workflow; `run()` returns the Operation."""

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
        node["phase"] = phase.value
        node.setdefault("finishedAt", self.stamp)
        if message:
            node["message"] = _short(message)
        elif phase is NodePhase.SUCCEEDED:
            node.pop("message", None)

    @staticmethod
    def add_child(parent: dict[str, Any], child_id: str) -> None:
        children = parent.setdefault("children", [])
        if child_id not in children:
            children.append(child_id)

    @staticmethod
    def phase_of(node: Mapping[str, Any] | None) -> NodePhase | None:
        return NodePhase(node["phase"]) if node else None

    def wake(self, when: datetime) -> None:
        if self.op.wake_at is None or when < self.op.wake_at:
            self.op.wake_at = when

    # -- limits ------------------------------------------------------------------------------

    @property
    def halted(self) -> bool:
        """No new process or node may start: shut down, or suspended (the exit handler runs on Stop)."""
        if self.in_exit_handler:
            return self.shutdown == Shutdown.TERMINATE
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
        template = self.templates.get(name)
        if template is None:
            raise UnsupportedFeature(
                f"template {name!r} (not in spec.templates; templateRef is not supported)"
            )
        return template

    def resolve_inputs(self, template: Mapping[str, Any], arguments: Mapping[str, str]) -> dict[str, str]:
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
        """Advance (or start) the node `name` running `template_name`; None when it may not start yet."""
        node = self.node_by_name(name)
        if node is not None and self.phase_of(node) in FULFILLED:
            return node
        template = self.template(template_name)
        if node is None and not self.can_start(boundary_id):
            return None
        try:
            inputs = self.resolve_inputs(template, arguments)
            annotations = substitute(_without_input_display_name(template, inputs), self.scope(inputs))
        except Unresolved as exc:
            if node is None:
                node = self.new_node(
                    name,
                    NodeType.POD,
                    display_name=display_name,
                    template_name=template_name,
                    boundary_id=boundary_id,
                )
            self.finish(node, NodePhase.ERROR, str(exc))
            return node
        # Argo names a retry's attempts after the node's default name, not its display name.
        default_display_name = display_name
        display_name = str(
            annotations.get(DISPLAY_NAME_ANNOTATION) or input_display_name(template, inputs) or display_name
        )
        if "dag" in template:
            return self.execute_dag(
                name, template, inputs, boundary_id=boundary_id, display_name=display_name
            )
        if "suspend" in template:
            return self.execute_suspend(
                name, template, inputs, boundary_id=boundary_id, display_name=display_name
            )
        if template.get("retryStrategy"):
            return self.execute_retry(
                name,
                template,
                inputs,
                boundary_id=boundary_id,
                display_name=display_name,
                attempt_display_name=default_display_name,
            )
        return self.execute_pod(name, template, inputs, boundary_id=boundary_id, display_name=display_name)

    # -- suspend -----------------------------------------------------------------------------

    def execute_suspend(
        self,
        name: str,
        template: Mapping[str, Any],
        inputs: dict[str, str],
        *,
        boundary_id: str | None,
        display_name: str,
    ) -> dict[str, Any]:
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

    # -- pods and retries --------------------------------------------------------------------

    def launch_for(
        self, node: Mapping[str, Any], template: Mapping[str, Any], inputs: dict[str, str]
    ) -> PodLaunch:
        container = substitute(template["container"], self.scope(inputs))
        argv = tuple(
            str(item) for item in [*(container.get("command") or []), *(container.get("args") or [])]
        )
        if not argv:
            raise UnsupportedFeature(
                f"templates[{template['name']}].container without command (image entrypoints)"
            )
        env = tuple((str(e["name"]), str(e.get("value", ""))) for e in container.get("env") or [])
        outputs_dir = dict(env).get(OUTPUTS_DIR_ENV, DEFAULT_OUTPUTS_DIR).rstrip("/")
        outputs = []
        for param in (template.get("outputs") or {}).get("parameters") or []:
            path = str(param["valueFrom"]["path"])
            if not path.startswith(outputs_dir + "/"):
                raise UnsupportedFeature(
                    f"templates[{template['name']}] output {param['name']!r} at {path}, "
                    f"outside {OUTPUTS_DIR_ENV}"
                )
            outputs.append((str(param["name"]), path[len(outputs_dir) + 1 :]))
        return PodLaunch(
            node_id=str(node["id"]),
            node_name=str(node["name"]),
            argv=argv,
            env=env,
            outputs_dir=outputs_dir,
            outputs=tuple(outputs),
        )

    def execute_pod(
        self,
        name: str,
        template: Mapping[str, Any],
        inputs: dict[str, str],
        *,
        boundary_id: str | None,
        display_name: str,
    ) -> dict[str, Any]:
        node = self.node_by_name(name)
        if node is None:
            node = self.new_node(
                name,
                NodeType.POD,
                display_name=display_name,
                template_name=str(template["name"]),
                boundary_id=boundary_id,
                phase=NodePhase.PENDING,
                inputs=inputs,
            )
        node_key = str(node["id"])
        state = self.pods.get(node_key)
        if state is not None and state.result is not None:
            self.apply_result(node, template, state.result)
            return node
        if state is not None:
            if node["phase"] != NodePhase.RUNNING:
                node["phase"] = NodePhase.RUNNING.value
                node.pop("message", None)
            node["hostNodeName"] = self.executor_id
            return node
        if self.halted:
            return node
        if node["phase"] == NodePhase.RUNNING:
            # Its process belonged to an executor that is gone: run it again (steps are idempotent).
            node["phase"] = NodePhase.PENDING.value
            node["message"] = "restarted: the executor that ran it stopped before it finished"
        try:
            self.op.launches.append(self.launch_for(node, template, inputs))
        except Unresolved as exc:
            self.finish(node, NodePhase.ERROR, str(exc))
        return node

    def apply_result(self, node: dict[str, Any], template: Mapping[str, Any], result: PodResult) -> None:
        outputs: dict[str, Any] = {"exitCode": str(result.exit_code)}
        params = []
        for param in (template.get("outputs") or {}).get("parameters") or []:
            name = str(param["name"])
            if name in result.outputs:
                params.append({"name": name, "value": result.outputs[name], "valueFrom": param["valueFrom"]})
        if params:
            outputs["parameters"] = params
        node["outputs"] = outputs
        if result.error:
            self.finish(node, NodePhase.ERROR, result.error)
        elif result.exit_code != 0:
            summary = f": {result.summary}" if result.summary else ""
            self.finish(node, NodePhase.FAILED, f"Error (exit code {result.exit_code}){summary}")
        elif result.missing_outputs:
            self.finish(
                node,
                NodePhase.ERROR,
                f"output parameter file(s) missing: {', '.join(result.missing_outputs)}",
            )
        else:
            self.finish(node, NodePhase.SUCCEEDED)

    def execute_retry(
        self,
        name: str,
        template: Mapping[str, Any],
        inputs: dict[str, str],
        *,
        boundary_id: str | None,
        display_name: str,
        attempt_display_name: str | None = None,
    ) -> dict[str, Any]:
        strategy = template["retryStrategy"]
        node = self.node_by_name(name) or self.new_node(
            name,
            NodeType.RETRY,
            display_name=display_name,
            template_name=str(template["name"]),
            boundary_id=boundary_id,
            inputs=inputs,
        )
        # Children are the attempts `name(0)`, `name(1)`, ... and, once it is done, the tasks after it.
        attempts = [
            self.nodes[child]
            for child in node.get("children") or []
            if child in self.nodes
            and re.fullmatch(re.escape(name) + r"\(\d+\)", str(self.nodes[child]["name"]))
        ]
        last = attempts[-1] if attempts else None
        if last is not None and self.phase_of(last) not in FULFILLED:
            last = self.execute_pod(
                str(last["name"]),
                template,
                inputs,
                boundary_id=boundary_id,
                display_name=str(last["displayName"]),
            )
        if last is not None and self.phase_of(last) in FULFILLED:
            verdict = self.retry_verdict(strategy, attempts, inputs)
            if isinstance(verdict, datetime):
                # The same text on every pass: a countdown would rewrite the status every second.
                wait = self.backoff_seconds(strategy, attempts=len(attempts))
                node["message"] = f"Backoff for {math.ceil(wait)} seconds"
                self.wake(verdict)
                return node
            if verdict is not None:
                phase, message = verdict
                node["outputs"] = copy.deepcopy(last.get("outputs"))
                self.finish(node, phase, message)
                return node
        if last is None or self.phase_of(last) in FULFILLED:
            if last is not None and not self.can_start(boundary_id, limits=False):
                return node
            node.pop("message", None)
            attempt_name = f"{name}({len(attempts)})"
            attempt = self.execute_pod(
                attempt_name,
                template,
                inputs,
                boundary_id=boundary_id,
                display_name=f"{attempt_display_name or display_name}({len(attempts)})",
            )
            self.add_child(node, str(attempt["id"]))
        return node

    def retry_verdict(
        self, strategy: Mapping[str, Any], attempts: list[dict[str, Any]], inputs: Mapping[str, str]
    ) -> tuple[NodePhase, str] | datetime | None:
        """After a finished attempt: the Retry node's end (phase, message), a time to wait until, or
        None to start the next attempt now.

        The order is Argo's (v3.7 `processNodeRetries`), and it matters: the backoff is waited out
        before the retry policy, the limit and the expression are looked at, so even a failure that
        will not be retried waits its backoff first; the last allowed attempt waits for nothing.
        """
        last = attempts[-1]
        phase = NodePhase(last["phase"])
        if phase in (NodePhase.SUCCEEDED, NodePhase.SKIPPED):
            return NodePhase.SUCCEEDED, ""
        limit = int(substitute(str(strategy["limit"]), self.scope(inputs)))
        if strategy.get("backoff"):
            wait = self.backoff_seconds(strategy, attempts=len(attempts))
            not_before = (parse_time(last.get("finishedAt")) or self.now) + timedelta(seconds=wait)
            if self.now < not_before and len(attempts) <= limit:
                return not_before
        policy = strategy.get("retryPolicy") or "OnFailure"
        retried = {"Always": {"Failed", "Error"}, "OnFailure": {"Failed"}, "OnError": {"Error"}}[policy]
        if phase.value not in retried:
            return phase, str(last.get("message", phase.value))
        if len(attempts) > limit:
            return phase, "No more retries left"
        expression = strategy.get("expression")
        if expression:
            # Argo's `lastRetry.exitCode` is "-1" when the attempt has no exit code (a lost pod).
            exit_code = int((last.get("outputs") or {}).get("exitCode") or -1)
            if not retry_expression_holds(str(expression), exit_code=exit_code, status=phase.value):
                return phase, "retryStrategy.expression evaluated to false"
        return None

    @staticmethod
    def backoff_seconds(strategy: Mapping[str, Any], *, attempts: int) -> float:
        """The wait after the `attempts`-th attempt: duration * factor^(attempts-1), at most `cap`."""
        backoff = strategy.get("backoff") or {}
        seconds = parse_duration(backoff["duration"])
        factor = int(backoff.get("factor") or 0)
        if factor > 0:
            seconds *= factor ** (attempts - 1)
        if backoff.get("cap"):
            seconds = min(seconds, parse_duration(backoff["cap"]))
        return seconds

    # -- DAGs --------------------------------------------------------------------------------

    def execute_dag(
        self,
        name: str,
        template: Mapping[str, Any],
        inputs: dict[str, str],
        *,
        boundary_id: str | None,
        display_name: str,
    ) -> dict[str, Any]:
        """Argo's DAG rules (v3.7 dag.go): a task runs once every dependency is fulfilled and each
        Succeeded or Skipped, or Failed/Errored with that dependency's `continueOn`; otherwise it
        gets an Omitted node (type Skipped), and so do the tasks behind it. The DAG ends when
        every task has a fulfilled node: Failed (or Error) when one of them failed without
        `continueOn`, else Succeeded. Argo writes no message on a DAG node."""
        node = self.node_by_name(name) or self.new_node(
            name,
            NodeType.DAG,
            display_name=display_name,
            template_name=str(template["name"]),
            boundary_id=boundary_id,
            inputs=inputs,
        )
        if node.get("displayName") != display_name:
            node["displayName"] = display_name
        tasks = list(template["dag"].get("tasks") or [])
        scope = self.scope(inputs)
        task_nodes: dict[str, dict[str, Any] | None] = {}
        failed: list[dict[str, Any]] = []
        for task in tasks:
            task_name = str(task["name"])
            deps = [str(d) for d in task.get("dependencies") or []]
            child_name = f"{name}.{task_name}"
            existing = self.node_by_name(child_name)
            dep_nodes = [task_nodes.get(dep) for dep in deps]
            if existing is None:
                finished = [n for n in dep_nodes if n is not None and self.phase_of(n) in FULFILLED]
                if len(finished) < len(deps):
                    task_nodes[task_name] = None
                    continue
                parents = finished or [node]
                if not all(
                    self.satisfies(self.task(tasks, dep), n) for dep, n in zip(deps, finished, strict=True)
                ):
                    omitted = self.new_node(
                        child_name,
                        NodeType.SKIPPED,
                        display_name=task_name,
                        template_name=str(task.get("template", "")),
                        boundary_id=str(node["id"]),
                        phase=NodePhase.OMITTED,
                        message="omitted: depends condition not met",
                    )
                    for parent in parents:
                        self.add_child(parent, str(omitted["id"]))
                    task_nodes[task_name] = omitted
                    continue
            child = (
                existing if existing is not None and self.phase_of(existing) is NodePhase.OMITTED else None
            )
            if child is None:
                child = self.execute_task(task, child_name, node, scope, task_nodes)
            task_nodes[task_name] = child
            if child is not None and existing is None:
                for parent in [n for n in dep_nodes if n is not None] or [node]:
                    self.add_child(parent, str(child["id"]))
            if child is not None and self.phase_of(child) in UNSUCCESSFUL and not self.continues(task, child):
                failed.append(child)
        if all(n is not None and self.phase_of(n) in FULFILLED for n in task_nodes.values()):
            self.finish(node, NodePhase(failed[0]["phase"]) if failed else NodePhase.SUCCEEDED)
        return node

    def satisfies(self, dependency: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
        """Does a finished dependency let the task after it run? (`dependencies` as Argo expands them)."""
        phase = self.phase_of(node)
        return phase in (NodePhase.SUCCEEDED, NodePhase.SKIPPED) or self.continues(dependency, node)

    @staticmethod
    def task(tasks: list[Mapping[str, Any]], name: str) -> Mapping[str, Any]:
        return next(t for t in tasks if str(t["name"]) == name)

    @staticmethod
    def continues(task: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
        continue_on = task.get("continueOn") or {}
        phase = node["phase"]
        return bool(
            (phase == NodePhase.FAILED and continue_on.get("failed"))
            or (phase == NodePhase.ERROR and continue_on.get("error"))
        )

    def task_scope(
        self, dag_name: str, scope: Mapping[str, str], task_nodes: Mapping[str, Any]
    ) -> dict[str, str]:
        result = dict(scope)
        for task_name, child in task_nodes.items():
            for param in ((child or {}).get("outputs") or {}).get("parameters") or []:
                if "value" in param:
                    result[f"tasks.{task_name}.outputs.parameters.{param['name']}"] = str(param["value"])
        return result

    def execute_task(
        self,
        task: Mapping[str, Any],
        child_name: str,
        dag_node: dict[str, Any],
        scope: Mapping[str, str],
        task_nodes: Mapping[str, Any],
    ) -> dict[str, Any] | None:
        task_scope = self.task_scope(str(dag_node["name"]), scope, task_nodes)
        template_name = str(task["template"])
        if task.get("withParam") is not None:
            return self.execute_loop(task, child_name, dag_node, task_scope)
        try:
            arguments = self.task_arguments(task, task_scope)
        except Unresolved as exc:
            node = self.node_by_name(child_name) or self.new_node(
                child_name,
                NodeType.POD,
                display_name=str(task["name"]),
                template_name=template_name,
                boundary_id=str(dag_node["id"]),
            )
            self.finish(node, NodePhase.ERROR, str(exc))
            return node
        return self.execute(
            child_name,
            template_name,
            arguments,
            boundary_id=str(dag_node["id"]),
            display_name=str(task["name"]),
        )

    @staticmethod
    def task_arguments(task: Mapping[str, Any], scope: Mapping[str, str]) -> dict[str, str]:
        arguments: dict[str, str] = {}
        for param in (task.get("arguments") or {}).get("parameters") or []:
            arguments[str(param["name"])] = str(substitute(str(param.get("value", "")), scope))
        return arguments

    def execute_loop(
        self, task: Mapping[str, Any], group_name: str, dag_node: dict[str, Any], scope: Mapping[str, str]
    ) -> dict[str, Any] | None:
        boundary_id = str(dag_node["id"])
        group = self.node_by_name(group_name)
        task_name = str(task["name"])
        try:
            items = json.loads(substitute(str(task["withParam"]), scope))
            if not isinstance(items, list):
                raise ValueError("not a JSON list")
        except (ValueError, Unresolved) as exc:
            group = group or self.new_node(
                group_name,
                NodeType.TASK_GROUP,
                display_name=task_name,
                template_name=str(task["template"]),
                boundary_id=boundary_id,
            )
            self.finish(group, NodePhase.ERROR, f"withParam value could not be parsed as a JSON list: {exc}")
            return group
        if group is None:
            if not self.can_start(boundary_id):
                return None
            if not items:
                return self.new_node(
                    group_name,
                    NodeType.SKIPPED,
                    display_name=task_name,
                    template_name=str(task["template"]),
                    boundary_id=boundary_id,
                    phase=NodePhase.SKIPPED,
                    message="Skipped, empty params",
                )
            group = self.new_node(
                group_name,
                NodeType.TASK_GROUP,
                display_name=task_name,
                template_name=str(task["template"]),
                boundary_id=boundary_id,
            )
        if self.phase_of(group) in FULFILLED:
            return group
        children: list[dict[str, Any] | None] = []
        for index, item in enumerate(items):
            label = item if isinstance(item, str) else json.dumps(item, separators=(",", ":"), sort_keys=True)
            item_name = f"{group_name}({index}:{label})"
            item_scope = dict(scope)
            item_scope["item"] = label
            if isinstance(item, dict):
                item_scope.update({f"item.{k}": str(v) for k, v in item.items()})
            existing = self.node_by_name(item_name)
            if existing is None and any(c is None for c in children):
                children.append(None)  # keep list order: never start item i+1 before item i
                continue
            try:
                arguments = self.task_arguments(task, item_scope)
            except Unresolved as exc:
                self.finish(group, NodePhase.ERROR, str(exc))
                return group
            child = self.execute(
                item_name,
                str(task["template"]),
                arguments,
                boundary_id=boundary_id,
                display_name=f"{task_name}({index}:{label})",
            )
            if child is not None:
                self.add_child(group, str(child["id"]))
            children.append(child)
        if all(c is not None and self.phase_of(c) in FULFILLED for c in children):
            # Argo: the group takes the phase of its last failed or errored child, no message.
            failures = [c for c in children if c is not None and self.phase_of(c) in UNSUCCESSFUL]
            self.finish(group, NodePhase(failures[-1]["phase"]) if failures else NodePhase.SUCCEEDED)
        return group

    # -- the workflow ------------------------------------------------------------------------

    def fail_unfinished(self, message: str, *, exit_handler_too: bool) -> None:
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
        entrypoint = str(self.spec.get("entrypoint", ""))
        main = self.node_by_name(self.name)
        started = parse_time(self.status.get("startedAt")) or self.now
        deadline_seconds = self.spec.get("activeDeadlineSeconds")
        stop_message = ""
        if self.shutdown:
            stop_message = f"Stopped with strategy '{self.shutdown}'"
        elif deadline_seconds is not None:
            deadline = started + timedelta(seconds=int(deadline_seconds))
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
        pods = [n for n in self.nodes.values() if n["type"] == NodeType.POD]
        done = sum(1 for n in pods if n["phase"] in FULFILLED)
        self.status["progress"] = f"{done}/{len(pods)}"

    def end(self, phase: WorkflowPhase, message: str, *, kill_all: bool = False) -> Operation:
        if kill_all:
            self.op.kills.extend(pid for pid, state in self.pods.items() if state.result is None)
            self.fail_unfinished(message, exit_handler_too=True)
        self.update_progress()
        self.status["phase"] = phase.value
        self.status.setdefault("startedAt", self.stamp)
        self.status["finishedAt"] = self.stamp
        if message:
            self.status["message"] = _short(message)
        else:
            self.status.pop("message", None)
        self.op.launches.clear()
        self.op.wake_at = None
        return self.op


def operate(
    workflow: Mapping[str, Any],
    *,
    now: datetime,
    pods: Mapping[str, PodState],
    lock_held: bool = True,
    executor_id: str = "local-executor",
) -> Operation:
    """One pass over `workflow`: the new status, processes to start and kill, when to look again.

    `pods` are the processes this executor runs for the Workflow's Pod nodes, by node id: running
    (no result yet) or finished. `lock_held` says whether the executor holds the Workflow's
    mutex for it (a Workflow that has not started waits in phase Pending without it).
    """
    return _Pass(workflow, now=now, pods=pods, lock_held=lock_held, executor_id=executor_id).run()
