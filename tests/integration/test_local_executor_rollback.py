"""The local executor runs the rollback branch of a built Workflow on the real API server.

Real: kube-apiserver + etcd with our Workflow CRD, the watch stream, the executor's processes, and
the Workflow exactly as `workflow_templates.builder` builds it with a rollback (contracts made by
hand, tests/support/rollback_contracts.py), but for each container's command: every step runs
STUB below (`python -c STUB <step> <args>`), which plays select, cluster, record, rollback-plan,
rollback and finalize from its environment and logs what it was asked. Not real: Argo Workflows
(the executor plays its controller; tests/unit/test_workflow_engine_rollback.py names the Argo
sources each behaviour follows) and the steps themselves (tests/e2e runs those).

Every wait is on a condition with a deadline (tests/support/wait.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from orchestrator.devenv.controlplane import DevCluster
from orchestrator.engine.executor import LocalExecutor
from orchestrator.kube.client import WORKFLOWS, Kube
from tests.support import workflow_control
from tests.support.builders import make_ps_model, make_release, make_stage
from tests.support.rollback_contracts import rollback_workflow
from tests.support.tiny_executor import tiny_executor_settings
from tests.support.wait import wait_for
from workflow_templates.builder import StageSize
from workflow_templates.settings import WorkflowSettings

pytestmark = pytest.mark.integration

# One line of JSON per start and end: [what, step, {flag: value}, time].
STUB = r"""
import json, os, sys, time
step, args = sys.argv[1], sys.argv[2:]
opts = dict(zip(args[::2], args[1::2]))
def note(what):
    with open(os.environ["LOG"], "a") as f:
        f.write(json.dumps([what, step, opts, time.time()]) + "\n")
def output(name, value):
    with open(os.path.join(os.environ["PROGRESSIVE_SYNC_OUTPUTS_DIR"], name), "w") as f:
        f.write(json.dumps(value))
note("start")
targets = json.loads(os.environ["TARGETS"])
failing = set(json.loads(os.environ["FAIL"]))
code = 0
if step == "select":
    output("targets", targets[opts["--stage"]])
elif step == "cluster":
    gate, deadline = os.environ.get("GATE"), time.time() + 60
    while gate and not os.path.exists(gate) and time.time() < deadline:
        time.sleep(0.05)
    code = 1 if opts["--cluster"] in failing else 0
elif step in ("record", "record-and-select"):
    if failing & set(targets[opts["--stage"]]):
        code = 1
    elif step == "record-and-select":
        output("targets", targets[opts["--next-stage"]])
elif step == "rollback-plan":
    for index, clusters in json.loads(os.environ["PLAN"]).items():
        output(f"rollback-{index}", clusters)
    for index, batches in json.loads(os.environ["BATCHES"]).items():
        output(f"rollback-batches-{index}", batches)
elif step in ("rollback", "rollback-batch"):
    time.sleep(float(os.environ["ROLLBACK_SECONDS"]))
note("end")
sys.exit(code)
"""
TARGETS = {"canary": ["c1"], "rest": ["c2", "c3"]}


def workflow(
    name: str,
    namespace: str,
    *,
    fail: Sequence[str] = (),
    plan: Mapping[int, list[str]] | None = None,
    batches: Mapping[int, list[str]] | None = None,
    log: Path,
    gate: Path | None = None,
    rollback_seconds: float = 0.0,
    deadline: int | None = None,
) -> dict[str, Any]:
    """The built rollback Workflow of a canary and a `rest` stage of two, one rollback at a time,
    every step running STUB; its rollback-plan writes `plan` (stage index -> clusters, one
    `rollback` pod each) and `batches` (stage index -> `rollback-batch` pod indexes)."""
    ps = make_ps_model(
        name, uid=None, stages=(make_stage("canary", max_parallel=1), make_stage("rest", max_parallel=2))
    )
    obj: dict[str, Any] = rollback_workflow(
        ps,
        release=make_release("r1", revisions=(("abc",),)),
        sizes={"canary": StageSize(1, 1), "rest": StageSize(2, 2)},
        settings=WorkflowSettings(retry_backoff="1s"),
        parallel={"rest": 1},
    ).to_dict()
    env = {
        "LOG": str(log),
        "TARGETS": json.dumps(TARGETS),
        "FAIL": json.dumps(list(fail)),
        "PLAN": json.dumps(plan or {}),
        "BATCHES": json.dumps(batches or {}),
        "ROLLBACK_SECONDS": str(rollback_seconds),
        **({"GATE": str(gate)} if gate else {}),
    }
    for template in obj["spec"]["templates"]:
        if "container" in template:
            template["container"]["command"] = ["python", "-c", STUB]
            template["container"]["env"] += [{"name": k, "value": v} for k, v in env.items()]
    if deadline is not None:
        obj["spec"]["activeDeadlineSeconds"] = deadline
    obj["metadata"]["namespace"] = namespace
    return obj


class Log:
    """What STUB logged, in order."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def rows(self) -> list[tuple[str, str, dict[str, str], float]]:
        if not self.path.exists():
            return []
        return [tuple(json.loads(line)) for line in self.path.read_text().splitlines()]  # type: ignore[misc]

    def started(self, *steps: str) -> list[tuple[str, dict[str, str]]]:
        return [(step, opts) for what, step, opts, _ in self.rows() if what == "start" and step in steps]

    def ended(self, step: str) -> int:
        return sum(1 for what, name, _, _ in self.rows() if what == "end" and name == step)


@pytest.fixture
def log(tmp_path: Path) -> Log:
    return Log(tmp_path / "steps.log")


@pytest.fixture
def executor(
    control_plane: DevCluster, kube: Kube, namespace: str, tmp_path: Path
) -> Iterator[LocalExecutor]:
    with LocalExecutor(kube, tiny_executor_settings(control_plane, namespace, tmp_path)) as running:
        yield running


def finished(kube: Kube, namespace: str, name: str, timeout: float = 90.0) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        obj = kube.get(WORKFLOWS, namespace, name)
        return obj if (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed", "Error") else None

    return wait_for(done, timeout=timeout, what=f"{name} finished")


def exit_steps(log: Log) -> list[tuple[str, str]]:
    """The exit handler's steps in start order: (step, its cluster or the Workflow status)."""
    return [
        (step, opts.get("--cluster") or opts.get("--batch") or opts.get("--workflow-status", ""))
        for step, opts in log.started("rollback-plan", "rollback", "rollback-batch", "finalize")
    ]


@pytest.mark.usefixtures("executor")
def test_a_failed_stage_is_rolled_back_last_stage_first_then_finalized(
    kube: Kube, namespace: str, log: Log
) -> None:
    # rest's two clusters at one at a time (its rollbackParallel) are one rollback-batch pod, which
    # restores them one after the other (orchestrator.planning.rollback.fanout_items); the canary's
    # one cluster is a rollback pod of its own.
    obj = workflow(
        "web",
        namespace,
        fail=["c2"],
        plan={0: ["c1"]},
        batches={1: ["0"]},
        log=log.path,
        rollback_seconds=0.3,
    )
    kube.create(WORKFLOWS, namespace, obj)
    done = finished(kube, namespace, "web-r1")
    assert done["status"]["phase"] == "Failed"
    assert exit_steps(log) == [
        ("rollback-plan", "Failed"),
        ("rollback-batch", "0"),
        ("rollback", "c1"),
        ("finalize", "Failed"),
    ]
    [(_, plan_opts)] = log.started("rollback-plan")
    assert plan_opts["--workflow-name"] == "web-r1"  # {{workflow.name}} inside the exit DAG
    # Later stages first: rest's batch pod ended before the canary's pod started.
    rows = [(what, step) for what, step, _, _ in log.rows() if step in ("rollback", "rollback-batch")]
    assert rows == [
        ("start", "rollback-batch"),
        ("end", "rollback-batch"),
        ("start", "rollback"),
        ("end", "rollback"),
    ]
    nodes = done["status"]["nodes"].values()
    assert {
        n["displayName"] for n in nodes if n.get("templateName") == "rollback" and n["type"] == "Retry"
    } == {"c1"}
    exit_node = next(n for n in nodes if n["name"] == "web-r1.onExit")
    assert (exit_node["type"], exit_node["templateName"], exit_node["phase"]) == ("DAG", "exit", "Succeeded")


@pytest.mark.usefixtures("executor")
def test_stop_rolls_back_and_terminate_does_not(kube: Kube, namespace: str, log: Log, tmp_path: Path) -> None:
    never = tmp_path / "never"
    for name, strategy in (("stopped", "Stop"), ("terminated", "Terminate")):
        obj = workflow(name, namespace, plan={0: ["c1"]}, log=log.path, gate=never)
        kube.create(WORKFLOWS, namespace, obj)
        wait_for(lambda: log.started("cluster"), timeout=30, what=f"{name}'s canary syncing")
        if strategy == "Stop":
            workflow_control.stop(kube, namespace, f"{name}-r1")
        else:
            workflow_control.terminate(kube, namespace, f"{name}-r1")
        done = finished(kube, namespace, f"{name}-r1")
        assert (done["status"]["phase"], done["status"]["message"]) == (
            "Failed",
            f"Stopped with strategy '{strategy}'",
        )
        ran = exit_steps(log)
        if strategy == "Stop":
            assert ran == [("rollback-plan", "Failed"), ("rollback", "c1"), ("finalize", "Failed")]
        else:
            assert ran == []
        log.path.unlink()


@pytest.mark.usefixtures("executor")
def test_past_the_deadline_the_rollback_pods_run_to_their_end(
    kube: Kube, namespace: str, log: Log, tmp_path: Path
) -> None:
    obj = workflow(
        "late",
        namespace,
        plan={0: ["c1"]},
        log=log.path,
        gate=tmp_path / "never",
        rollback_seconds=3,
        deadline=3,
    )
    kube.create(WORKFLOWS, namespace, obj)
    done = finished(kube, namespace, "late-r1")
    assert done["status"]["phase"] == "Failed" and "deadline" in done["status"]["message"]
    assert exit_steps(log) == [("rollback-plan", "Failed"), ("rollback", "c1"), ("finalize", "Failed")]
    assert log.ended("rollback") == 1  # it slept 3 s past the deadline and was not killed
    [pod] = [
        n
        for n in done["status"]["nodes"].values()
        if n.get("templateName") == "rollback" and n["type"] == "Pod"
    ]
    assert pod["phase"] == "Succeeded"
