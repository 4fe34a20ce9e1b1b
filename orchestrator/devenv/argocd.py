"""The real Argo CD on the dev control plane: repo-server, application controller, ApplicationSet
controller, redis, a `file://` Git repository and destination clusters, as local processes.

`ArgoCDStack.start(control_plane, tools, settings)`:

1. installs Argo CD's own CRDs (from the tool cache) on the control plane, and in its namespace
   `argocd-cm` (no in-cluster destination; the HealthProbe Lua health check), `argocd-cmd-params-cm`,
   `argocd-secret` and the `default` AppProject;
2. starts `settings.servers` destination clusters (each its own etcd + kube-apiserver, a
   `DevCluster`) with the HealthProbe CRD, and writes one cluster Secret per `settings.clusters`
   entry (its labels are what stage selectors match), pointing at those servers round-robin: the
   first name of a server as `https://127.0.0.1:PORT`, the second as `https://localhost:PORT`
   (two names for one server are two clusters to Argo CD);
3. creates a bare Git repository holding the starter app (`starter_app`), starts redis
   (Debian's `redis-server`) and the three Argo CD components on free loopback ports, and waits
   until each answers its health check;
4. optionally creates the starter ApplicationSet and syncs its Applications once (release 1
   deployed everywhere), the way Argo CD's API server would.

Reconciliation timing comes from `ARGOCD_RECONCILIATION_TIMEOUT`/`_JITTER` (argocd-cm's
`timeout.reconciliation` is read from those variables by the processes; the ConfigMap keeps the
same value for people reading it). Every port is free-chosen; nothing machine-wide changes.
`restart_component(name)` kills one Argo CD component and starts it again (the fault suite's
controller restart). `stop()` ends the processes, the destination clusters and removes the work
dir. The Argo CD processes use the control plane's admin credentials and their own client certificates
(`system:masters`) on the destination clusters.

This module is the stack's processes and its life; its parts, one job each: `argocd_settings`
(what to run: tools, settings, clusters), `argocd_manifests` (the objects it installs, as values)
and `argocd_requests` (what a person does to a running Argo CD: sync, refresh, a new release).

Callers: `progressive-sync dev-cluster up --argocd`, `progressive-sync demo --argocd real`, the
real-Argo-CD tests.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import logging
import os
import secrets
import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from orchestrator.devenv import starter_app
from orchestrator.devenv.argocd_manifests import (
    APP_PROJECTS,
    CONFIG_MAPS,
    HEALTH_PROBES,
    VALIDATING_POLICIES,
    VALIDATING_POLICY_BINDINGS,
    argocd_cm,
    argocd_cmd_params_cm,
    argocd_secret,
    cluster_secret,
    default_project,
    refusal_policy,
    refusal_policy_binding,
)
from orchestrator.devenv.argocd_requests import (
    app_summary,
    commit_next_release,
    request_refresh,
    request_sync,
)
from orchestrator.devenv.argocd_settings import (
    ArgoCDSettings,
    ArgoCDStackError,
    ArgoCDTools,
    DestinationCluster,
    socket_folder,
)
from orchestrator.devenv.controlplane import PORT_TAKEN, DevCluster, free_port
from orchestrator.devenv.gitrepo import ReleaseRepo
from orchestrator.devenv.processes import ProcessError, Supervisor, http_ok, redis_pings
from orchestrator.kube.client import (
    APPLICATION_SETS,
    APPLICATIONS,
    NAMESPACES,
    SECRETS,
    AlreadyExists,
    Invalid,
    Kube,
    NotFound,
    Resource,
)
from orchestrator.kube.crds import apply_crds

log = logging.getLogger(__name__)

COMPONENTS = ("argocd-repo-server", "argocd-application-controller", "argocd-applicationset-controller")
# Starts of redis and the components on new ports after one lost its port (`_start_processes`).
START_ATTEMPTS = 3


# --- the stack ----------------------------------------------------------------------------------


@dataclass
class ArgoCDStack:
    """A running Argo CD on a dev control plane. Start with `ArgoCDStack.start`; always `stop()`."""

    control_plane: DevCluster
    tools: ArgoCDTools
    settings: ArgoCDSettings
    workdir: Path
    kube: Kube
    repo: ReleaseRepo
    supervisor: Supervisor
    servers: list[DevCluster] = field(default_factory=list)
    clusters: list[DestinationCluster] = field(default_factory=list)
    ports: dict[str, int] = field(default_factory=dict)
    _owns_workdir: bool = True
    # Where the components' unix sockets go: the work dir, or a short folder of its own when the
    # work dir's path is too long for a socket (see `socket_folder`).
    _socket_dir: Path | None = None
    _server_kubes: dict[str, Kube] = field(default_factory=dict, repr=False)
    # Component -> the URL that answers 200 once it runs (its health check).
    _health_urls: dict[str, str] = field(default_factory=dict, repr=False)

    @classmethod
    def start(
        cls,
        control_plane: DevCluster,
        tools: ArgoCDTools,
        settings: ArgoCDSettings | None = None,
        *,
        workdir: str | os.PathLike[str] | None = None,
    ) -> ArgoCDStack:
        """Start everything (see the module docstring); on failure stop what started and raise."""
        settings = settings or ArgoCDSettings()
        tools.check()
        # A folder this start creates is removed by stop(); one that existed is left alone.
        owns = workdir is None or not Path(workdir).exists()
        root = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="progressive-sync-argocd-"))
        root.mkdir(parents=True, exist_ok=True)
        stack = cls(
            control_plane=control_plane,
            tools=tools,
            settings=settings,
            workdir=root,
            kube=Kube.from_kubeconfig(str(control_plane.kubeconfig)),
            repo=ReleaseRepo.create(
                root / "releases.git",
                starter_app.release_files(1, app=settings.app_set or starter_app.APP_SET),
                message="Release 1",
            ),
            supervisor=Supervisor(root),
            _owns_workdir=owns,
        )
        try:
            stack._install_argocd_objects()
            stack._start_destinations()
            stack._start_processes()
            if settings.app_set:
                stack.create_app_set(
                    starter_app.application_set(
                        settings.app_set, repo_url=stack.repo.url, path=starter_app.APP_PATH
                    )
                )
                names = [starter_app.app_name(settings.app_set, c.name) for c in stack.clusters]
                stack.wait_compared(names, stack.repo.head())
                if settings.bootstrap:
                    head = stack.repo.head()
                    for name in names:
                        request_sync(stack.kube, settings.namespace, name, revision=head)
                    stack.wait_synced(names, head)
        except BaseException:
            stack.stop()
            raise
        return stack

    # -- start-up ---------------------------------------------------------------------------

    def _install_argocd_objects(self) -> None:
        apply_crds(self.kube, self.tools.crd_documents())
        namespace = self.settings.namespace
        with contextlib.suppress(AlreadyExists):
            self.kube.create(
                NAMESPACES, None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
            )
        self._create_or_replace(
            CONFIG_MAPS, argocd_cm(self.settings.reconciliation_seconds, self.settings.extra_argocd_cm)
        )
        self._create_or_replace(CONFIG_MAPS, argocd_cmd_params_cm())
        self._create_or_replace(SECRETS, argocd_secret(secrets.token_urlsafe(32)))
        self._create_or_replace(APP_PROJECTS, default_project())

    def _create_or_replace(self, resource: Resource, body: dict[str, Any]) -> None:
        namespace = self.settings.namespace
        try:
            self.kube.create(resource, namespace, body)
        except AlreadyExists:
            current = self.kube.get(resource, namespace, body["metadata"]["name"])
            body = {
                **body,
                "metadata": {**body["metadata"], "resourceVersion": current["metadata"]["resourceVersion"]},
            }
            self.kube.replace(resource, namespace, body)

    def _start_destinations(self) -> None:
        # One at a time from this thread: each child dies with the thread that started it.
        for index in range(self.settings.servers):
            server = DevCluster.start(
                self.control_plane.tools_dir, workdir=self.workdir / f"server-{index + 1}"
            )
            self.servers.append(server)
            kube = Kube.from_kubeconfig(str(server.kubeconfig))
            self._server_kubes[server.api_url] = kube
            apply_crds(kube, [starter_app.probe_crd()])
        for index, spec in enumerate(self.settings.clusters):
            server = self.servers[index % len(self.servers)]
            host = "127.0.0.1" if index < len(self.servers) else "localhost"
            url = server.api_url.replace("127.0.0.1", host)
            cluster = DestinationCluster(spec.name, url, dict(spec.labels), server)
            self.clusters.append(cluster)
            self._write_cluster_secret(cluster)

    def _write_cluster_secret(self, cluster: DestinationCluster) -> None:
        kubeconfig = cluster.api.mint_user("argocd-application-controller", ["system:masters"])
        user = yaml.safe_load(kubeconfig.read_text())
        files = user["users"][0]["user"]
        ca_file = user["clusters"][0]["cluster"]["certificate-authority"]

        def b64_file(path: str) -> str:
            return base64.b64encode(Path(path).read_bytes()).decode()

        tls_client_config = {
            "insecure": False,
            "caData": b64_file(ca_file),
            "certData": b64_file(files["client-certificate"]),
            "keyData": b64_file(files["client-key"]),
        }
        self._create_or_replace(SECRETS, cluster_secret(cluster, tls_client_config))

    def _environment(self, component: str) -> dict[str, str]:
        for folder in ("tls", "ssh", "gnupg", "tmp", "home"):
            (self.workdir / folder).mkdir(exist_ok=True)
        seconds = f"{self.settings.reconciliation_seconds}s"
        jitter = f"{self.settings.reconciliation_jitter_seconds}s"
        path = os.pathsep.join(
            [
                str(self.tools.wrappers_dir),
                str(self.tools.git.parent),
                os.environ.get("PATH", "/usr/bin:/bin"),
            ]
        )
        progressive = (
            {
                "ARGOCD_APPLICATIONSET_CONTROLLER_ENABLE_PROGRESSIVE_SYNCS": "true",
                "ARGOCD_APPLICATIONSET_CONTROLLER_REFRESH_GRACE_PERIOD_SECONDS": str(
                    self.settings.progressive_sync_refresh_grace_seconds
                ),
            }
            if self.settings.progressive_syncs and component == "argocd-applicationset-controller"
            else {}
        )
        return {
            **progressive,
            "PATH": path,
            "HOME": str(self.workdir / "home"),
            "TMPDIR": str(self.workdir / "tmp"),
            "KUBECONFIG": str(self.control_plane.kubeconfig),
            "ARGOCD_BINARY_NAME": component,
            "ARGOCD_GPG_ENABLED": "false",
            "ARGOCD_GNUPGHOME": str(self.workdir / "gnupg"),
            "ARGOCD_ASK_PASS_SOCK": str(self._sockets() / f"{component}-askpass.sock"),
            "ARGOCD_TLS_DATA_PATH": str(self.workdir / "tls"),
            "ARGOCD_SSH_DATA_PATH": str(self.workdir / "ssh"),
            "ARGOCD_RECONCILIATION_TIMEOUT": seconds,
            "ARGOCD_RECONCILIATION_JITTER": jitter,
        }

    def _sockets(self) -> Path:
        if self._socket_dir is None:
            self._socket_dir = socket_folder(self.workdir, f"{max(COMPONENTS, key=len)}-askpass.sock")
        return self._socket_dir

    def _start_processes(self) -> None:
        """Start redis and the Argo CD components on free ports. A port `free_port` found free can
        be taken by another process (another test's stack) before the component binds it, seconds
        later: the component exits with "address already in use", and all of them start again on
        new ports, at most `START_ATTEMPTS` times in all (as kube-apiserver does, controlplane)."""
        for attempt in range(1, START_ATTEMPTS + 1):
            try:
                self._start_processes_once()
                return
            except ProcessError as exc:
                if attempt == START_ATTEMPTS or PORT_TAKEN not in str(exc):
                    raise
                log.warning("Argo CD: a port was taken before its component bound it; new ports: %s", exc)
                self.supervisor.stop_some(["redis", *COMPONENTS])

    def _start_processes_once(self) -> None:
        ports = {
            name: free_port()
            for name in (
                "redis",
                "repo-server",
                "repo-server-metrics",
                "controller-metrics",
                "applicationset-metrics",
                "applicationset-probe",
                "applicationset-webhook",
            )
        }
        self.ports = ports
        timeout = self.settings.ready_timeout_seconds
        (self.workdir / "redis").mkdir(exist_ok=True)
        self.supervisor.spawn(
            "redis",
            [
                str(self.tools.redis_server),
                "--port", str(ports["redis"]),
                "--bind", "127.0.0.1",
                "--save", "",
                "--appendonly", "no",
                "--dir", str(self.workdir / "redis"),
            ],
        )  # fmt: skip
        self.supervisor.wait_until("redis", lambda: redis_pings(ports["redis"]), timeout=timeout, what="PING")
        redis = f"127.0.0.1:{ports['redis']}"
        repo_server = f"127.0.0.1:{ports['repo-server']}"
        common = ["--logformat", "text", "--loglevel", self.settings.log_level]
        kube = ["--kubeconfig", str(self.control_plane.kubeconfig), "--namespace", self.settings.namespace]
        commands = {
            "argocd-repo-server": [
                "--disable-tls",
                "--client-ca-path=",
                "--address", "127.0.0.1",
                "--port", str(ports["repo-server"]),
                "--metrics-address", "127.0.0.1",
                "--metrics-port", str(ports["repo-server-metrics"]),
                "--redis", redis,
            ],
            "argocd-application-controller": [
                *kube,
                "--repo-server", repo_server,
                "--repo-server-plaintext",
                "--redis", redis,
                "--metrics-port", str(ports["controller-metrics"]),
            ],
            "argocd-applicationset-controller": [
                *kube,
                "--argocd-repo-server", repo_server,
                "--repo-server-plaintext",
                "--enable-leader-election=false",
                "--metrics-addr", f"127.0.0.1:{ports['applicationset-metrics']}",
                "--probe-addr", f"127.0.0.1:{ports['applicationset-probe']}",
                "--webhook-addr", f"127.0.0.1:{ports['applicationset-webhook']}",
            ],
        }  # fmt: skip
        health = {
            "argocd-repo-server": f"http://127.0.0.1:{ports['repo-server-metrics']}/healthz",
            "argocd-application-controller": f"http://127.0.0.1:{ports['controller-metrics']}/healthz",
            # Its probe server has no health check registered (404): the metrics server answers
            # once the manager runs.
            "argocd-applicationset-controller": f"http://127.0.0.1:{ports['applicationset-metrics']}/metrics",
        }
        for component in COMPONENTS:
            self.supervisor.spawn(
                component,
                [component, *commands[component], *common],
                env=self._environment(component),
                executable=self.tools.argocd,
            )
        self._health_urls = health
        for component in COMPONENTS:
            self._wait_ready(component)

    def _wait_ready(self, component: str) -> None:
        url = self._health_urls[component]
        self.supervisor.wait_until(
            component,
            functools.partial(http_ok, url),
            timeout=self.settings.ready_timeout_seconds,
            what=f"GET {url}",
        )

    def restart_component(self, component: str, *, kill_signal: signal.Signals = signal.SIGKILL) -> None:
        """Kill one Argo CD component (SIGKILL by default: a crash, as an OOM kill or a lost node
        does) and start it again with the same flags; returns once it answers its health check.
        What it kept in memory is gone; redis, the API server and the Applications stay."""
        if component not in COMPONENTS:
            raise ValueError(f"component {component!r}: use one of {', '.join(COMPONENTS)}")
        self.supervisor.restart(component, kill_signal=kill_signal)
        self._wait_ready(component)

    def set_reconciliation(self, seconds: int, jitter_seconds: int = 0) -> None:
        """Switch Argo CD's timed comparison to every `seconds` (0: off) plus up to `jitter_seconds`.

        The repo-server and the application controller read the timer once, at start, from
        `ARGOCD_RECONCILIATION_TIMEOUT`/`_JITTER` (the repo-server takes its revision cache's
        lifetime from the same variable: Git refs and Helm indexes it resolved stay cached that long,
        24 h when it is 0), so both are restarted with the new values; `argocd-cm` says the same.
        Call it with no operation in progress: a restarted controller takes an operation up only
        once its Application changes (docs/real-argocd.md, traps)."""
        if seconds < 0 or jitter_seconds < 0:
            raise ValueError("the reconciliation timer and its jitter cannot be negative")
        self.settings = replace(
            self.settings, reconciliation_seconds=seconds, reconciliation_jitter_seconds=jitter_seconds
        )
        self.kube.patch(
            CONFIG_MAPS, self.namespace, "argocd-cm", {"data": {"timeout.reconciliation": f"{seconds}s"}}
        )
        for component in ("argocd-repo-server", "argocd-application-controller"):
            self.supervisor.restart(component, kill_signal=signal.SIGTERM, env=self._environment(component))
            self._wait_ready(component)

    def set_progressive_sync_refresh_grace(self, seconds: int) -> None:
        """Restart the ApplicationSet controller with progressive syncs on and this refresh grace
        (`--refresh-grace-period-seconds`: how long after an Application changed it waits for Argo
        CD's own comparison before it asks for a refresh and lets a RollingSync step start)."""
        if seconds < 0:
            raise ValueError("the refresh grace cannot be negative")
        self.settings = replace(
            self.settings, progressive_syncs=True, progressive_sync_refresh_grace_seconds=seconds
        )
        component = "argocd-applicationset-controller"
        self.supervisor.restart(component, kill_signal=signal.SIGTERM, env=self._environment(component))
        self._wait_ready(component)

    # -- using it ---------------------------------------------------------------------------

    @property
    def namespace(self) -> str:
        """Where the Applications, ApplicationSets and cluster Secrets live."""
        return self.settings.namespace

    def cluster(self, name: str) -> DestinationCluster:
        """The destination cluster called `name`."""
        for cluster in self.clusters:
            if cluster.name == name:
                return cluster
        raise KeyError(f"no cluster {name!r}; the stack has {', '.join(c.name for c in self.clusters)}")

    def cluster_kube(self, name: str) -> Kube:
        """The adapter for the API server behind cluster `name` (as its admin)."""
        return self._server_kubes[self.cluster(name).api.api_url]

    def refuse_changes(self, cluster: str, *, timeout: float = 30.0) -> None:
        """Make the API server behind `cluster` refuse every ConfigMap change in the starter
        Application's namespace there (a ValidatingAdmissionPolicy): Argo CD's syncs of it fail, as
        a broken release would. Returns once the API server enforces it."""
        namespace = starter_app.destination_namespace(self.settings.app_set or starter_app.APP_SET, cluster)
        name = f"progressive-sync-refuse-{namespace}"
        message = f"cluster {cluster} refuses this release (dev stack: refuse_changes)"
        kube = self.cluster_kube(cluster)
        kube.create(VALIDATING_POLICIES, None, refusal_policy(name, namespace, message))
        kube.create(VALIDATING_POLICY_BINDINGS, None, refusal_policy_binding(name))
        # The API server compiles a new policy in the background: wait until a change is refused.
        deadline = time.monotonic() + timeout
        check = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "refusal-check"}}
        while time.monotonic() < deadline:
            try:
                kube.create(CONFIG_MAPS, namespace, check)
            except Invalid:
                return
            except NotFound:
                kube.create(
                    NAMESPACES,
                    None,
                    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
                )
                continue
            kube.delete(CONFIG_MAPS, namespace, "refusal-check")
            time.sleep(0.2)
        raise ArgoCDStackError(
            f"the API server of cluster {cluster} did not enforce {name} within {timeout:g}s"
        )

    def install_crd(self, cluster: str, crd: dict[str, Any]) -> None:
        """Install a CRD on the API server behind `cluster` and wait until it is served."""
        apply_crds(self.cluster_kube(cluster), [crd])

    def create_app_set(self, body: dict[str, Any]) -> dict[str, Any]:
        """Create an ApplicationSet in the stack's namespace."""
        return self.kube.create(APPLICATION_SETS, self.namespace, body)

    def release(self, message: str | None = None) -> str:
        """Commit the starter app's next release on `main`; the new commit's full SHA."""
        return commit_next_release(self.repo, self.settings.app_set or starter_app.APP_SET, message)[1]

    def refresh(self, names: Iterable[str], *, hard: bool = False) -> None:
        """Ask Argo CD to compare these Applications with Git now (`argocd.argoproj.io/refresh`)."""
        request_refresh(self.kube, self.namespace, names, hard=hard)

    def set_probe_health(
        self, cluster: str, namespace: str, probe: str, health: str, message: str = ""
    ) -> None:
        """Set a HealthProbe's `status.health` on `cluster` (what its Lua health check reads)."""
        if health not in starter_app.PROBE_HEALTH_VALUES:
            raise ValueError(f"health {health!r}: use one of {', '.join(starter_app.PROBE_HEALTH_VALUES)}")
        self.cluster_kube(cluster).patch(
            HEALTH_PROBES,
            namespace,
            probe,
            {"status": {"health": health, "message": message}},
            subresource="status",
        )

    def applications(self, names: Iterable[str]) -> dict[str, dict[str, Any] | None]:
        """Name -> the Application (None when it does not exist)."""
        found: dict[str, dict[str, Any] | None] = {}
        for name in names:
            try:
                found[name] = self.kube.get(APPLICATIONS, self.namespace, name)
            except NotFound:
                found[name] = None
        return found

    def wait_compared(self, names: Sequence[str], revision: str, *, timeout: float | None = None) -> None:
        """Wait until every Application exists and Argo CD compared it with `revision`."""
        self._wait(
            names,
            lambda app: str(((app.get("status") or {}).get("sync") or {}).get("revision", "")) == revision,
            f"compared with {revision[:12]}",
            timeout,
        )

    def wait_out_of_sync(self, names: Sequence[str], revision: str, *, timeout: float | None = None) -> None:
        """Wait until every Application is OutOfSync, compared with `revision`."""

        def behind(app: Mapping[str, Any]) -> bool:
            sync = (app.get("status") or {}).get("sync") or {}
            return sync.get("status") == "OutOfSync" and sync.get("revision") == revision

        self._wait(names, behind, f"OutOfSync at {revision[:12]}", timeout)

    def wait_synced(
        self, names: Sequence[str], revision: str | Sequence[str], *, timeout: float | None = None
    ) -> None:
        """Wait until every Application is Synced and Healthy at `revision` (a list: the revisions
        of a multi-source Application, one per source) with no operation left."""
        wanted = [revision] if isinstance(revision, str) else list(revision)

        def synced(app: Mapping[str, Any]) -> bool:
            status = app.get("status") or {}
            sync = status.get("sync") or {}
            compared = [str(r) for r in sync.get("revisions") or []] or [str(sync.get("revision") or "")]
            return (
                sync.get("status") == "Synced"
                and compared == wanted
                and (status.get("health") or {}).get("status") == "Healthy"
                and not app.get("operation")
                and ((status.get("operationState") or {}).get("phase") in (None, "Succeeded"))
            )

        self._wait(names, synced, f"Synced and Healthy at {','.join(r[:12] for r in wanted)}", timeout)

    def _wait(
        self,
        names: Sequence[str],
        done: Callable[[Mapping[str, Any]], bool],
        what: str,
        timeout: float | None,
    ) -> None:
        deadline = time.monotonic() + (timeout or self.settings.ready_timeout_seconds)
        pending = list(names)
        while time.monotonic() < deadline:
            self.supervisor.check_alive()
            apps = self.applications(pending)
            pending = [name for name, app in apps.items() if app is None or not done(app)]
            if not pending:
                return
            time.sleep(0.2)
        states = {name: app_summary(app) for name, app in self.applications(pending).items()}
        raise ArgoCDStackError(f"Applications not {what} in time: {states}")

    # -- teardown ---------------------------------------------------------------------------

    @property
    def pids(self) -> dict[str, int]:
        """Name -> pid of redis and the Argo CD components."""
        return self.supervisor.pids

    def stop(self) -> None:
        """Stop the Argo CD processes, redis and the destination clusters; remove the work dir."""
        self.supervisor.stop()
        for kube in self._server_kubes.values():
            kube.close()
        self._server_kubes.clear()
        for server in reversed(self.servers):
            server.stop()
        self.servers.clear()
        self.kube.close()
        if self._socket_dir is not None and self._socket_dir != self.workdir:
            shutil.rmtree(self._socket_dir, ignore_errors=True)
        if self._owns_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> ArgoCDStack:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def describe(stack: ArgoCDStack) -> list[str]:
    """What `dev-cluster up --argocd` prints about the running Argo CD (comment lines)."""
    settings = stack.settings
    refresh = (
        f"every {settings.reconciliation_seconds}s"
        if settings.reconciliation_seconds
        else "only when asked (argocd.argoproj.io/refresh)"
    )
    lines = [
        f"Argo CD v3 (repo-server, application controller, ApplicationSet controller) in namespace "
        f"{stack.namespace}; logs in {stack.workdir}",
        f"Argo CD compares Applications with Git {refresh}",
    ]
    for cluster in stack.clusters:
        labels = ",".join(f"{k}={v}" for k, v in sorted(cluster.labels.items()))
        lines.append(f"cluster {cluster.name}: {cluster.server} ({labels})")
    if settings.app_set:
        lines.append(
            f"ApplicationSet {settings.app_set}: {len(stack.clusters)} Applications, release 1 "
            f"({stack.repo.head()[:12]}) deployed"
        )
    lines += [
        f"releases: {stack.repo.url} (branch main, path {starter_app.APP_PATH}/)",
        "new release: progressive-sync dev-cluster release [--refresh]",
        f"  or: git clone {stack.repo.url} work && cd work && <edit> && "
        "git commit -am 'Release 2' && git push",
    ]
    return lines
