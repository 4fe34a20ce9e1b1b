"""The dev stack: the local control plane, and on request the real node and real Argo Workflows.

`DevStack.start(StackOptions(...))` is what `progressive-sync dev-cluster up`, `demo --engine argo`,
the real-stack test fixtures and `make bench` share:

1. the machine's node lock first, when a node is asked for (a second node fails at once, before
   anything starts);
2. etcd + kube-apiserver (`controlplane`), prepared for a node when there is one;
3. the CRDs: ours and the peers' own (Argo Workflows', Argo CD's) from the tools folder;
4. the node (`node`), with the step image and the argoexec image built and imported;
5. workflow-controller and argo server (`argoworkflows`);
5b. the real Argo CD (`argocd`: redis, repo-server, application controller, ApplicationSet
   controller, destination clusters, a Git repository with a starter app), when asked for;
5c. what analysis gates need (`analysis_stack`: a metrics endpoint per cluster, a real Prometheus
   scraping it, the real Argo Rollouts analysis controller with its CRDs), when asked for;
6. per namespace where rollouts run (`prepare_namespace`): the namespace, ready for pods, and the
   chart's service accounts and RBAC for the steps, rendered from `charts/progressive-sync` by
   `helm template` (so the steps run with exactly what the chart grants).

`exports()` are the environment variables a shell needs to use the stack: KUBECONFIG, and with Argo
the step image, the pull policy, the Argo Server for the watcher and the argo CLI, the tools on PATH,
and with analysis Prometheus' URL and the metrics endpoint's control URL.
`health()` names every program the stack started that has exited since (`health.DeadProgram`).
`stop()` stops everything in reverse order and undoes every change to the machine.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from orchestrator.devenv import images as images_mod
from orchestrator.devenv import machine, tools
from orchestrator.devenv.analysis_stack import AnalysisStack
from orchestrator.devenv.argocd import ArgoCDStack
from orchestrator.devenv.argocd_settings import ArgoCDSettings, ArgoCDTools
from orchestrator.devenv.argorollouts import RolloutsTools
from orchestrator.devenv.argoworkflows import ArgoTools, ArgoWorkflows
from orchestrator.devenv.controlplane import ControlPlaneError, DevCluster, find_tools_dir
from orchestrator.devenv.health import DeadProgram
from orchestrator.devenv.node import Node, NodeTools, create_namespace, namespace_ready
from orchestrator.kube.client import NAMESPACES, AlreadyExists, Kube, NotFound, Resource
from orchestrator.kube.crds import all_crd_documents, apply_crds

log = logging.getLogger(__name__)

CHART = Path(__file__).resolve().parents[2] / "charts" / "progressive-sync"
# What of the chart the stack installs: identities and permissions (the watcher runs elsewhere: in
# the shell that sourced the exports, or in the test process; its Deployment's image is not here).
CHART_KINDS = (
    "ServiceAccount",
    "Role",
    "RoleBinding",
    "ClusterRole",
    "ClusterRoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
)
DEFAULT_NAMESPACE = "argocd"

_RESOURCES = {
    "ServiceAccount": Resource("", "v1", "serviceaccounts", "ServiceAccount"),
    "Role": Resource("rbac.authorization.k8s.io", "v1", "roles", "Role"),
    "RoleBinding": Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding"),
    "ClusterRole": Resource("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole"),
    "ClusterRoleBinding": Resource(
        "rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding"
    ),
    "ValidatingAdmissionPolicy": Resource(
        "admissionregistration.k8s.io", "v1", "validatingadmissionpolicies", "ValidatingAdmissionPolicy"
    ),
    "ValidatingAdmissionPolicyBinding": Resource(
        "admissionregistration.k8s.io",
        "v1",
        "validatingadmissionpolicybindings",
        "ValidatingAdmissionPolicyBinding",
    ),
}
_CLUSTER_SCOPED = {
    "ClusterRole",
    "ClusterRoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
}


class StackError(ControlPlaneError):
    """The stack could not start; the message says why and what to do."""


@dataclass(frozen=True)
class StackOptions:
    """What to start. `argo_workflows` implies `node`."""

    node: bool = False
    argo_workflows: bool = False
    argo_server: bool = True
    # How soon the controller looks at a Workflow again (its DEFAULT_REQUEUE_TIME).
    requeue_time: str = "10s"
    # Flags added after the controller's own (a flag given twice: the later wins), e.g.
    # `--workflow-workers=32`, `--qps=100`, `--burst=200` (bench/bench_many.py).
    controller_args: tuple[str, ...] = ()
    # Namespaces prepared for rollouts (created, steps' service account and RBAC from the chart).
    namespaces: tuple[str, ...] = (DEFAULT_NAMESPACE,)
    tools_dir: Path | None = None
    workdir: Path | None = None
    # The real Argo CD and its fleet (None: not started; the fleet simulator plays Argo CD).
    argocd: ArgoCDSettings | None = None
    # The Argo Rollouts analysis controller, Prometheus and the metrics endpoint (analysis gates);
    # the endpoint serves `metrics_clusters` (default: Argo CD's clusters when it runs).
    argo_rollouts: bool = False
    metrics_clusters: tuple[str, ...] = ()
    # kube-apiserver's GOMEMLIMIT instead of the dev stack's (controlplane.APISERVER_GO_ENVIRONMENT):
    # more memory for less collecting, e.g. the test suite's real stack.
    apiserver_memory_limit: str | None = None
    # The CPU weight of everything the node runs (its cgroup root's cpu.shares; host.py) against the
    # machine's other programs (None: the kernel's default, 1024), e.g. the test suite's real stack,
    # whose pods are its critical path.
    node_cpu_shares: int | None = None

    @property
    def wants_node(self) -> bool:
        """A node runs (asked for, or needed by the controller)."""
        return self.node or self.argo_workflows


@dataclass
class DevStack:
    """A running stack; create with `DevStack.start`, always `stop()` it."""

    options: StackOptions
    tools_dir: Path
    cluster: DevCluster | None = None
    node: Node | None = None
    argo: ArgoWorkflows | None = None
    argocd: ArgoCDStack | None = None
    analysis: AnalysisStack | None = None
    steps_image: images_mod.Image | None = None
    timings: dict[str, float] = field(default_factory=dict)
    # A view of a stack another process runs (`attach`): it prepares namespaces on that stack's node
    # and reads its API server, and starts or stops nothing.
    attached: bool = False
    _lock: machine.NodeLock | None = field(default=None, repr=False)
    _rbac: dict[str, list[tuple[str, str | None, str]]] = field(default_factory=dict, repr=False)

    @classmethod
    def start(cls, options: StackOptions) -> DevStack:
        """Start what `options` asks for; on any failure stop what started and re-raise."""
        started = time.monotonic()
        stack = cls(options=options, tools_dir=find_tools_dir(options.tools_dir))
        argo_tools = ArgoTools.find() if options.argo_workflows else None
        argocd_tools = ArgoCDTools.find() if options.argocd else None
        rollouts_tools = RolloutsTools.find() if options.argo_rollouts else None
        if options.wants_node:
            NodeTools.find()  # every missing program named now, before anything starts
            stack._lock = machine.NodeLock()
            stack._lock.acquire()  # NodeBusy now, before anything starts
        try:
            stack._start(argo_tools, rollouts_tools)
            if argocd_tools is not None and options.argocd is not None and stack.cluster is not None:
                cluster, settings = stack.cluster, options.argocd
                workdir = options.workdir / "argocd" if options.workdir else None
                stack.argocd = stack._timed(
                    "argocd", lambda: ArgoCDStack.start(cluster, argocd_tools, settings, workdir=workdir)
                )
            if rollouts_tools is not None:
                stack._start_analysis(rollouts_tools)
        except BaseException:
            stack.stop()
            raise
        stack.timings["stack_start"] = time.monotonic() - started
        return stack

    def _start(self, argo_tools: ArgoTools | None, rollouts_tools: RolloutsTools | None) -> None:
        options = self.options
        cache = images_mod.images_cache()

        def build_images() -> list[images_mod.Image]:
            self.steps_image = images_mod.steps_image(cache)
            built = [self.steps_image]
            if argo_tools is not None:
                built.append(images_mod.argoexec_image(cache, argo_tools.argoexec))
            return built

        # Before anything starts (it may say what to build). Argo's minimal Workflow CRD, as Argo's
        # install applies it: the real controller writes Workflows all along, and the full schema
        # doubles what each write and the install cost the API server (docs/design/dev-stack.md).
        crds = all_crd_documents(tools.peer_crd_dirs(), workflow_crd_dir=tools.minimal_workflow_crd_dir())
        if rollouts_tools is not None:
            crds += rollouts_tools.crd_documents()
        if options.wants_node:
            # containerd and the image imports need no API server: they run while it starts.
            assert self._lock is not None
            self.node = Node.prepare(
                images_cache=cache, images=build_images, lock=self._lock, cpu_shares=options.node_cpu_shares
            )
        self.cluster = self._timed(
            "control_plane",
            lambda: DevCluster.start(
                self.tools_dir,
                workdir=options.workdir,
                node_ready=options.wants_node,
                apiserver_memory_limit=options.apiserver_memory_limit,
            ),
        )
        if self.node is not None and options.workdir is None:
            # Its temporary workdir: if this process is killed, the next node start removes it.
            self.node.ledger.remember_owned_folders([self.cluster.workdir])
        with self.kube() as kube:
            # The peers' CRDs are megabytes: the API server takes a while to serve them.
            self._timed("crds", lambda: apply_crds(kube, crds, timeout=300.0))
        if self.node is None:
            for namespace in options.namespaces:
                self._create_plain_namespace(namespace)
            return
        self._timed("node_join", lambda: self.node.join(self.cluster) if self.node and self.cluster else None)
        self.timings.update(self.node.timings)
        if argo_tools is not None:
            self._start_argo(
                argo_tools,
                options.requeue_time,
                server=options.argo_server,
                controller_args=options.controller_args,
            )
        for namespace in options.namespaces:
            self._timed(f"namespace {namespace}", lambda ns=namespace: self.prepare_namespace(ns))

    def _start_analysis(self, rollouts_tools: RolloutsTools) -> None:
        assert self.cluster is not None
        clusters = self.options.metrics_clusters
        if not clusters and self.options.argocd is not None:
            clusters = tuple(cluster.name for cluster in self.options.argocd.clusters)
        cluster = self.cluster
        self.analysis = self._timed(
            "analysis",
            lambda: AnalysisStack.start(
                cluster,
                folder=cluster.workdir / "analysis",
                clusters=clusters,
                rollouts_tools=rollouts_tools,
                apply_crds=False,  # applied with the others
            ),
        )
        self.timings.update(self.analysis.timings)

    @classmethod
    def attach(cls, *, tools_dir: Path, workdir: Path, api_url: str, kubeconfig: Path) -> DevStack:
        """A view of a stack with a node that another process started (its control plane's folder,
        URL and admin kubeconfig): for a second test process sharing the machine's one node. Its
        `cluster` reads the audit log; `stop()` stops nothing and leaves the folder."""
        cluster = DevCluster(
            workdir=workdir,
            tools_dir=tools_dir,
            api_url=api_url,
            etcd_url="",
            kubeconfig=kubeconfig,
            node_ready=True,
            _owns_workdir=False,
        )
        options = StackOptions(node=True, argo_workflows=True, namespaces=())
        return cls(options=options, tools_dir=tools_dir, cluster=cluster, attached=True)

    def add_argo_workflows(self, *, requeue_time: str = "10s", server: bool = True) -> None:
        """Start Argo Workflows on this running stack's node (no-op when it runs already).

        What a test session does when its first test that needs the controller comes after
        tests that needed only the node.
        """
        if self.argo is not None:
            return
        if self.node is None:
            raise StackError("Argo Workflows needs the node: start the stack with StackOptions(node=True)")
        self._start_argo(ArgoTools.find(), requeue_time, server=server)

    def restart_argo_workflows(self, *, requeue_time: str) -> None:
        """Restart the controller and the server with another DEFAULT_REQUEUE_TIME (the bench compares)."""
        if self.argo is None:
            raise StackError("Argo Workflows is not running on this stack")
        server = self.argo.server_url is not None
        self.argo.stop()
        self.argo = None
        self._start_argo(ArgoTools.find(), requeue_time, server=server)

    def _start_argo(
        self,
        argo_tools: ArgoTools,
        requeue_time: str,
        *,
        server: bool,
        controller_args: tuple[str, ...] = (),
    ) -> None:
        assert self.cluster is not None and self.node is not None
        self.argo = ArgoWorkflows.start(
            self.cluster,
            self.node,
            argo_tools,
            images_cache=images_mod.images_cache(),
            requeue_time=requeue_time,
            server=server,
            controller_args=controller_args,
        )
        self.timings.update(self.argo.timings)

    def _timed(self, what: str, call: Any) -> Any:
        started = time.monotonic()
        try:
            return call()
        finally:
            self.timings[what] = time.monotonic() - started

    @contextlib.contextmanager
    def kube(self) -> Iterator[Kube]:
        """An admin adapter for the stack's API server (closed after the block)."""
        assert self.cluster is not None
        client = Kube.from_kubeconfig(str(self.cluster.kubeconfig))
        try:
            yield client
        finally:
            client.close()

    # -- namespaces -------------------------------------------------------------------------

    def _create_plain_namespace(self, namespace: str) -> None:
        with self.kube() as kube, contextlib.suppress(AlreadyExists):
            kube.create(
                NAMESPACES, None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
            )

    def prepare_namespace(self, namespace: str) -> None:
        """Create `namespace` (ready for pods) and install the chart's steps identity and RBAC in it."""
        if self.node is None and not self.attached:
            raise StackError("prepare_namespace needs the node (StackOptions(node=True))")
        with self.kube() as kube:
            try:
                create_namespace(kube, namespace)
            except AlreadyExists:
                deadline = time.monotonic() + 30
                while not namespace_ready(kube, namespace) and time.monotonic() < deadline:
                    time.sleep(0.1)
            created = []
            for document in self.chart_rbac(namespace):
                kind = document["kind"]
                scope = None if kind in _CLUSTER_SCOPED else document["metadata"].get("namespace", namespace)
                with contextlib.suppress(AlreadyExists):
                    kube.create(_RESOURCES[kind], scope, document)
                created.append((kind, scope, document["metadata"]["name"]))
            self._rbac[namespace] = created

    def forget_namespace(self, namespace: str) -> None:
        """Delete the namespace and the cluster-wide RBAC objects installed for it."""
        with self.kube() as kube:
            for kind, scope, name in self._rbac.pop(namespace, []):
                if scope is None:
                    with contextlib.suppress(NotFound):
                        kube.delete(_RESOURCES[kind], None, name)
            with contextlib.suppress(NotFound):
                kube.delete(NAMESPACES, None, namespace)

    def chart_rbac(self, namespace: str) -> list[dict[str, Any]]:
        """The chart's service accounts, roles and bindings for steps running in `namespace`."""
        helm = tools.binary("helm")
        # One release per namespace: cluster-wide names (ClusterRoles) include the release name.
        release = "ps-" + hashlib.sha256(namespace.encode()).hexdigest()[:10]
        command = [
            str(helm),
            "template",
            release,
            str(CHART),
            "--namespace",
            namespace,
            "--set",
            f"workflowNamespace={namespace}",
            "--set",
            f"argocdNamespace={namespace}",
            "--set",
            "installWorkflowTemplates=false",
            # The chart requires image.repository; only the RBAC documents are kept, so any name does.
            "--set",
            "image.repository=progressive-sync",
        ]
        result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
        if result.returncode != 0:
            raise StackError(f"helm template of {CHART} failed: {result.stderr.strip()}")
        documents = [
            doc for doc in yaml.safe_load_all(result.stdout) if doc and doc.get("kind") in CHART_KINDS
        ]
        for document in documents:
            if document["kind"] not in _CLUSTER_SCOPED:
                document["metadata"].setdefault("namespace", namespace)
        return documents

    # -- what a shell needs ---------------------------------------------------------------------

    def exports(self) -> list[tuple[str, str]]:
        """(variable, value) pairs for `export` lines: everything a watcher or the argo CLI needs."""
        assert self.cluster is not None
        exports = [("KUBECONFIG", str(self.cluster.kubeconfig))]
        if self.argo is not None:
            exports.append(("PROGRESSIVE_SYNC_ENGINE", "argo"))
        if self.steps_image is not None:
            exports += [
                ("PROGRESSIVE_SYNC_STEP_IMAGE", self.steps_image.reference),
                ("PROGRESSIVE_SYNC_STEP_IMAGE_PULL_POLICY", "Never"),
            ]
        if self.argo is not None and self.argo.server_url:
            exports.append(("PROGRESSIVE_SYNC_ARGO_SERVER", self.argo.server_url))
            exports += sorted(self.argo.argo_environment().items())
        if self.analysis is not None:
            exports += self.analysis.exports()
        if self.node is not None:
            exports.append(("PATH", f"{tools.tools_dir()}:$PATH"))
        return exports

    def environment(self, base: dict[str, str]) -> dict[str, str]:
        """`base` with the exports applied (for starting a watcher or argo as a child process)."""
        env = dict(base)
        for name, value in self.exports():
            env[name] = value.replace("$PATH", base.get("PATH", ""))
        return env

    # -- health ---------------------------------------------------------------------------------

    def health(self) -> list[DeadProgram]:
        """Every program this stack started that has exited since (how, and its log's telling
        lines), in start order; [] when all run. Cheap: it asks the processes, not the programs.
        An attached view started nothing and sees nothing (a guest probes: tests/support/stack_watch.py)."""
        found: list[DeadProgram] = []
        if self.cluster is not None and not self.attached:
            found += self.cluster.exited()
        if self.node is not None:
            found += self.node.exited()
        if self.argo is not None:
            found += self.argo.exited()
        if self.argocd is not None:
            found += self.argocd.supervisor.exited()
        if self.analysis is not None:
            found += self.analysis.exited()
        return found

    # -- stop -----------------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop everything in reverse order; undo every change to the machine; release the lock."""
        try:
            if self.analysis is not None:
                self.analysis.stop()
                self.analysis = None
            if self.argocd is not None:
                self.argocd.stop()
                self.argocd = None
            if self.argo is not None:
                self.argo.stop()
            if self.node is not None:
                self.node.stop()
            elif self._lock is not None and self._lock.held:
                machine.clean_up()  # the node failed part-way: undo what it did
        finally:
            if self.cluster is not None:
                self.cluster.stop()
            if self._lock is not None:
                self._lock.release()
            self.argo = None
            self.node = None

    def __enter__(self) -> DevStack:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def shell_exports(exports: list[tuple[str, str]]) -> list[str]:
    """`export NAME=value` lines (values quoted for a POSIX shell; $PATH left to expand)."""
    lines = []
    for name, value in exports:
        if "$PATH" in value:
            lines.append(f'export {name}="{value}"')
        else:
            lines.append(f"export {name}={_quote(value)}")
    return lines


def _quote(value: str) -> str:
    import shlex  # noqa: PLC0415

    return shlex.quote(value)
