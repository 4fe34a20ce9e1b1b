"""What analysis gates need beside a control plane: the metrics endpoint, Prometheus, the controller.

`AnalysisStack.start(cluster, folder=..., clusters=(...))` starts, in this order:

1. the metrics endpoint (`metrics_endpoint`): per-cluster request counters and latency, every
   cluster in `clusters` good to begin with; its control URL flips one to bad;
2. a real Prometheus (`prometheus`) scraping it every second; start returns once Prometheus has
   scraped it (its first scrape comes ~5 s after it starts: its target discovery sends the first
   targets after a fixed 5 s), and with `clusters`, once the error-rate query answers for the first;
3. the real Argo Rollouts analysis controller (`argorollouts`), its CRDs applied first, with
   Prometheus as its default `prometheus` address.

`exports()` names them for a shell or another process (`PROGRESSIVE_SYNC_PROMETHEUS_URL`,
`PROGRESSIVE_SYNC_METRICS_CONTROL_URL`); `exited()` names Prometheus or the controller when it died;
`stop()` stops all three, last started first.

Callers: `orchestrator.devenv.stack` (`dev-cluster up --argo-rollouts`), the analysis test tier
(tests/support/analysis.py).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.devenv.argorollouts import ArgoRollouts, RolloutsTools
from orchestrator.devenv.controlplane import DevCluster
from orchestrator.devenv.health import DeadProgram
from orchestrator.devenv.metrics_endpoint import MetricsEndpoint, error_rate_query
from orchestrator.devenv.prometheus import JOB, Prometheus
from workflow_templates.pieces import ROLLOUTS_INSTANCE_ID_ENV

PROMETHEUS_URL_VARIABLE = "PROGRESSIVE_SYNC_PROMETHEUS_URL"
METRICS_CONTROL_URL_VARIABLE = "PROGRESSIVE_SYNC_METRICS_CONTROL_URL"


@dataclass
class AnalysisStack:
    """A running endpoint, Prometheus and analysis controller; create with `start`, always `stop()`."""

    endpoint: MetricsEndpoint
    prometheus: Prometheus | None = None
    controller: ArgoRollouts | None = None
    timings: dict[str, float] = field(default_factory=dict)

    @classmethod
    def start(
        cls,
        cluster: DevCluster,
        *,
        folder: Path,
        clusters: Sequence[str] = (),
        rollouts_tools: RolloutsTools | None = None,
        instance_id: str | None = None,
        apply_crds: bool = True,
        ready_timeout: float = 60.0,
        controller_identity: Path | None = None,
    ) -> AnalysisStack:
        """Start all three (see the module doc); on any failure stop what started and re-raise."""
        started = time.monotonic()
        found = rollouts_tools or RolloutsTools.find()  # a missing build named before anything starts
        stack = cls(endpoint=MetricsEndpoint(clusters).start())
        try:
            stack.prometheus = Prometheus.start(
                [stack.endpoint.target], folder=folder / "prometheus", ready_timeout=ready_timeout
            )
            stack.controller = ArgoRollouts.start(
                cluster,
                found,
                folder=folder / "argo-rollouts",
                instance_id=instance_id,
                prometheus_url=stack.prometheus.url,
                apply_crds=apply_crds,
                ready_timeout=ready_timeout,
                identity=controller_identity,
            )
            # Waited for last: the controller started meanwhile.
            stack.prometheus.wait_for_value(f'up{{job="{JOB}"}} == 1', timeout=ready_timeout)
            if clusters:
                stack.prometheus.wait_for_value(error_rate_query(clusters[0]), timeout=ready_timeout)
        except BaseException:
            stack.stop()
            raise
        stack.timings.update(stack.prometheus.timings)
        stack.timings.update(stack.controller.timings)
        stack.timings["analysis_start"] = time.monotonic() - started
        return stack

    @property
    def prometheus_url(self) -> str:
        """Where Prometheus answers (a `prometheus` metric's `address`)."""
        assert self.prometheus is not None
        return self.prometheus.url

    def exports(self) -> list[tuple[str, str]]:
        """(variable, value) pairs for a shell: Prometheus, the metrics control URL (and the instance id)."""
        exports = [
            (PROMETHEUS_URL_VARIABLE, self.prometheus_url),
            (METRICS_CONTROL_URL_VARIABLE, self.endpoint.url),
        ]
        if self.controller is not None and self.controller.instance_id:
            exports.append((ROLLOUTS_INSTANCE_ID_ENV, self.controller.instance_id))
        return exports

    def describe(self) -> list[str]:
        """What runs, in a line each (for `dev-cluster up`'s comments)."""
        lines = [
            f"Prometheus at {self.prometheus_url} (scrapes every 1s); metrics endpoint {self.endpoint.url}"
            f" (PUT {self.endpoint.url}/clusters/NAME '{{\"errorRate\": 0.5}}' makes NAME bad)",
        ]
        if self.controller is not None:
            lines.append(
                f"Argo Rollouts analysis controller (--controllers=analysis); log {self.controller.log_path}"
            )
        return lines

    def exited(self) -> list[DeadProgram]:
        """Prometheus or the analysis controller, when it exited since it started."""
        found = []
        if self.prometheus is not None:
            found += self.prometheus.supervisor.exited()
        if self.controller is not None:
            found += self.controller.supervisor.exited()
        return found

    def stop(self) -> None:
        """Stop the controller, Prometheus and the endpoint."""
        try:
            if self.controller is not None:
                self.controller.stop()
                self.controller = None
            if self.prometheus is not None:
                self.prometheus.stop()
                self.prometheus = None
        finally:
            self.endpoint.stop()
