"""The fault suite's real-stack rows (issue 18): Argo Workflows and the node fail mid-rollout.

Real: everything of tests/support/realstack.py (kube-apiserver + etcd, a node with containerd and
the kubelet, the workflow-controller of Argo Workflows v3.7.18, the steps as pods of our step
image). Argo CD is the fleet simulator (in this process), over a fleet of two clusters in one
stage, one at a time. The rollout's Workflow is created as the watcher creates it
(`RolloutRig.start_rollout`); the steps record the ProgressiveSync's status themselves.

The first cluster is held Progressing until its row's fault is in place: its sync may start from
`select` (the first wave, steps/first_wave.py) before its step pod exists, so a fixed health time
could end before the pod runs. Each row injects one fault once that pod's step logs that it is
following the cluster (it is then waiting for it to turn Healthy), lets the cluster turn Healthy,
and checks what every fault row checks:

1. the rollout ends in the row's phase (the Workflow and the ProgressiveSync's status);
2. every Application is synced at most once, exactly once when the rollout succeeds (the
   simulator's events log, and the steps' Application writes in the API server's audit log);
3. recovery within the row's bound: from the end of the fault to the Workflow's final phase, a
   deadline (never a sleep).

What each row showed is in docs/design/watcher.md ("Faults it rides out").
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from orchestrator.devenv.node import PODS
from orchestrator.kube.client import NotFound
from tests.support.engines import ARGO, rollout_engine
from tests.support.realstack import RealStack
from tests.support.rollout_rig import RolloutRig, rollout_rig
from tests.support.wait import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

CLUSTERS = 2
# One stage, one cluster at a time: the first cluster's step pod meets the fault, the second's
# starts only once the Workflow goes on after it (five pods in all: select, two clusters, record,
# the exit handler).
STAGE = "all"
STAGES = [{"name": STAGE, "targets": {"clusters": {"selector": {}}}, "maxParallel": 1}]
# The first cluster stays Progressing (an hour) until its row lets it turn Healthy (`release_first`).
HELD_HEALTH_SECONDS = 3600
WORKFLOW_LABEL = "workflows.argoproj.io/workflow"
NODE_NAME_ANNOTATION = "workflows.argoproj.io/node-name"


@dataclass
class FaultRun:
    """What a row's fault works on, and what it leaves for the checks."""

    rig: RolloutRig
    real: RealStack
    first: str
    showed: str = ""


def first_pods(rig: RolloutRig, first: str) -> list[dict[str, Any]]:
    """The pods of the first cluster's step (any phase)."""
    pods, _ = rig.kube.list(PODS, rig.namespace, label_selector=f"{WORKFLOW_LABEL}={rig.workflow_name}")
    return [
        pod
        for pod in pods
        if f".cluster(0:{first})" in (pod["metadata"].get("annotations") or {}).get(NODE_NAME_ANNOTATION, "")
    ]


def first_pod(run: FaultRun) -> dict[str, Any] | None:
    """The running pod of the first cluster's cluster step (None when there is none yet)."""
    pods, _ = run.rig.kube.list(
        PODS, run.rig.namespace, label_selector=f"{WORKFLOW_LABEL}={run.rig.workflow_name}"
    )
    for pod in pods:
        node = (pod["metadata"].get("annotations") or {}).get(NODE_NAME_ANNOTATION, "")
        if f".cluster(0:{run.first})" in node and pod.get("status", {}).get("phase") == "Running":
            return pod  # type: ignore[no-any-return]
    return None


def wait_for_first_pod(run: FaultRun) -> dict[str, Any]:
    """The first cluster's step pod, once its step follows the cluster (its log says so): the step
    runs in it, past the emissary's start, and waits for the cluster to turn Healthy."""
    pod = wait_for(lambda: first_pod(run), timeout=60, interval=0.2, what="the first cluster's step pod")
    assert pod is not None
    following = f"cluster {run.first}: following"
    wait_for(
        lambda: following in step_log(run, pod),
        timeout=60,
        interval=0.2,
        what=f"the log of pod {pod['metadata']['name']} to say {following!r}",
    )
    return pod


def step_log(run: FaultRun, pod: dict[str, Any]) -> str:
    """What the pod's main container logged so far, read where the node's kubelet writes it."""
    node = run.real.stack.node
    assert node is not None
    meta = pod["metadata"]
    folder = node.root / "pod-logs" / f"{meta['namespace']}_{meta['name']}_{meta['uid']}" / "main"
    return "".join(path.read_text(errors="replace") for path in sorted(folder.glob("*.log")))


def release_first(run: FaultRun) -> None:
    """The first cluster turns Healthy now (it was held Progressing); again, it changes nothing."""
    run.rig.set_app_behaviour(run.first, **{"health-seconds": "0"})


def controller_killed_and_restarted(run: FaultRun) -> None:
    """SIGKILL the workflow-controller; while it is down the first cluster turns Healthy and its step pod
    ends (nobody watches it); then start the controller again."""
    argo = run.real.stack.argo
    assert argo is not None
    pod = wait_for_first_pod(run)
    killed = argo.controller_pid
    argo.kill_controller()
    release_first(run)
    try:
        wait_for(
            lambda: _pod_phase(run, pod["metadata"]["name"]) == "Succeeded",
            timeout=60,
            interval=0.2,
            what="the first cluster's step pod to end while the controller is down",
        )
        down_phase = run.rig.phase()
    finally:
        argo.start_controller()
    run.showed = (
        f"controller {killed} killed; the first cluster's pod Succeeded meanwhile, the Workflow still "
        f"{down_phase}; controller {argo.controller_pid} started"
    )


def step_pod_deleted(run: FaultRun) -> None:
    """Delete the first cluster's step pod while it waits for the first cluster's health, once the
    controller has seen it run (a pod deleted while its node is still Pending is created again for
    the same node: Argo's podReconciliation)."""
    pod = wait_for_first_pod(run)
    name = pod["metadata"]["name"]
    wait_for(
        lambda: [node["phase"] for node in attempt_nodes(run.rig, run.first)] == ["Running"],
        timeout=30,
        interval=0.2,
        what="the first cluster's attempt Running in the Workflow",
    )
    deleted_at = time.monotonic()
    run.rig.kube.delete(PODS, run.rig.namespace, name)
    seen: list[str] = []

    def gone_and_seen() -> bool:
        # What the pod and the cluster's attempts went through, each change once (for the docs).
        # Gone: no pod of that name, or one Argo made again under the same name (another uid): a
        # poll that missed the moment between the two saw the new pod and waited for it to go.
        phase = _pod_phase(run, name, pod["metadata"]["uid"])
        state = f"pod {phase}; attempts {attempts(run.rig, run.first)}"
        if not seen or seen[-1].split("] ", 1)[-1] != state:
            seen.append(f"[{time.monotonic() - deleted_at:.1f}s] {state}")
        return phase is None

    try:
        wait_for(gone_and_seen, timeout=60, interval=0.2, what=f"pod {name} gone")
    except AssertionError as exc:  # what the pod and the attempts went through, for the diagnosis
        raise AssertionError(f"{exc}; seen: {seen}") from None
    # The step runs again: in a new attempt's pod, or in a new pod of the same name for the same
    # attempt (looked for now: the Workflow's podGC removes the pods once they succeed).
    uid = pod["metadata"]["uid"]
    again = wait_for(
        lambda: [p for p in first_pods(run.rig, run.first) if p["metadata"]["uid"] != uid],
        timeout=60,
        interval=0.2,
        what="the first cluster's step in a new pod",
    )[0]
    release_first(run)
    how = "the same pod name, same attempt" if again["metadata"]["name"] == name else "a new attempt"
    run.showed = (
        f"pod {name} deleted: "
        + " -> ".join(seen)
        + f"; ran again after {time.monotonic() - deleted_at:.1f}s "
        f"in pod {again['metadata']['name']} ({how})"
    )


def kubelet_restarted(run: FaultRun) -> None:
    """Restart the node's kubelet (SIGTERM, started again) while the first cluster's step pod runs."""
    node = run.real.stack.node
    assert node is not None
    pod = wait_for_first_pod(run)
    before = node.kubelet_pid
    node.restart_kubelet()
    release_first(run)
    run.showed = (
        f"kubelet {before} restarted as {node.kubelet_pid} with pod {pod['metadata']['name']} running"
    )


def _pod_phase(run: FaultRun, name: str, uid: str = "") -> str | None:
    """The phase of pod `name`; None when it is gone, or (with `uid`) when a pod of that name now is
    another one (Argo created the same attempt's pod again under its name)."""
    try:
        pod = run.rig.kube.get(PODS, run.rig.namespace, name)
    except NotFound:
        return None
    if uid and pod["metadata"].get("uid") != uid:
        return None
    return str(pod.get("status", {}).get("phase", ""))


@dataclass(frozen=True)
class ArgoFault:
    inject: Callable[[FaultRun], None]
    # The Workflow's and the ProgressiveSync's final phase.
    phase: str
    # Seconds from the end of the fault to the Workflow's final phase.
    bound: float


FAULTS = [
    # The controller and the kubelet serve every test on the stack: those rows have it alone
    # (`realstack_exclusive`, tests/support/realstack.py); deleting the row's own pod disturbs no other.
    pytest.param(
        ArgoFault(controller_killed_and_restarted, "Succeeded", 90.0),
        id="realstack-argo-controller-killed-and-restarted",
        marks=pytest.mark.realstack_exclusive,
    ),
    # The deleted pod's step exits 75 on SIGTERM. Argo then either records that attempt (Failed,
    # exit 75: retried), finds the pod gone (Error "pod deleted": retried), or, within 10 s of the
    # attempt's start (RECENTLY_STARTED_POD_DURATION), creates the same pod again for the same
    # attempt. Each way the step runs again, finds the sync it had started and waits for health.
    # Every row reads the step's log where the node's kubelet writes it (`step_log`): the owner's
    # worker has the node; the guest's attaches to the API server only.
    pytest.param(
        ArgoFault(step_pod_deleted, "Succeeded", 90.0),
        id="realstack-step-pod-deleted",
        marks=pytest.mark.realstack_owner,
    ),
    pytest.param(
        ArgoFault(kubelet_restarted, "Succeeded", 90.0),
        id="realstack-kubelet-restarted",
        marks=pytest.mark.realstack_exclusive,
    ),
]


@pytest.fixture
def rig(request: pytest.FixtureRequest, real_stack: RealStack, tmp_path: Path) -> Iterator[RolloutRig]:
    with rollout_engine(request, ARGO, tmp_path) as engine, rollout_rig(engine, clusters=CLUSTERS) as running:
        yield running


@pytest.mark.parametrize("fault", FAULTS)
def test_rollout_rides_out_the_fault(rig: RolloutRig, real_stack: RealStack, fault: ArgoFault) -> None:
    first, _ = rig.planned_targets(STAGES, STAGE)
    rig.simulate({first: {"healthSeconds": HELD_HEALTH_SECONDS}})
    mark = rig.engine.cluster.audit_mark()
    started = time.monotonic()
    rig.start_rollout(STAGES)
    wait_for(lambda: rig.sync_starts().get(first), timeout=120, interval=0.2, what="the first sync")
    run = FaultRun(rig, real_stack, first)
    fault.inject(run)
    release_first(run)  # each row lets it go once its fault is in place; here in case one did not
    healed = time.monotonic()

    done = rig.wait_finished(timeout=fault.bound)
    recovered = time.monotonic() - healed

    assert done["status"]["phase"] == fault.phase, done["status"].get("message")
    assert rig.wait_phase(fault.phase, timeout=30)["phase"] == fault.phase
    clusters = rig.all_clusters()
    if fault.phase == "Succeeded":
        assert rig.sync_starts() == dict.fromkeys(clusters, 1)
        assert rig.fleet is not None
        assert rig.app_writes_by_steps(mark) == dict.fromkeys(rig.fleet.applications, 1)
    else:
        assert all(count == 1 for count in rig.sync_starts().values()), rig.sync_starts()
    tried = attempts(rig, first)
    assert tried[-1].startswith("Succeeded exit 0"), (tried, run.showed)
    assert all(attempt.startswith(("Failed exit 75", "Error")) for attempt in tried[:-1]), tried
    # The figures docs/design/watcher.md quotes (pytest -s): the first cluster's attempts as Argo saw them.
    print(
        f"{run.showed}; first cluster's attempts: {tried}; ended "
        f"{done['status']['phase']} {recovered:.1f}s after the fault, row {time.monotonic() - started:.1f}s"
    )


def attempts(rig: RolloutRig, cluster: str) -> list[str]:
    """The Pod nodes under the cluster's Retry node, in order: phase, exit code, message."""
    return [
        f"{pod['phase']} exit {(pod.get('outputs') or {}).get('exitCode', '-')} {pod.get('message', '')}"
        for pod in attempt_nodes(rig, cluster)
    ]


def attempt_nodes(rig: RolloutRig, cluster: str) -> list[dict[str, Any]]:
    """The Pod nodes under the cluster's Retry node (none before Argo made it)."""
    retries = rig.cluster_nodes(STAGE, 0, cluster)
    children = (retries[0].get("children") or []) if retries else []
    return [rig.nodes(id=child)[0] for child in children]
