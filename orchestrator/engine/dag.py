"""DAG templates: tasks run once their dependencies allow (or are Omitted), task arguments and
`tasks.<t>.outputs.parameters.*` are resolved per task, `withParam` loops run as a TaskGroup of
items in list order, and the DAG node ends when every task's node has.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from orchestrator.engine.expressions import Unresolved, substitute, when_holds
from orchestrator.engine.nodes import PassState
from orchestrator.workflows.phases import FULFILLED, UNSUCCESSFUL, NodePhase, NodeType


class DagNodes(PassState):
    """DAG nodes, their tasks and `withParam` loops."""

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
            if failed:
                self.finish(node, NodePhase(failed[0]["phase"]))
            else:
                self.finish_with_outputs(node, template, self.task_scope(name, scope, task_nodes))
        return node

    def finish_with_outputs(
        self, node: dict[str, Any], template: Mapping[str, Any], scope: Mapping[str, str]
    ) -> None:
        """A DAG that Succeeded: its `outputs.parameters` (`valueFrom.parameter`, e.g.
        `{{tasks.t.outputs.parameters.p}}`) resolved from its tasks' outputs, then Succeeded. As
        Argo v3.7 (dag.go executeDAG): outputs are set only on success (a Failed DAG has none),
        and one that cannot be resolved (the task produced no such output) errors the DAG."""
        parameters = []
        for param in (template.get("outputs") or {}).get("parameters") or []:
            reference = str((param.get("valueFrom") or {}).get("parameter", ""))
            try:
                value = substitute(reference, scope)
            except Unresolved as exc:
                self.finish(node, NodePhase.ERROR, f"output parameter {param['name']!r}: {exc}")
                return
            parameters.append({"name": str(param["name"]), "value": str(value)})
        if parameters:
            node["outputs"] = {"parameters": parameters}
        self.finish(node, NodePhase.SUCCEEDED)

    def satisfies(self, dependency: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
        """Does a finished dependency let the task after it run? (`dependencies` as Argo expands them)."""
        phase = self.phase_of(node)
        return phase in (NodePhase.SUCCEEDED, NodePhase.SKIPPED) or self.continues(dependency, node)

    @staticmethod
    def task(tasks: list[Mapping[str, Any]], name: str) -> Mapping[str, Any]:
        """The task named `name` among the DAG's `tasks`."""
        return next(t for t in tasks if str(t["name"]) == name)

    @staticmethod
    def continues(task: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
        """Does the task's `continueOn` let a Failed or Errored node count as done for the tasks after it?"""
        continue_on = task.get("continueOn") or {}
        phase = node["phase"]
        return bool(
            (phase == NodePhase.FAILED and continue_on.get("failed"))
            or (phase == NodePhase.ERROR and continue_on.get("error"))
        )

    def task_scope(
        self, dag_name: str, scope: Mapping[str, str], task_nodes: Mapping[str, Any]
    ) -> dict[str, str]:
        """The scope of a task: `scope` plus the phase (`tasks.<t>.status`) of the DAG's tasks that
        finished and the output parameters of those that have them."""
        result = dict(scope)
        for task_name, child in task_nodes.items():
            if child is not None and self.phase_of(child) in FULFILLED:
                result[f"tasks.{task_name}.status"] = str(child["phase"])
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
        """Advance (or start) one task's node; None when it may not start yet."""
        task_scope = self.task_scope(str(dag_node["name"]), scope, task_nodes)
        template_name = str(task["template"])
        if task.get("when") is not None:
            # Argo: a task whose `when` is false gets a Skipped node, which its dependents take as done.
            # The `when` is resolved first, and a false one leaves the task's arguments and withParam
            # unresolved (v3.7 resolveDependencyReferences), so they may name outputs that do not exist.
            try:
                resolved_when = str(substitute(str(task["when"]), task_scope))
                holds = when_holds(resolved_when)
            except Unresolved as exc:
                node = self.node_by_name(child_name) or self.new_node(
                    child_name,
                    NodeType.SKIPPED,
                    display_name=str(task["name"]),
                    template_name=template_name,
                    boundary_id=str(dag_node["id"]),
                )
                self.finish(node, NodePhase.ERROR, f"when: {exc}")
                return node
            if not holds:
                existing = self.node_by_name(child_name)
                if existing is not None:
                    return existing
                skipped = self.new_node(
                    child_name,
                    NodeType.SKIPPED,
                    display_name=str(task["name"]),
                    template_name=template_name,
                    boundary_id=str(dag_node["id"]),
                    phase=NodePhase.SKIPPED,
                    # A loop with a false `when` expands to no item at all (v3.7 expandTask).
                    message="Skipped, empty params"
                    if task.get("withParam") is not None
                    else f"when '{resolved_when}' evaluated false",
                )
                return skipped
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
        """The task's `arguments.parameters` with their variables resolved from `scope`."""
        arguments: dict[str, str] = {}
        for param in (task.get("arguments") or {}).get("parameters") or []:
            arguments[str(param["name"])] = str(substitute(str(param.get("value", "")), scope))
        return arguments

    def execute_loop(
        self, task: Mapping[str, Any], group_name: str, dag_node: dict[str, Any], scope: Mapping[str, str]
    ) -> dict[str, Any] | None:
        """A `withParam` task: a TaskGroup node with one child per item, started in list order
        (Skipped when the list is empty, Error when the value is not a JSON list)."""
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
