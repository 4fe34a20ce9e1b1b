"""`progressive-sync watch`: run the watcher in the foreground until SIGTERM / Ctrl-C.

Each flag is declared once, below, with the `Settings` field it sets; click reads it from its
`PROGRESSIVE_SYNC_<FLAG>` variable when the flag is absent (`auto_envvar_prefix`, so
`--resync-period` is `PROGRESSIVE_SYNC_RESYNC_PERIOD`; a flag wins; `--help` shows each name).
Without `-n`, `-A` or $PROGRESSIVE_SYNC_NAMESPACE it watches the kubeconfig context's namespace,
else argocd (`orchestrator.cli.namespaces`, as every command's `-n`). `build_settings` is the one
constructor of the watcher's `Settings` from them. Then it sets up JSON (or text) logs, builds the
Kubernetes adapter and runs `orchestrator.watcher.process.run_process` (the watcher; under leader
election with `--leader-elect`; /metrics, /healthz and /readyz on `--http-port`) until SIGTERM or
SIGINT, then stops cleanly: no new reconcile starts, the ones in flight finish, watch streams close,
the Lease is released. Exit codes: 0 after a clean stop, 1 when a watch loop gave up (the API server
stayed unreachable past every backoff), 2 for bad flags.

The Argo Server token is never a flag value (it would show in `ps`): it comes from
`--argo-token-file` or the `PROGRESSIVE_SYNC_ARGO_TOKEN` variable.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import click

from orchestrator.cli.conventions import resolved_namespace
from orchestrator.cli.help_catalog import epilog
from orchestrator.core.stop_signals import stop_signals
from orchestrator.watcher.settings import (
    ENV_PREFIX,
    Engine,
    LogFormat,
    Settings,
    SettingsError,
    read_token,
)
from workflow_templates.settings import StepResources, WorkflowSettings

# Where a flag's value goes: a `Settings` field, or `workflow.<field>` of its `WorkflowSettings`.
WORKFLOW_FIELD = "workflow."
TOKEN_VARIABLE = f"{ENV_PREFIX}ARGO_TOKEN"
DEFAULTS = Settings()


class SettingsFlag(click.Option):
    """A `watch` flag and the settings field(s) it sets (`to`), through `convert` when given."""

    def __init__(
        self,
        *args: Any,
        to: tuple[str, ...],
        convert: Callable[[Any], Any] | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("show_envvar", True)
        super().__init__(*args, **kwargs)
        self.to = to
        self.convert = convert


def flag(
    *decls: str, to: str | tuple[str, ...], convert: Callable[[Any], Any] | None = None, **kwargs: Any
) -> Any:
    """`click.option` for a `watch` flag that sets `to` (see `SettingsFlag`)."""
    targets = (to,) if isinstance(to, str) else to
    return click.option(*decls, cls=SettingsFlag, to=targets, convert=convert, **kwargs)


def _positive(_ctx: click.Context, _param: click.Parameter, value: float) -> float:
    if value <= 0:
        raise click.BadParameter("must be positive")
    return value


def _step_resources(text: str) -> StepResources:
    try:
        parsed = json.loads(text)
    except ValueError as exc:
        raise SettingsError(f"--step-resources is not JSON: {exc}") from exc
    return StepResources.from_kubernetes(parsed, source="--step-resources")


@click.command(
    "watch", context_settings={"auto_envvar_prefix": ENV_PREFIX.rstrip("_")}, epilog=epilog("watch")
)
@flag(
    "-n",
    "--namespace",
    to="namespaces",
    convert=lambda namespaces: tuple(namespaces) or None,
    multiple=True,
    help=(
        "Namespace to watch for ProgressiveSyncs (repeat for several; env: space-separated) "
        "[default: the kubeconfig context's namespace, then argocd]."
    ),
)
@flag(
    "-A",
    "--all-namespaces",
    to="namespaces",
    convert=lambda everywhere: () if everywhere else None,
    is_flag=True,
    help="Watch ProgressiveSyncs in every namespace.",
)
@flag(
    "--argocd-namespace",
    to=("argocd_namespace", WORKFLOW_FIELD + "argocd_namespace"),
    help="Where Applications, ApplicationSets and cluster Secrets live (default: each ProgressiveSync's).",
)
@flag(
    "--workflow-namespace",
    to="workflow_namespace",
    help="Where Workflows are created; must be the one watched namespace (default: the ProgressiveSync's).",
)
@flag(
    "--kubeconfig",
    to="kubeconfig",
    envvar=[f"{ENV_PREFIX}KUBECONFIG", "KUBECONFIG"],
    type=click.Path(dir_okay=False),
    help="Kubeconfig file (default: in-cluster service account).",
)
@flag("--context", to="context", help="Kubeconfig context.")
@flag(
    "--engine",
    to="engine",
    convert=Engine,
    type=click.Choice([e.value for e in Engine]),
    default=DEFAULTS.engine.value,
    show_default=True,
    help="argo: Argo Workflows runs the Workflows; local: the local executor, in this process.",
)
@flag(
    "--max-step-processes",
    to="max_step_processes",
    type=click.IntRange(min=0),
    default=DEFAULTS.max_step_processes,
    show_default=True,
    help=(
        "Engine local: the most step processes the executor runs at once; a step past it waits, "
        "Pending, for a free one (each Workflow may always run two). 0: no bound."
    ),
)
@flag("--step-image", to=WORKFLOW_FIELD + "image", help="Image of the step containers.")
@flag(
    "--step-image-pull-policy",
    to=WORKFLOW_FIELD + "image_pull_policy",
    type=click.Choice(["Always", "IfNotPresent", "Never"]),
    show_default=DEFAULTS.workflow.image_pull_policy,
    help="Pull policy of the step containers.",
)
@flag(
    "--step-service-account",
    "--service-account",
    to=WORKFLOW_FIELD + "service_account",
    show_default=DEFAULTS.workflow.service_account,
    help="Service account the step pods run as.",
)
@flag(
    "--step-resources",
    to=WORKFLOW_FIELD + "resources",
    convert=_step_resources,
    help=(
        "Resources of every step container as JSON, e.g. "
        '\'{"requests": {"cpu": "20m"}, "limits": {"memory": "256Mi"}}\'.'
    ),
)
@flag(
    "--rollouts-instance-id",
    to=WORKFLOW_FIELD + "rollouts_instance_id",
    help=(
        "The Argo Rollouts controller's --instance-id: the analysis steps label their AnalysisRuns "
        "for it [default: none, for a controller started without one]."
    ),
)
@flag(
    "--follower/--no-follower",
    to=WORKFLOW_FIELD + "follower",
    default=None,
    help=(
        "Run the rollout follower beside the stages (steps/follow.py): a done cluster's slot and its "
        "stage's boundary are taken at once, not when its pod has started [default: on]."
    ),
)
@flag(
    "--pods-at-once-limit",
    to=WORKFLOW_FIELD + "pods_at_once_limit",
    type=click.IntRange(min=0),
    default=None,
    help=(
        "A stage of one pod per cluster with at most this many targets starts all its cluster pods "
        "together, each taking a free slot the moment one frees (steps/turn.py); 0: maxParallel pods "
        "at a time [default: 20]."
    ),
)
@flag("--argo-server", to="argo_server", help="Submit Workflows through this Argo Server URL.")
@flag(
    "--argo-token-file",
    to=(),  # read with the token variable by `build_settings`, never kept as a path
    type=click.Path(dir_okay=False, path_type=Path),
    help=f"File holding the Argo Server bearer token (or set {TOKEN_VARIABLE}).",
)
@flag(
    "--argo-insecure-skip-verify",
    to="argo_verify_tls",
    convert=lambda skip: not skip,
    is_flag=True,
    help="Do not verify the Argo Server's TLS certificate.",
)
@flag(
    "--log-level",
    to="log_level",
    convert=str.upper,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
    default=DEFAULTS.log_level,
    show_default=True,
)
@flag(
    "--log-format",
    to="log_format",
    convert=LogFormat,
    type=click.Choice([f.value for f in LogFormat]),
    default=DEFAULTS.log_format.value,
    show_default=True,
)
@flag("--workers", to="workers", type=click.IntRange(min=1), default=DEFAULTS.workers, show_default=True)
@flag(
    "--resync-period",
    to="resync_seconds",
    type=float,
    default=DEFAULTS.resync_seconds,
    show_default=True,
    callback=_positive,
    help="Seconds between full resyncs (every ProgressiveSync reconciled again).",
)
@flag(
    "--summary-interval",
    to="summary_interval_seconds",
    type=click.FloatRange(min=0),
    default=DEFAULTS.summary_interval_seconds,
    show_default=True,
    help=(
        "Seconds between two writes of a running stage's summary (counts, clusters in flight and "
        "failed) into a ProgressiveSync, from its ProgressiveSyncStage records; 0: at every change."
    ),
)
@flag(
    "--rollout-history",
    to="rollout_history",
    type=click.IntRange(min=0),
    default=DEFAULTS.rollout_history,
    show_default=True,
    help=(
        "Rollouts before the current one whose ProgressiveSyncStage records are kept (as a "
        "Deployment's revisionHistoryLimit); older rollouts' records are deleted. 0: the current only."
    ),
)
@flag(
    "--watch-timeout",
    to="watch_timeout_seconds",
    type=click.IntRange(min=1),
    default=DEFAULTS.watch_timeout_seconds,
    show_default=True,
    help="Seconds each watch stream lasts before it is resumed.",
)
@flag(
    "--request-timeout",
    to="request_timeout_seconds",
    type=float,
    default=DEFAULTS.request_timeout_seconds,
    show_default=True,
    callback=_positive,
    help="Read timeout of every API request, in seconds.",
)
@flag(
    "--finalize-grace",
    to="finalize_grace_seconds",
    type=float,
    default=DEFAULTS.finalize_grace_seconds,
    show_default=True,
    help="Seconds a finished Workflow's exit handler gets to record the outcome before the watcher does.",
)
@flag(
    "--deletion-grace",
    to="deletion_grace_seconds",
    type=float,
    default=DEFAULTS.deletion_grace_seconds,
    show_default=True,
    help="Seconds a deleted ProgressiveSync waits for its stopped Workflow before it goes.",
)
@flag(
    "--fleet-compare-wait",
    to="fleet_compare_seconds",
    type=float,
    default=DEFAULTS.fleet_compare_seconds,
    show_default=True,
    help="Before a rollout starts, seconds to wait for Argo CD to compare every Application against the "
    "release (the Workflow is sized from it); then it starts with what is known.",
)
@flag(
    "--allow-prune",
    to="allow_prune",
    is_flag=True,
    help="Let ProgressiveSyncs set spec.syncOptions.prune: true (refused with Valid=False otherwise).",
)
@flag(
    "--allowed-sync-option",
    "allowed_sync_options",
    to="allowed_sync_options",
    convert=lambda options: tuple(options) or None,
    multiple=True,
    show_default=" ".join(DEFAULTS.allowed_sync_options),
    help="A sync option ProgressiveSyncs may use, e.g. ServerSideApply=true (repeat; env: space-separated; "
    "'*' allows any).",
)
@flag(
    "--leader-elect",
    to="leader_elect",
    is_flag=True,
    help="Act only while holding a Lease, so several replicas can run (one acts, the others stand by).",
)
@flag("--leader-elect-namespace", to="leader_elect_namespace", help="Namespace of the Lease.")
@flag(
    "--leader-elect-name",
    to="leader_elect_name",
    default=DEFAULTS.leader_elect_name,
    show_default=True,
    help="Name of the Lease.",
)
@flag(
    "--leader-elect-identity",
    to="leader_elect_identity",
    help="This replica's name in the Lease [default: host name and a random suffix].",
)
@flag(
    "--lease-duration",
    to="lease_seconds",
    type=float,
    default=DEFAULTS.lease_seconds,
    show_default=True,
    callback=_positive,
    help="Seconds a standby waits after the leader's last renewal before it takes over.",
)
@flag(
    "--renew-deadline",
    to="renew_deadline_seconds",
    type=float,
    default=DEFAULTS.renew_deadline_seconds,
    show_default=True,
    callback=_positive,
    help="Seconds without a successful renewal after which the leader stops acting (< --lease-duration).",
)
@flag(
    "--retry-period",
    to="retry_period_seconds",
    type=float,
    default=DEFAULTS.retry_period_seconds,
    show_default=True,
    callback=_positive,
    help="Seconds between attempts to acquire or renew the Lease.",
)
@flag(
    "--http-port",
    to="http_port",
    type=click.IntRange(min=0, max=65535),
    help="Serve /metrics, /healthz and /readyz on this port [default: not served].",
)
@flag(
    "--http-address",
    to="http_address",
    default=DEFAULTS.http_address,
    show_default=True,
    help="Address the HTTP endpoints listen on.",
)
@flag(
    "--shutdown-timeout",
    to="shutdown_timeout_seconds",
    type=float,
    default=DEFAULTS.shutdown_timeout_seconds,
    show_default=True,
    callback=_positive,
    help="Seconds in-flight reconciles get to finish after SIGTERM (keep below the pod's grace period).",
)
def watch(**flags: Any) -> None:
    """Watch ProgressiveSyncs and run their rollouts as Workflows (until SIGTERM or Ctrl-C)."""
    from orchestrator.cli.logsetup import configure_logging  # noqa: PLC0415
    from orchestrator.kube.client import Kube, KubeError  # noqa: PLC0415 - keeps `--help` fast
    from orchestrator.watcher.process import run_process  # noqa: PLC0415

    if not flags.get("namespace") and not flags.get("all_namespaces"):
        # The same default as every command's -n ($PROGRESSIVE_SYNC_NAMESPACE came as the flag).
        resolved = resolved_namespace(None, kubeconfig=flags.get("kubeconfig"), context=flags.get("context"))
        flags["namespace"] = (resolved.namespace,)
    try:
        settings = build_settings(os.environ, **flags)
    except (SettingsError, ValueError) as exc:
        raise click.UsageError(str(exc)) from exc

    configure_logging(settings.log_level, settings.log_format.value)
    stop = threading.Event()
    try:
        kube = Kube.from_kubeconfig(settings.kubeconfig, settings.context, settings.kube)
    except KubeError as exc:
        raise click.ClickException(str(exc)) from exc
    try:
        with stop_signals(lambda _signum: stop.set()):
            code = run_process(kube, settings, stop)
    except KubeError as exc:
        click.echo(f"error: {exc}", err=True)
        code = 1
    finally:
        kube.close()
    sys.exit(code)


def build_settings(environ: Mapping[str, str], **flags: Any) -> Settings:
    """The watcher's `Settings` from parsed `watch` flags (by their names; a flag not given keeps
    the field's default): each value goes where its declaration says. `environ` gives only the Argo
    Server token and the rest of `WorkflowSettings` (`PROGRESSIVE_SYNC_WORKFLOW_<FIELD>`).
    """
    fields: dict[str, Any] = {}
    workflow_fields: dict[str, Any] = {}
    for param in watch.params:
        if not isinstance(param, SettingsFlag) or flags.get(str(param.name)) is None:
            continue
        value = flags[str(param.name)]
        if param.convert is not None:
            value = param.convert(value)
        if value is None:
            continue
        for target in param.to:
            if target.startswith(WORKFLOW_FIELD):
                workflow_fields[target.removeprefix(WORKFLOW_FIELD)] = value
            else:
                fields[target] = value
    return Settings(
        **fields,
        argo_token=read_token(environ.get(TOKEN_VARIABLE), flags.get("argo_token_file")),
        workflow=WorkflowSettings.from_environment(environ, **workflow_fields),
    )
