"""The real Argo Workflows controller and Argo Server, as processes beside the dev node.

`ArgoWorkflows.start(cluster, node, tools)` runs, against a `DevCluster` with a real `Node`:

- `workflow-controller` (built by `make tools` from the pinned Argo Workflows module) with its
  ConfigMap in namespace `argo`, leader election off (`LEADER_ELECTION_DISABLE`, one instance
  outside a cluster), `DEFAULT_REQUEUE_TIME` short (how soon a Workflow is looked at again; 10 s
  by default, 1 s in tests), metrics servers off (their port 9090 is fixed), and our locally built
  argoexec image as the executor (`imagePullPolicy: Never`);
- `argo server` in server auth mode over plain HTTP (`--auth-mode=server --secure=false`), with
  the UI's pop-ups off (`FIRST_TIME_USER_MODAL` & co.), on a free port.

**Cluster-wide, not `--namespaced`.** Tests give every test a fresh namespace; a namespaced
controller watches one namespace and would have to be restarted per test (seconds each, and only
one can run: its health port is fixed). Production users run both modes; what our Workflows need
from the controller is the same in both (the watcher creates each Workflow in the one namespace
the controller must watch). So one controller serves every namespace.

Both listen on every interface (`:6060` for the controller's health and profiling endpoints, which
cannot be moved or turned off; `:<port>` for the server, which has no bind-address flag), and the
server in this mode needs no login. So the node's firewall chain (`networking.guard_loopback_ports`)
rejects connections to both ports that do not come from this machine. 6060 being fixed is one
more reason this runs only beside the node, under its machine-wide lock.

Each runs as its own user (a client certificate in group system:masters), so the API server's
audit log tells the controller's writes apart. Their kubeconfigs and logs live under the node's
root, so whatever a killed run leaves is found and stopped by the node's clean-up.

`exited()` names either when it died (an Argo `level=fatal`, say: its exit code and that line);
`start_controller()` starts a dead or killed (`kill_controller`) controller again.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from orchestrator.devenv import networking, tools
from orchestrator.devenv.controlplane import ControlPlaneError, DevCluster, free_port, spawn_logged
from orchestrator.devenv.health import DeadProgram, exited_programs
from orchestrator.devenv.images import Image, argoexec_image
from orchestrator.devenv.node import CONFIG_MAPS, Node
from orchestrator.kube.client import NAMESPACES, AlreadyExists, Kube, NotFound

log = logging.getLogger(__name__)

NAMESPACE = "argo"
CONFIGMAP = "workflow-controller-configmap"
HEALTHZ_PORT = 6060  # fixed in cmd/workflow-controller (http.ListenAndServe(":6060"))
UI_ENVIRONMENT = {"FIRST_TIME_USER_MODAL": "false", "FEEDBACK_MODAL": "false", "NEW_VERSION_MODAL": "false"}


class ArgoError(ControlPlaneError):
    """The controller or the server could not start; the message says why."""


@dataclass(frozen=True)
class ArgoTools:
    """The binaries and CRDs `make tools` builds from the pinned Argo Workflows module."""

    workflow_controller: Path
    argoexec: Path
    argo: Path
    crds_dir: Path

    @classmethod
    def find(cls) -> ArgoTools:
        """Find them where `make tools` put them, or fail saying how to build them."""
        try:
            return cls(
                workflow_controller=tools.binary("workflow-controller"),
                argoexec=tools.binary("argoexec"),
                argo=tools.binary("argo"),
                crds_dir=tools.crd_dir("argo-workflows"),
            )
        except tools.ToolsMissing as exc:
            raise ArgoError(str(exc)) from exc


def controller_configmap(*, namespace: str = NAMESPACE) -> dict[str, Any]:
    """The workflow-controller ConfigMap: metrics servers off (fixed port 9090), nothing else."""
    off = yaml.safe_dump({"enabled": False})
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": CONFIGMAP, "namespace": namespace},
        "data": {"metricsConfig": off, "telemetryConfig": off},
    }


def _port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(0.5)
        return probe.connect_ex(("127.0.0.1", port)) == 0


@dataclass
class ArgoWorkflows:
    """A running workflow-controller (+ argo server); create with `start`, always `stop()`."""

    cluster: DevCluster
    node: Node
    tools: ArgoTools
    executor_image: Image
    folder: Path
    server_url: str | None = None
    timings: dict[str, float] = field(default_factory=dict)
    _processes: list[subprocess.Popen[bytes]] = field(default_factory=list, repr=False)
    _controller: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    _controller_command: tuple[list[str], dict[str, str]] = field(
        default_factory=lambda: ([], {}), repr=False
    )

    @classmethod
    def start(
        cls,
        cluster: DevCluster,
        node: Node,
        argo_tools: ArgoTools,
        *,
        images_cache: Path,
        requeue_time: str = "10s",
        server: bool = True,
        ready_timeout: float = 90.0,
        controller_args: Sequence[str] = (),
    ) -> ArgoWorkflows:
        """Install the controller's ConfigMap, start the controller (and the server), wait for them.

        Argo's CRDs must be installed already (the stack installs every CRD at once).
        `controller_args` come after the controller's own flags (the later of two wins).
        """
        started = time.monotonic()
        if _port_in_use(HEALTHZ_PORT):
            raise ArgoError(
                f"port {HEALTHZ_PORT} (the workflow-controller's fixed health port) is in use here: "
                "is another workflow-controller running?"
            )
        image = argoexec_image(images_cache, argo_tools.argoexec)
        node.import_images([image])
        folder = node.root / "argo"
        folder.mkdir(parents=True, exist_ok=True)
        argo = cls(cluster=cluster, node=node, tools=argo_tools, executor_image=image, folder=folder)
        try:
            argo._install()
            argo._start_controller(requeue_time, ready_timeout, controller_args)
            if server:
                argo._start_server(ready_timeout)
        except BaseException:
            argo.stop()
            raise
        argo.timings["argo_start"] = time.monotonic() - started
        return argo

    def _install(self) -> None:
        kube = Kube.from_kubeconfig(str(self.cluster.kubeconfig))
        try:
            with contextlib.suppress(AlreadyExists):
                kube.create(
                    NAMESPACES,
                    None,
                    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
                )
            try:
                kube.get(CONFIG_MAPS, NAMESPACE, CONFIGMAP)
            except NotFound:
                kube.create(CONFIG_MAPS, NAMESPACE, controller_configmap())
        finally:
            kube.close()

    def _spawn(self, name: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        process = spawn_logged(name, argv, self.folder, env={**_base_environment(), **env})
        self._processes.append(process)
        return process

    def _start_controller(
        self, requeue_time: str, timeout: float, controller_args: Sequence[str] = ()
    ) -> None:
        kubeconfig = self.cluster.mint_user(
            "argo-workflow-controller", ["system:masters"], filename="argo-workflow-controller.kubeconfig"
        )
        local = self.folder / "controller.kubeconfig"
        local.write_bytes(kubeconfig.read_bytes())
        self._controller_command = (
            [
                str(self.tools.workflow_controller),
                f"--kubeconfig={local}",
                f"--namespace={NAMESPACE}",
                f"--configmap={CONFIGMAP}",
                f"--executor-image={self.executor_image.reference}",
                "--executor-image-pull-policy=Never",
                "--workflow-workers=8",
                "--loglevel=info",
                *controller_args,
            ],
            {"LEADER_ELECTION_DISABLE": "true", "DEFAULT_REQUEUE_TIME": requeue_time},
        )
        networking.guard_loopback_ports(self.node.ledger, [HEALTHZ_PORT])
        self._run_controller(timeout)

    def _run_controller(self, timeout: float) -> None:
        argv, env = self._controller_command
        self._controller = self._spawn("workflow-controller", argv, env)
        self._wait_http(
            f"http://127.0.0.1:{HEALTHZ_PORT}/healthz", self._controller, "workflow-controller", timeout
        )

    @property
    def controller_pid(self) -> int:
        """The running workflow-controller's process id."""
        if self._controller is None or self._controller.poll() is not None:
            raise ArgoError("the workflow-controller is not running")
        return self._controller.pid

    def kill_controller(self) -> None:
        """SIGKILL the workflow-controller (its whole process group) and reap it: a crash, no
        clean shutdown. The server and the pods keep running. For the fault suite."""
        process = self._controller
        if process is None:
            raise ArgoError("the workflow-controller is not running")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30.0)
        self._processes.remove(process)
        self._controller = None

    def start_controller(self, *, timeout: float = 90.0) -> None:
        """Start the workflow-controller again as it first ran (after `kill_controller`, or after
        it exited by itself: a `level=fatal`); return once its health endpoint answers. Its log
        goes on in the same file."""
        if self._controller is not None:
            if self._controller.poll() is None:
                raise ArgoError("the workflow-controller is running already")
            self._processes.remove(self._controller)
            self._controller = None
        self._run_controller(timeout)

    def exited(self) -> list[DeadProgram]:
        """The workflow-controller or the argo server, when it exited since it started (not after
        `kill_controller`), with its log's telling lines."""
        return exited_programs(
            (name, process, self.folder / f"{name}.log")
            for process in self._processes
            for name in ["workflow-controller" if process is self._controller else "argo-server"]
        )

    def _start_server(self, timeout: float) -> None:
        kubeconfig = self.cluster.mint_user(
            "argo-server", ["system:masters"], filename="argo-server.kubeconfig"
        )
        local = self.folder / "server.kubeconfig"
        local.write_bytes(kubeconfig.read_bytes())
        port = free_port()
        networking.guard_loopback_ports(self.node.ledger, [port])
        process = self._spawn(
            "argo-server",
            [
                str(self.tools.argo),
                "server",
                f"--kubeconfig={local}",
                f"--namespace={NAMESPACE}",
                f"--configmap={CONFIGMAP}",
                "--auth-mode=server",
                "--secure=false",
                f"--port={port}",
                "--loglevel=info",
            ],
            UI_ENVIRONMENT,
        )
        self.server_url = f"http://127.0.0.1:{port}"
        self._wait_http(f"{self.server_url}/api/v1/version", process, "argo server", timeout)

    def _wait_http(self, url: str, process: subprocess.Popen[bytes], what: str, timeout: float) -> None:
        started = time.monotonic()
        deadline = started + timeout
        last = "no answer yet"
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise ArgoError(f"{what} exited with {process.returncode}:\n{self.log_tail(what)}")
            try:
                with urllib.request.urlopen(url, timeout=2.0) as response:
                    if response.status == 200:
                        self.timings[f"{what} ready"] = time.monotonic() - started
                        return
                    last = f"HTTP {response.status}"
            except (urllib.error.URLError, OSError) as exc:
                last = str(exc)
            time.sleep(0.2)
        raise ArgoError(f"{what} not ready at {url} after {timeout:g}s ({last}):\n{self.log_tail(what)}")

    def log_tail(self, what: str, lines: int = 30) -> str:
        """The last lines of the controller's or the server's log."""
        name = "workflow-controller" if "controller" in what else "argo-server"
        path = self.folder / f"{name}.log"
        try:
            return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return f"(no log at {path})"

    @property
    def pids(self) -> list[int]:
        """The controller's and the server's process ids."""
        return [process.pid for process in self._processes]

    def argo_environment(self) -> dict[str, str]:
        """What the argo CLI needs to talk to this Argo Server (without it: straight to Kubernetes)."""
        if self.server_url is None:
            return {}
        # In server auth mode the server ignores tokens, but the CLI insists on one: an empty one does.
        return {
            "ARGO_SERVER": self.server_url.removeprefix("http://"),
            "ARGO_SECURE": "false",
            "ARGO_HTTP1": "true",
            "ARGO_TOKEN": "",
        }

    def stop(self) -> None:
        """Stop the server and the controller (their processes groups)."""
        from orchestrator.devenv.host import stop_process_group  # noqa: PLC0415

        for process in reversed(self._processes):
            stop_process_group(process)
        self._processes.clear()


def _base_environment() -> dict[str, str]:
    keep = ("PATH", "HOME", "LANG", "TZ")
    return {name: os.environ[name] for name in keep if name in os.environ}
