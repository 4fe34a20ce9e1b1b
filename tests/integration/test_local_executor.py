"""The local executor on the real API server, with real processes, on tiny Workflows.

Real: kube-apiserver + etcd with our Workflow CRD (no status subresource, like Argo's), the watch
stream, resourceVersion conflicts, `kubectl`, and each step as a subprocess (`python -c ...`)
that logs its start and end to a file. Not real: Argo Workflows (the executor plays its
controller). The full rollout with the steps and the fleet simulator is in tests/e2e.

Every wait is on a condition with a deadline (tests/support/wait.py).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from orchestrator.api.metadata import NAME_LABEL
from orchestrator.core.clock import SystemClock
from orchestrator.devenv.controlplane import DevCluster
from orchestrator.engine.executor import LocalExecutor
from orchestrator.engine.executor_settings import ExecutorSettings
from orchestrator.kube.client import WORKFLOWS, Kube
from tests.support import workflow_control
from tests.support.kubectl import Kubectl
from tests.support.tiny_executor import StepLog, tiny_executor_settings
from tests.support.wait import wait_for

pytestmark = pytest.mark.integration

# A step: log "start <label> <time>", sleep $SLEEP (or until the file $GATE exists), write
# outputs, log "end", exit with $EXIT (or the next code of $EXITS, consumed in file $EXITS).
STEP = r"""
import json, os, sys, time
label = sys.argv[1]
log = os.environ["LOG"]
def note(what):
    with open(log, "a") as f:
        f.write(f"{what} {label} {time.time()}\n")
note("start")
gate = os.environ.get("GATE")
deadline = time.time() + 30
while gate and not os.path.exists(gate) and time.time() < deadline:
    time.sleep(0.05)
time.sleep(float(os.environ.get("SLEEP", "0")))
out = os.environ["PROGRESSIVE_SYNC_OUTPUTS_DIR"]
if os.environ.get("TARGETS"):
    with open(os.path.join(out, "targets"), "w") as f:
        f.write(os.environ["TARGETS"])
code = int(os.environ.get("EXIT", "0"))
exits = os.environ.get("EXITS")
if exits:
    codes = json.load(open(exits))
    code = codes.pop(0) if codes else 0
    json.dump(codes, open(exits, "w"))
note("end")
print(f"{label} done with {code}")
sys.exit(code)
"""


def container(label: str, **env: str) -> dict[str, Any]:
    return {
        "image": "python",
        "command": ["python", "-c", STEP, label],
        "env": [{"name": k, "value": v} for k, v in env.items()],
    }


def step_template(
    name: str, label: str, *, outputs: bool = False, retry: bool = False, **env: str
) -> dict[str, Any]:
    template: dict[str, Any] = {"name": name, "container": container(label, **env)}
    if outputs:
        template["outputs"] = {
            "parameters": [{"name": "targets", "valueFrom": {"path": "/tmp/outputs/targets"}}]
        }
        template["container"]["env"].append({"name": "PROGRESSIVE_SYNC_OUTPUTS_DIR", "value": "/tmp/outputs"})
    if retry:
        template["retryStrategy"] = {
            "limit": 3,
            "retryPolicy": "Always",
            "expression": "asInt(lastRetry.exitCode) == 75",
            "backoff": {"duration": "1s", "factor": 1},
        }
    return template


def workflow(name: str, namespace: str, templates: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"name": name, "namespace": namespace, "labels": {NAME_LABEL: "tiny"}},
        "spec": {"entrypoint": "main", "templates": templates, **spec},
    }


def dag(name: str, *tasks: dict[str, Any], parallelism: int | None = None) -> dict[str, Any]:
    template: dict[str, Any] = {"name": name, "dag": {"tasks": list(tasks)}}
    if parallelism:
        template["parallelism"] = parallelism
    return template


def task(name: str, template: str, *deps: str, **extra: Any) -> dict[str, Any]:
    result: dict[str, Any] = {"name": name, "template": template, **extra}
    if deps:
        result["dependencies"] = list(deps)
    return result


@pytest.fixture
def log(tmp_path: Path) -> StepLog:
    return StepLog(tmp_path / "steps.log")


def settings_for(control_plane: DevCluster, namespace: str, tmp_path: Path) -> ExecutorSettings:
    return tiny_executor_settings(control_plane, namespace, tmp_path)


@pytest.fixture
def executor(
    control_plane: DevCluster, kube: Kube, namespace: str, tmp_path: Path
) -> Iterator[LocalExecutor]:
    with LocalExecutor(kube, settings_for(control_plane, namespace, tmp_path)) as running:
        yield running


def get(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    return kube.get(WORKFLOWS, namespace, name)


def phase_of(kube: Kube, namespace: str, name: str) -> str:
    return str((get(kube, namespace, name).get("status") or {}).get("phase", ""))


def wait_phase(kube: Kube, namespace: str, name: str, *phases: str, timeout: float = 60.0) -> dict[str, Any]:
    wait_for(lambda: phase_of(kube, namespace, name) in phases, timeout=timeout, what=f"{name} in {phases}")
    return get(kube, namespace, name)


def nodes_named(obj: dict[str, Any], suffix: str) -> list[dict[str, Any]]:
    return [n for n in (obj.get("status") or {}).get("nodes", {}).values() if str(n["name"]).endswith(suffix)]


# --- tests -----------------------------------------------------------------------------------


def test_dag_with_outputs_and_a_bounded_fanout_runs_to_succeeded(
    executor: LocalExecutor, kube: Kube, kubectl: Kubectl, namespace: str, log: StepLog
) -> None:
    targets = json.dumps([f"c{i}" for i in range(5)])
    templates = [
        dag(
            "main",
            task("select", "select"),
            task(
                "fan",
                "fan",
                "select",
                arguments={
                    "parameters": [
                        {"name": "targets", "value": "{{tasks.select.outputs.parameters.targets}}"}
                    ]
                },
            ),
            task("record", "record", "fan"),
        ),
        {
            "name": "fan",
            "inputs": {"parameters": [{"name": "targets"}]},
            "parallelism": 2,
            "dag": {
                "tasks": [
                    task(
                        "item",
                        "item",
                        withParam="{{inputs.parameters.targets}}",
                        arguments={"parameters": [{"name": "c", "value": "{{item}}"}]},
                    )
                ]
            },
        },
        {
            **step_template("item", "item-{{inputs.parameters.c}}", LOG=str(log.path), SLEEP="0.3"),
            "inputs": {"parameters": [{"name": "c"}]},
        },
        step_template("select", "select", outputs=True, LOG=str(log.path), TARGETS=targets),
        step_template("record", "record", LOG=str(log.path)),
    ]
    kube.create(WORKFLOWS, namespace, workflow("fan", namespace, templates))
    done = wait_phase(kube, namespace, "fan", "Succeeded", "Failed", "Error")
    assert done["status"]["phase"] == "Succeeded", done["status"].get("message")
    assert [log.count("end", f"item-c{i}") for i in range(5)] == [1] * 5
    assert log.max_concurrent("item-") == 2
    select = nodes_named(done, ".select")[0]
    assert select["outputs"]["parameters"][0]["value"] == targets
    assert done["status"]["startedAt"] <= done["status"]["finishedAt"]
    table = kubectl.ok("get", "workflows", "-n", namespace)
    assert "fan" in table and "Succeeded" in table


def test_stop_runs_the_exit_handler_and_terminate_does_not(
    executor: LocalExecutor, kube: Kube, namespace: str, log: StepLog, tmp_path: Path
) -> None:
    gate = str(tmp_path / "never")
    for name, strategy in (("stopped", "Stop"), ("terminated", "Terminate")):
        templates = [
            dag("main", task("slow", "slow")),
            step_template("slow", f"slow-{name}", LOG=str(log.path), GATE=gate),
            step_template("bye", f"exit-{name}", LOG=str(log.path)),
        ]
        kube.create(WORKFLOWS, namespace, workflow(name, namespace, templates, onExit="bye"))
        wait_for(lambda n=name: log.count("start", f"slow-{n}") == 1, timeout=30, what=f"{name} started")
        if strategy == "Stop":
            workflow_control.stop(kube, namespace, name)
        else:
            workflow_control.terminate(kube, namespace, name)
        done = wait_phase(kube, namespace, name, "Failed", "Succeeded", "Error")
        assert done["status"]["phase"] == "Failed"
        assert done["status"]["message"] == f"Stopped with strategy '{strategy}'"
        assert log.count("end", f"slow-{name}") == 0  # killed, not finished
    assert log.count("end", "exit-stopped") == 1
    assert log.count("start", "exit-terminated") == 0


def test_suspend_holds_new_steps_and_resume_continues(
    executor: LocalExecutor, kube: Kube, namespace: str, log: StepLog, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    templates = [
        dag("main", task("one", "one"), task("two", "two", "one")),
        step_template("one", "one", LOG=str(log.path), GATE=str(gate)),
        step_template("two", "two", LOG=str(log.path)),
    ]
    kube.create(WORKFLOWS, namespace, workflow("paused", namespace, templates))
    wait_for(lambda: log.count("start", "one") == 1, timeout=30, what="one started")
    workflow_control.suspend(kube, namespace, "paused")
    gate.touch()
    wait_for(lambda: log.count("end", "one") == 1, timeout=30, what="one finished while suspended")
    wait_for(
        lambda: nodes_named(get(kube, namespace, "paused"), ".one")[0]["phase"] == "Succeeded", timeout=30
    )
    # Give the executor several passes: two must not start while the Workflow is suspended.
    wait_for(lambda: phase_of(kube, namespace, "paused") == "Running", timeout=5)
    assert log.count("start", "two") == 0
    workflow_control.resume(kube, namespace, "paused", clock=SystemClock())
    done = wait_phase(kube, namespace, "paused", "Succeeded", "Failed")
    assert done["status"]["phase"] == "Succeeded"
    assert log.count("end", "two") == 1


def test_approval_gate_waits_until_resumed(
    executor: LocalExecutor, kube: Kube, namespace: str, log: StepLog
) -> None:
    templates = [
        dag("main", task("approve", "approval"), task("after", "after", "approve")),
        {"name": "approval", "suspend": {}},
        step_template("after", "after", LOG=str(log.path)),
    ]
    kube.create(WORKFLOWS, namespace, workflow("gated", namespace, templates))
    gate = wait_for(lambda: nodes_named(get(kube, namespace, "gated"), ".approve"), timeout=30)[0]
    assert (gate["type"], gate["phase"]) == ("Suspend", "Running")
    assert log.count("start", "after") == 0
    workflow_control.resume(kube, namespace, "gated", clock=SystemClock())
    done = wait_phase(kube, namespace, "gated", "Succeeded", "Failed")
    assert done["status"]["phase"] == "Succeeded"
    assert log.count("end", "after") == 1


@pytest.mark.parametrize(
    ("verdict", "gate_phase"),
    [
        pytest.param("Inconclusive", "Running", id="inconclusive-waits"),
        pytest.param("Passed", "Skipped", id="skipped"),
    ],
)
@pytest.mark.usefixtures("executor")
def test_a_when_gate_runs_only_on_its_verdict(
    kube: Kube, namespace: str, log: StepLog, verdict: str, gate_phase: str
) -> None:
    """The analysis gate's shape (workflow_templates.builder): `approve-analysis` runs only when the
    analysis task's `verdict` output says Inconclusive; Skipped, the task after it runs at once."""
    analysis = step_template("analysis", "analysis", outputs=True, LOG=str(log.path), TARGETS=verdict)
    analysis["outputs"]["parameters"][0]["name"] = "verdict"
    when = "{{tasks.analysis.outputs.parameters.verdict}} == Inconclusive"
    templates = [
        dag(
            "main",
            task("analysis", "analysis"),
            task("approve-analysis", "approval", "analysis", when=when),
            task("after", "after", "approve-analysis"),
        ),
        analysis,
        {"name": "approval", "suspend": {}},
        step_template("after", "after", LOG=str(log.path)),
    ]
    name = f"when-{verdict.lower()}"
    kube.create(WORKFLOWS, namespace, workflow(name, namespace, templates))
    gate = wait_for(lambda: nodes_named(get(kube, namespace, name), ".approve-analysis"), timeout=30)[0]
    assert gate["phase"] == gate_phase
    if gate_phase == "Running":
        assert log.count("start", "after") == 0
        workflow_control.resume(kube, namespace, name, clock=SystemClock())
    done = wait_phase(kube, namespace, name, "Succeeded", "Failed")
    assert done["status"]["phase"] == "Succeeded"
    assert log.count("end", "after") == 1


def test_temporary_errors_are_retried(
    executor: LocalExecutor, kube: Kube, namespace: str, log: StepLog, tmp_path: Path
) -> None:
    exits = tmp_path / "exits.json"
    exits.write_text("[75, 75]")
    templates = [
        dag("main", task("flaky", "flaky")),
        step_template("flaky", "flaky", retry=True, LOG=str(log.path), EXITS=str(exits)),
    ]
    kube.create(WORKFLOWS, namespace, workflow("flaky", namespace, templates))
    done = wait_phase(kube, namespace, "flaky", "Succeeded", "Failed")
    assert done["status"]["phase"] == "Succeeded"
    assert log.count("end", "flaky") == 3
    retry = nodes_named(done, ".flaky")[0]
    assert retry["type"] == "Retry" and len(retry["children"]) == 3


def test_restarted_executor_finishes_without_rerunning_finished_steps(
    control_plane: DevCluster, kube: Kube, namespace: str, log: StepLog, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    templates = [
        dag(
            "main",
            task("first", "first"),
            task("second", "second", "first"),
            task("third", "third", "second"),
        ),
        step_template("first", "first", LOG=str(log.path)),
        step_template("second", "second", LOG=str(log.path), GATE=str(gate)),
        step_template("third", "third", LOG=str(log.path)),
    ]
    settings = settings_for(control_plane, namespace, tmp_path)
    with LocalExecutor(kube, settings):
        kube.create(WORKFLOWS, namespace, workflow("restart", namespace, templates))
        wait_for(lambda: log.count("start", "second") == 1, timeout=30, what="second started")
        # The process starts right after its node is written Pending; wait until the executor
        # has recorded it Running, or a stop in between leaves a Pending node behind.
        wait_for(
            lambda: (
                [n["phase"] for n in nodes_named(get(kube, namespace, "restart"), ".second")] == ["Running"]
            ),
            timeout=30,
            what="second recorded Running",
        )
    # The first executor stopped: it killed `second`, which stays Running in the Workflow.
    stale = nodes_named(get(kube, namespace, "restart"), ".second")[0]
    assert stale["phase"] == "Running"
    gate.touch()
    with LocalExecutor(kube, settings):
        done = wait_phase(kube, namespace, "restart", "Succeeded", "Failed")
    assert done["status"]["phase"] == "Succeeded"
    assert log.count("start", "first") == 1
    assert log.count("start", "second") == 2
    assert log.count("end", "third") == 1


def test_a_second_workflow_of_the_same_mutex_waits(
    executor: LocalExecutor, kube: Kube, namespace: str, log: StepLog, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    mutex = {"synchronization": {"mutexes": [{"name": "one-at-a-time"}]}}
    kube.create(
        WORKFLOWS,
        namespace,
        workflow(
            "first",
            namespace,
            [dag("main", task("a", "a")), step_template("a", "a", LOG=str(log.path), GATE=str(gate))],
            **mutex,
        ),
    )
    wait_for(lambda: log.count("start", "a") == 1, timeout=30)
    kube.create(
        WORKFLOWS,
        namespace,
        workflow(
            "second",
            namespace,
            [dag("main", task("b", "b")), step_template("b", "b", LOG=str(log.path))],
            **mutex,
        ),
    )
    waiting = wait_phase(kube, namespace, "second", "Pending", timeout=30)
    assert "one-at-a-time" in waiting["status"]["message"]
    gate.touch()
    wait_phase(kube, namespace, "first", "Succeeded")
    wait_phase(kube, namespace, "second", "Succeeded")
    starts = {label: when for what, label, when in log.events() if what == "start"}
    ends = {label: when for what, label, when in log.events() if what == "end"}
    assert starts["b"] >= ends["a"]


def test_unsupported_feature_is_an_error_naming_it(
    executor: LocalExecutor, kube: Kube, namespace: str
) -> None:
    templates = [{"name": "main", "script": {"image": "python", "source": "print(1)"}}]
    kube.create(WORKFLOWS, namespace, workflow("scripted", namespace, templates))
    done = wait_phase(kube, namespace, "scripted", "Error", "Succeeded", "Failed", timeout=30)
    assert done["status"]["phase"] == "Error"
    assert "unsupported by the local executor" in done["status"]["message"]
    assert "script" in done["status"]["message"] or "templates[main]" in done["status"]["message"]


@pytest.mark.parametrize(
    "warm", [True, False], ids=["through-the-warm-launcher", "plain-subprocess-when-disabled"]
)
def test_python_m_steps_run_the_same_through_the_warm_launcher_or_without_it(
    control_plane: DevCluster, kube: Kube, namespace: str, tmp_path: Path, warm: bool
) -> None:
    child = "tests.support.warm_child"
    settings = replace(
        settings_for(control_plane, namespace, tmp_path),
        warm_modules=(child,) if warm else (),
        extra_env=(("PYTHONPATH", str(Path(__file__).resolve().parents[2])),),
    )

    def step(name: str, *args: str) -> dict[str, Any]:
        command = ["python", "-m", child, *args]
        return {
            "name": name,
            "container": {
                "image": "python",
                "command": command,
                "env": [{"name": "FROM_CONTAINER", "value": "yes"}],
            },
        }

    templates = [
        dag("main", task("report", "report"), task("three", "three", "report")),
        step("report", "report", "an arg"),
        step("three", "exit", "3"),
    ]
    with LocalExecutor(kube, settings):
        kube.create(WORKFLOWS, namespace, workflow("warm", namespace, templates))
        done = wait_phase(kube, namespace, "warm", "Succeeded", "Failed", "Error")
        [stdout] = [p for p in (tmp_path / "executor").rglob("stdout.log") if "argv" in p.read_text()]
        report = json.loads(stdout.read_text())
        parent = Path(f"/proc/{report['ppid']}/cmdline").read_bytes().split(b"\0")
    # stop() closed the watch stream instead of leaving it open until its timeout (20s here).
    assert not [t for t in threading.enumerate() if t.name == "executor-watch"]
    assert done["status"]["phase"] == "Failed"
    assert "exit code 3" in nodes_named(done, ".three")[0]["message"]
    assert nodes_named(done, ".report")[0]["phase"] == "Succeeded"
    assert report["argv"] == ["report", "an arg"]
    assert report["cwd"] == str(stdout.parent)
    assert report["env"]["FROM_CONTAINER"] == "yes"
    assert report["env"]["KUBECONFIG"] == str(control_plane.kubeconfig)
    assert report["env"]["PROGRESSIVE_SYNC_OUTPUTS_DIR"] == str(stdout.parent / "outputs")
    if warm:
        assert b"orchestrator.engine.warm_python" in parent, parent
        assert not Path(f"/proc/{report['ppid']}").exists(), "stopping the executor stops its launcher"
    else:
        assert report["ppid"] == os.getpid()


def test_a_worker_is_started_before_stop_can_find_it(
    control_plane: DevCluster, kube: Kube, namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`stop` joins every worker it finds registered (under the executor's lock). A worker is now
    registered and started under that lock, so `stop` never finds one whose thread has not started
    (CI on c83e4be: with the watch thread between the two, `stop` raised "cannot join thread before
    it is started"). The Workflow does not exist: its worker finds that out and ends."""
    executor = LocalExecutor(kube, replace(settings_for(control_plane, namespace, tmp_path), warm_modules=()))
    lock_held_at_start: list[bool] = []
    real_start = threading.Thread.start

    def start(thread: threading.Thread) -> None:
        if thread.name.startswith("workflow-"):
            free = executor._mutex.acquire(blocking=False)
            if free:
                executor._mutex.release()
            lock_held_at_start.append(not free)
        real_start(thread)

    monkeypatch.setattr(threading.Thread, "start", start)
    executor.observe({"metadata": {"namespace": namespace, "name": "never-created", "uid": "u1"}})
    executor.stop(timeout=10)
    assert lock_held_at_start == [True], "the worker's thread started outside the lock `stop` takes"
    name = f"workflow-{namespace}/never-created"
    wait_for(
        lambda: not [t for t in threading.enumerate() if t.name == name],
        timeout=10,
        what="the worker's thread to end",
    )
