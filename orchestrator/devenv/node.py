"""A real Kubernetes node on this machine, for the dev control plane: pods actually run.

`Node.start(cluster)` adds to a `DevCluster` started with `node_ready=True`:

- containerd (Debian's 1.6) as a plain background process with its own root, state and socket
  under the node's root (`machine.NODE_ROOT`), cgroupfs, `restrict_oom_score_adj` (root here lacks
  CAP_SYS_RESOURCE), network namespaces mounted under its state dir, runc's state under the root,
  our own pause image as the sandbox image;
- pod networking (`networking`): a CNI bridge with our subnet, and a DNAT of the `kubernetes`
  Service IP:443 to the API server's loopback port, so pods are ordinary pods (no hostNetwork)
  that reach the API server the way in-cluster clients do (`KUBERNETES_SERVICE_HOST`);
- the kubelet (cgroupfs under its own cgroup root, cgroup v1 allowed, swap allowed, no iptables
  chains, no image garbage collection — our images cannot be pulled again — its serving cert
  signed by our CA and only the API server's client cert accepted);
- kube-scheduler and kube-controller-manager, with only the controllers a dev cluster needs:
  default ServiceAccounts, `kube-root-ca.crt`, role aggregation, node lifecycle (removes the
  not-ready taint), taint eviction, garbage collection, namespace finalization, pod GC;
- images built here (`images`) imported into containerd; pods use `imagePullPolicy: Never`.

It is machine-wide (a bridge, an iptables chain, kernel tunables, cgroups, mounts, fixed names), so
one node runs per machine: `start` takes the machine's node lock (failing at once when another
process holds it), cleans whatever a killed run left behind, and records each change in a ledger
before making it; `stop` undoes everything (see `machine`). Start it from a long-lived thread: its
processes die with that thread (PR_SET_PDEATHSIG), except containerd's shims and containers,
which the next start (or `dev-cluster down`) cleans up.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from orchestrator.devenv import host, machine, networking, tools
from orchestrator.devenv import images as images_mod
from orchestrator.devenv.controlplane import ControlPlaneError, DevCluster, free_port, spawn_logged
from orchestrator.devenv.health import DeadProgram, exited_programs, program_name
from orchestrator.devenv.processes import http_ok
from orchestrator.kube.client import NAMESPACES, Kube, KubeError, NotFound, Resource

log = logging.getLogger(__name__)

NODES = Resource("", "v1", "nodes", "Node")
PODS = Resource("", "v1", "pods", "Pod")
SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount")
CONFIG_MAPS = Resource("", "v1", "configmaps", "ConfigMap")

NODE_NAME = "progressive-sync-node"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
CONTROLLERS = (
    "serviceaccount-controller",
    # The chart's watcher is a Deployment (helm install on the dev stack).
    "deployment-controller",
    "replicaset-controller",
    # Argo Rollouts' `job` analysis provider measures with a Job: its pod and its completion.
    "job-controller",
    "root-ca-certificate-publisher-controller",
    "clusterrole-aggregation-controller",
    "node-lifecycle-controller",
    "taint-eviction-controller",
    "garbage-collector-controller",
    "namespace-controller",
    "pod-garbage-collector-controller",
)
# Debian packages (hack/tools/debian-packages.sh installs them) and what each gives the node.
HOST_COMMANDS = {
    "containerd": "containerd",
    "containerd-shim-runc-v2": "containerd",
    "ctr": "containerd",
    "runc": "runc",
    "iptables": "iptables",
    "ip": "iproute2",
}
CNI_PLUGINS = ("bridge", "host-local", "loopback")
CNI_BIN_DIRS = (Path("/usr/lib/cni"), Path("/opt/cni/bin"))
NODE_TOOLS = ("kubelet", "kube-scheduler", "kube-controller-manager")


class NodeError(ControlPlaneError):
    """The node could not start; the message says what is missing or what failed."""


@dataclass(frozen=True)
class NodeTools:
    """Where the node's programs are: ours from `make tools`, the rest from Debian packages."""

    kubelet: Path
    kube_scheduler: Path
    kube_controller_manager: Path
    containerd: Path
    ctr: Path
    cni_bin_dir: Path

    @classmethod
    def find(cls) -> NodeTools:
        """Find every program, or fail naming all that are missing and how to get them."""
        problems = []
        if os.geteuid() != 0:
            problems.append("a real node needs root (containerd, cgroups, iptables, a bridge)")
        found: dict[str, Path] = {}
        for name in NODE_TOOLS:
            try:
                found[name] = tools.binary(name)
            except tools.ToolsMissing as exc:
                problems.append(str(exc))
        packages = sorted({pkg for cmd, pkg in HOST_COMMANDS.items() if shutil.which(cmd) is None})
        cni_dir = next((d for d in CNI_BIN_DIRS if all((d / p).is_file() for p in CNI_PLUGINS)), None)
        if cni_dir is None:
            packages.append("containernetworking-plugins")
        if packages:
            names = " ".join(packages)
            problems.append(f"missing Debian packages: {names} (as root: apt-get install {names})")
        if not host.CGROUP_MOUNT.is_dir():
            problems.append(f"no cgroup file system at {host.CGROUP_MOUNT}")
        if problems:
            raise NodeError("cannot start a real node: " + "; ".join(problems))
        assert cni_dir is not None
        return cls(
            kubelet=found["kubelet"],
            kube_scheduler=found["kube-scheduler"],
            kube_controller_manager=found["kube-controller-manager"],
            containerd=Path(str(shutil.which("containerd"))),
            ctr=Path(str(shutil.which("ctr"))),
            cni_bin_dir=cni_dir,
        )


@dataclass
class Node:
    """A node; `Node.start(cluster, ...)` (or `prepare` then `join`), always `stop()` it."""

    tools: NodeTools
    root: Path
    cluster: DevCluster | None = None
    name: str = NODE_NAME
    node_ip: str = networking.NODE_IP
    timings: dict[str, float] = field(default_factory=dict)
    _lock: machine.NodeLock = field(default_factory=machine.NodeLock, repr=False)
    _ledger: machine.Ledger | None = field(default=None, repr=False)
    _processes: list[subprocess.Popen[bytes]] = field(default_factory=list, repr=False)
    _imported: dict[str, images_mod.Image] = field(default_factory=dict, repr=False)
    _pending_images: Future[None] | None = field(default=None, repr=False)
    _pool: ThreadPoolExecutor | None = field(default=None, repr=False)
    _started_at: float = 0.0
    _stopped: bool = False
    _kubelet_argv: list[str] = field(default_factory=list, repr=False)
    _kubelet_healthz_port: int = 0
    _owns_lock: bool = True

    # -- start ----------------------------------------------------------------------------

    @classmethod
    def start(
        cls,
        cluster: DevCluster,
        *,
        images_cache: Path,
        images: Callable[[], Sequence[images_mod.Image]] | None = None,
        root: Path = machine.NODE_ROOT,
        ready_timeout: float = 120.0,
        lock: machine.NodeLock | None = None,
    ) -> Node:
        """Start the node for `cluster` and wait until it is Ready: `prepare` then `join`."""
        node = cls.prepare(images_cache=images_cache, images=images, root=root, lock=lock)
        try:
            node.join(cluster, ready_timeout=ready_timeout)
        except BaseException:
            node.stop()
            raise
        return node

    @classmethod
    def prepare(
        cls,
        *,
        images_cache: Path,
        images: Callable[[], Sequence[images_mod.Image]] | None = None,
        root: Path = machine.NODE_ROOT,
        lock: machine.NodeLock | None = None,
        cpu_shares: int | None = None,
    ) -> Node:
        """The part of the start that needs no API server, so it can overlap the control plane's.

        Takes the node lock (`lock`, if the caller already holds it; else its own: raises
        `machine.NodeBusy` at once when another node runs), cleans up what a killed node left,
        makes the cgroups (the pods' CPU weight: `cpu_shares`, None for the kernel's default), the
        bridge and the CNI config, starts containerd, imports the pause image and starts importing
        `images()` (built and imported in the background; `join` waits for them). Undoes everything
        on failure.
        """
        node = cls(tools=NodeTools.find(), root=root)
        node._started_at = time.monotonic()
        if lock is not None and lock.held:
            node._lock, node._owns_lock = lock, False
        else:
            node._lock.acquire()  # NodeBusy: leave the other node alone, undo nothing
        try:
            cleaned = machine.clean_up(root, owner_gone=True)  # we hold the lock: no owner is alive
            if cleaned:
                log.warning("cleaned up what an earlier node left behind: %s", "; ".join(cleaned))
            node._prepare(images_cache, images, cpu_shares)
        except BaseException:
            node.stop()
            raise
        return node

    def _prepare(
        self,
        images_cache: Path,
        images: Callable[[], Sequence[images_mod.Image]] | None,
        cpu_shares: int | None,
    ) -> None:
        for folder in ("logs", "containerd", "kubelet", "certs", "cni/net.d", "cni/ipam", "pod-logs"):
            (self.root / folder).mkdir(parents=True, exist_ok=True)
        self._ledger = machine.Ledger(self.root / "ledger.json")
        self._ledger.save()
        pause = self._timed("pause_image_build", images_mod.pause_image, images_cache)
        networking.set_up_bridge(
            self._ledger, cni_conf_dir=self.root / "cni/net.d", ipam_dir=self.root / "cni/ipam"
        )
        self._ledger.mark(cgroups=True)
        host.make_cgroup_root(cpu_shares=cpu_shares)
        self._start_containerd(pause)
        self.import_images([pause])
        if images is not None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="node-images")
            self._pending_images = self._pool.submit(self._build_and_import, images)

    def _build_and_import(self, images: Callable[[], Sequence[images_mod.Image]]) -> None:
        built = self._timed("images_build", images)
        with ThreadPoolExecutor(max_workers=2, thread_name_prefix="node-import") as pool:
            for future in [pool.submit(self.import_images, [image]) for image in built]:
                future.result()

    def join(self, cluster: DevCluster, *, ready_timeout: float = 120.0) -> None:
        """Join `cluster` (started with `node_ready=True`): the Service DNAT, the kubelet, the
        scheduler and the controller-manager; wait for the images and until the node is Ready."""
        if not cluster.node_ready:
            raise NodeError("the control plane was not started for a node: DevCluster.start(node_ready=True)")
        self.cluster = cluster
        networking.set_up_service_dnat(self.ledger, api_port=cluster.api_port)
        self._start_kubelet()
        self._start_control_loops()
        if self._pending_images is not None:
            self._pending_images.result()
        self._wait_ready(ready_timeout)
        self.timings["node_start"] = time.monotonic() - self._started_at

    def _timed(self, what: str, call: Callable[..., Any], *args: Any) -> Any:
        started = time.monotonic()
        try:
            return call(*args)
        finally:
            self.timings[what] = time.monotonic() - started

    @property
    def _control_plane(self) -> DevCluster:
        if self.cluster is None:
            raise NodeError("the node has not joined a control plane yet")
        return self.cluster

    @property
    def ledger(self) -> machine.Ledger:
        """The record of this node's changes to the machine (others add theirs, e.g. guarded ports)."""
        if self._ledger is None:
            raise NodeError("the node is not started")
        return self._ledger

    @property
    def containerd_socket(self) -> Path:
        """containerd's gRPC socket."""
        return self.root / "containerd" / "containerd.sock"

    def _spawn(
        self, name: str, argv: Sequence[str], env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        process = spawn_logged(name, argv, self.root / "logs", env=env)
        self._processes.append(process)
        return process

    def _start_containerd(self, pause: images_mod.Image) -> None:
        config = self.root / "containerd" / "config.toml"
        config.write_text(
            containerd_config(
                self.root / "containerd",
                sandbox_image=pause.reference,
                cni_bin_dir=self.tools.cni_bin_dir,
                cni_conf_dir=self.root / "cni/net.d",
                runc_root=self.root / "runc",
            )
        )
        env = {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"), "TMPDIR": str(self.root)}
        process = self._spawn("containerd", [str(self.tools.containerd), "--config", str(config)], env)
        deadline = time.monotonic() + 30.0
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise NodeError(
                    f"containerd exited with {process.returncode}:\n{self.log_tail('containerd')}"
                )
            if self.containerd_socket.exists() and self._ctr("version").returncode == 0:
                return
            time.sleep(0.1)
        raise NodeError(f"containerd did not answer within 30s:\n{self.log_tail('containerd')}")

    def _ctr(self, *args: str, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
        command = [
            str(self.tools.ctr),
            "--address",
            str(self.containerd_socket),
            "--namespace",
            "k8s.io",
            *args,
        ]
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)

    def import_images(self, images: Iterable[images_mod.Image]) -> None:
        """Import images into the node's containerd (skipping those already there)."""
        for image in images:
            if image.reference in self._imported:
                continue
            started = time.monotonic()
            images_mod.import_image(self.tools.ctr, self.containerd_socket, image)
            self._imported[image.reference] = image
            name = image.reference.split("/")[-1].split(":")[0]
            self.timings[f"import {name}"] = time.monotonic() - started

    @property
    def images(self) -> dict[str, images_mod.Image]:
        """The images imported so far, by reference."""
        return dict(self._imported)

    def _start_kubelet(self) -> None:
        certs = self.root / "certs"
        serving_cert, serving_key = self._control_plane.issue_serving_cert(
            "kubelet", [self.node_ip, self.name], certs
        )
        kubeconfig = self._kubeconfig(f"system:node:{self.name}", ["system:nodes"])
        healthz_port = free_port()
        config = self.root / "kubelet" / "config.yaml"
        config.write_text(
            yaml.safe_dump(
                kubelet_config(
                    node_ip=self.node_ip,
                    port=free_port(),
                    healthz_port=healthz_port,
                    client_ca=self._control_plane.ca_cert_path,
                    serving_cert=serving_cert,
                    serving_key=serving_key,
                    containerd_socket=self.containerd_socket,
                    root=self.root,
                )
            )
        )
        assert self._ledger is not None
        self._ledger.remember_sysctls(machine.KERNEL_TUNABLES)
        self._ledger.remember_new_folders(machine.KUBELET_FIXED_FOLDERS)
        self._kubelet_argv = [
            str(self.tools.kubelet),
            f"--config={config}",
            f"--kubeconfig={kubeconfig}",
            f"--root-dir={self.root / 'kubelet'}",
            f"--cert-dir={certs}",
            f"--hostname-override={self.name}",
            f"--node-ip={self.node_ip}",
            "--v=1",
        ]
        self._kubelet_healthz_port = healthz_port
        self._spawn("kubelet", self._kubelet_argv)

    def restart_kubelet(self, *, kill: bool = False, ready_timeout: float = 60.0) -> None:
        """Stop the kubelet (SIGTERM, or SIGKILL when `kill`) and start it again with the same
        configuration; return once its health endpoint answers. The containers it started keep
        running meanwhile (containerd runs them); the new kubelet finds them again.

        For the fault suite (a node's kubelet restarted mid-rollout).
        """
        index = self._kubelet_index()
        process = self._processes[index]
        if kill:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30.0)
        else:
            host.stop_process_group(process)
        self._processes[index] = spawn_logged("kubelet", self._kubelet_argv, self.root / "logs")
        url = f"http://127.0.0.1:{self._kubelet_healthz_port}/healthz"
        self._wait(lambda: http_ok(url), ready_timeout, f"the restarted kubelet's {url}")

    def _kubelet_index(self) -> int:
        for index, process in enumerate(self._processes):
            if isinstance(process.args, list) and process.args[:1] == [str(self.tools.kubelet)]:
                return index
        raise NodeError("the kubelet is not running (the node has not joined)")

    @property
    def kubelet_pid(self) -> int:
        """The running kubelet's process id."""
        return self._processes[self._kubelet_index()].pid

    def _kubeconfig(self, user: str, groups: Sequence[str] = ()) -> Path:
        """A kubeconfig for `user` kept under the node's root (so a leftover process is found by it)."""
        minted = self._control_plane.mint_user(user, groups, filename=f"{user.replace(':', '-')}.kubeconfig")
        local = self.root / "certs" / minted.name
        local.write_bytes(minted.read_bytes())
        local.chmod(0o600)
        return local

    def _start_control_loops(self) -> None:
        scheduler = self._kubeconfig("system:kube-scheduler")
        self._spawn(
            "kube-scheduler",
            [
                str(self.tools.kube_scheduler),
                f"--kubeconfig={scheduler}",
                "--leader-elect=false",
                "--secure-port=0",
            ],
        )
        manager = self._kubeconfig("system:kube-controller-manager")
        self._spawn(
            "kube-controller-manager",
            [
                str(self.tools.kube_controller_manager),
                f"--kubeconfig={manager}",
                "--leader-elect=false",
                "--secure-port=0",
                "--use-service-account-credentials=true",
                f"--root-ca-file={self._control_plane.ca_cert_path}",
                f"--service-account-private-key-file={self._control_plane.service_account_key_path}",
                f"--controllers={','.join(CONTROLLERS)}",
                # A pod of a node that stopped answering is evicted after this long (default 5 min).
                "--node-monitor-grace-period=20s",
            ],
        )

    def _wait_ready(self, timeout: float) -> None:
        kube = Kube.from_kubeconfig(str(self._control_plane.kubeconfig))
        try:
            self._wait(
                lambda: node_is_ready(_get_or_none(kube, NODES, None, self.name)),
                timeout,
                "the node Ready without the not-ready taint",
            )
            self._wait(
                lambda: namespace_ready(kube, "default"),
                timeout,
                "the default ServiceAccount and kube-root-ca.crt in namespace default",
            )
        finally:
            kube.close()

    def _wait(self, ready: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for process in self._processes:
                if process.poll() is not None:
                    name = Path(str(process.args[0])).name if isinstance(process.args, list) else "a process"
                    raise NodeError(
                        f"{name} exited with {process.returncode} waiting for {what}:\n{self.log_tail(name)}"
                    )
            with contextlib.suppress(KubeError):
                if ready():
                    return
            time.sleep(0.2)
        raise NodeError(f"timed out after {timeout:g}s waiting for {what}:\n{self.log_tail('kubelet')}")

    def log_tail(self, name: str, lines: int = 30) -> str:
        """The last lines of one component's log."""
        path = self.root / "logs" / f"{name}.log"
        try:
            return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return f"(no log at {path})"

    # -- stop -----------------------------------------------------------------------------

    @property
    def pids(self) -> list[int]:
        """containerd, kubelet, kube-scheduler and kube-controller-manager (group leaders)."""
        return [process.pid for process in self._processes]

    def exited(self) -> list[DeadProgram]:
        """containerd, the kubelet, kube-scheduler or kube-controller-manager, when it exited since
        it started (with its log's telling lines)."""
        return exited_programs(
            (name, process, self.root / "logs" / f"{name}.log")
            for process in self._processes
            for name in [program_name(process)]
        )

    def stop(self) -> None:
        """Stop every process and undo every change to the machine; then release the lock."""
        if self._stopped or not self._lock.held:
            return
        self._stopped = True
        started = time.monotonic()
        try:
            # The kubelet and control loops first (so nothing restarts containers), then the
            # containers through containerd, then containerd; `clean_up` kills what is left.
            for process in reversed(self._processes[1:]):
                host.stop_process_group(process)
            log.debug("node stop: control loops and kubelet stopped after %.1fs", time.monotonic() - started)
            self._remove_containers()
            log.debug("node stop: containers removed after %.1fs", time.monotonic() - started)
            done = machine.clean_up(self.root, children=self._processes[:1])
            if self._pool is not None:
                self._pool.shutdown(wait=True, cancel_futures=True)  # imports fail fast without containerd
            log.info(
                "node stopped in %.1fs: %s", time.monotonic() - started, "; ".join(done) or "nothing to undo"
            )
        finally:
            self._processes.clear()
            if self._owns_lock:
                self._lock.release()

    def _remove_containers(self) -> None:
        """Kill and delete every task and container containerd runs (their shims exit with them)."""
        if not self._processes or self._processes[0].poll() is not None:
            return
        with contextlib.suppress(subprocess.TimeoutExpired, OSError):
            tasks = self._ctr("tasks", "list", "--quiet", timeout=10.0).stdout.split()
            for task in tasks:
                self._ctr("tasks", "kill", "--signal", "SIGKILL", task, timeout=10.0)
            for task in tasks:
                self._ctr("tasks", "delete", "--force", task, timeout=10.0)
            containers = self._ctr("containers", "list", "--quiet", timeout=10.0).stdout.split()
            if containers:
                self._ctr("containers", "delete", *containers, timeout=30.0)

    def __enter__(self) -> Node:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


# --- configuration (pure) ----------------------------------------------------------------------------


def containerd_config(
    folder: Path, *, sandbox_image: str, cni_bin_dir: Path, cni_conf_dir: Path, runc_root: Path
) -> str:
    """containerd 1.6's config.toml (version 2) for the node: everything under `folder`."""
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""# Written by progressive-sync (orchestrator/devenv/node.py); removed when the node stops.
version = 2
root = "{folder / "root"}"
state = "{folder / "state"}"
disabled_plugins = [
  "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing",
]

[grpc]
  address = "{folder / "containerd.sock"}"

[ttrpc]
  address = "{folder / "containerd.sock.ttrpc"}"

[plugins."io.containerd.internal.v1.opt"]
  path = "{folder / "opt"}"

[{cri}]
  sandbox_image = "{sandbox_image}"
  # root here lacks CAP_SYS_RESOURCE: containers may not lower their OOM score below ours
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  disable_apparmor = true
  enable_selinux = false

[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"

[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[{cri}.containerd.runtimes.runc.options]
  SystemdCgroup = false
  Root = "{runc_root}"

[{cri}.cni]
  bin_dir = "{cni_bin_dir}"
  conf_dir = "{cni_conf_dir}"
  max_conf_num = 1
"""


def kubelet_config(
    *,
    node_ip: str,
    port: int,
    healthz_port: int,
    client_ca: Path,
    serving_cert: Path,
    serving_key: Path,
    containerd_socket: Path,
    root: Path,
) -> dict[str, Any]:
    """The KubeletConfiguration of the node (see the module doc for why each setting)."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": node_ip,
        "port": port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz_port,
        "tlsCertFile": str(serving_cert),
        "tlsPrivateKeyFile": str(serving_key),
        # Only holders of a client cert from our CA (the API server, for logs and exec) get in.
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": False},
            "x509": {"clientCAFile": str(client_ca)},
        },
        "authorization": {"mode": "AlwaysAllow"},
        "containerRuntimeEndpoint": f"unix://{containerd_socket}",
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": "/" + host.CGROUP_ROOT,
        "failCgroupV1": False,
        "failSwapOn": False,
        "makeIPTablesUtilChains": False,
        "podLogsDir": str(root / "pod-logs"),
        "volumePluginDir": str(root / "kubelet" / "volume-plugins"),
        # Our images are imported, never pulled: garbage-collecting one would break every later pod.
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        # A dev machine's disk is often fuller than a node's: evict only when it is nearly full.
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
        "serializeImagePulls": False,
        "resolvConf": "/etc/resolv.conf",
        "clusterDomain": "cluster.local",
        "shutdownGracePeriod": "0s",
        "shutdownGracePeriodCriticalPods": "0s",
        "logging": {"format": "text"},
    }


# --- readiness (pure over API objects) -------------------------------------------------------------


def _get_or_none(kube: Kube, resource: Resource, namespace: str | None, name: str) -> dict[str, Any] | None:
    try:
        return kube.get(resource, namespace, name)
    except NotFound:
        return None


def node_is_ready(node: dict[str, Any] | None) -> bool:
    """Ready=True and the not-ready taint removed (only then does the scheduler place pods)."""
    if node is None:
        return False
    conditions = {c.get("type"): c.get("status") for c in (node.get("status") or {}).get("conditions") or []}
    taints = [t.get("key") for t in (node.get("spec") or {}).get("taints") or []]
    return conditions.get("Ready") == "True" and NOT_READY_TAINT not in taints


def namespace_ready(kube: Kube, namespace: str) -> bool:
    """The namespace has its `default` ServiceAccount and `kube-root-ca.crt` (pods need both)."""
    return (
        _get_or_none(kube, SERVICE_ACCOUNTS, namespace, "default") is not None
        and _get_or_none(kube, CONFIG_MAPS, namespace, "kube-root-ca.crt") is not None
    )


def create_namespace(kube: Kube, name: str, *, timeout: float = 30.0) -> None:
    """Create a namespace and wait until pods can run in it (ServiceAccount, root CA ConfigMap)."""
    kube.create(NAMESPACES, None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    deadline = time.monotonic() + timeout
    while not namespace_ready(kube, name):
        if time.monotonic() > deadline:
            raise NodeError(
                f"namespace {name} got no default ServiceAccount or kube-root-ca.crt in {timeout:g}s"
            )
        time.sleep(0.1)
