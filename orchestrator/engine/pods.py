"""Pod nodes: the process to start for a container template (command, args and env resolved,
where its output parameters are read from), and a finished process's result as the node's phase,
message and outputs. A Pod node found Running without a process is run again (steps are idempotent).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from orchestrator.engine.expressions import Unresolved, substitute
from orchestrator.engine.interface import PodLaunch, PodResult, UnsupportedFeature
from orchestrator.engine.nodes import PassState
from orchestrator.workflows.phases import NodePhase, NodeType

OUTPUTS_DIR_ENV = "PROGRESSIVE_SYNC_OUTPUTS_DIR"
DEFAULT_OUTPUTS_DIR = "/tmp/outputs"


class PodNodes(PassState):
    """Pod nodes: launch, keep Running, record the result."""

    def launch_for(
        self, node: Mapping[str, Any], template: Mapping[str, Any], inputs: dict[str, str]
    ) -> PodLaunch:
        """The process to start for a Pod node: argv, env and where its output parameters are."""
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
        """Advance (or create) a Pod node: record a finished process's result, mark a running one
        Running, or launch one (again) unless the Workflow is halted."""
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
        if state is not None and state.waiting:
            # Launched, but its process waits for a free slot (orchestrator/engine/slots.py): Pending
            # with the reason, as Argo shows a pod no node can take yet.
            node["phase"] = NodePhase.PENDING.value
            node["message"] = state.waiting
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
        """A finished process's exit code, outputs and error as the node's outputs and phase.

        As Argo's wait container (v3.7 `SaveParameters`): outputs are read whatever the exit code,
        and an output whose file is missing takes its `valueFrom.default` where it has one (no
        error then); a process that could not run or was killed has no outputs."""
        outputs: dict[str, Any] = {"exitCode": str(result.exit_code)}
        params = []
        defaulted = set()
        for param in (template.get("outputs") or {}).get("parameters") or []:
            name = str(param["name"])
            value = result.outputs.get(name)
            if value is None and "default" in param["valueFrom"] and not result.error:
                value = str(param["valueFrom"]["default"])
                defaulted.add(name)
            if value is not None:
                params.append({"name": name, "value": value, "valueFrom": param["valueFrom"]})
        missing = [name for name in result.missing_outputs if name not in defaulted]
        if params:
            outputs["parameters"] = params
        node["outputs"] = outputs
        if result.error:
            self.finish(node, NodePhase.ERROR, result.error)
        elif result.exit_code != 0:
            summary = f": {result.summary}" if result.summary else ""
            # Argo's message for a failed main container: its name, the kubelet's reason, the exit
            # code and the termination message, which a step sets to its summary line
            # (steps.cli.write_termination_message; v3.7 operator.go inferFailedReason).
            self.finish(node, NodePhase.FAILED, f"main: Error (exit code {result.exit_code}){summary}")
        elif missing:
            self.finish(node, NodePhase.ERROR, f"output parameter file(s) missing: {', '.join(missing)}")
        else:
            self.finish(node, NodePhase.SUCCEEDED)
