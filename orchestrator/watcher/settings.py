"""`Settings`: the watcher's one typed configuration, built once from flags and environment.

`progressive-sync watch` parses its flags (each also readable from a `PROGRESSIVE_SYNC_*`
variable, a flag wins) into a `Settings` and passes it down explicitly: to the informers, the
work queue, the reconcile policy, the Workflow builder and the Argo Server client. Nothing reads
the environment or holds settings in module globals. The demo and tests build a `Settings`
directly (`Settings(namespaces=("argocd",), engine=Engine.LOCAL, ...)`).

Every timeout and retry is data here: tuples of backoffs bound the attempts, and
`KubeSettings`/`InformerSettings`/`ReconcilePolicy` are derived from these fields.
"""

from __future__ import annotations

import socket
import uuid
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path

from orchestrator.engine.executor_settings import DEFAULT_MAX_STEP_PROCESSES, ExecutorSettings
from orchestrator.kube.client import KubeSettings
from orchestrator.kube.informer import InformerSettings
from orchestrator.watcher.decision import DEFAULT_ALLOWED_SYNC_OPTIONS, ReconcilePolicy
from orchestrator.watcher.leader import LeaseSettings
from orchestrator.watcher.retention import DEFAULT_ROLLOUT_HISTORY
from workflow_templates.settings import WorkflowSettings

ENV_PREFIX = "PROGRESSIVE_SYNC_"


class Engine(StrEnum):
    """Who runs the Workflows the watcher creates."""

    ARGO = "argo"  # Argo Workflows' controller (production)
    LOCAL = "local"  # the local executor, started by the watcher in the same process


class LogFormat(StrEnum):
    """How log lines look."""

    JSON = "json"
    TEXT = "text"


class SettingsError(ValueError):
    """The settings contradict each other; the message says which flags."""


@dataclass(frozen=True)
class Settings:
    """Everything `progressive-sync watch` is told; see `progressive-sync watch --help`."""

    # Where ProgressiveSyncs (and their Workflows) are watched; empty: every namespace.
    namespaces: tuple[str, ...] = ("argocd",)
    # Where Applications, ApplicationSets and cluster Secrets live; None: each ProgressiveSync's own.
    argocd_namespace: str | None = None
    # Where Workflows are created. The steps read their ProgressiveSync from the Workflow's own
    # namespace ({{workflow.namespace}}), so this may only name the one watched namespace.
    workflow_namespace: str | None = None
    kubeconfig: str | None = None
    context: str | None = None
    engine: Engine = Engine.ARGO
    # Engine local: the most step processes the executor runs at once (orchestrator/engine/slots.py).
    max_step_processes: int = DEFAULT_MAX_STEP_PROCESSES
    # Optional submission through the Argo Server REST API (engine argo only).
    argo_server: str | None = None
    argo_token: str | None = field(default=None, repr=False)
    argo_verify_tls: bool = True
    log_level: str = "INFO"
    log_format: LogFormat = LogFormat.JSON
    workers: int = 4
    # Every object is reported again this often, so a missed event is healed.
    resync_seconds: float = 300.0
    # While a stage runs, its summary in the ProgressiveSync is written at most this often (from
    # its ProgressiveSyncStage records; orchestrator/watcher/summaries.py).
    summary_interval_seconds: float = 5.0
    # Records (ProgressiveSyncStage objects) kept of the rollouts before the current one, as a
    # Deployment's revisionHistoryLimit: the rest are deleted (orchestrator/watcher/retention.py).
    rollout_history: int = DEFAULT_ROLLOUT_HISTORY
    # Each watch stream lasts this long before it is resumed (bounds a silent dead connection).
    watch_timeout_seconds: int = 300
    # Sleeps between failed list/watch attempts; their number bounds the failures in a row without
    # progress (a list, an accepted stream, an event): with these, ~2 min of an unreachable API server.
    watch_backoffs: tuple[float, ...] = (0.2, 0.5, 1.0, 2.0, 4.0, *(5.0,) * 19)
    # Sleeps before a failed reconcile runs again (the last one repeats: never give up).
    reconcile_backoffs: tuple[float, ...] = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)
    connect_timeout_seconds: float = 5.0
    request_timeout_seconds: float = 30.0
    request_backoffs: tuple[float, ...] = (0.2, 0.5, 1.0, 2.0, 4.0)
    finalize_grace_seconds: float = 30.0
    deletion_grace_seconds: float = 30.0
    # Before a rollout starts: at most this long for Argo CD to compare every owned Application
    # against the release (the Workflow is sized from that plan); then it starts with what is known.
    fleet_compare_seconds: float = 120.0
    # How long start-up waits for the first lists before giving up.
    sync_timeout_seconds: float = 120.0
    # What ProgressiveSync authors may put in spec.syncOptions (anything else: Valid=False).
    allow_prune: bool = False
    allowed_sync_options: tuple[str, ...] = DEFAULT_ALLOWED_SYNC_OPTIONS
    # Leader election: with several replicas only the holder of this Lease acts (see `leader`).
    leader_elect: bool = False
    leader_elect_namespace: str | None = None
    leader_elect_name: str = "progressive-sync-watcher"
    leader_elect_identity: str = field(default_factory=lambda: default_identity())  # noqa: PLW0108 - defined below
    lease_seconds: float = 15.0
    renew_deadline_seconds: float = 10.0
    retry_period_seconds: float = 2.0
    # /metrics, /healthz and /readyz on this port (None: not served).
    http_port: int | None = None
    http_address: str = "0.0.0.0"
    # SIGTERM: how long in-flight reconciles get to finish (keep it inside the pod's grace period).
    shutdown_timeout_seconds: float = 20.0
    # The Workflow's step image, service account, retries, ...
    workflow: WorkflowSettings = field(default_factory=WorkflowSettings)

    def local_executor_settings(self) -> ExecutorSettings:
        """The local engine's (engine local): the steps get the watcher's kubeconfig; the one watched
        namespace is the executor's, several or all make it watch every namespace."""
        return ExecutorSettings(
            kubeconfig=Path(self.kubeconfig) if self.kubeconfig else None,
            namespace=self.namespaces[0] if len(self.namespaces) == 1 else None,
            max_step_processes=self.max_step_processes,
        )

    def __post_init__(self) -> None:
        if self.leader_elect and not self.leader_elect_namespace:
            raise SettingsError(
                "--leader-elect needs --leader-elect-namespace (where the Lease lives; the chart sets "
                "it to the release namespace)"
            )
        if self.leader_elect:
            try:
                self.leader_election  # noqa: B018 - validates the timings
            except ValueError as exc:
                raise SettingsError(f"--lease-duration/--renew-deadline/--retry-period: {exc}") from exc
        if self.shutdown_timeout_seconds <= 0:
            raise SettingsError("--shutdown-timeout must be positive")
        if self.workers < 1:
            raise SettingsError("--workers must be at least 1")
        if self.max_step_processes < 0:
            raise SettingsError("--max-step-processes must not be negative (0: no bound)")
        if self.summary_interval_seconds < 0:
            raise SettingsError("--summary-interval must not be negative")
        if self.rollout_history < 0:
            raise SettingsError("--rollout-history must not be negative")
        if self.resync_seconds <= 0 or self.watch_timeout_seconds < 1:
            raise SettingsError("--resync-period and --watch-timeout must be positive")
        if not self.watch_backoffs or not self.reconcile_backoffs:
            raise SettingsError("backoff tuples must not be empty")
        if self.argo_server and self.engine != Engine.ARGO:
            raise SettingsError("--argo-server submits to Argo Workflows: it needs --engine argo")
        if self.argo_server and not self.argo_server.startswith(("http://", "https://")):
            raise SettingsError(f"--argo-server {self.argo_server!r} must be an http(s) URL")
        if self.workflow_namespace is not None and self.namespaces != (self.workflow_namespace,):
            raise SettingsError(
                f"--workflow-namespace {self.workflow_namespace} must be the one watched namespace: "
                "the steps read their ProgressiveSync from the Workflow's namespace (watch only that "
                "namespace, or leave --workflow-namespace unset)"
            )
        if self.log_level.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR"):
            raise SettingsError(f"--log-level {self.log_level!r}: use DEBUG, INFO, WARNING or ERROR")

    # -- derived settings -----------------------------------------------------------------

    @property
    def kube(self) -> KubeSettings:
        """Timeouts and retries of every API call."""
        return KubeSettings(
            connect_timeout=self.connect_timeout_seconds,
            read_timeout=self.request_timeout_seconds,
            retry_backoffs=self.request_backoffs,
        )

    @property
    def informer(self) -> InformerSettings:
        """How each list/watch loop runs."""
        return InformerSettings(
            watch_timeout_seconds=self.watch_timeout_seconds, backoffs=self.watch_backoffs
        )

    @property
    def leader_election(self) -> LeaseSettings | None:
        """The Lease to hold before acting, or None without leader election."""
        if not self.leader_elect or not self.leader_elect_namespace:
            return None
        return LeaseSettings(
            namespace=self.leader_elect_namespace,
            name=self.leader_elect_name,
            identity=self.leader_elect_identity,
            lease_seconds=self.lease_seconds,
            renew_deadline_seconds=self.renew_deadline_seconds,
            retry_seconds=self.retry_period_seconds,
        )

    @property
    def policy(self) -> ReconcilePolicy:
        """The waiting times of the reconcile decision."""
        return ReconcilePolicy(
            finalize_grace_seconds=self.finalize_grace_seconds,
            deletion_grace_seconds=self.deletion_grace_seconds,
            fleet_compare_seconds=self.fleet_compare_seconds,
            allow_prune=self.allow_prune,
            allowed_sync_options=self.allowed_sync_options,
        )

    @property
    def workflow_settings(self) -> WorkflowSettings:
        """How Workflows are built: `workflow`, with `--argocd-namespace` when it names none itself."""
        if self.argocd_namespace and not self.workflow.argocd_namespace:
            return replace(self.workflow, argocd_namespace=self.argocd_namespace)
        return self.workflow

    def argocd_namespace_for(self, ps_namespace: str) -> str:
        """Where the Applications of a ProgressiveSync in `ps_namespace` live."""
        return self.argocd_namespace or ps_namespace


def read_token(token: str | None, token_file: Path | None) -> str | None:
    """The Argo Server token: the value given, else the file's content (stripped), else None."""
    if token:
        return token.strip()
    if token_file is not None:
        try:
            return token_file.read_text().strip() or None
        except OSError as exc:
            raise SettingsError(f"cannot read --argo-token-file {token_file}: {exc.strerror}") from exc
    return None


def default_identity() -> str:
    """This process's name in the Lease: the host (the pod's name in a cluster) and a random part."""
    return f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"
