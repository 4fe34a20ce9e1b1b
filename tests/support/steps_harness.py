"""Running the steps the way a Workflow container does, and counting what they write.

`StepRunner` runs `python -m steps <step>` as a process of its own with `PROGRESSIVE_SYNC_*` environment
variables (the rollout contract among them, as the Workflow builder would make it for the
ProgressiveSync as stored: `StepRunner.contract`) and a kubeconfig of its own user (`STEPS_USER`),
so the API server's audit log tells the steps' writes apart from the test's and the simulator's
(`writes_by`). `run` forks the step from this worker's warm launcher, as the local executor does
(orchestrator/engine/warm_python.py: the same argv, environment, cwd, exit code and output as
`python -m steps`, without paying the imports in every step: ~0.3 CPU-s each, a few hundred
steps per suite); `start` (a step the test signals or reads while it runs) and
`PROGRESSIVE_SYNC_TEST_COLD_STEPS=1` start a plain subprocess. `make_progressive_sync` creates the
object the steps work on. `CountingKube` counts what a step run in-process calls through the
adapter. Real: the step's own process, the API server, the audit log.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.api.models import ProgressiveSync
from orchestrator.argocd.fleet import cluster_from_secret
from orchestrator.argocd.inventory import INVENTORY_NAME
from orchestrator.devenv.controlplane import AuditEvent, DevCluster
from orchestrator.engine.executor_settings import ExecutorSettings
from orchestrator.engine.step_process import common_environment
from orchestrator.engine.warm_python import WarmLauncher
from orchestrator.kube.client import PROGRESSIVE_SYNCS, AlreadyExists, Kube, NotFound, Resource
from orchestrator.planning.contract import RolloutContract
from orchestrator.watcher.publisher import InventoryPublisher
from tests.support.builders import NEW_REVISION, make_contract, make_ps, make_stage

CLUSTER_ROLES = Resource("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole")
CLUSTER_ROLE_BINDINGS = Resource(
    "rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding"
)

STEPS_USER = "progressive-sync-steps"
# A canary of one cluster, then the rest three at a time.
DEFAULT_STAGES = [make_stage("canary", max_targets=1), make_stage("rest", max_parallel=3)]
REPO_ROOT = Path(__file__).resolve().parents[2]
COLD_STEPS_VARIABLE = "PROGRESSIVE_SYNC_TEST_COLD_STEPS"  # "1": every step a plain subprocess

_launcher_lock = threading.Lock()
_launcher: WarmLauncher | None = None


def warm_launcher() -> WarmLauncher | None:
    """This process's warm launcher of `steps` (started on first use, stopped at exit), or None
    when COLD_STEPS_VARIABLE asks for plain subprocesses."""
    global _launcher  # noqa: PLW0603 - one launcher per test process, like one executor's
    if os.environ.get(COLD_STEPS_VARIABLE) == "1":
        return None
    with _launcher_lock:
        if _launcher is None:
            settings = ExecutorSettings()
            _launcher = WarmLauncher(settings, common_environment(settings), REPO_ROOT)
            _launcher.start()
            atexit.register(_launcher.stop)
        return _launcher


# What the chart grants the step pods (charts/progressive-sync/templates/rbac.yaml), so the steps
# are tested with no more rights than they get in production.
STEPS_RULES = [
    {
        "apiGroups": ["progressivesync.io"],
        "resources": ["progressivesyncs"],
        "verbs": ["get", "list", "watch"],
    },
    {
        "apiGroups": ["progressivesync.io"],
        "resources": ["progressivesyncs/status"],
        "verbs": ["get", "update", "patch"],
    },
    {
        "apiGroups": ["progressivesync.io"],
        "resources": ["progressivesyncstages"],
        "verbs": ["get", "list", "watch", "create", "patch"],
    },
    {
        "apiGroups": ["argoproj.io"],
        "resources": ["applications"],
        "verbs": ["get", "list", "watch", "update", "patch"],
    },
    {"apiGroups": ["argoproj.io"], "resources": ["applicationsets"], "verbs": ["get", "list"]},
    {"apiGroups": ["argoproj.io"], "resources": ["workflows"], "verbs": ["get"]},
    # Analysis gates (analysis.enabled, and analysis.clusterTemplates for the last rule).
    {
        "apiGroups": ["argoproj.io"],
        "resources": ["analysisruns"],
        "verbs": ["get", "list", "watch", "create", "patch"],
    },
    {"apiGroups": ["argoproj.io"], "resources": ["analysistemplates"], "verbs": ["get"]},
    {"apiGroups": ["argoproj.io"], "resources": ["clusteranalysistemplates"], "verbs": ["get"]},
    # The AppProjects' sync windows (steps/window_gate.py), in the Argo CD namespace.
    {"apiGroups": ["argoproj.io"], "resources": ["appprojects"], "verbs": ["get"]},
    # No Secret: the cluster inventory the watcher publishes instead (publish_inventory here).
    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"], "resourceNames": [INVENTORY_NAME]},
]


def steps_kubeconfig(control_plane: DevCluster, kube: Kube) -> Path:
    """A kubeconfig for STEPS_USER, bound to the steps' ClusterRole of the chart (no more)."""
    path = control_plane.workdir / f"{STEPS_USER}.kubeconfig"
    if path.exists():
        return path
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": STEPS_USER},
        "rules": STEPS_RULES,
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": STEPS_USER},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": STEPS_USER},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": STEPS_USER}],
    }
    for resource, body in ((CLUSTER_ROLES, role), (CLUSTER_ROLE_BINDINGS, binding)):
        with contextlib.suppress(AlreadyExists):
            kube.create(resource, None, body)
    return control_plane.mint_user(STEPS_USER)


def publish_inventory(kube: Kube, namespace: str) -> None:
    """Publish the cluster inventory of `namespace` from its cluster Secrets, as the watcher does
    (tests that run steps without a watcher call it after changing cluster Secrets)."""
    clusters = [cluster_from_secret(secret) for secret in kube.list_cluster_secrets(namespace)]
    InventoryPublisher(kube, lambda _ns: clusters, lambda: [namespace]).publish(namespace)


def writes_by(
    control_plane: DevCluster, mark: int, *, user: str = STEPS_USER, namespace: str | None = None
) -> list[AuditEvent]:
    """The writes `user` made after `mark` (optionally only in `namespace`), including refused ones."""
    return [
        event
        for event in control_plane.audit_events_since(mark)
        if event.user == user and (namespace is None or event.namespace == namespace)
    ]


def describe(events: list[AuditEvent]) -> list[str]:
    """Audit events as short strings for assertion messages."""
    return [
        f"{e.verb} {e.resource}/{e.name}{'/' + e.subresource if e.subresource else ''} -> {e.code}"
        for e in events
    ]


def make_progressive_sync(
    kube: Kube,
    namespace: str,
    *,
    name: str = "myservice",
    app_set: str = "myservice",
    stages: list[dict[str, Any]] | None = None,
    deadline_seconds: int = 60,
    max_failed_clusters: int = 0,
    degraded_grace_seconds: int | None = None,
    status: dict[str, Any] | None = None,
    **spec: Any,
) -> ProgressiveSync:
    """Create a ProgressiveSync (and, with `status`, write its status subresource); `spec` are more
    spec fields in wire form (`analysis={...}`)."""
    grace = {} if degraded_grace_seconds is None else {"degradedGraceSeconds": degraded_grace_seconds}
    body = make_ps(
        name,
        namespace=None,
        app_set=app_set,
        stages=stages or DEFAULT_STAGES,
        progressDeadlineSeconds=deadline_seconds,
        failurePolicy={"maxFailedClusters": max_failed_clusters},
        **grace,
        **spec,
    )
    created = kube.create(PROGRESSIVE_SYNCS, namespace, body)
    if status is not None:
        created["status"] = status
        created = kube.replace(PROGRESSIVE_SYNCS, namespace, created, subresource="status")
    return ProgressiveSync.model_validate(created)


def read_progressive_sync(kube: Kube, namespace: str, name: str = "myservice") -> ProgressiveSync:
    """The ProgressiveSync as stored now."""
    return ProgressiveSync.model_validate(kube.get(PROGRESSIVE_SYNCS, namespace, name))


@dataclass
class StepRunner:
    """Runs `python -m steps` for one rollout of one ProgressiveSync, as a container would."""

    kubeconfig: Path
    namespace: str
    outputs_dir: Path
    name: str = "myservice"
    rollout_id: str = "r1"
    extra_env: dict[str, str] = field(default_factory=dict)
    # Whether the last `run` was forked from the warm launcher (False: a plain subprocess).
    last_run_warm: bool = field(default=False, init=False)

    def contract(
        self,
        sizing: Mapping[str, Mapping[str, Any]] | None = None,
        *,
        revisions: Sequence[Sequence[str]] = ((NEW_REVISION,),),
        rollback: Mapping[str, Any] | None = None,
    ) -> RolloutContract:
        """The rollout contract of this rollout: the stages of the ProgressiveSync as stored now (the
        default ones when there is none), the release of `revisions`, and each stage one at a time,
        one pod per cluster, no first wave unless `sizing` says otherwise, and the spec's windows
        (`make_contract`)."""
        kube = Kube.from_kubeconfig(str(self.kubeconfig))
        windows = None
        try:
            spec = read_progressive_sync(kube, self.namespace, self.name).spec
            stages, windows = [stage.name for stage in spec.stages], spec.windows
        except NotFound:
            stages = [stage["name"] for stage in DEFAULT_STAGES]
        finally:
            kube.close()
        return make_contract(
            stages,
            rollout_id=self.rollout_id,
            revisions=revisions,
            sizing=sizing,
            rollback=rollback,
            windows=windows,
        )

    def env(self, **overrides: str) -> dict[str, str]:
        """The container's environment: the contract's PROGRESSIVE_SYNC_* variables (the rollout
        contract `contract()` gives, unless `PROGRESSIVE_SYNC_CONTRACT` is among `overrides`)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("PROGRESSIVE_SYNC_")}
        env.pop("KUBECONFIG", None)
        env.update(
            {
                "PROGRESSIVE_SYNC_NAMESPACE": self.namespace,
                "PROGRESSIVE_SYNC_NAME": self.name,
                "PROGRESSIVE_SYNC_KUBECONFIG": str(self.kubeconfig),
                "PROGRESSIVE_SYNC_OUTPUTS_DIR": str(self.outputs_dir),
                "PYTHONPATH": str(REPO_ROOT),
            }
        )
        env.update(self.extra_env)
        env.update(overrides)
        if "PROGRESSIVE_SYNC_CONTRACT" not in env:
            env["PROGRESSIVE_SYNC_CONTRACT"] = self.contract().to_json()
        return env

    def command(self, step: str, *args: str) -> list[str]:
        """The argv of one step."""
        return [sys.executable, "-m", "steps", step, *args]

    def run(
        self, step: str, *args: str, timeout: float = 120, **env: str
    ) -> subprocess.CompletedProcess[str]:
        """Run a step to its end; output captured. Forked from the warm launcher, or a plain
        subprocess when there is none or it cannot start this one."""
        argv, environment = self.command(step, *args), self.env(**env)
        self.last_run_warm = False
        launcher = warm_launcher()
        if launcher is not None:
            with tempfile.TemporaryDirectory(prefix="step-") as scratch:
                stdout, stderr = Path(scratch) / "stdout", Path(scratch) / "stderr"
                process = launcher.launch(argv, environment, REPO_ROOT, stdout, stderr)
                if process is not None:
                    self.last_run_warm = True
                    try:
                        code = process.wait(timeout)
                    except subprocess.TimeoutExpired:
                        with contextlib.suppress(ProcessLookupError):
                            os.killpg(process.pid, signal.SIGKILL)
                        raise
                    return subprocess.CompletedProcess(
                        argv, code, stdout.read_text(errors="replace"), stderr.read_text(errors="replace")
                    )
        return subprocess.run(
            argv,
            env=environment,
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def start(self, step: str, *args: str, log_path: Path, **env: str) -> subprocess.Popen[str]:
        """Start a step in the background; stdout and stderr go to `log_path` (read it while it runs)."""
        handle = log_path.open("w")
        try:
            return subprocess.Popen(
                self.command(step, *args),
                env=self.env(**env),
                cwd=REPO_ROOT,
                stdout=handle,
                stderr=subprocess.STDOUT,
                text=True,
            )
        finally:
            handle.close()

    def targets(self) -> str:
        """The `targets` output file of `select`."""
        return (self.outputs_dir / "targets").read_text()


class CountingKube:
    """The test's Kube, counting what a step calls through it: `calls` by (method, resource plural,
    filtered by a field selector); `label_selectors`, each list's label selector by plural."""

    def __init__(self, kube: Kube) -> None:
        self._kube = kube
        self.calls: Counter[tuple[str, str, bool]] = Counter()
        self.label_selectors: dict[str, list[str]] = {}

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._kube, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            plural = getattr(args[0], "plural", "") if args else ""
            self.calls[(name, plural, bool(kwargs.get("field_selector")))] += 1
            if name == "list":
                self.label_selectors.setdefault(plural, []).append(kwargs.get("label_selector") or "")
            return attr(*args, **kwargs)

        return call
