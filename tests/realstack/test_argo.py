"""The real Argo Workflows controller and Argo Server: a Workflow runs on real pods, the argo CLI
reads it, and the watcher's `--argo-server` submission works against the real server.

Real: everything of tests/support/realstack.py; the steps run as pods of our step image under the
chart's steps service account. Argo CD is the fleet simulator (in this process). The requests-mock
tests of the submission path (tests/unit/test_argo_server.py) stay as unit tests.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from orchestrator.kube.client import PROGRESSIVE_SYNCS, WORKFLOWS
from orchestrator.simulator.appcontroller import FleetSimulator
from orchestrator.simulator.config import SimulatorConfig
from tests.support.realstack import RealStack
from tests.support.wait import wait_for
from tests.support.watcher_harness import FAST_FLEET, create_ps, phase_of, seed, sync_starts, workflows_of

STEPS_SERVICE_ACCOUNT = "progressive-sync-steps"


def two_step_workflow(image: str) -> dict[str, Any]:
    """`produce` writes an output parameter; `consume` gets it as an argument and prints it."""

    def step(name: str, script: str, *args: str, **extra: Any) -> dict[str, Any]:
        return {
            "name": name,
            "container": {
                "image": image,
                "imagePullPolicy": "Never",
                "command": ["python", "-c", script, *args],
            },
            **extra,
        }

    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"name": "two-steps"},
        "spec": {
            "entrypoint": "main",
            "serviceAccountName": STEPS_SERVICE_ACCOUNT,
            "templates": [
                {
                    "name": "main",
                    "steps": [
                        [{"name": "produce", "template": "produce"}],
                        [
                            {
                                "name": "consume",
                                "template": "consume",
                                "arguments": {
                                    "parameters": [
                                        {"name": "word", "value": "{{steps.produce.outputs.parameters.word}}"}
                                    ]
                                },
                            }
                        ],
                    ],
                },
                step(
                    "produce",
                    "open('/tmp/word', 'w').write('hello-from-a-pod')",
                    outputs={"parameters": [{"name": "word", "valueFrom": {"path": "/tmp/word"}}]},
                ),
                step(
                    "consume",
                    "import sys; print('got', sys.argv[1])",
                    "{{inputs.parameters.word}}",
                    inputs={"parameters": [{"name": "word"}]},
                ),
            ],
        },
    }


def test_a_two_step_workflow_runs_on_the_real_controller_and_the_argo_cli_reads_it(
    real_stack: RealStack, real_namespace: str
) -> None:
    real_stack.kube.create(WORKFLOWS, real_namespace, two_step_workflow(real_stack.step_image))
    done = wait_for(
        lambda: (
            (real_stack.kube.get(WORKFLOWS, real_namespace, "two-steps").get("status") or {}).get("phase")
            in ("Succeeded", "Failed", "Error")
            and real_stack.kube.get(WORKFLOWS, real_namespace, "two-steps")
        ),
        timeout=180,
        interval=0.5,
        what="the Workflow to finish",
    )
    assert done["status"]["phase"] == "Succeeded", done["status"].get("message")
    pods = {n["displayName"]: n for n in done["status"]["nodes"].values() if n["type"] == "Pod"}
    assert sorted(pods) == ["consume", "produce"]
    assert pods["produce"]["outputs"]["parameters"][0]["value"] == "hello-from-a-pod"
    assert pods["consume"]["inputs"]["parameters"][0]["value"] == "hello-from-a-pod"

    # The real argo CLI, straight to Kubernetes and through the Argo Server, sees the same Workflow.
    for via_server in (False, True):
        shown = real_stack.argo(
            "get", "two-steps", "-o", "json", namespace=real_namespace, via_server=via_server
        )
        assert shown.returncode == 0, shown.stderr
        assert json.loads(shown.stdout)["status"]["phase"] == "Succeeded"
    listed = real_stack.argo("list", "-o", "name", namespace=real_namespace, via_server=True)
    assert listed.stdout.split() == ["two-steps"], listed.stderr


def test_the_watcher_submits_through_the_real_argo_server_and_the_rollout_runs_on_pods(
    real_stack: RealStack, real_namespace: str, tmp_path: Path
) -> None:
    fleet = seed(real_stack.kube, real_namespace, clusters=2)
    events = tmp_path / "simulator.jsonl"
    simulator = FleetSimulator(
        real_stack.kube, real_namespace, SimulatorConfig.from_yaml(FAST_FLEET), events_log=events
    ).start()
    watcher = real_stack.watcher(real_namespace, tmp_path / "watcher.log", argo_server=True)
    assert (
        watcher.env is not None and watcher.env["PROGRESSIVE_SYNC_ARGO_SERVER"] == real_stack.argo_server_url
    )
    audit_mark = real_stack.stack.cluster.audit_mark() if real_stack.stack.cluster else 0
    try:
        watcher.start()
        create_ps(real_stack.kube, real_namespace, "web", fleet.app_set)
        wait_for(
            lambda: phase_of(real_stack.kube, real_namespace, "web") in ("Succeeded", "Failed"),
            timeout=300,
            interval=1.0,
            what="the rollout to finish",
        )
    finally:
        watcher.stop()
        simulator.stop()
    status = real_stack.kube.get(PROGRESSIVE_SYNCS, real_namespace, "web")["status"]
    assert status["phase"] == "Succeeded", status
    assert sync_starts(events) == {app: 1 for app in fleet.apps}
    # The exit handler records the outcome while the Workflow is still Running: wait for its end.
    workflow = wait_for(
        lambda: next(
            (
                w
                for w in workflows_of(real_stack.kube, real_namespace, "web")
                if w.get("status", {}).get("finishedAt")
            ),
            None,
        ),
        timeout=60,
        interval=0.5,
        what="the Workflow to finish",
    )
    assert workflow["status"]["phase"] == "Succeeded"
    # The Workflow was created by the Argo Server (its own user), not by the watcher's kubeconfig.
    assert real_stack.stack.cluster is not None
    creators = {
        event.user
        for event in real_stack.stack.cluster.audit_events_since(audit_mark)
        if event.resource == "workflows" and event.verb == "create" and event.namespace == real_namespace
    }
    assert creators == {"argo-server"}
    # Every step ran as a pod under the chart's steps service account.
    assert workflow["spec"].get("serviceAccountName") == STEPS_SERVICE_ACCOUNT
