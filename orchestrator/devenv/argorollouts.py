"""The real Argo Rollouts analysis controller, as a host process beside a dev control plane.

`ArgoRollouts.start(cluster, tools, folder=...)` applies Argo Rollouts' own analysis CRDs
(AnalysisRun, AnalysisTemplate, ClusterAnalysisTemplate: `make tools` copies them from the module,
`crds/argo-rollouts/`) and runs `rollouts-controller` (built by `make tools` from the pinned
`github.com/argoproj/argo-rollouts` module) with:

- `--controllers=analysis`: only the analysis controller (v1.10 has the flag; no Rollout,
  Experiment, Service or Ingress controllers, no notifications). It reconciles AnalysisRuns
  whoever creates them: the `prometheus` and `web` providers measure in the controller's own
  process (no pod, no node); the `job` provider creates Jobs, which need a node to run;
- cluster-wide by default (like our Argo Workflows controller: tests give each test a namespace),
  `namespace=` for `--namespaced` (its kubeconfig context names the namespace);
- `instance_id=` for `--instance-id`: then it reconciles only AnalysisRuns labelled
  `argo-rollouts.argoproj.io/controller-instance-id: <id>`; without, only those *without* that label;
- `--leader-elect=false` (one instance, outside a cluster), free ports for its metrics and health
  endpoints (8090 and 8080 by default, on every interface: not settable to loopback);
- `ARGO_ROLLOUTS_PROMETHEUS_ADDRESS` when `prometheus_url` is given: the address a `prometheus`
  metric without one uses.

Ready when `/healthz` answers and its log says the analysis workers started (the health endpoint
answers before the informers have synced). It runs as its own user (a client certificate in group
system:masters), so the audit log tells its writes apart. `stop()` ends it; the log stays in `folder`.

Callers: `orchestrator.devenv.stack` (`dev-cluster up --argo-rollouts`), the analysis test tier
(tests/support/analysis.py).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.analysis.run import INSTANCE_ID_LABEL
from orchestrator.devenv import tools
from orchestrator.devenv.controlplane import ControlPlaneError, DevCluster, free_port
from orchestrator.devenv.processes import ProcessError, Supervisor, http_ok
from orchestrator.kube.client import Kube
from orchestrator.kube.crds import apply_crds, crd_documents_in

USER = "argo-rollouts-controller"
# Where the controller looks for its ConfigMap `argo-rollouts-config` (absent here: defaults) and
# where leader election would keep its Lease (off here): its POD_NAMESPACE.
CONTROLLER_NAMESPACE = "argo-rollouts"
READY_LOG_LINE = "analysis workers"  # "Started 30 analysis workers", after the caches synced


class RolloutsError(ControlPlaneError):
    """The controller could not start; the message says why."""


@dataclass(frozen=True)
class RolloutsTools:
    """The controller and the CRDs `make tools` builds from the pinned Argo Rollouts module."""

    controller: Path
    crds_dir: Path

    @classmethod
    def find(cls) -> RolloutsTools:
        """Find them where `make tools` put them, or fail saying how to build them."""
        try:
            return cls(controller=tools.binary("rollouts-controller"), crds_dir=tools.rollouts_crd_dir())
        except tools.ToolsMissing as exc:
            raise RolloutsError(str(exc)) from exc

    def crd_documents(self) -> list[dict[str, Any]]:
        """The analysis CRDs, as `apply_crds` takes them."""
        return crd_documents_in(self.crds_dir)


def install_crds(kube: Kube, rollouts_tools: RolloutsTools, *, timeout: float = 120.0) -> None:
    """Create or update the analysis CRDs and wait until the API server serves them."""
    apply_crds(kube, rollouts_tools.crd_documents(), timeout=timeout)


def mint_identity(cluster: DevCluster, *, filename: str = f"{USER}.kubeconfig") -> Path:
    """A kubeconfig for the analysis controller's user (`USER`, in system:masters) on `cluster`,
    written as `filename` in its folder."""
    return cluster.mint_user(USER, ["system:masters"], filename=filename)


@dataclass
class ArgoRollouts:
    """A running analysis controller; create with `start`, always `stop()`."""

    folder: Path
    supervisor: Supervisor
    healthz_port: int
    metrics_port: int
    instance_id: str | None = None
    namespace: str | None = None
    timings: dict[str, float] = field(default_factory=dict)

    @classmethod
    def start(
        cls,
        cluster: DevCluster,
        rollouts_tools: RolloutsTools,
        *,
        folder: Path,
        instance_id: str | None = None,
        namespace: str | None = None,
        prometheus_url: str | None = None,
        apply_crds: bool = True,
        ready_timeout: float = 60.0,
        identity: Path | None = None,
    ) -> ArgoRollouts:
        """Apply the CRDs (unless told they are there), start the controller, wait until it works.

        The controller signs in as its own user (`USER`, in system:masters), minted by the cluster's
        CA; `identity` is such a kubeconfig minted beforehand, for a process that attached to a
        cluster another process started (it holds no CA: tests/support/realstack.py's guest)."""
        started = time.monotonic()
        folder.mkdir(parents=True, exist_ok=True)
        crds_applied = 0.0
        if apply_crds:
            kube = Kube.from_kubeconfig(str(cluster.kubeconfig))
            try:
                install_crds(kube, rollouts_tools)
            finally:
                kube.close()
            crds_applied = time.monotonic() - started
        kubeconfig = folder / "controller.kubeconfig"
        kubeconfig.write_bytes((identity or mint_identity(cluster)).read_bytes())
        controller = cls(
            folder=folder,
            supervisor=Supervisor(folder),
            healthz_port=free_port(),
            metrics_port=free_port(),
            instance_id=instance_id,
            namespace=namespace,
        )
        argv = [
            str(rollouts_tools.controller),
            f"--kubeconfig={kubeconfig}",
            "--controllers=analysis",
            "--leader-elect=false",
            f"--healthzPort={controller.healthz_port}",
            f"--metricsPort={controller.metrics_port}",
            "--loglevel=info",
        ]
        if instance_id:
            argv.append(f"--instance-id={instance_id}")
        if namespace:
            argv += ["--namespaced", f"--namespace={namespace}"]
        env = {name: os.environ[name] for name in ("PATH", "HOME", "LANG", "TZ") if name in os.environ}
        env["POD_NAMESPACE"] = CONTROLLER_NAMESPACE
        if prometheus_url:
            env["ARGO_ROLLOUTS_PROMETHEUS_ADDRESS"] = prometheus_url
        controller.supervisor.spawn("rollouts-controller", argv, env=env)
        try:
            controller.supervisor.wait_until(
                "rollouts-controller",
                controller.ready,
                timeout=ready_timeout,
                what=f"GET {controller.healthz_url} and '{READY_LOG_LINE}' in its log",
            )
        except ProcessError as exc:
            controller.stop()
            raise RolloutsError(str(exc)) from exc
        if apply_crds:
            controller.timings["argo-rollouts crds"] = crds_applied
        controller.timings["rollouts-controller ready"] = time.monotonic() - started - crds_applied
        return controller

    @property
    def healthz_url(self) -> str:
        """Its health endpoint."""
        return f"http://127.0.0.1:{self.healthz_port}/healthz"

    @property
    def metrics_url(self) -> str:
        """Its Prometheus metrics (analysis_run_* among them)."""
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    @property
    def log_path(self) -> Path:
        """The controller's log."""
        return self.supervisor.log_path("rollouts-controller")

    def ready(self) -> bool:
        """Its health endpoint answers and its analysis workers run."""
        if not http_ok(self.healthz_url, timeout=1.0):
            return False
        try:
            return READY_LOG_LINE in self.log_path.read_text(errors="replace")
        except OSError:
            return False

    @property
    def pid(self) -> int:
        """The controller's process id."""
        return self.supervisor.pids["rollouts-controller"]

    def labels(self) -> dict[str, str]:
        """The labels an AnalysisRun needs for this controller to reconcile it (its instance id)."""
        return {INSTANCE_ID_LABEL: self.instance_id} if self.instance_id else {}

    def log_tail(self, lines: int = 30) -> str:
        """The end of its log."""
        return self.supervisor.log_tail("rollouts-controller", lines)

    def stop(self) -> None:
        """Stop the controller (SIGTERM, SIGKILL after 10 s)."""
        self.supervisor.stop()
