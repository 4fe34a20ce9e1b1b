"""The real node: pods run to completion on images built here, one node per machine, and nothing a
node did to the machine outlives it, not even when its owner is SIGKILLed.

Real: everything of tests/support/realstack.py. The clean-up test stops the session's stack, starts
a node in a child process, SIGKILLs that child while a pod runs, and checks the next start cleans
up and a stop leaves the machine as it found it (processes, mounts, iptables, bridge, sysctls,
cgroups, folders).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import psutil
import pytest

from orchestrator.devenv import host, machine
from orchestrator.devenv.node import PODS
from orchestrator.devenv.stack import DevStack, StackOptions
from orchestrator.kube.client import Kube
from tests.support.apiserver_memory import TEST_APISERVER_MEMORY_LIMIT
from tests.support.machine_state import MachineState
from tests.support.realstack import TEST_NODE_CPU_SHARES, RealStack, RealStackSession
from tests.support.wait import wait_for

# Reads its service account's token and CA and asks the API server for its version through the
# `kubernetes` Service IP: the pod network, the DNAT, the serving cert's SANs and the token at once.
CALL_THE_API_SERVER = textwrap.dedent(
    """
    import json, os, ssl, urllib.request
    folder = "/var/run/secrets/kubernetes.io/serviceaccount"
    context = ssl.create_default_context(cafile=f"{folder}/ca.crt")
    request = urllib.request.Request(
        f"https://{os.environ['KUBERNETES_SERVICE_HOST']}:{os.environ['KUBERNETES_SERVICE_PORT']}/version",
        headers={"Authorization": "Bearer " + open(f"{folder}/token").read()},
    )
    with urllib.request.urlopen(request, context=context, timeout=10) as response:
        print("apiserver", json.load(response)["gitVersion"])
    import orchestrator
    print("progressive-sync", orchestrator.__version__)
    """
)


def pod(name: str, image: str, script: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "main",
                    "image": image,
                    "imagePullPolicy": "Never",
                    "command": ["python", "-c", script],
                }
            ],
        },
    }


def phase(kube: Kube, namespace: str, name: str) -> str:
    return str((kube.get(PODS, namespace, name).get("status") or {}).get("phase", ""))


def test_a_pod_of_our_step_image_runs_to_succeeded_and_reaches_the_api_server(
    real_node: RealStack, real_namespace: str
) -> None:
    real_node.kube.create(PODS, real_namespace, pod("hello", real_node.step_image, CALL_THE_API_SERVER))
    wait_for(
        lambda: phase(real_node.kube, real_namespace, "hello") in ("Succeeded", "Failed"),
        timeout=60,
        interval=0.2,
        what="the pod to finish",
    )
    logs = subprocess.run(
        ["kubectl", f"--kubeconfig={real_node.kubeconfig}", "logs", "-n", real_namespace, "hello"],
        capture_output=True,
        text=True,
        env=real_node.environment(),
        timeout=30,
        check=False,
    )
    assert phase(real_node.kube, real_namespace, "hello") == "Succeeded", logs.stdout + logs.stderr
    # The logs come from the kubelet through the API server (its client cert, our CA).
    assert "apiserver v1.35.4" in logs.stdout
    assert "progressive-sync 0.1.0" in logs.stdout


@pytest.mark.realstack_owner  # the stack's processes are this process's children
def test_the_real_stacks_api_server_runs_with_the_suites_memory_limit(real_node: RealStack) -> None:
    """The suite's real stack asks for a larger GOMEMLIMIT (tests/support/apiserver_memory.py) and
    its kube-apiserver got it, unless this process's environment sets one."""
    cluster = real_node.stack.cluster
    assert cluster is not None
    [apiserver] = [p for p in map(psutil.Process, cluster.pids) if p.name() == "kube-apiserver"]
    expected = os.environ.get("GOMEMLIMIT", TEST_APISERVER_MEMORY_LIMIT)
    assert apiserver.environ().get("GOMEMLIMIT") == expected


def test_the_real_nodes_pods_run_with_the_suites_cpu_weight(real_node: RealStack) -> None:
    """The suite's real stack gives its node's cgroup root a larger CPU weight (TEST_NODE_CPU_SHARES
    in tests/support/realstack.py), so its pods go first on a busy machine. (Read from the machine:
    a guest worker, which started no node, sees the owner's.)"""
    weights = [
        (name, int((folder / name).read_text()))
        for folder in host.cgroup_folders()
        for name in ("cpu.shares", "cpu.weight")
        if (folder / name).exists()
    ]
    expected = {"cpu.shares": TEST_NODE_CPU_SHARES, "cpu.weight": host.cpu_weight(TEST_NODE_CPU_SHARES)}
    assert weights, f"no CPU weight in {host.cgroup_folders()}"
    assert all(value == expected[name] for name, value in weights), weights


@pytest.mark.realstack_owner  # the message names the node lock's holder: this process
def test_a_second_node_on_the_machine_fails_at_once_with_a_clear_message(
    real_node: RealStack, tmp_path: Path
) -> None:
    assert real_node.stack.node is not None
    env = {**os.environ, "PROGRESSIVE_SYNC_DEV_CLUSTER_DIR": str(tmp_path / "second")}
    second = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli.main", "dev-cluster", "up", "--node"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert second.returncode == 1
    assert "a dev node is already running on this machine" in second.stderr
    assert f"pid {os.getpid()}" in second.stderr  # names the holder
    assert "kube-apiserver at" not in second.stdout  # nothing was started
    assert not (tmp_path / "second" / "etcd").exists()


# The child that owns a node and is SIGKILLed: starts a stack with a node, runs a pod that sleeps,
# prints the pod's node-side facts and waits to be killed.
OWNER = textwrap.dedent(
    """
    import json, sys, time
    from orchestrator.devenv.node import PODS
    from orchestrator.devenv.stack import DevStack, StackOptions
    stack = DevStack.start(StackOptions(node=True, namespaces=("owner",)))
    with stack.kube() as kube:
        kube.create(PODS, "owner", {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "sleeper"},
            "spec": {"restartPolicy": "Never", "containers": [{
                "name": "main", "image": stack.steps_image.reference, "imagePullPolicy": "Never",
                "command": ["python", "-c", "import time; time.sleep(3600)"]}]}})
        deadline = time.monotonic() + 90
        while kube.get(PODS, "owner", "sleeper").get("status", {}).get("phase") != "Running":
            if time.monotonic() > deadline:
                sys.exit("the pod did not start")
            time.sleep(0.2)
    print(json.dumps({"ready": True, "workdir": str(stack.cluster.workdir)}), flush=True)
    time.sleep(3600)
    """
)


@pytest.mark.stops_the_real_stack
def test_a_node_whose_owner_was_sigkilled_is_cleaned_up_by_the_next_start(
    real_stack_session: RealStackSession, tmp_path: Path
) -> None:
    real_stack_session.stop()  # this test needs the machine without the session's node
    before = MachineState.take()
    log = (tmp_path / "owner.log").open("w")
    owner = subprocess.Popen([sys.executable, "-c", OWNER], stdout=subprocess.PIPE, stderr=log, text=True)
    try:
        assert owner.stdout is not None
        line = owner.stdout.readline()  # bounded: the child prints one line or exits
        ready = json.loads(line or "{}")
        assert ready.get("ready"), (tmp_path / "owner.log").read_text()[-3000:]
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait(timeout=30)
    left = machine.leftovers()
    # The kill left real state behind (else this test would prove nothing): the pod's container
    # and its shim outlive their owner, with their mounts, the bridge and the iptables chain.
    assert any("processes in cgroup" in item for item in left), left
    assert any("mounts under" in item for item in left), left
    assert any(host.BRIDGE in item for item in left), left
    owners_workdir = Path(ready["workdir"])
    assert owners_workdir.is_dir(), "the killed owner's control plane folder is left behind"

    stack = DevStack.start(StackOptions(node=True, namespaces=("again",)))
    assert not owners_workdir.exists(), "the next start removes the killed owner's folders"
    try:
        assert stack.node is not None and stack.steps_image is not None
        with stack.kube() as kube:
            kube.create(PODS, "again", pod("after", stack.steps_image.reference, "print('ok')"))
            wait_for(
                lambda: phase(kube, "again", "after") == "Succeeded",
                timeout=60,
                what="a pod after the clean-up",
            )
    finally:
        stack.stop()
    assert machine.leftovers() == []
    assert MachineState.take().differences(before) == []
