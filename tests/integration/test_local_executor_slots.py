"""The local executor's bound on step processes, on the real API server with real processes.

`ExecutorSettings.max_step_processes` (orchestrator/engine/slots.py): steps past the bound stay
Pending in the Workflow, saying why, and start in their order as slots free; every Workflow still
runs two steps whatever the others run, so a step that waits for a later one of its Workflow (as the
follower waits for the rollout) cannot starve it. Each step is `python -c` that notes its start
and end in a shared log and can wait for a file another step makes.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.api.metadata import NAME_LABEL
from orchestrator.devenv.controlplane import DevCluster
from orchestrator.engine.executor import LocalExecutor
from orchestrator.kube.client import WORKFLOWS, Kube
from tests.support.tiny_executor import StepLog, tiny_executor_settings
from tests.support.wait import wait_for

pytestmark = pytest.mark.integration

# A step: note "start <label> <time>", wait (at most 120 s, longer than any test waits) for the file
# $AWAIT if given, make the file $MAKE if given, note "end", exit 0.
STEP = r"""
import os, sys, time
label, log = sys.argv[1], os.environ["LOG"]
def note(what):
    with open(log, "a") as f:
        f.write(f"{what} {label} {time.time()}\n")
note("start")
awaited, deadline = os.environ.get("AWAIT"), time.time() + 120
while awaited and not os.path.exists(awaited) and time.time() < deadline:
    time.sleep(0.05)
if os.environ.get("MAKE"):
    open(os.environ["MAKE"], "w").close()
note("end")
"""
WAITING = "waiting for a free step process"


def step(name: str, log: Path, **env: str) -> dict[str, Any]:
    return {
        "name": name,
        "container": {
            "image": "python",
            "command": ["python", "-c", STEP, name],
            "env": [{"name": "LOG", "value": str(log)}, *({"name": k, "value": v} for k, v in env.items())],
        },
    }


def workflow(name: str, namespace: str, steps: list[dict[str, Any]]) -> dict[str, Any]:
    """Every step a task of one DAG, none depending on another: a pass asks for all at once."""
    tasks = [{"name": s["name"], "template": s["name"]} for s in steps]
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"name": name, "namespace": namespace, "labels": {NAME_LABEL: "slots"}},
        "spec": {"entrypoint": "main", "templates": [{"name": "main", "dag": {"tasks": tasks}}, *steps]},
    }


@pytest.fixture
def bounded(
    request: pytest.FixtureRequest, control_plane: DevCluster, kube: Kube, namespace: str, tmp_path: Path
) -> Iterator[LocalExecutor]:
    settings = tiny_executor_settings(control_plane, namespace, tmp_path, max_step_processes=request.param)
    with LocalExecutor(kube, settings) as running:
        yield running


def nodes(kube: Kube, namespace: str, name: str) -> dict[str, dict[str, Any]]:
    """The Workflow's Pod nodes by their task name."""
    found = kube.get(WORKFLOWS, namespace, name).get("status", {}).get("nodes", {}).values()
    return {str(n["displayName"]): n for n in found if n["type"] == "Pod"}


def phase(kube: Kube, namespace: str, name: str) -> str:
    return str(kube.get(WORKFLOWS, namespace, name).get("status", {}).get("phase", ""))


@pytest.mark.parametrize("bounded", [pytest.param(3, id="three-at-once")], indirect=True)
def test_steps_past_the_bound_stay_pending_saying_why_and_start_in_order_as_slots_free(
    bounded: LocalExecutor, kube: Kube, namespace: str, tmp_path: Path
) -> None:
    log = StepLog(tmp_path / "steps.log")
    gate = tmp_path / "gate"
    names = [f"s{i}" for i in range(6)]
    kube.create(
        WORKFLOWS,
        namespace,
        workflow("bounded", namespace, [step(n, log.path, AWAIT=str(gate)) for n in names]),
    )

    def held() -> dict[str, str]:
        by_name = nodes(kube, namespace, "bounded")
        pending = {
            n: str(node.get("message", "")) for n, node in by_name.items() if node["phase"] == "Pending"
        }
        running = [n for n, node in by_name.items() if node["phase"] == "Running"]
        # A node is Running once its process is started, a moment before the process logs "start".
        logged = len(log.started()) == 3
        return pending if len(running) == 3 and len(pending) == 3 and logged else {}

    pending = wait_for(held, timeout=30, what="three steps Running (and logged started) and three Pending")
    assert all(WAITING in message and "at most 3 at once" in message for message in pending.values()), pending
    assert sorted(log.started()) == names[:3]  # the first three of the pass; the others wait
    gate.touch()
    wait_for(
        lambda: phase(kube, namespace, "bounded") == "Succeeded", timeout=60, what="the Workflow Succeeded"
    )
    # The three that waited start together once the first three end (one pass): in any order.
    assert sorted(log.started()) == names and sorted(log.started()[3:]) == names[3:]
    assert log.max_concurrent() == 3
    assert all("message" not in node for node in nodes(kube, namespace, "bounded").values())
    # Each process gives its slot back as it ends, which may be a moment after its node is recorded.
    assert wait_for(lambda: bounded.slots.usage() == (0, 0), timeout=10, what="every slot given back")


@pytest.mark.parametrize("bounded", [pytest.param(1, id="one-at-once")], indirect=True)
def test_a_step_waiting_for_a_later_one_of_its_workflow_cannot_starve_it_under_the_bound(
    bounded: LocalExecutor, kube: Kube, namespace: str, tmp_path: Path
) -> None:
    # Each Workflow: `follow` waits for the file `work` makes, as the rollout follower waits for the
    # rollout. Two of them under a bound of one: without the two steps each Workflow may always run,
    # the followers would hold every slot and `work` never start.
    log = StepLog(tmp_path / "steps.log")
    for name in ("one", "two"):
        done = tmp_path / f"{name}.done"
        steps = [step("follow", log.path, AWAIT=str(done)), step("work", log.path, MAKE=str(done))]
        kube.create(WORKFLOWS, namespace, workflow(name, namespace, steps))
    both = wait_for(
        lambda: [phase(kube, namespace, name) for name in ("one", "two")] == ["Succeeded"] * 2,
        timeout=60,
        what="both Workflows Succeeded",
    )
    assert both
    assert sorted(log.started()) == ["follow", "follow", "work", "work"]
    # Each process gives its slot back as it ends, which may be a moment after its node is recorded.
    assert wait_for(lambda: bounded.slots.usage() == (0, 0), timeout=10, what="every slot given back")
