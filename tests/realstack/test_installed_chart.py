"""The chart as users install it: `helm install` into the dev stack, the watcher running as a pod of
the locally built image under the chart's own service accounts, RBAC and admission policies, a
rollout on real pods, then `helm upgrade` (the new pod takes the Lease over) and `helm uninstall`.

Real: everything of tests/support/realstack.py (node, Argo Workflows, the step image that also holds
the watcher), the real helm, the chart's Deployment, probes, Lease, Roles and
ValidatingAdmissionPolicies. Argo CD is the fleet simulator, in this process.

It also checks the step containers' hardening in running pods (non-root, read-only root filesystem,
seccomp RuntimeDefault, the outputs directory an emptyDir), and the watcher's, from inside its pod.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import threading
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.devenv import tools
from orchestrator.devenv.node import PODS, create_namespace
from orchestrator.kube.client import (
    EVENTS,
    LEASES,
    NAMESPACES,
    PROGRESSIVE_SYNCS,
    Kube,
    NotFound,
    Resource,
)
from orchestrator.simulator.appcontroller import FleetSimulator
from orchestrator.simulator.config import SimulatorConfig
from tests.support.chart import CHART
from tests.support.realstack import RealStack
from tests.support.wait import wait_for
from tests.support.watcher_harness import (
    FAST_FLEET,
    REVISION_2,
    create_ps,
    phase_of,
    release,
    seed,
    status_of,
    sync_starts,
    workflows_of,
)

RELEASE = "psi"
FULLNAME = f"{RELEASE}-progressive-sync"
WATCHER_SA = f"{FULLNAME}-watcher"
STEPS_SA = "progressive-sync-steps"
ROLES = Resource("rbac.authorization.k8s.io", "v1", "roles", "Role")
POLICIES = Resource(
    "admissionregistration.k8s.io", "v1", "validatingadmissionpolicies", "ValidatingAdmissionPolicy"
)
CLUSTER_ROLES = Resource("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole")
DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment")
HARDENED = {
    "runAsNonRoot": True,
    "runAsUser": 65532,
    "readOnlyRootFilesystem": True,
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


def helm(stack: RealStack, *args: str, timeout: float = 300) -> str:
    result = subprocess.run(
        [str(tools.binary("helm")), "--kubeconfig", str(stack.kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert result.returncode == 0, f"helm {' '.join(args)}: {result.stdout}\n{result.stderr}"
    return result.stdout


def kubectl(stack: RealStack, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(tools.binary("kubectl")), "--kubeconfig", str(stack.kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture
def plain_namespace(real_stack: RealStack) -> Iterator[str]:
    """A namespace ready for pods and nothing else: the chart brings its own identities."""
    name = f"psi-{uuid.uuid4().hex[:8]}"
    create_namespace(real_stack.kube, name)
    yield name
    with contextlib.suppress(NotFound):
        real_stack.kube.delete(NAMESPACES, None, name)


def watcher_pods(kube: Kube, namespace: str) -> list[dict[str, Any]]:
    items, _ = kube.list(PODS, namespace, label_selector="app.kubernetes.io/component=watcher")
    return [p for p in items if not (p.get("metadata") or {}).get("deletionTimestamp")]


def ready_watcher(kube: Kube, namespace: str) -> dict[str, Any] | None:
    for pod in watcher_pods(kube, namespace):
        conditions = {c["type"]: c["status"] for c in (pod.get("status") or {}).get("conditions") or []}
        if conditions.get("Ready") == "True":
            return pod
    return None


def lease_holder(kube: Kube, namespace: str) -> str:
    try:
        return str(kube.get(LEASES, namespace, f"{FULLNAME}-watcher")["spec"].get("holderIdentity") or "")
    except NotFound:
        return ""


class StepPods:
    """Records every step pod seen while a rollout runs (Argo deletes them on success)."""

    def __init__(self, kube: Kube, namespace: str) -> None:
        self.kube, self.namespace = kube, namespace
        self.seen: dict[str, dict[str, Any]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.3):
            with contextlib.suppress(Exception):
                items, _ = self.kube.list(
                    PODS, self.namespace, label_selector="workflows.argoproj.io/workflow"
                )
                for pod in items:
                    name = pod["metadata"]["name"]
                    if (pod.get("status") or {}).get("phase") in ("Running", "Succeeded"):
                        self.seen[name] = pod

    def __enter__(self) -> StepPods:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


# Stack start is not counted (conftest warms it up); install, two rollouts on real pods and an
# upgrade take a few minutes on a loaded machine.
@pytest.mark.timeout(1500)
def test_helm_install_a_rollout_under_the_charts_own_accounts_upgrade_and_uninstall(
    real_stack: RealStack, plain_namespace: str, tmp_path: Path
) -> None:
    kube, ns = real_stack.kube, plain_namespace
    repository, _, tag = real_stack.step_image.rpartition(":")
    fleet = seed(kube, ns, clusters=2)
    events = tmp_path / "simulator.jsonl"
    simulator = FleetSimulator(kube, ns, SimulatorConfig.from_yaml(FAST_FLEET), events_log=events).start()
    values = [
        f"image.repository={repository}",
        "image.pullPolicy=Never",
        f"argocdNamespace={ns}",
        f"workflowNamespace={ns}",
        "watcher.logLevel=DEBUG",
    ]
    # The tag is a content hash: when its hex digits are all decimal `--set` reads a number, which the
    # chart's schema refuses ("at '/image/tag': got number, want string"); --set-string keeps it text.
    set_args = [arg for value in values for arg in ("--set", value)] + ["--set-string", f"image.tag={tag}"]
    assert real_stack.stack.cluster is not None
    audit_mark = real_stack.stack.cluster.audit_mark()
    installed = False
    try:
        helm(real_stack, "install", RELEASE, str(CHART), "-n", ns, *set_args, "--wait", "--timeout", "4m")
        installed = True
        pod = wait_for(lambda: ready_watcher(kube, ns), timeout=120, what="the watcher pod ready")
        assert pod["spec"]["serviceAccountName"] == WATCHER_SA
        wait_for(lambda: lease_holder(kube, ns) == pod["metadata"]["name"], what="the pod to lead")

        # The watcher's own hardening, seen from inside its pod; its endpoints from the node.
        inside = kubectl(
            real_stack,
            "exec",
            "-n",
            ns,
            pod["metadata"]["name"],
            "--",
            "python",
            "-c",
            "import os, json\n"
            "try:\n open('/probe', 'w'); writable = True\n"
            "except OSError: writable = False\n"
            "print(json.dumps({'uid': os.getuid(), 'root_writable': writable}))",
        )
        assert inside.returncode == 0, inside.stderr
        assert json.loads(inside.stdout) == {"uid": 65532, "root_writable": False}
        pod_ip = pod["status"]["podIP"]
        with urllib.request.urlopen(f"http://{pod_ip}:8080/metrics", timeout=10) as response:
            assert "progressive_sync_leader 1.0" in response.read().decode()
        for path in ("/healthz", "/readyz"):
            with urllib.request.urlopen(f"http://{pod_ip}:8080{path}", timeout=10) as response:
                assert response.status == 200, path

        # A rollout: Workflows by the watcher's account, Application writes by the steps' account.
        with StepPods(kube, ns) as step_pods:
            create_ps(kube, ns, "web", fleet.app_set)
            wait_for(
                lambda: phase_of(kube, ns, "web") in ("Succeeded", "Failed"),
                timeout=420,
                interval=1.0,
                what="the rollout to finish",
            )
        assert phase_of(kube, ns, "web") == "Succeeded", status_of(kube, ns, "web")
        assert sync_starts(events) == dict.fromkeys(fleet.apps, 1)
        # Events on the ProgressiveSync, written by the watcher's own account.
        reasons = {e["reason"] for e in kube.list(EVENTS, ns)[0] if e["involvedObject"]["name"] == "web"}
        assert {"RolloutStarted", "StageSucceeded", "RolloutSucceeded"} <= reasons, reasons
        writers: dict[tuple[str, str], set[str]] = {}
        for e in real_stack.stack.cluster.audit_events_since(audit_mark):
            if e.namespace == ns and e.resource in ("workflows", "applications") and e.code < 300:
                writers.setdefault((e.resource, e.verb), set()).add(e.user)
        watcher_user = f"system:serviceaccount:{ns}:{WATCHER_SA}"
        steps_user = f"system:serviceaccount:{ns}:{STEPS_SA}"
        # Only the watcher's account creates Workflows; the steps' account syncs the Applications
        # (the other writer of Applications is the simulator, standing for Argo CD, as admin).
        assert writers[("workflows", "create")] == {watcher_user}, writers
        assert steps_user in writers[("applications", "update")], writers
        app_writers = set().union(*(users for (res, _), users in writers.items() if res == "applications"))
        assert watcher_user not in app_writers, writers

        # Step pods ran as the steps' account, hardened, with the outputs directory an emptyDir.
        assert step_pods.seen, "no step pod was seen running"
        for name, step_pod in step_pods.seen.items():
            spec = step_pod["spec"]
            assert spec["serviceAccountName"] == STEPS_SA, name
            [main] = [c for c in spec["containers"] if c["name"] == "main"]
            assert {k: main["securityContext"].get(k) for k in HARDENED} == HARDENED, name
            mounts = {m["mountPath"]: m["name"] for m in main.get("volumeMounts") or []}
            volumes = {v["name"]: v for v in spec.get("volumes") or []}
            assert "emptyDir" in volumes[mounts["/tmp/outputs"]], name

        # Upgrade: a changed value rolls the Deployment; the new pod takes the Lease over and acts.
        old = pod["metadata"]["name"]
        helm(
            real_stack,
            "upgrade",
            RELEASE,
            str(CHART),
            "-n",
            ns,
            *set_args,
            "--set",
            "watcher.logLevel=INFO",
            "--wait",
            "--timeout",
            "4m",
        )
        new = wait_for(
            lambda: (p := ready_watcher(kube, ns)) is not None and p["metadata"]["name"] != old and p,
            timeout=180,
            what="the upgraded watcher pod ready",
        )
        wait_for(
            lambda: lease_holder(kube, ns) == new["metadata"]["name"], timeout=60, what="the new pod to lead"
        )
        release(kube, fleet, REVISION_2)
        wait_for(
            # Both Workflows Succeeded: right after the second is created the ProgressiveSync still
            # says Succeeded (the first rollout's phase), so its phase alone is no sign (a race).
            lambda: (
                phase_of(kube, ns, "web") == "Succeeded"
                and [w.get("status", {}).get("phase") for w in workflows_of(kube, ns, "web")]
                == ["Succeeded"] * 2
            ),
            timeout=420,
            interval=1.0,
            what="the second rollout Succeeded under the upgraded watcher",
        )
        assert sync_starts(events) == dict.fromkeys(fleet.apps, 2)

        # Uninstall: ProgressiveSyncs first (the watcher lets their finalizer go), then the chart.
        kube.delete(PROGRESSIVE_SYNCS, ns, "web")
        wait_for(lambda: _gone(kube, PROGRESSIVE_SYNCS, ns, "web"), timeout=120, what="web deleted")
        helm(real_stack, "uninstall", RELEASE, "-n", ns, "--wait", "--timeout", "3m")
        installed = False
        wait_for(lambda: not watcher_pods(kube, ns), timeout=120, what="the watcher pod gone")
        assert [r for r in kube.list(ROLES, ns)[0] if r["metadata"]["name"].startswith(FULLNAME)] == []
        assert [p for p in kube.list(POLICIES, None)[0] if p["metadata"]["name"].startswith(FULLNAME)] == []
        assert [
            c for c in kube.list(CLUSTER_ROLES, None)[0] if c["metadata"]["name"].startswith(FULLNAME)
        ] == []
        assert _gone(kube, DEPLOYMENTS, ns, f"{FULLNAME}-watcher")
    except BaseException:
        # What the pods and the namespace's events say, for the failure's report.
        for what in (("get", "pods", "-o", "wide"), ("get", "events", "--sort-by=.lastTimestamp")):
            print(kubectl(real_stack, *what, "-n", ns).stdout[-10000:])
        raise
    finally:
        logs = kubectl(
            real_stack, "logs", "-n", ns, "-l", "app.kubernetes.io/component=watcher", "--tail=100"
        )
        print(logs.stdout[-20000:])
        if installed:
            subprocess.run(
                [
                    str(tools.binary("helm")),
                    "--kubeconfig",
                    str(real_stack.kubeconfig),
                    "uninstall",
                    RELEASE,
                    "-n",
                    ns,
                ],
                capture_output=True,
                timeout=120,
                check=False,
            )
        simulator.stop()


def _gone(kube: Kube, resource: Resource, namespace: str, name: str) -> bool:
    try:
        kube.get(resource, namespace, name)
    except NotFound:
        return True
    return False
