"""Who runs the rollout Workflows in a scenario: the local executor, or the real Argo Workflows controller.

The rollout scenarios (tests/e2e/test_rollout_scenarios.py) run once per engine and assert the same
things on both. `RolloutEngine` hides what differs:

- **local**: the session's control plane (etcd + kube-apiserver), a namespace of it, and the local
  executor started by the test in this process (`running()`), running each step as a subprocess
  with the steps' own restricted user (tests/support/steps_harness);
- **argo**: the real stack of tests/support/realstack.py (a real node, the real workflow-controller
  and Argo Server of Argo Workflows v3.7.18, the step image built here), a namespace prepared with
  the chart's step service account and RBAC; the controller runs the Workflows, each step a pod, so
  `running()` starts nothing. Those tests are marked `realstack`; they queue on the machine-wide
  real-node lock (TEAM.md) and are skipped, saying why, where the real stack's fixtures are absent.

Each engine also runs in **batch mode** (`local-batch`, `argo-batch`): the Workflow settings put
every stage with a target in batches of at most two clusters (`batch_threshold=0`,
`batch_clusters=2`: `python -m steps batch` pods sharing the stage's maxParallel, docs/design/workflow.md),
so the same scenarios check that batches keep the semantics of one pod per cluster (issue 15),
across batches too. `local-batch` runs every scenario; `argo-batch` only those marked
`batch_on_real_argo` (many clusters sharing batches, a failure beside a running sibling, the failure
tolerance: what batches change), as real pods cost seconds each (tests/conftest.py deselects the rest).

Everything else is the same object on both: the fleet simulator (this process), the watcher (this
process, or `progressive-sync watch` as a child process), the real `argo` CLI, the audit log of the
API server, and the Workflow the watcher builds (only the step image and pull policy differ).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from orchestrator.devenv import tools
from orchestrator.devenv.controlplane import DevCluster
from orchestrator.engine.executor import LocalExecutor
from orchestrator.engine.executor_settings import ExecutorSettings
from orchestrator.kube.client import Kube
from tests.support.steps_harness import STEPS_USER, steps_kubeconfig
from tests.support.watcher_harness import WatcherProcess
from workflow_templates.settings import ENV_PREFIX as WORKFLOW_ENV_PREFIX
from workflow_templates.settings import WorkflowSettings

LOCAL = "local"
ARGO = "argo"
BATCH_SUFFIX = "-batch"
BATCH_CLUSTERS = 2  # in batch mode: small batches, so a stage of the scenarios has several
# Both engines, the real one marked so `-m 'not realstack'` leaves it out; each also in batch mode.
ENGINES = [
    pytest.param(LOCAL, id=LOCAL),
    pytest.param(LOCAL + BATCH_SUFFIX, id=LOCAL + BATCH_SUFFIX),
    pytest.param(ARGO, id=ARGO, marks=pytest.mark.realstack),
    pytest.param(ARGO + BATCH_SUFFIX, id=ARGO + BATCH_SUFFIX, marks=pytest.mark.realstack),
]


@dataclass
class RolloutEngine:
    """One engine with the API server, namespace and tools a scenario needs."""

    name: str
    kube: Kube
    namespace: str
    cluster: DevCluster  # the control plane: its admin kubeconfig and its audit log
    workdir: Path
    steps_kubeconfig: Path | None = None  # local: the steps' own user; argo: pods use their account
    real: Any = None  # tests.support.realstack.RealStack on the argo engine
    # Batch mode: every stage with a target runs in batches (WorkflowSettings.batch_threshold).
    batch_threshold: int | None = None

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig (the CLI, the watcher)."""
        return self.cluster.kubeconfig

    @property
    def steps_user(self) -> str:
        """Who the steps are in the audit log."""
        if self.name == ARGO:
            return f"system:serviceaccount:{self.namespace}:progressive-sync-steps"
        return STEPS_USER

    def workflow_settings(self, **changes: Any) -> WorkflowSettings:
        """What the watcher (or a test building a Workflow) gives `build_workflow` on this engine."""
        changes.setdefault("argocd_namespace", self.namespace)
        # The product's default (a small stage's pods at once, steps/turn.py) unless
        # PROGRESSIVE_SYNC_TEST_PODS_AT_ONCE_LIMIT says otherwise (0: maxParallel pods at a time).
        limit = os.environ.get("PROGRESSIVE_SYNC_TEST_PODS_AT_ONCE_LIMIT")
        if limit is not None:
            changes.setdefault("pods_at_once_limit", int(limit))
        if self.batch_threshold is not None:
            changes.setdefault("batch_threshold", self.batch_threshold)
            changes.setdefault("batch_clusters", BATCH_CLUSTERS)
        if self.real is not None:
            return self.real.workflow_settings(**changes)  # type: ignore[no-any-return]
        return WorkflowSettings(**changes)

    @contextlib.contextmanager
    def running(self) -> Iterator[LocalExecutor | None]:
        """The engine runs Workflows inside this block (the real controller always does)."""
        if self.name == ARGO:
            yield None
            return
        assert self.steps_kubeconfig is not None
        settings = ExecutorSettings(
            kubeconfig=self.steps_kubeconfig,
            namespace=self.namespace,
            workdir=self.workdir / "executor",
            resync_seconds=0.5,
            kill_grace_seconds=3.0,
            step_timeout_seconds=300.0,
            watch_timeout_seconds=20,
        )
        with LocalExecutor(self.kube, settings) as executor:
            yield executor

    def argo(self, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        """The real argo CLI against this engine's API server (straight to Kubernetes)."""
        if self.real is not None:
            result = self.real.argo(*args, namespace=self.namespace, timeout=timeout)
        else:
            try:
                binary = tools.binary("argo")
            except tools.ToolsMissing as exc:
                pytest.fail(str(exc))
            env = {**os.environ, "KUBECONFIG": str(self.kubeconfig)}
            for name in ("ARGO_SERVER", "ARGO_SECURE", "ARGO_HTTP1", "ARGO_TOKEN"):
                env.pop(name, None)
            result = subprocess.run(
                [str(binary), *args, "-n", self.namespace],
                capture_output=True,
                text=True,
                env=env,
                timeout=timeout,
                check=False,
            )
        assert result.returncode == 0, f"argo {' '.join(args)}: {result.stdout}{result.stderr}"
        return result

    def watcher_process(self, log_path: Path) -> WatcherProcess:
        """`progressive-sync watch` as a child process (to SIGKILL), creating Workflows for this engine."""
        if self.real is not None:
            process = self.real.watcher(self.namespace, log_path)
        else:
            process = WatcherProcess(self.kubeconfig, self.namespace, log_path)
        if self.batch_threshold is not None:
            process.env = {
                **(process.env or os.environ),
                f"{WORKFLOW_ENV_PREFIX}BATCH_THRESHOLD": str(self.batch_threshold),
                f"{WORKFLOW_ENV_PREFIX}BATCH_CLUSTERS": str(BATCH_CLUSTERS),
            }
        return process  # type: ignore[no-any-return]


@contextlib.contextmanager
def rollout_engine(request: pytest.FixtureRequest, name: str, workdir: Path) -> Iterator[RolloutEngine]:
    """The engine `name` (LOCAL or ARGO, either with BATCH_SUFFIX) with a fresh namespace."""
    batch_threshold = 0 if name.endswith(BATCH_SUFFIX) else None
    name = name.removesuffix(BATCH_SUFFIX)
    if name == LOCAL:
        cluster: DevCluster = request.getfixturevalue("control_plane")
        kube: Kube = request.getfixturevalue("kube")
        namespace: str = request.getfixturevalue("namespace")
        yield RolloutEngine(
            LOCAL,
            kube,
            namespace,
            cluster,
            workdir,
            steps_kubeconfig=steps_kubeconfig(cluster, kube),
            batch_threshold=batch_threshold,
        )
        return
    try:
        real = request.getfixturevalue("real_stack")
    except pytest.FixtureLookupError:
        pytest.skip("the real stack's fixtures (tests/support/realstack.py) are not in this checkout")
    with real.namespace("scn") as namespace:
        cluster = real.stack.cluster
        yield RolloutEngine(
            ARGO, real.kube, namespace, cluster, workdir, real=real, batch_threshold=batch_threshold
        )
