"""Static checks of a rendered Workflow or WorkflowTemplate: every reference resolves.

Hera checks types when it builds, but not references (a dangling entrypoint builds fine), and
Argo only finds them when the Workflow runs. `problems(obj, library=...)` returns what is wrong,
as sentences, empty when nothing is. It checks what our Workflows rely on:

- names: object name, template names and DAG task names follow Argo's rules and are unique;
- the entrypoint and `onExit` name templates that exist;
- every task calls a template of the same object, or a `templateRef` that exists in `library`
  (the WorkflowTemplates by name), exactly one of the two;
- every dependency names a task of the same DAG, and the dependencies form no cycle;
- every `{{...}}` reference resolves: `inputs.parameters.X` declared by the template (and the one
  expression tag we write, `names.display_name_of_input(X)`, for a declared X),
  `workflow.parameters.X` declared in `spec.arguments`, `tasks.T.outputs.parameters.P` where T is
  an ancestor of the task and its template declares output P, `tasks.T.status` of an ancestor T,
  `item` only in looped tasks, and the workflow globals we use; `workflow.status` only in
  templates reachable from `onExit`;
- every input parameter a called template declares without a value is passed by the caller;
- `parallelism` is an integer >= 1, suspend durations are whole seconds, display names pass
  Argo's rule;
- no template-level `failFast`: Argo v3.7 fails such a template from `checkParallelism` without
  setting its outbound nodes, so the tasks after it are never reached and the Workflow hangs
  Running (and with non-Pod children it fails while they still run); see docs/design/workflow.md.

Used by the tests (on everything we render) and by `progressive-sync render --check`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from orchestrator.api.metadata import MAX_OBJECT_NAME
from workflow_templates import names

_REF = re.compile(r"{{\s*([^{}]*?)\s*}}")
_GLOBALS = {"workflow.name", "workflow.namespace", "workflow.uid", "workflow.serviceAccountName"}
_EXIT_GLOBALS = {"workflow.status", "workflow.failures"}


def _strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def references(value: Any) -> list[str]:
    """Every `{{...}}` variable used in a value (strings nested anywhere in it), in order."""
    return [match.group(1) for text in _strings(value) for match in _REF.finditer(text)]


def _param_names(holder: Mapping[str, Any] | None) -> list[str]:
    return [str(p.get("name", "")) for p in ((holder or {}).get("parameters") or [])]


def _check_name(kind: str, name: str, problems: list[str]) -> None:
    if not name:
        problems.append(f"a {kind} has no name")
    elif len(name) > names.MAX_FIELD_NAME or not names.FIELD_NAME_RE.fullmatch(name):
        problems.append(f"{kind} name {name!r} is not valid for Argo ([a-zA-Z0-9-], at most 128)")


def _find_cycle(dependencies: Mapping[str, list[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(task: str) -> list[str] | None:
        state[task] = 1
        path.append(task)
        for dep in dependencies.get(task, []):
            if state.get(dep) == 1:
                return [*path[path.index(dep) :], dep]
            if dep in dependencies and state.get(dep) is None:
                found = visit(dep)
                if found:
                    return found
        path.pop()
        state[task] = 2
        return None

    for task in dependencies:
        if state.get(task) is None:
            found = visit(task)
            if found:
                return found
    return None


def _ancestors(task: str, dependencies: Mapping[str, list[str]]) -> set[str]:
    seen: set[str] = set()
    stack = list(dependencies.get(task, []))
    while stack:
        dep = stack.pop()
        if dep not in seen:
            seen.add(dep)
            stack.extend(dependencies.get(dep, []))
    return seen


class _Checker:
    def __init__(self, obj: Mapping[str, Any], library: Mapping[str, Mapping[str, Any]]) -> None:
        self.obj = obj
        self.spec = obj.get("spec") or {}
        self.library = library
        self.problems: list[str] = []
        self.templates: dict[str, Mapping[str, Any]] = {}
        for template in self.spec.get("templates") or []:
            name = str(template.get("name", ""))
            _check_name("template", name, self.problems)
            if name in self.templates:
                self.problems.append(f"template name {name!r} is used twice")
            self.templates[name] = template
        self.workflow_params = set(_param_names(self.spec.get("arguments")))

    def resolve(self, task: Mapping[str, Any], where: str) -> Mapping[str, Any] | None:
        """The template a task calls, or None (with a problem recorded)."""
        local, ref = task.get("template"), task.get("templateRef") or {}
        if bool(local) == bool(ref):
            self.problems.append(f"{where}: give exactly one of template and templateRef")
            return None
        if local:
            if local not in self.templates:
                self.problems.append(f"{where}: template {local!r} does not exist")
                return None
            return self.templates[local]
        library_obj = self.library.get(str(ref.get("name", "")))
        if library_obj is None:
            self.problems.append(
                f"{where}: templateRef names WorkflowTemplate {ref.get('name')!r}, not found"
            )
            return None
        for template in (library_obj.get("spec") or {}).get("templates") or []:
            if template.get("name") == ref.get("template"):
                return template  # type: ignore[no-any-return]
        self.problems.append(
            f"{where}: templateRef template {ref.get('template')!r} "
            f"is not in WorkflowTemplate {ref.get('name')!r}"
        )
        return None

    def check_call(self, callee: Mapping[str, Any], arguments: Mapping[str, Any] | None, where: str) -> None:
        passed = set(_param_names(arguments))
        for param in (callee.get("inputs") or {}).get("parameters") or []:
            has_default = "value" in param or "default" in param
            if param.get("name") not in passed and not has_default:
                self.problems.append(f"{where}: input parameter {param.get('name')!r} is not passed")

    def check_refs(self, value: Any, where: str, allowed: set[str], exit_scope: bool) -> None:
        for ref in references(value):
            if ref in allowed or ref in _GLOBALS or (exit_scope and ref in _EXIT_GLOBALS):
                continue
            if ref.startswith("="):
                self.problems.append(f"{where}: expression {{{{{ref}}}}} is not used by our Workflows")
                continue
            if (
                ref.startswith("workflow.parameters.")
                and ref.removeprefix("workflow.parameters.") in self.workflow_params
            ):
                continue
            self.problems.append(f"{where}: {{{{{ref}}}}} does not resolve")

    def check_template(self, template: Mapping[str, Any], exit_scope: bool) -> None:
        name = str(template.get("name", ""))
        where = f"template {name!r}"
        declared = _param_names(template.get("inputs"))
        inputs = {f"inputs.parameters.{p}" for p in declared}
        # The one expression our Workflows use: a display name showing a declared input.
        inputs |= {names.display_name_of_input(p).removeprefix("{{").removesuffix("}}") for p in declared}
        parallelism = template.get("parallelism")
        if parallelism is not None and (not isinstance(parallelism, int) or parallelism < 1):
            self.problems.append(f"{where}: parallelism must be an integer >= 1, not {parallelism!r}")
        if template.get("failFast"):
            self.problems.append(
                f"{where}: template failFast hangs the Workflow on Argo v3.7 when anything depends on the "
                "template; let the steps stop the stage instead"
            )
        display = (template.get("annotations") or {}).get(names.DISPLAY_NAME_ANNOTATION)
        if display and "{{" not in display and not names.DISPLAY_NAME_RE.fullmatch(display):
            self.problems.append(f"{where}: display name {display!r} does not pass Argo's rule")
        suspend = template.get("suspend")
        if suspend is not None and suspend.get("duration") is not None:
            duration = str(suspend["duration"])
            if "{{" not in duration and not duration.isdigit():
                self.problems.append(f"{where}: suspend duration {duration!r} is not whole seconds")
        dag = template.get("dag")
        if dag is None:
            body = {k: v for k, v in template.items() if k not in ("name", "inputs", "outputs")}
            self.check_refs(body, where, inputs, exit_scope)
        else:
            self.check_dag(dag, where, inputs, exit_scope)

    def check_dag(self, dag: Mapping[str, Any], where: str, inputs: set[str], exit_scope: bool) -> None:
        tasks = dag.get("tasks") or []
        if not tasks:
            self.problems.append(f"{where}: a DAG needs at least one task")
        by_name: dict[str, Mapping[str, Any]] = {}
        for task in tasks:
            task_name = str(task.get("name", ""))
            _check_name(f"task of {where}", task_name, self.problems)
            if task_name[:1].isdigit():
                self.problems.append(f"{where}: task {task_name!r} starts with a digit")
            if task_name in by_name:
                self.problems.append(f"{where}: task {task_name!r} is defined twice")
            by_name[task_name] = task
        dependencies: dict[str, list[str]] = {}
        for task_name, task in by_name.items():
            deps = [str(d) for d in task.get("dependencies") or []]
            if task.get("depends"):
                self.problems.append(
                    f"{where}: task {task_name!r} uses `depends`; our Workflows use dependencies"
                )
            for dep in deps:
                if dep not in by_name:
                    self.problems.append(
                        f"{where}: task {task_name!r} depends on {dep!r}, which does not exist"
                    )
            dependencies[task_name] = [d for d in deps if d in by_name]
        cycle = _find_cycle(dependencies)
        if cycle:
            self.problems.append(f"{where}: dependency cycle {' -> '.join(cycle)}")
            return
        callees: dict[str, Mapping[str, Any] | None] = {}
        for task_name, task in by_name.items():
            callees[task_name] = self.resolve(task, f"{where} task {task_name!r}")
        for task_name, task in by_name.items():
            task_where = f"{where} task {task_name!r}"
            callee = callees[task_name]
            if callee is not None:
                self.check_call(callee, task.get("arguments"), task_where)
            allowed = set(inputs)
            if task.get("withParam") is not None or task.get("withItems") is not None:
                allowed.add("item")
            for ancestor in _ancestors(task_name, dependencies):
                allowed.add(f"tasks.{ancestor}.status")
                ancestor_callee = callees.get(ancestor)
                for output in _param_names((ancestor_callee or {}).get("outputs")):
                    allowed.add(f"tasks.{ancestor}.outputs.parameters.{output}")
            self.check_refs(
                {k: v for k, v in task.items() if k in ("arguments", "withParam", "when")},
                task_where,
                allowed,
                exit_scope,
            )

    def reachable(self, start: str) -> set[str]:
        seen: set[str] = set()
        stack = [start]
        while stack:
            name = stack.pop()
            if name in seen or name not in self.templates:
                continue
            seen.add(name)
            for task in (self.templates[name].get("dag") or {}).get("tasks") or []:
                if task.get("template"):
                    stack.append(str(task["template"]))
        return seen

    def run(self) -> list[str]:
        meta = self.obj.get("metadata") or {}
        name = str(meta.get("name", ""))
        if (
            not name
            or len(name) > MAX_OBJECT_NAME
            or not re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", name)
        ):
            self.problems.append(f"object name {name!r} is not a DNS name of at most 63 characters")
        entrypoint = self.spec.get("entrypoint")
        if self.obj.get("kind") == "Workflow" and not entrypoint:
            self.problems.append("a Workflow needs spec.entrypoint")
        for field in ("entrypoint", "onExit"):
            target = self.spec.get(field)
            if target and target not in self.templates:
                self.problems.append(f"spec.{field} names template {target!r}, which does not exist")
        exit_templates = self.reachable(str(self.spec.get("onExit", "")))
        main_templates = self.reachable(str(entrypoint)) if entrypoint else set()
        for template_name, template in self.templates.items():
            # A library template may be called from anywhere, exit handlers included.
            exit_scope = template_name in exit_templates or (
                self.obj.get("kind") == "WorkflowTemplate" and template_name not in main_templates
            )
            self.check_template(template, exit_scope)
        return self.problems


def problems(obj: Mapping[str, Any], *, library: Mapping[str, Mapping[str, Any]] | None = None) -> list[str]:
    """What is wrong with a Workflow or WorkflowTemplate object (see the module docstring)."""
    return _Checker(obj, library or {}).run()


def library_of(objects: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """WorkflowTemplates by name, for resolving `templateRef`."""
    return {str(obj["metadata"]["name"]): obj for obj in objects}
