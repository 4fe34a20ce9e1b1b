"""Fixtures of the real-Argo-CD tests.

What is real: everything `tests/support/argocd_harness.py` lists — a control plane of their own
(etcd + kube-apiserver with our CRDs and Argo CD's own), Argo CD's repo-server, application
controller and ApplicationSet controller as processes (`make tools` builds them), redis, `file://`
Git repositories, two destination kube-apiservers behind four cluster Secrets. The local executor
plays Argo Workflows. Nothing fakes Argo CD or the API.

One stack serves the package's tests (it takes ~20 s to start); each test gets its own scenario. On a
machine shared by several people, run these tests under the real-stack queue lock
(`flock -w 7200 /tmp/progressive-sync-realstack.lock ...`, TEAM.md).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from orchestrator.devenv import controlplane as devcluster
from orchestrator.devenv import tools
from orchestrator.devenv.argocd import ArgoCDStack
from orchestrator.devenv.argocd_settings import ArgoCDSettings, ArgoCDStackError, ArgoCDTools
from orchestrator.kube.client import Kube
from orchestrator.kube.crds import all_crd_documents, apply_crds
from tests.support.argocd_harness import STACK_CLUSTERS, Scenario, scenario_of

# How long the session's stack took to start, for the report at the end.
STARTUP: dict[str, float] = {}


@pytest.fixture(scope="package")
def argocd_stack() -> Iterator[ArgoCDStack]:
    """A control plane with the real Argo CD and two destination API servers, for this package's tests
    (they run one after the other, so it stops after the last of them, before the real-stack tier)."""
    try:
        argocd_tools = ArgoCDTools.find()
        assets = devcluster.find_tools_dir()
        # Argo's minimal Workflow CRD (as installed): the session's control plane checks our
        # Workflows against the full schema; here Argo CD is what is under test.
        crds = all_crd_documents(tools.peer_crd_dirs(), workflow_crd_dir=tools.minimal_workflow_crd_dir())
    except (ArgoCDStackError, devcluster.ControlPlaneError, tools.ToolsMissing) as exc:
        pytest.fail(f"{exc}\n(`make test` builds the tools and sets PROGRESSIVE_SYNC_TOOLS_DIR for you.)")
    started = time.monotonic()
    cluster = devcluster.DevCluster.start(assets)
    try:
        kube = Kube.from_kubeconfig(str(cluster.kubeconfig))
        apply_crds(kube, crds)
        kube.close()
        settings = ArgoCDSettings(
            namespace="argocd",
            clusters=STACK_CLUSTERS,
            servers=2,
            reconciliation_seconds=0,  # no timed refresh: a test refreshes what it means to
            app_set=None,
        )
        stack = ArgoCDStack.start(cluster, argocd_tools, settings)
        STARTUP["stack"] = time.monotonic() - started
        try:
            yield stack
        finally:
            stack.stop()
    finally:
        cluster.stop()


@pytest.fixture
def scenario(argocd_stack: ArgoCDStack) -> Iterator[Scenario]:
    """A fresh ApplicationSet over the stack's four clusters, release 1 deployed everywhere."""
    with scenario_of(argocd_stack) as made:
        yield made


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print how long the real Argo CD stack took to start."""
    if STARTUP:
        terminalreporter.write_line(f"real Argo CD stack started in {STARTUP['stack']:.1f}s")
