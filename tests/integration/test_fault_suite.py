"""The fault suite (issue 18): one fault injected into a running rollout, the same three checks.

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
rollout under a steady fault.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import re
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from orchestrator.api.reasons import Reason
from orchestrator.devenv import controlplane as devcluster
from orchestrator.kube.client import (
    APPLICATIONS,
    CRDS,
    EVENTS,
    NAMESPACES,
    PROGRESSIVE_SYNCS,
    SECRETS,
    AlreadyExists,
    Kube,
    KubeError,
    KubeSettings,
    NotFound,
    Resource,
)
from orchestrator.kube.watchloop import CRD_MISSING, FORBIDDEN
from orchestrator.watcher.loop import Watcher
from tests.support import etcd
from tests.support.kubectl import Kubectl
from tests.support.tcp_proxy import FaultProxy, Mode, kubeconfig_via
from tests.support.wait import wait_for
from tests.support.watcher_harness import (
    Actors,
    create_ps,
    phase_of,
    seed,
    status_of,
    sync_starts,
    watcher_settings,
    workflows_of,
)

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

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
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create", "get", "update", "patch"]},
        {
            "apiGroups": ["argoproj.io"],
            "resources": ["applications", "applicationsets"],
            "verbs": ["get", "list", "watch"],
        },
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


# --- what each fault showed: asserted (the fault really happened), returned for the report -------


def showed_cuts(rig: Rig) -> str:
    assert rig.proxy.counts["cut"] >= 3 and rig.watch_failures() >= 1
    return f"{rig.proxy.counts['cut']} connections cut, {rig.watch_failures()} watcher streams resumed"


def showed_stall(rig: Rig) -> str:
    assert rig.watch_failures() >= 1, "the read timeout fired on a stalled stream"
    return f"{rig.watch_failures()} stalled watcher streams ended by their read timeout"


def showed_truncation(rig: Rig) -> str:
    assert rig.proxy.counts["truncated"] >= 1
    return f"{rig.proxy.counts['truncated']} responses truncated mid-chunk"


def showed_outage(rig: Rig) -> str:
    assert rig.watch_failures() >= 1
    return f"{rig.watch_failures()} failed watcher attempts during the outage, none gave up"


def showed_restart(rig: Rig) -> str:
    assert rig.cluster.pids != rig.apiserver_pids, "kube-apiserver is a new process"
    return f"kube-apiserver restarted; {rig.watch_failures()} failed watcher attempts"


def showed_compactions(rig: Rig) -> str:
    assert len(rig.compactions) >= 3
    assert rig.watcher is not None
    relists = sum(informer.stats.relists_after_gone for informer in rig.watcher.informers)
    # With the watch cache on (the default), a resume point the cache still holds is served from
    # it: the 410s reach clients only when a stream resumes from before the cache's window
    # (test_watcher_gone runs the same rollout with the cache off, where every resume meets them).
    return f"{len(rig.compactions)} compactions, {relists} watcher re-lists after 410"


def showed_orphan_reported(rig: Rig) -> str:
    def reasons() -> list[str]:
        return [
            c.get("reason", "") for c in status_of(rig.kube, rig.namespace, "orphan").get("conditions") or []
        ]

    wait_for(lambda: "ApplicationSetNotFound" in reasons(), timeout=30, what="the orphan's condition")
    assert not workflows_of(rig.kube, rig.namespace, "orphan")
    return f"the broken one: conditions {reasons()}, no Workflow; the good one rolled out"


def showed_clock_jumps(rig: Rig) -> str:
    assert rig.clock.offset == timedelta(hours=-1)
    return "the watcher's wall clock +1 h mid-sync, then -2 h; the rollout went on undisturbed"


def showed_conflicts(rig: Rig) -> str:
    conflicts = rig.audit("progressivesyncs", "update", 409)
    assert conflicts >= 1, "status writes met 409s"
    return (
        f"{conflicts} status writes answered 409, {rig.audit('progressivesyncs', 'patch', 200)} storm patches"
    )


def showed_lost_answers(rig: Rig) -> str:
    assert rig.proxy.counts["answers_dropped"] >= 1
    created = rig.audit("workflows", "create", 201)
    assert created == 1, f"one Workflow created, whatever the retries: {created}"
    return (
        f"{rig.proxy.counts['answers_dropped']} answers to writes lost; Workflow creates: 1 x 201, "
        f"{rig.audit('workflows', 'create', 409)} x 409"
    )


Heal = Callable[[], None]


def _no_heal() -> None:
    return None


# --- the faults: each starts one and returns what ends it ----------------------------------------


def cut_streams_every_2s(rig: Rig) -> Heal:
    return rig.every(2.0, rig.proxy.cut)


def half_open_stall(rig: Rig) -> Heal:
    """Every connection open now (watch streams, requests in flight) goes silent, never closing."""
    assert rig.proxy.stall_open() > 0, "there were connections to stall"
    return _no_heal


def truncate_mid_chunk_every_3s(rig: Rig) -> Heal:
    return rig.every(3.0, rig.proxy.truncate_open)


def outage_20s(rig: Rig) -> Heal:
    rig.proxy.set_mode(Mode.REFUSE)
    until = time.monotonic() + 20.0
    wait_for(lambda: time.monotonic() >= until, timeout=25.0, interval=0.5, what="the outage's end")
    rig.proxy.set_mode(Mode.PASS)
    return _no_heal


def apiserver_restart(rig: Rig) -> Heal:
    """kube-apiserver stopped (SIGTERM) and started again on the same etcd and port."""
    rig.cluster.restart_apiserver()
    return _no_heal


def etcd_compaction_every_500ms(rig: Rig) -> Heal:
    """etcd's history compacted to its current revision twice a second, for the whole rollout."""

    def compact() -> None:
        rig.compactions.append(etcd.compact(rig.cluster.etcd_url))

    return rig.every(0.5, compact)


def conflict_storm(rig: Rig) -> Heal:
    """Someone else patches the ProgressiveSync every 20 ms: status writes (PUTs carrying the
    resourceVersion they read) keep meeting 409s."""
    counter = iter(range(1_000_000))

    def touch() -> None:
        annotation = {"metadata": {"annotations": {"example.com/touched": str(next(counter))}}}
        rig.kube.patch(PROGRESSIVE_SYNCS, rig.namespace, PS, annotation)

    return rig.every(0.02, touch)


def showed_forbidden_reported(rig: Rig) -> str:
    assert rig.watcher is not None
    forbidden = event_messages(rig.kube, rig.namespace, PS, FORBIDDEN)
    assert len(forbidden) == 1, f"one WatchForbidden Event: {forbidden}"
    assert f"forbidden to watch workflows.argoproj.io in namespace {rig.namespace}" in forbidden[0] or (
        f"forbidden to list workflows.argoproj.io in namespace {rig.namespace}" in forbidden[0]
    ), forbidden[0]
    wait_for(
        lambda: Reason.WATCH_RESUMED in event_reasons(rig.kube, rig.namespace, PS),
        timeout=30,
        what="WatchResumed",
    )
    forbidden_attempts = sum(i.stats.failures for i in rig.watcher.caches.workflow_informers)
    return (
        f"Events {event_reasons(rig.kube, rig.namespace, PS)}; {forbidden_attempts} forbidden Workflow "
        "list/watch attempts waited out (capped at 5 s), the other informers kept watching"
    )


def _revoke_workflows(rig: Rig) -> Heal:
    """Remove the watcher's RoleBinding for Workflows; the proxy drops every connection, as a network
    blip would, so the watcher re-authorizes at once (an open watch is not re-checked until its 20 s
    window ends). Its Workflow informers wait and say so; the others keep watching."""
    watcher = rig.watcher
    assert watcher is not None
    rig.kube.delete(ROLE_BINDINGS, rig.namespace, "watcher-workflows")
    rig.proxy.cut()
    wait_for(
        lambda: all(i.blocked is not None for i in watcher.caches.workflow_informers),
        timeout=30,
        what="the Workflow informers to meet the 403",
    )
    assert all(
        i.blocked is not None and i.blocked.reason == FORBIDDEN for i in watcher.caches.workflow_informers
    )
    others = [i for i in watcher.informers if i not in watcher.caches.workflow_informers]
    wait_for(lambda: all(i.usable for i in others), timeout=30, what="the other informers to keep watching")
    assert not watcher.failed

    def restore() -> None:  # called again after the rollout ended: idempotent
        with contextlib.suppress(AlreadyExists):
            binding = watcher_binding("watcher-workflows", rig.watcher_user)
            rig.kube.create(ROLE_BINDINGS, rig.namespace, binding)

    return restore


def _forbidden_reported(rig: Rig) -> None:
    wait_for(
        lambda: FORBIDDEN in event_reasons(rig.kube, rig.namespace, PS),
        timeout=30,
        what="the WatchForbidden Event on the ProgressiveSync",
    )


def rolebinding_removed(rig: Rig) -> Heal:
    """The watcher's RoleBinding for Workflows removed mid-rollout, restored once it said so (the
    steps, another identity, go on meanwhile)."""
    restore = _revoke_workflows(rig)
    _forbidden_reported(rig)
    return restore


def rolebinding_missing_at_start(rig: Rig) -> Heal:
    """The binding is gone when the ProgressiveSync arrives: nothing is done on a blind Workflow cache
    (no Workflow created), it is said, and the rollout starts once the binding is back."""
    restore = _revoke_workflows(rig)
    create_ps(rig.kube, rig.namespace, PS, "myservice")
    _forbidden_reported(rig)
    assert not workflows_of(rig.kube, rig.namespace, PS), "no Workflow while the watcher cannot watch them"
    assert not rig.first_sync_started()
    return restore


PRIORITY_LEVELS = Resource(
    "flowcontrol.apiserver.k8s.io", "v1", "prioritylevelconfigurations", "PriorityLevelConfiguration"
)
FLOW_SCHEMAS = Resource("flowcontrol.apiserver.k8s.io", "v1", "flowschemas", "FlowSchema")
RETRY_LINE = re.compile(r"Retry-After (?P<asked>[0-9.]+)s\); retrying in (?P<waited>[0-9.]+)s")


def rejected_by_apf(cluster: devcluster.DevCluster, flow_schema: str) -> int:
    """Requests of `flow_schema` that API Priority and Fairness answered 429 (kube-apiserver's metrics)."""
    total = 0
    for line in cluster.metrics_text().splitlines():
        if line.startswith("apiserver_flowcontrol_rejected_requests_total{") and (
            f'flow_schema="{flow_schema}"' in line
        ):
            total += int(float(line.rsplit(" ", 1)[1]))
    return total


class RetryLines(logging.Handler):
    """Collects the log lines of retries the server asked to wait for (`Retry-After`)."""

    def __init__(self, into: list[str]) -> None:
        super().__init__(logging.WARNING)
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "Retry-After" in message:
            self.into.append(message)


def apf_throttles_the_watcher(rig: Rig) -> Heal:
    """API Priority and Fairness throttles the watcher's own identity for the whole rollout: a
    FlowSchema matching its user (not system:masters, which is exempt) sends every request of it to
    a PriorityLevelConfiguration with no seats of its own (nominalConcurrencyShares 0, nothing
    borrowed) and no queues (limitResponse Reject). Such a level serves one request at a time (the
    API server lets a request exceed the limit only while nothing else of the level executes): any
    two of the watcher's requests at once, and the second is answered 429 with a Retry-After. The
    proxy cuts the watcher's connections until the reconnect storm has met some 429s for certain;
    after that the rollout runs throttled."""
    name = f"ps-throttle-{rig.namespace}"[:63]
    rig.kube.create(
        PRIORITY_LEVELS,
        None,
        {
            "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
            "kind": "PriorityLevelConfiguration",
            "metadata": {"name": name},
            "spec": {
                "type": "Limited",
                "limited": {
                    "nominalConcurrencyShares": 0,
                    "lendablePercent": 0,
                    "borrowingLimitPercent": 0,
                    "limitResponse": {"type": "Reject"},
                },
            },
        },
    )
    every = {
        "verbs": ["*"],
        "apiGroups": ["*"],
        "resources": ["*"],
        "namespaces": ["*"],
        "clusterScope": True,
    }
    rig.kube.create(
        FLOW_SCHEMAS,
        None,
        {
            "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
            "kind": "FlowSchema",
            "metadata": {"name": name},
            "spec": {
                "priorityLevelConfiguration": {"name": name},
                "matchingPrecedence": 300,  # before global-default (9900) and service-accounts (9000)
                "distinguisherMethod": {"type": "ByUser"},
                "rules": [
                    {
                        "subjects": [{"kind": "User", "user": {"name": rig.watcher_user}}],
                        "resourceRules": [every],
                        "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
                    }
                ],
            },
        },
    )
    handler = RetryLines(rig.retry_after_lines)
    logging.getLogger("orchestrator").addHandler(handler)

    def reconnect_storm_met_429s() -> bool:
        rig.proxy.cut()
        return rejected_by_apf(rig.cluster, name) >= 3

    wait_for(reconnect_storm_met_429s, timeout=60, interval=1.0, what="APF to answer the watcher 429s")

    def lift() -> None:  # called again after the rollout ended: idempotent
        if handler in logging.getLogger("orchestrator").handlers:
            rig.rejected_by_apf = rejected_by_apf(rig.cluster, name)
            logging.getLogger("orchestrator").removeHandler(handler)
        for resource in (FLOW_SCHEMAS, PRIORITY_LEVELS):
            with contextlib.suppress(NotFound):
                rig.kube.delete(resource, None, name)

    return lift


def showed_throttled(rig: Rig) -> str:
    assert rig.rejected_by_apf >= 3, f"the API server answered the watcher 429s: {rig.rejected_by_apf}"
    waits = [m.groupdict() for line in rig.retry_after_lines if (m := RETRY_LINE.search(line))]
    assert waits, f"the watcher logged its 429s with the Retry-After asked: {rig.retry_after_lines[:3]}"
    for wait in waits:
        assert float(wait["waited"]) >= float(wait["asked"]), wait  # Retry-After honoured
    asked = sorted({float(w["asked"]) for w in waits})
    return (
        f"{rig.rejected_by_apf} of the watcher's requests rejected by APF (kube-apiserver's "
        f"apiserver_flowcontrol_rejected_requests_total), {len(waits)} 429s met by its loops and "
        f"retries, each waited at least the Retry-After asked ({asked} s)"
    )


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


def token_id(token: str) -> str:
    """`JTI=<id>`: how the audit log names the token that authenticated a request."""
    payload = token.split(".")[1]
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    return f"JTI={claims['jti']}"


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


def token_refused(cluster: devcluster.DevCluster, token: str) -> bool:
    """True once the API server answers 401 to `token`."""
    context = ssl.create_default_context(cafile=str(cluster.ca_cert_path))
    request = urllib.request.Request(f"{cluster.api_url}/api", headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=10, context=context):
            return False
    except urllib.error.HTTPError as exc:
        return exc.code == 401


def credentials_rotated(rig: Rig) -> Heal:
    """Mid-rollout, the watcher's ServiceAccount token is rotated in place: a new token written to
    the file its kubeconfig names (`tokenFile`), the old one revoked (its bound Secret deleted)
    until the API server refuses it. The watcher goes on with the new one, without a restart."""
    assert rig.token_path is not None
    # The rollout must still be running once the old token is refused (which takes up to ~10 s, the
    # API server's token cache): every cluster is held Progressing until then, so the watcher's
    # writes on the rollout's end come after the revocation, however fast the rollout is.
    hold_health(rig, "3600")
    old = rig.token_path.read_text().strip()
    new = mint_token(rig.cluster, rig.namespace, "watcher-token-2")
    write_token(rig.token_path, new)
    rig.kube.delete(SECRETS, rig.namespace, "watcher-token-1")
    # The API server caches a token it accepted for up to 10 s.
    wait_for(lambda: token_refused(rig.cluster, old), timeout=30, interval=0.5, what="the old token refused")
    rig.rotated_mark = rig.cluster.audit_mark()
    rig.new_credential = token_id(new)
    return lambda: hold_health(rig, "0")


def hold_health(rig: Rig, seconds: str) -> None:
    """Every Application of the fleet turns Healthy `seconds` after its sync (the simulator's
    annotation; a merge patch, so no race with the steps' sync writes)."""
    items, _ = rig.kube.list(APPLICATIONS, rig.namespace)
    patch = {"metadata": {"annotations": {"simulator.progressivesync.io/health-seconds": seconds}}}
    for item in items:
        rig.kube.patch(APPLICATIONS, rig.namespace, item["metadata"]["name"], patch)


def showed_new_credentials_used(rig: Rig) -> str:
    def writes() -> list[devcluster.AuditEvent]:
        return [e for e in rig.cluster.audit_events_since(rig.rotated_mark) if e.user == rig.watcher_user]

    # Its last writes (the RolloutSucceeded Event at the latest) come after the revocation.
    after = wait_for(writes, timeout=30, what="the watcher's writes after the old token was refused")
    assert all(e.credential == rig.new_credential for e in after), [
        (e.verb, e.resource, e.credential) for e in after
    ]
    # The token is what this fault is about: nothing refused as unauthenticated or forbidden. A 409
    # is the status writer's optimistic concurrency (a step wrote the status first; it reads again
    # and re-applies, writing nothing when the change is already there), so it may come last.
    refused = [(e.verb, e.resource, e.code) for e in after if e.code in (401, 403)]
    assert not refused, refused
    assert any(e.code < 400 for e in after), [(e.verb, e.resource, e.code) for e in after]
    return (
        f"the old token refused (401) after its Secret was deleted; {len(after)} writes by the watcher "
        f"after that, all with the new token ({rig.new_credential[:12]}...), no restart"
    )


STATUS_RULE = WATCHER_RULES["watcher"][1]
assert STATUS_RULE["resources"] == ["progressivesyncs/status"]


def _set_watcher_rules(rig: Rig, rules: list[dict[str, list[str]]]) -> None:
    role = rig.kube.get(ROLES, rig.namespace, "watcher")
    role["rules"] = rules
    rig.kube.replace(ROLES, rig.namespace, role)


def status_write_forbidden(rig: Rig) -> Heal:
    """The watcher's Role narrowed before the ProgressiveSync arrives: it may read ProgressiveSyncs
    but not update `progressivesyncs/status` (403 on its status writes). It says what is missing and
    the fix in an Event, keeps running (the Workflow it created rolls out meanwhile: the steps write
    the status as themselves), and converges once the rule is back."""
    narrowed = [rule for rule in WATCHER_RULES["watcher"] if rule is not STATUS_RULE]
    _set_watcher_rules(rig, narrowed)
    create_ps(rig.kube, rig.namespace, PS, "myservice")
    wait_for(
        lambda: Reason.RECONCILE_FORBIDDEN in event_reasons(rig.kube, rig.namespace, PS),
        timeout=30,
        what="the ReconcileForbidden Event on the ProgressiveSync",
    )
    # The rest keeps working: the Workflow created before the refused status write runs its syncs.
    wait_for(rig.first_sync_started, timeout=ROLLOUT_SECONDS, what="a sync while the status is forbidden")
    assert rig.watcher is not None and not rig.watcher.failed

    def restore() -> None:  # called again after the rollout ended: idempotent
        _set_watcher_rules(rig, WATCHER_RULES["watcher"])

    return restore


def showed_status_forbidden_reported(rig: Rig) -> str:
    forbidden = event_messages(rig.kube, rig.namespace, PS, Reason.RECONCILE_FORBIDDEN)
    assert len(forbidden) == 1, f"one ReconcileForbidden Event: {forbidden}"
    assert 'cannot update resource "progressivesyncs/status"' in forbidden[0], forbidden[0]
    assert "grant the watcher's account this permission" in forbidden[0], forbidden[0]
    wait_for(
        lambda: Reason.RECONCILE_RESUMED in event_reasons(rig.kube, rig.namespace, PS),
        timeout=30,
        what="ReconcileResumed",
    )
    # The watcher's own fields are written once it may again (the steps cannot write these).
    wait_for(
        lambda: (status_of(rig.kube, rig.namespace, PS).get("rollout") or {}).get("workflow"),
        timeout=30,
        what="the watcher to record the rollout's Workflow",
    )
    refused = rig.audit("progressivesyncs", "update", 403)
    # No crash loop: the reconcile backs off (0.5, 1, 2, 5, 10 s ...), events re-queue it at most
    # once per change; a few dozen refusals over the whole window at most.
    assert 1 <= refused <= 40, refused
    return f"Events {event_reasons(rig.kube, rig.namespace, PS)}; {refused} status writes answered 403"


WORKFLOW_CRD = "workflows.argoproj.io"


def _crd_established(kube: Kube, name: str) -> bool:
    try:
        conditions = (kube.get(CRDS, None, name).get("status") or {}).get("conditions") or []
    except NotFound:
        return False
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)


def _crd_exists(kube: Kube, name: str) -> bool:
    try:
        kube.get(CRDS, None, name)
    except NotFound:
        return False
    return True


def workflow_crd_missing_at_start(rig: Rig) -> Heal:
    """Argo Workflows' Workflow CRD removed (kubectl delete crd) before the ProgressiveSync arrives: the
    watcher's Workflow informers meet 404, wait and say so (CRDMissing, naming the CRD and the fix),
    no Workflow can be made; the CRD installed again, the rollout starts and ends."""
    watcher = rig.watcher
    assert watcher is not None
    live = rig.kube.get(CRDS, None, WORKFLOW_CRD)
    body = {
        "apiVersion": live["apiVersion"],
        "kind": live["kind"],
        "metadata": {k: v for k, v in live["metadata"].items() if k in ("name", "labels", "annotations")},
        "spec": live["spec"],
    }
    rig.kube.delete(CRDS, None, WORKFLOW_CRD)
    wait_for(
        lambda: all(i.blocked is not None for i in watcher.caches.workflow_informers),
        timeout=120,
        what="the Workflow informers to meet the missing CRD",
    )
    # The deletion ends only once the API server has removed every Workflow of the shared plane; a
    # create before then answers AlreadyExists and the CRD is then gone for good (a race seen when
    # this row ran after the other rows on the same control plane).
    wait_for(lambda: not _crd_exists(rig.kube, WORKFLOW_CRD), timeout=120, what="the Workflow CRD deleted")
    assert all(
        i.blocked is not None and i.blocked.reason == CRD_MISSING for i in watcher.caches.workflow_informers
    )
    create_ps(rig.kube, rig.namespace, PS, "myservice")
    wait_for(
        lambda: CRD_MISSING in event_reasons(rig.kube, rig.namespace, PS),
        timeout=30,
        what="the CRDMissing Event on the ProgressiveSync",
    )
    assert not rig.first_sync_started()
    assert not watcher.failed

    def reinstall() -> None:  # called again after the rollout ended: idempotent
        with contextlib.suppress(AlreadyExists):
            rig.kube.create(CRDS, None, body)
        wait_for(lambda: _crd_established(rig.kube, WORKFLOW_CRD), timeout=60, what="the Workflow CRD")

    return reinstall


def showed_crd_missing_reported(rig: Rig) -> str:
    missing = event_messages(rig.kube, rig.namespace, PS, CRD_MISSING)
    assert len(missing) == 1, f"one CRDMissing Event: {missing}"
    assert f"the CustomResourceDefinition {WORKFLOW_CRD} is not installed" in missing[0], missing[0]
    assert "install Argo Workflows' CRDs" in missing[0], missing[0]
    wait_for(
        lambda: Reason.WATCH_RESUMED in event_reasons(rig.kube, rig.namespace, PS),
        timeout=30,
        what="WatchResumed",
    )
    return f"Events {event_reasons(rig.kube, rig.namespace, PS)}; no Workflow until the CRD was back"


def ambiguous_workflow_create(rig: Rig) -> Heal:
    """Writes land but their answers are lost until the Workflow exists (the create timed out for the
    watcher although the API server committed it)."""
    rig.proxy.set_mode(Mode.LOSE_WRITE_ANSWERS)
    create_ps(rig.kube, rig.namespace, PS, "myservice")
    # Until the create's answer is lost, not only until the Workflow is seen: the API server commits
    # the Workflow before it answers, so a GET can see it while the answer is still on its way, and
    # switching back then let the answer through (0 lost, seen once in a CI run at c32fd2c).
    wait_for(
        lambda: rig.proxy.counts["answers_dropped"] >= 1 and workflows_of(rig.kube, rig.namespace, PS),
        timeout=60,
        what="the Workflow to land with the answer to its create lost",
    )
    rig.proxy.set_mode(Mode.PASS)
    return _no_heal


def broken_beside_good(rig: Rig) -> Heal:
    """A ProgressiveSync of an ApplicationSet that does not exist, created before the good one."""
    create_ps(rig.kube, rig.namespace, "orphan", "no-such-appset")
    return _no_heal


def wall_clock_jumps(rig: Rig) -> Heal:
    """The watcher's wall clock jumps an hour forwards mid-sync, then two hours backwards at the next
    sync (and stays an hour behind)."""
    rig.clock.offset = timedelta(hours=1)
    wait_for(
        lambda: len(sync_starts(rig.events_log)) >= 2 or phase_of(rig.kube, rig.namespace, PS) == "Failed",
        timeout=ROLLOUT_SECONDS,
        what="the next sync",
    )
    rig.clock.offset = timedelta(hours=-1)
    return _no_heal


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


FAULTS = [
    pytest.param(
        Fault(cut_streams_every_2s, "start", ROLLOUT_SECONDS, lasting=True, showed=showed_cuts),
        id="network-streams-cut-every-2s",
    ),
    # A stalled stream is noticed by its read timeout: the watcher's watches (20 s windows) at 25 s,
    # the simulator's (5 s) at 10 s, requests in flight at their 30 s read timeout; then the rollout.
    pytest.param(
        Fault(half_open_stall, "first-sync", 30.0 + ROLLOUT_SECONDS, showed=showed_stall),
        id="network-half-open-stall",
    ),
    pytest.param(
        Fault(truncate_mid_chunk_every_3s, "start", ROLLOUT_SECONDS, lasting=True, showed=showed_truncation),
        id="network-truncated-mid-chunk",
    ),
    # Refused for 20 s mid-sync: every loop waits (backoff capped at 5 s) and resumes.
    pytest.param(
        Fault(outage_20s, "first-sync", ROLLOUT_SECONDS, showed=showed_outage), id="network-outage-20s"
    ),
    pytest.param(
        Fault(apiserver_restart, "first-sync", ROLLOUT_SECONDS, showed=showed_restart),
        id="apiserver-restart-same-etcd",
    ),
    pytest.param(
        Fault(etcd_compaction_every_500ms, "start", ROLLOUT_SECONDS, lasting=True, showed=showed_compactions),
        id="apiserver-etcd-compaction",
    ),
    # Status writes back off on 409 (up to 2 s each, 20 attempts): the rollout is slower, not stuck.
    pytest.param(
        Fault(conflict_storm, "first-sync", 2 * ROLLOUT_SECONDS, lasting=True, showed=showed_conflicts),
        id="apiserver-409-storm",
    ),
    pytest.param(
        Fault(wall_clock_jumps, "first-sync", ROLLOUT_SECONDS, showed=showed_clock_jumps),
        id="process-wall-clock-jumps",
    ),
    # A malformed spec never gets stored (the CRD's schema refuses duplicate stage names,
    # maxParallel 0, maxTargets 150%, In without values, Exists with values: 422 each, tried);
    # what can be stored broken is a reference to nothing.
    pytest.param(
        Fault(broken_beside_good, "start", ROLLOUT_SECONDS, showed=showed_orphan_reported),
        id="schema-broken-progressivesync-beside-a-good-one",
    ),
    pytest.param(
        Fault(
            ambiguous_workflow_create, "start", ROLLOUT_SECONDS, showed=showed_lost_answers, creates_ps=True
        ),
        id="apiserver-ambiguous-workflow-create",
    ),
    # Bound: the rollout ends within the fault-free time once the binding is back (the watcher
    # notices at its next attempt, 5 s at most, and reconciles every ProgressiveSync at once).
    pytest.param(
        Fault(
            rolebinding_removed,
            "first-sync",
            ROLLOUT_SECONDS,
            showed=showed_forbidden_reported,
            watcher_as_user=True,
        ),
        id="identity-rolebinding-removed-mid-run",
    ),
    pytest.param(
        Fault(
            rolebinding_missing_at_start,
            "start",
            ROLLOUT_SECONDS,
            showed=showed_forbidden_reported,
            watcher_as_user=True,
            creates_ps=True,
        ),
        id="identity-rolebinding-missing-at-start",
    ),
    # Lasting: the rollout runs throttled from the 429s to its end.
    pytest.param(
        Fault(
            apf_throttles_the_watcher,
            "start",
            2 * ROLLOUT_SECONDS,
            lasting=True,
            showed=showed_throttled,
            watcher_as_user=True,
        ),
        id="apiserver-apf-429-retry-after",
    ),
    # Bound: from the Role's repair; the rollout itself went on meanwhile.
    pytest.param(
        Fault(
            status_write_forbidden,
            "start",
            ROLLOUT_SECONDS,
            showed=showed_status_forbidden_reported,
            watcher_as_user=True,
            creates_ps=True,
        ),
        id="identity-status-write-forbidden",
    ),
    pytest.param(
        Fault(
            credentials_rotated,
            "first-sync",
            ROLLOUT_SECONDS,
            showed=showed_new_credentials_used,
            watcher_as_service_account=True,
        ),
        id="identity-credentials-rotated",
    ),
    # Removes the session's Workflow CRD (and with it every Workflow left by earlier tests), then
    # installs the same definition again: the tests after find it as it was.
    pytest.param(
        Fault(
            workflow_crd_missing_at_start,
            "start",
            ROLLOUT_SECONDS,
            showed=showed_crd_missing_reported,
            creates_ps=True,
        ),
        id="schema-workflow-crd-missing-at-start",
    ),
]


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


@pytest.mark.timeout(600)
@pytest.mark.parametrize("fault", FAULTS)
def test_a_rollout_survives(
    fault: Fault, plane: tuple[devcluster.DevCluster, Kube], request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    namespace = f"fault-{request.node.callspec.id}"[:63]
    with rig_for(
        plane,
        namespace,
        tmp_path,
        watcher_as_user=fault.watcher_as_user,
        watcher_as_service_account=fault.watcher_as_service_account,
    ) as rig:
        kube = rig.kube
        heal: Heal = _no_heal
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
