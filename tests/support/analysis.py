"""The real analysis components in tests: fixtures, AnalysisRun builders, waiting on a run's phase.

What is real: the session's control plane (tests/conftest.py `control_plane`) with Argo Rollouts'
own analysis CRDs applied at first use, the Argo Rollouts analysis controller of the pinned release
(`--controllers=analysis`, cluster-wide, built by `make tools`), a real Prometheus (Debian's)
scraping a metrics endpoint this process serves and controls per cluster
(`orchestrator.devenv.metrics_endpoint`). The `prometheus` and `web` providers measure inside the
controller's process: no node is needed for them. The `job` provider's Jobs need a node (the
real-stack tier).

Fixtures (registered in tests/conftest.py; every test using them is marked `analysis`):

- `analysis_stack` (session): the running `AnalysisStack` (endpoint, Prometheus, controller),
  started once per session (per xdist worker) on `control_plane`, ~7 s (Prometheus scrapes its
  first target ~5 s after it starts);
- `analysis_env` (per test): an `AnalysisEnv`: `kube` (admin), a fresh `namespace`,
  `runner` (a Kube client as a user that may only create/get/list/watch/patch/delete `analysisruns`
  and read `analysistemplates` in that namespace and `clusteranalysistemplates`), `prometheus_url`,
  `endpoint` (`endpoint.set_error_rate(cluster, rate)`), and `cluster` (a cluster name of its own,
  good, already answering the error-rate query).

Builders: `prometheus_metric`, `web_metric`, `analysis_run`, `analysis_template`; waiting:
`wait_for_phase` (with a deadline; the phases are Argo Rollouts' own strings).
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from orchestrator.devenv import controlplane as devcluster
from orchestrator.devenv.analysis_stack import AnalysisStack
from orchestrator.devenv.argorollouts import RolloutsError, RolloutsTools
from orchestrator.devenv.metrics_endpoint import MetricsEndpoint, error_rate_query
from orchestrator.devenv.prometheus import PrometheusError
from orchestrator.kube.client import (
    ANALYSIS_RUNS,
    ANALYSIS_TEMPLATES,
    CLUSTER_ANALYSIS_TEMPLATES,
    Kube,
    NotFound,
    Resource,
)
from tests.support.wait import wait_for

# Argo Rollouts' phases (pkg/apis/rollouts/v1alpha1 AnalysisPhase); the last four are final.
PENDING, RUNNING = "Pending", "Running"
SUCCESSFUL, FAILED, ERROR, INCONCLUSIVE = "Successful", "Failed", "Error", "Inconclusive"
FINAL_PHASES = frozenset({SUCCESSFUL, FAILED, ERROR, INCONCLUSIVE})
# The error-rate condition the tests use: good below 5 %, bad above 20 %, in between neither.
SUCCESS_BELOW = 0.05
FAILURE_ABOVE = 0.2

# How long this process' analysis stack took to start, by part (for a tier's summary line).
STARTUP: dict[str, float] = {}
# Clusters the session's endpoint serves from the start, for the first tests to take.
CLUSTER_POOL = 24

ROLES = Resource("rbac.authorization.k8s.io", "v1", "roles", "Role")
ROLE_BINDINGS = Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding")
CLUSTER_ROLES = Resource("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole")
CLUSTER_ROLE_BINDINGS = Resource(
    "rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding"
)
READ = ["get", "list", "watch"]
# What the issue grants the steps' account, and what a test's `runner` may do.
RUNNER_RULES = [
    {
        "apiGroups": ["argoproj.io"],
        "resources": ["analysisruns"],
        "verbs": ["create", "get", "list", "watch", "patch", "delete"],
    },
    {"apiGroups": ["argoproj.io"], "resources": ["analysistemplates"], "verbs": READ},
]


# -- builders -------------------------------------------------------------------------------------


def prometheus_metric(
    name: str,
    *,
    address: str | None,
    query: str,
    success: str | None = f"result[0] < {SUCCESS_BELOW}",
    failure: str | None = f"result[0] > {FAILURE_ABOVE}",
    interval: str = "1s",
    count: int | None = 3,
    failure_limit: int | None = None,
    consecutive_error_limit: int | None = 0,
    inconclusive_limit: int | None = None,
) -> dict[str, Any]:
    """A `prometheus` metric. `consecutive_error_limit` 0: the first error ends it (Argo Rollouts
    retries a measurement that errored only after a fixed 10 s, and allows 4 by default)."""
    metric: dict[str, Any] = {
        "name": name,
        "interval": interval,
        # No address: the controller's ARGO_ROLLOUTS_PROMETHEUS_ADDRESS (the stack's Prometheus).
        "provider": {"prometheus": {"query": query} | ({"address": address} if address else {})},
    }
    return _limits(
        metric,
        successCondition=success,
        failureCondition=failure,
        count=count,
        failureLimit=failure_limit,
        consecutiveErrorLimit=consecutive_error_limit,
        inconclusiveLimit=inconclusive_limit,
    )


def web_metric(
    name: str,
    *,
    url: str,
    json_path: str = "{$.errorRate}",
    success: str | None = f"result < {SUCCESS_BELOW}",
    failure: str | None = f"result > {FAILURE_ABOVE}",
    interval: str = "1s",
    count: int | None = 2,
    consecutive_error_limit: int | None = 0,
) -> dict[str, Any]:
    """A `web` metric: GET `url`, the value at `json_path` is `result`."""
    metric: dict[str, Any] = {
        "name": name,
        "interval": interval,
        "provider": {"web": {"url": url, "jsonPath": json_path, "timeoutSeconds": 5}},
    }
    return _limits(
        metric,
        successCondition=success,
        failureCondition=failure,
        count=count,
        consecutiveErrorLimit=consecutive_error_limit,
    )


def _limits(metric: dict[str, Any], **optional: str | int | None) -> dict[str, Any]:
    """`metric` with the optional fields that have a value (Argo Rollouts' own names)."""
    metric.update({key: value for key, value in optional.items() if value is not None})
    return metric


def analysis_run(
    name: str,
    metrics: list[dict[str, Any]],
    *,
    args: list[dict[str, Any]] | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A standalone AnalysisRun (no owner), as `kubectl argo rollouts create analysisrun` makes one."""
    body: dict[str, Any] = {
        "apiVersion": ANALYSIS_RUNS.api_version,
        "kind": ANALYSIS_RUNS.kind,
        "metadata": {"name": name, "labels": dict(labels or {})},
        "spec": {"metrics": metrics},
    }
    if args:
        body["spec"]["args"] = args
    return body


def analysis_template(
    name: str,
    metrics: list[dict[str, Any]],
    *,
    args: list[dict[str, Any]] | None = None,
    cluster_scope: bool = False,
) -> dict[str, Any]:
    """An AnalysisTemplate (a ClusterAnalysisTemplate with `cluster_scope`)."""
    resource = CLUSTER_ANALYSIS_TEMPLATES if cluster_scope else ANALYSIS_TEMPLATES
    spec: dict[str, Any] = {"metrics": metrics}
    if args:
        spec["args"] = args
    return {
        "apiVersion": resource.api_version,
        "kind": resource.kind,
        "metadata": {"name": name},
        "spec": spec,
    }


# -- reading a run --------------------------------------------------------------------------------


def phase_of(run: dict[str, Any]) -> str:
    """The run's phase ("" before the controller's first look)."""
    return str((run.get("status") or {}).get("phase") or "")


def metric_results(run: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each metric's result by name (phase, message, measurements)."""
    return {result["name"]: result for result in (run.get("status") or {}).get("metricResults") or []}


def wait_for_phase(
    kube: Kube,
    namespace: str,
    name: str,
    phases: set[str] | frozenset[str],
    *,
    timeout: float = 30.0,
    clock: Callable[[], float] = time.monotonic,
) -> dict[str, Any]:
    """The AnalysisRun once its phase is one of `phases`; AssertionError (with its status) after `timeout`."""
    deadline = clock() + timeout
    run: dict[str, Any] = {}
    while clock() < deadline:
        with contextlib.suppress(NotFound):
            run = kube.get(ANALYSIS_RUNS, namespace, name)
            if phase_of(run) in phases:
                return run
        time.sleep(0.1)
    raise AssertionError(
        f"AnalysisRun {namespace}/{name} not in {sorted(phases)} after {timeout:g}s: "
        f"phase {phase_of(run)!r}, status {run.get('status')}"
    )


# -- fixtures -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AnalysisEnv:
    """What a test of analysis gets (see the module doc)."""

    kube: Kube
    runner: Kube
    namespace: str
    stack: AnalysisStack
    cluster: str

    @property
    def prometheus_url(self) -> str:
        """Prometheus' base URL (a `prometheus` metric's `address`)."""
        return self.stack.prometheus_url

    @property
    def endpoint(self) -> MetricsEndpoint:
        """The metrics endpoint: `endpoint.set_error_rate(cluster, rate)`."""
        return self.stack.endpoint

    def error_rate_query(self, cluster: str | None = None) -> str:
        """PromQL for `cluster`'s (default: this test's) error rate."""
        return error_rate_query(cluster or self.cluster)

    def set_error_rate(self, cluster: str, rate: float, *, timeout: float = 30.0) -> None:
        """Make `cluster` answer `rate` of its requests with a 500, and return once Prometheus' error
        rate query says so (its window all after the change: a run created now measures `rate`)."""
        set_error_rate(self.stack, cluster, rate, timeout=timeout)

    def new_cluster(self, prefix: str = "c") -> str:
        """Another cluster of this test's own, good and already answering the error-rate query."""
        return add_cluster(self.stack, prefix)

    def create_run(self, body: dict[str, Any]) -> dict[str, Any]:
        """Create an AnalysisRun in the test's namespace as the least-privileged `runner`."""
        return self.runner.create(ANALYSIS_RUNS, self.namespace, body)

    def wait_for_phase(
        self, name: str, phases: set[str] | frozenset[str], *, timeout: float = 30.0
    ) -> dict[str, Any]:
        """`wait_for_phase` in the test's namespace."""
        return wait_for_phase(self.kube, self.namespace, name, phases, timeout=timeout)


def add_cluster(stack: AnalysisStack, prefix: str = "c") -> str:
    """A fresh cluster name on the endpoint (good), once Prometheus answers its error rate."""
    cluster = f"{prefix}-{uuid.uuid4().hex[:8]}"
    stack.endpoint.set_error_rate(cluster, 0.0)
    assert stack.prometheus is not None
    stack.prometheus.wait_for_value(error_rate_query(cluster), timeout=30.0)
    return cluster


def set_error_rate(stack: AnalysisStack, cluster: str, rate: float, *, timeout: float = 30.0) -> None:
    """`stack.endpoint.set_error_rate`, then wait until Prometheus' error-rate query gives `rate`."""
    stack.endpoint.set_error_rate(cluster, rate)
    assert stack.prometheus is not None
    prometheus = stack.prometheus
    wait_for(
        lambda: abs(prometheus.wait_for_value(error_rate_query(cluster)) - rate) < 0.001,
        timeout=timeout,
        interval=0.2,
        what=f"Prometheus to see {cluster}'s error rate at {rate}",
    )


@pytest.fixture(scope="session")
def analysis_stack(control_plane: devcluster.DevCluster) -> Iterator[AnalysisStack]:
    """The metrics endpoint, Prometheus and the analysis controller on the session's control plane."""
    try:
        rollouts_tools = RolloutsTools.find()
    except RolloutsError as exc:
        pytest.fail(f"{exc}\n(`make test` builds the tools and sets PROGRESSIVE_SYNC_TOOLS_DIR for you.)")
    try:
        stack = AnalysisStack.start(
            control_plane,
            folder=control_plane.workdir / "analysis",
            # Served from the start, so Prometheus has their series before the first test: each
            # test takes one (`take_cluster`) instead of waiting two scrapes for a new one.
            clusters=tuple(f"pool-{index:02d}" for index in range(CLUSTER_POOL)),
            rollouts_tools=rollouts_tools,
        )
    except (RolloutsError, PrometheusError) as exc:
        pytest.fail(str(exc))
    STARTUP.update(stack.timings)
    try:
        yield stack
    finally:
        stack.stop()


@pytest.fixture(scope="session")
def analysis_clusters(analysis_stack: AnalysisStack) -> list[str]:
    """The session's pool of good clusters no test has taken yet (`analysis_env` takes one each)."""
    return sorted(name for name in analysis_stack.endpoint.clusters() if name.startswith("pool-"))


@pytest.fixture
def analysis_env(
    analysis_stack: AnalysisStack,
    analysis_clusters: list[str],
    control_plane: devcluster.DevCluster,
    kube: Kube,
    namespace: str,
) -> Iterator[AnalysisEnv]:
    """A fresh namespace where a least-privileged user may run analyses, and a good cluster of its own."""
    user = f"analysis-runner.{uuid.uuid4().hex[:8]}"  # a certificate's CN holds 64 characters at most
    name = "analysis-runner"
    _create(kube, ROLES, namespace, {"metadata": {"name": name}, "rules": RUNNER_RULES})
    _create(kube, ROLE_BINDINGS, namespace, _binding(name, "Role", name, user))
    # ClusterAnalysisTemplates are cluster-wide: a ClusterRole bound per test user.
    cluster_name = f"{name}-{namespace}"
    _create(
        kube,
        CLUSTER_ROLES,
        None,
        {
            "metadata": {"name": cluster_name},
            "rules": [
                {"apiGroups": ["argoproj.io"], "resources": ["clusteranalysistemplates"], "verbs": READ}
            ],
        },
    )
    _create(kube, CLUSTER_ROLE_BINDINGS, None, _binding(cluster_name, "ClusterRole", cluster_name, user))
    runner = Kube.from_kubeconfig(str(control_plane.mint_user(user)))
    try:
        yield AnalysisEnv(
            kube=kube,
            runner=runner,
            namespace=namespace,
            stack=analysis_stack,
            # One of the session's pool while it lasts (no test had it), else a new one.
            cluster=analysis_clusters.pop() if analysis_clusters else add_cluster(analysis_stack),
        )
    finally:
        runner.close()
        for resource, scope, object_name in (
            (CLUSTER_ROLE_BINDINGS, None, cluster_name),
            (CLUSTER_ROLES, None, cluster_name),
        ):
            with contextlib.suppress(NotFound):
                kube.delete(resource, scope, object_name)


def _create(kube: Kube, resource: Resource, namespace: str | None, body: dict[str, Any]) -> None:
    kube.create(resource, namespace, {"apiVersion": resource.api_version, "kind": resource.kind, **body})


def _binding(name: str, role_kind: str, role: str, user: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
        "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": user}],
    }
