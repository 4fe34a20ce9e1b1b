"""The fault suite's rig (issue 18): one fault injected into a running rollout, the same three checks
(`survives`), for the tests/integration/test_fault_suite_*.py files, each a table of faults.

Real: the session's control plane (kube-apiserver + etcd; restarted and compacted here, which
leaves it as it was), the watcher in this process, the local executor
running the real step programs, and the fleet simulator playing Argo CD. Network faults go through
`tests/support/tcp_proxy.py`: every actor (watcher, executor, simulator, the steps) talks to the
API server through it; the test's own client talks directly.

The watcher runs as cluster admin, except in the identity rows: there it is a minted user (no
groups) holding the chart's watcher rules through two RoleBindings in the test's namespace, one of
which the fault removes and restores.

Each scenario is one row: what to inject, when (before the ProgressiveSync exists, or once the
first sync has started), and what must hold afterwards, every time:

1. the rollout ends in the right phase, with one Workflow;
2. every Application is synced at most once — exactly once when the rollout succeeds — counted
   from the simulator's exact events log (a pick-up is logged once even when its answer was lost);
3. recovery within the row's bound: from the end of the fault to the final phase (a deadline,
   never a sleep), with no watch loop given up and no simulator error.

The closing note of issue 18 lists what each row showed (see the report); `make bench` times the
rollout under a steady fault. The `plane` fixture is registered for tests/integration by its
conftest.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from orchestrator.devenv import controlplane as devcluster
from orchestrator.kube.client import (
    EVENTS,
    NAMESPACES,
    Kube,
    KubeError,
    KubeSettings,
    Resource,
)
from orchestrator.watcher.loop import Watcher
from tests.support.kubectl import Kubectl
from tests.support.tcp_proxy import FaultProxy, kubeconfig_via
from tests.support.wait import wait_for
from tests.support.watcher_harness import (
    Actors,
    create_ps,
    phase_of,
    seed,
    sync_starts,
    watcher_settings,
    workflows_of,
)

PS = "web"
CLUSTERS = 4
# Each sync takes a second and a half: the rollout (canary, then three clusters) spans the fault.
FLEET = "defaults: {syncSeconds: 1.0, healthSeconds: 0.5}"
# A fault-free rollout of this fleet takes ~15-25 s on the loaded 2-core machine.
ROLLOUT_SECONDS = 60.0


ROLES = Resource("rbac.authorization.k8s.io", "v1", "roles", "Role")
ROLE_BINDINGS = Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding")
# The chart's watcher rules (charts/progressive-sync/templates/rbac.yaml) for one namespace that is
# the watched, workflow, ApplicationSet and Argo CD namespace at once; Workflows in a Role of their own.
WATCHER_RULES = {
    "watcher": [
        {
            "apiGroups": ["progressivesync.io"],
            "resources": ["progressivesyncs"],
            "verbs": ["get", "list", "watch", "update", "patch"],
        },
        {
            "apiGroups": ["progressivesync.io"],
            "resources": ["progressivesyncs/status"],
            "verbs": ["get", "update", "patch"],
        },
        {
            "apiGroups": ["progressivesync.io"],
            "resources": ["progressivesyncs/finalizers"],
            "verbs": ["update"],
        },
        {
            "apiGroups": ["progressivesync.io"],
            "resources": ["progressivesyncstages"],
            "verbs": ["get", "list", "watch", "delete"],
        },
        {"apiGroups": [""], "resources": ["events"], "verbs": ["get", "create", "patch"]},
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create", "get", "update", "patch"]},
        {
            "apiGroups": ["argoproj.io"],
            "resources": ["applications", "applicationsets"],
            "verbs": ["get", "list", "watch"],
        },
        # analysis.enabled: the templates a due release's analysis names (Valid=False before a start).
        {"apiGroups": ["argoproj.io"], "resources": ["analysistemplates"], "verbs": ["get"]},
    ],
    "watcher-workflows": [
        {
            "apiGroups": ["argoproj.io"],
            "resources": ["workflows"],
            "verbs": ["get", "list", "watch", "create", "patch"],
        },
    ],
}


def watcher_binding(name: str, user: str) -> dict[str, object]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }


def grant_watcher(kube: Kube, namespace: str, user: str) -> None:
    """The watcher's Roles and RoleBindings for `user` in `namespace`."""
    for name, rules in WATCHER_RULES.items():
        kube.create(
            ROLES,
            namespace,
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "Role",
                "metadata": {"name": name},
                "rules": rules,
            },
        )
        kube.create(ROLE_BINDINGS, namespace, watcher_binding(name, user))


def event_reasons(kube: Kube, namespace: str, name: str) -> list[str]:
    """The reasons of the Events on one ProgressiveSync, oldest first."""
    items, _ = kube.list(EVENTS, namespace, field_selector=f"involvedObject.name={name}")
    return [str(e.get("reason", "")) for e in sorted(items, key=lambda e: str(e.get("firstTimestamp", "")))]


def event_messages(kube: Kube, namespace: str, name: str, reason: str) -> list[str]:
    items, _ = kube.list(EVENTS, namespace, field_selector=f"involvedObject.name={name}")
    return [str(e.get("message", "")) for e in items if e.get("reason") == reason]


@pytest.fixture
def plane(control_plane: devcluster.DevCluster, kube: Kube) -> tuple[devcluster.DevCluster, Kube]:
    """The session's control plane (with Argo's and Argo CD's CRDs): restarting its API server or
    compacting its etcd leaves it as it was for the tests after (same etcd, port and certificates)."""
    return control_plane, kube


class JumpingClock:
    """The wall clock plus an offset a fault moves (the watcher's `now`; waits stay real)."""

    def __init__(self) -> None:
        self.offset = timedelta(0)

    def now(self) -> datetime:
        return datetime.now(UTC) + self.offset

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))


@dataclass
class Rig:
    """One rollout under fault: the proxy, the actors behind it, the test's direct client."""

    cluster: devcluster.DevCluster
    kube: Kube  # direct, for the test's own reads and writes
    namespace: str
    proxy: FaultProxy
    events_log: Path
    apps: tuple[str, ...] = ()
    watcher: Watcher | None = None
    actors: Actors | None = None
    background: list[threading.Thread] = field(default_factory=list)
    stop_background: threading.Event = field(default_factory=threading.Event)

    def every(self, seconds: float, action: Callable[[], object]) -> Callable[[], None]:
        """Run `action` every `seconds` on a thread until the returned function is called."""
        stop = threading.Event()

        def loop() -> None:
            while not stop.wait(seconds) and not self.stop_background.is_set():
                with contextlib.suppress(KubeError, OSError):
                    action()

        thread = threading.Thread(target=loop, daemon=True)
        thread.start()
        self.background.append(thread)

        def end() -> None:
            stop.set()
            thread.join(timeout=10)

        return end

    audit_mark: int = 0
    watcher_user: str = ""  # the minted user the watcher runs as, or "" for cluster admin
    clock: JumpingClock = field(default_factory=JumpingClock)
    compactions: list[int] = field(default_factory=list)
    apiserver_pids: list[int] = field(default_factory=list)
    # API Priority and Fairness: the watcher's 429s as the API server counted them, and the retry
    # lines the watcher logged for them.
    rejected_by_apf: int = 0
    retry_after_lines: list[str] = field(default_factory=list)
    # The watcher as a ServiceAccount: the token file its kubeconfig names; after a rotation, where
    # the audit log was and the new token's id.
    token_path: Path | None = None
    rotated_mark: int = 0
    new_credential: str = ""

    def first_sync_started(self) -> bool:
        return bool(sync_starts(self.events_log))

    def watch_failures(self) -> int:
        """Failed list/watch attempts of the watcher's loops (each one resumed)."""
        assert self.watcher is not None
        return sum(informer.stats.failures for informer in self.watcher.informers)

    def audit(self, resource: str, verb: str, code: int) -> int:
        """Writes of `resource` answered `code` in this test's namespace (the API server's audit log)."""
        return sum(
            1
            for event in self.cluster.audit_events_since(self.audit_mark)
            if event.namespace == self.namespace
            and event.resource == resource
            and event.verb == verb
            and event.code == code
        )


Heal = Callable[[], None]


def no_heal() -> None:
    return None


SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount")
WATCHER_ACCOUNT = "watcher"


def mint_token(cluster: devcluster.DevCluster, namespace: str, bound_to: str) -> str:
    """A token of the watcher's ServiceAccount (`kubectl create token`), bound to a Secret made for
    it: deleting that Secret revokes the token."""
    kubectl = Kubectl(cluster.tools_dir / "kubectl", cluster.kubeconfig)
    kubectl.ok("create", "secret", "generic", bound_to, "-n", namespace)
    return kubectl.ok(
        "create",
        "token",
        WATCHER_ACCOUNT,
        "-n",
        namespace,
        "--duration=1h",
        "--bound-object-kind=Secret",
        f"--bound-object-name={bound_to}",
    ).strip()


def write_token(path: Path, token: str) -> None:
    """Replace the token file at once (write aside, rename): a reader sees the old or the new."""
    aside = path.with_suffix(".new")
    aside.write_text(token)
    os.replace(aside, path)


def token_kubeconfig(proxy: FaultProxy, cluster: devcluster.DevCluster, token_path: Path, dest: Path) -> Path:
    """A kubeconfig through the proxy whose user is a `tokenFile` (how a token is rotated in place)."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "c",
                "cluster": {"server": proxy.url, "certificate-authority": str(cluster.ca_cert_path)},
            }
        ],
        "users": [{"name": WATCHER_ACCOUNT, "user": {"tokenFile": str(token_path)}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": WATCHER_ACCOUNT}}],
        "current-context": "c",
    }
    dest.write_text(json.dumps(config))
    dest.chmod(0o600)
    return dest


@dataclass(frozen=True)
class Fault:
    inject: Callable[[Rig], Heal]
    # "start": injected before the ProgressiveSync exists; "first-sync": once the simulator picked
    # up the first sync.
    when: str
    # Seconds to the rollout's final phase: from the end of the fault, or for a lasting fault from
    # its start (the rollout must finish under it).
    bound: float
    # A lasting fault goes on until the rollout has ended; the others end when `inject` returns.
    lasting: bool = False
    phase: str = "Succeeded"
    # Asserts that the fault really happened; says what it showed.
    showed: Callable[[Rig], str] = lambda rig: ""
    # The injector creates the ProgressiveSync itself.
    creates_ps: bool = False
    # The watcher runs as a minted user holding the chart's watcher rules, not as cluster admin.
    watcher_as_user: bool = False
    # ... or as a ServiceAccount holding them, by a token file (`tokenFile` in its kubeconfig).
    watcher_as_service_account: bool = False


@contextlib.contextmanager
def rig_for(
    plane: tuple[devcluster.DevCluster, Kube],
    namespace: str,
    tmp_path: Path,
    *,
    watcher_as_user: bool = False,
    watcher_as_service_account: bool = False,
) -> Iterator[Rig]:
    cluster, kube = plane
    kube.create(NAMESPACES, None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    host, _, port = cluster.api_url.removeprefix("https://").rpartition(":")
    proxy = FaultProxy(host, int(port)).start()
    proxied_path = kubeconfig_via(proxy, cluster.kubeconfig, tmp_path / "proxied.kubeconfig")
    steps_path = kubeconfig_via(
        proxy, cluster.mint_user(f"steps-{namespace}", ["system:masters"]), tmp_path / "steps.kubeconfig"
    )
    # The actors' own client: the adapter's default timeouts, through the proxy.
    actors_kube = Kube.from_kubeconfig(str(proxied_path), settings=KubeSettings())
    watcher_user = ""
    watcher_path = proxied_path
    if watcher_as_user:
        watcher_user = f"watcher-{namespace}"[:60]  # a certificate CN: 64 at most
        grant_watcher(kube, namespace, watcher_user)
        watcher_path = kubeconfig_via(proxy, cluster.mint_user(watcher_user), tmp_path / "watcher.kubeconfig")
    token_path = None
    if watcher_as_service_account:
        account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": WATCHER_ACCOUNT}}
        kube.create(SERVICE_ACCOUNTS, namespace, account)
        watcher_user = f"system:serviceaccount:{namespace}:{WATCHER_ACCOUNT}"
        grant_watcher(kube, namespace, watcher_user)
        token_path = tmp_path / "watcher.token"
        write_token(token_path, mint_token(cluster, namespace, "watcher-token-1"))
        watcher_path = token_kubeconfig(proxy, cluster, token_path, tmp_path / "watcher.kubeconfig")
    watcher_kube = Kube.from_kubeconfig(str(watcher_path), settings=KubeSettings())
    rig = Rig(cluster, kube, namespace, proxy, tmp_path / "simulator.jsonl", watcher_user=watcher_user)
    rig.token_path = token_path
    rig.audit_mark = cluster.audit_mark()
    rig.apiserver_pids = cluster.pids
    rig.apps = seed(kube, namespace, clusters=CLUSTERS).apps
    try:
        rig.actors = Actors(actors_kube, namespace, steps_path, rig.events_log, FLEET).start()
        watcher = Watcher(watcher_kube, watcher_settings(namespace), clock=rig.clock).start()
        rig.watcher = watcher
        try:
            yield rig
        finally:
            watcher.stop(timeout=15)
    finally:
        rig.stop_background.set()
        for thread in rig.background:
            thread.join(timeout=10)
        if rig.actors is not None:
            rig.actors.stop()
        proxy.stop()
        actors_kube.close()
        watcher_kube.close()


def survives(
    fault: Fault, plane: tuple[devcluster.DevCluster, Kube], request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """One row of the fault suite: inject `fault` into a running rollout, then the three checks (the
    module docstring)."""
    namespace = f"fault-{request.node.callspec.id}"[:63]
    with rig_for(
        plane,
        namespace,
        tmp_path,
        watcher_as_user=fault.watcher_as_user,
        watcher_as_service_account=fault.watcher_as_service_account,
    ) as rig:
        kube = rig.kube
        heal: Heal = no_heal
        if fault.when == "start":
            heal = fault.inject(rig)
        if not fault.creates_ps:
            create_ps(kube, namespace, PS, "myservice")
        if fault.when == "first-sync":
            wait_for(rig.first_sync_started, timeout=ROLLOUT_SECONDS, what="the first sync to start")
            heal = fault.inject(rig)
        if not fault.lasting:
            heal()
        since = time.monotonic()  # the fault's end, or the start of a lasting one
        wait_for(
            lambda: phase_of(kube, namespace, PS) in ("Succeeded", "Failed"),
            timeout=fault.bound,
            what=f"the rollout to end within {fault.bound}s of the fault (lasting: {fault.lasting})",
        )
        took = time.monotonic() - since
        heal()
        assert rig.watcher is not None and rig.actors is not None and rig.actors.simulator is not None
        assert not rig.watcher.failed, f"a watch loop gave up: {rig.watcher.failed}"
        assert rig.actors.simulator.error is None, rig.actors.simulator.error
        phase = phase_of(kube, namespace, PS)
        starts = sync_starts(rig.events_log)
        workflows = workflows_of(kube, namespace, PS)
        # What it showed, for -s runs (the closing note of issue 18).
        print(f"\nFAULT {request.node.callspec.id}: {fault.showed(rig)}; ended {took:.1f}s after")

    assert phase == fault.phase
    assert len(workflows) == 1, [w["metadata"]["name"] for w in workflows]
    if fault.phase == "Succeeded":
        assert starts == dict.fromkeys(rig.apps, 1), "every Application synced exactly once"
    else:
        assert all(count == 1 for count in starts.values()), f"an Application synced twice: {starts}"
