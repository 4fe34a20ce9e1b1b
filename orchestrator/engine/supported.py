"""The subset of Argo Workflows the local executor runs: `check_supported` names the first field,
template type or value outside it (the operator then ends the Workflow in phase Error saying so).

Besides what the executor does not do, it refuses what the real controller cannot run: `failFast`
(it hangs nested templates on Argo v3.7) and `parallelism` in any template the exit handler runs
(Argo v3.7's controller exits on it: docs/design/workflow.md, "No parallelism in the exit handler").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from orchestrator.engine.expressions import check_retry_expression, check_when_expression, parse_duration
from orchestrator.engine.interface import UnsupportedFeature
from orchestrator.workflows.phases import Shutdown

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
    "volumes",
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
    "volumeMounts",
}
_SUPPORTED_TASK = {"name", "template", "arguments", "dependencies", "withParam", "continueOn", "when"}
_SUPPORTED_RETRY = {"limit", "retryPolicy", "expression", "backoff"}
_SUPPORTED_BACKOFF = {"duration", "factor", "cap"}


def _only(kind: str, obj: Mapping[str, Any], allowed: set[str]) -> None:
    extra = sorted(set(obj) - allowed)
    if extra:
        raise UnsupportedFeature(f"{kind}.{extra[0]}")


def _check_parameters(
    kind: str, holder: Mapping[str, Any] | None, *, outputs: bool = False, value_from: str = "path"
) -> None:
    """Parameters without valueFrom; outputs with `valueFrom.<value_from>` only (a container's
    `path`, with an optional `default` for a missing file; a DAG's `parameter`)."""
    if not holder:
        return
    _only(kind, holder, {"parameters"})
    allowed = {value_from, "default"} if value_from == "path" else {value_from}
    for param in holder.get("parameters") or []:
        if outputs:
            keys = set(param.get("valueFrom") or {})
            if value_from not in keys or not keys <= allowed:
                other_than = " and ".join(sorted(allowed))
                raise UnsupportedFeature(f"{kind}.parameters.valueFrom other than {other_than}")
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


def exit_handler_templates(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The templates a Workflow's exit handler may run: `onExit`, the templates of its DAG's tasks,
    theirs, and so on (each once)."""
    by_name = {template.get("name"): template for template in spec.get("templates") or []}
    seen: dict[str, Mapping[str, Any]] = {}
    todo = [spec["onExit"]] if spec.get("onExit") else []
    while todo:
        name = todo.pop()
        if name in seen or name not in by_name:
            continue
        seen[name] = by_name[name]
        todo += [task.get("template") for task in (by_name[name].get("dag") or {}).get("tasks") or []]
    return list(seen.values())


def _check_exit_handler(spec: Mapping[str, Any]) -> None:
    """No template the exit handler may run has `parallelism`: Argo v3.7.18 lists a task that
    `parallelism` held back among its parent's children before it makes its node (dag.go), then
    walks an exit handler's children and exits (`level=fatal`, taskset.go): the whole controller,
    again on every restart."""
    for template in exit_handler_templates(spec):
        if template.get("parallelism") is not None:
            raise UnsupportedFeature(
                f"templates[{template.get('name')}].parallelism in the exit handler "
                "(it crashes Argo v3.7's controller)"
            )


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
    _check_exit_handler(spec)
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
        _check_parameters(
            f"{kind}.outputs",
            template.get("outputs"),
            outputs=True,
            value_from="parameter" if "dag" in template else "path",
        )
        if "dag" in template:
            # `failFast: false` is what the executor does (a DAG ends once every task has, Failed when
            # one failed); Argo's default (true) fails it at its first failed branch while the others run.
            if template["dag"].get("failFast", False) is not False:
                raise UnsupportedFeature(f"{kind}.dag.failFast (only false)")
            _only(f"{kind}.dag", template["dag"], {"tasks", "failFast"})
            for task in template["dag"].get("tasks") or []:
                _only(f"{kind}.dag.tasks[{task.get('name')}]", task, _SUPPORTED_TASK)
                if task.get("when") is not None:
                    check_when_expression(str(task["when"]))
                _check_parameters(f"{kind}.dag.tasks[{task.get('name')}].arguments", task.get("arguments"))
        # emptyDir volumes only (the step outputs directory on a read-only root filesystem): each
        # local step already gets a fresh directory of its own, so they need nothing more here.
        volumes = {volume.get("name") for volume in template.get("volumes") or []}
        for volume in template.get("volumes") or []:
            _only(f"{kind}.volumes[{volume.get('name')}]", volume, {"name", "emptyDir"})
        if "container" in template:
            container = template["container"]
            _only(f"{kind}.container", container, _SUPPORTED_CONTAINER)
            for mount in container.get("volumeMounts") or []:
                if mount.get("name") not in volumes:
                    raise UnsupportedFeature(
                        f"{kind}.container.volumeMounts[{mount.get('name')}] of no emptyDir volume"
                    )
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
