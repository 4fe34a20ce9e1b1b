"""`progressive-sync watch`: run the watcher in the foreground until SIGTERM / Ctrl-C.

Parses flags (each also read from its `PROGRESSIVE_SYNC_*` variable; a flag wins) into one
`orchestrator.watcher.settings.Settings`, sets up JSON (or text) logs, builds the Kubernetes adapter and
runs `orchestrator.watcher.loop.Watcher` until SIGTERM or SIGINT, then stops cleanly: no new reconcile
starts, the ones in flight finish, watch streams close. Exit codes: 0 after a clean stop, 1 when
a watch loop gave up (the API server stayed unreachable past every backoff), 2 for bad flags.

The Argo Server token is never a flag value (it would show in `ps`): it comes from
`--argo-token-file` or the `PROGRESSIVE_SYNC_ARGO_TOKEN` variable.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from collections.abc import Mapping
from pathlib import Path

import click

from orchestrator.watcher.settings import Engine, LogFormat, Settings, SettingsError, read_token


def _seconds(value: float) -> float:
    if value <= 0:
        raise click.BadParameter("must be positive")
    return value


@click.command("watch")
@click.option(
    "-n",
    "--namespace",
    "namespaces",
    multiple=True,
    envvar="PROGRESSIVE_SYNC_NAMESPACE",
    show_default="argocd",
    help="Namespace to watch for ProgressiveSyncs (repeat for several; env: space-separated).",
)
@click.option("-A", "--all-namespaces", is_flag=True, help="Watch ProgressiveSyncs in every namespace.")
@click.option(
    "--argocd-namespace",
    envvar="PROGRESSIVE_SYNC_ARGOCD_NAMESPACE",
    help="Where Applications, ApplicationSets and cluster Secrets live (default: each ProgressiveSync's).",
)
@click.option(
    "--workflow-namespace",
    envvar="PROGRESSIVE_SYNC_WORKFLOW_NAMESPACE",
    help="Where Workflows are created; must be the one watched namespace (default: the ProgressiveSync's).",
)
@click.option(
    "--kubeconfig",
    envvar=["PROGRESSIVE_SYNC_KUBECONFIG", "KUBECONFIG"],
    type=click.Path(dir_okay=False),
    help="Kubeconfig file (default: in-cluster service account).",
)
@click.option("--context", envvar="PROGRESSIVE_SYNC_CONTEXT", help="Kubeconfig context.")
@click.option(
    "--engine",
    type=click.Choice([e.value for e in Engine]),
    default=Engine.ARGO.value,
    envvar="PROGRESSIVE_SYNC_ENGINE",
    show_default=True,
    help="argo: Argo Workflows runs the Workflows; local: the local executor, in this process.",
)
@click.option("--step-image", envvar="PROGRESSIVE_SYNC_STEP_IMAGE", help="Image of the step containers.")
@click.option(
    "--step-image-pull-policy",
    type=click.Choice(["Always", "IfNotPresent", "Never"]),
    envvar="PROGRESSIVE_SYNC_STEP_IMAGE_PULL_POLICY",
    help="Pull policy of the step containers [default: IfNotPresent].",
)
@click.option(
    "--step-service-account",
    "--service-account",
    "service_account",
    envvar="PROGRESSIVE_SYNC_STEP_SERVICE_ACCOUNT",
    help="Service account the step pods run as [default: progressive-sync-steps].",
)
@click.option(
    "--step-resources",
    envvar="PROGRESSIVE_SYNC_STEP_RESOURCES",
    help=(
        "Resources of every step container as JSON, e.g. "
        '\'{"requests": {"cpu": "20m"}, "limits": {"memory": "256Mi"}}\'.'
    ),
)
@click.option(
    "--argo-server",
    envvar="PROGRESSIVE_SYNC_ARGO_SERVER",
    help="Submit Workflows through this Argo Server URL.",
)
@click.option(
    "--argo-token-file",
    envvar="PROGRESSIVE_SYNC_ARGO_TOKEN_FILE",
    type=click.Path(dir_okay=False, path_type=Path),
    help="File holding the Argo Server bearer token (or set PROGRESSIVE_SYNC_ARGO_TOKEN).",
)
@click.option(
    "--argo-insecure-skip-verify",
    is_flag=True,
    envvar="PROGRESSIVE_SYNC_ARGO_INSECURE_SKIP_VERIFY",
    help="Do not verify the Argo Server's TLS certificate.",
)
@click.option(
    "--log-level",
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
    default="INFO",
    envvar="PROGRESSIVE_SYNC_LOG_LEVEL",
    show_default=True,
)
@click.option(
    "--log-format",
    type=click.Choice([f.value for f in LogFormat]),
    default=LogFormat.JSON.value,
    envvar="PROGRESSIVE_SYNC_LOG_FORMAT",
    show_default=True,
)
@click.option(
    "--workers", type=click.IntRange(min=1), default=4, envvar="PROGRESSIVE_SYNC_WORKERS", show_default=True
)
@click.option(
    "--resync-period",
    type=float,
    default=300.0,
    envvar="PROGRESSIVE_SYNC_RESYNC_PERIOD",
    show_default=True,
    callback=lambda _c, _p, v: _seconds(v),
    help="Seconds between full resyncs (every ProgressiveSync reconciled again).",
)
@click.option(
    "--watch-timeout",
    type=click.IntRange(min=1),
    default=300,
    envvar="PROGRESSIVE_SYNC_WATCH_TIMEOUT",
    show_default=True,
    help="Seconds each watch stream lasts before it is resumed.",
)
@click.option(
    "--request-timeout",
    type=float,
    default=30.0,
    envvar="PROGRESSIVE_SYNC_REQUEST_TIMEOUT",
    show_default=True,
    callback=lambda _c, _p, v: _seconds(v),
    help="Read timeout of every API request, in seconds.",
)
@click.option(
    "--finalize-grace",
    type=float,
    default=30.0,
    envvar="PROGRESSIVE_SYNC_FINALIZE_GRACE",
    show_default=True,
    help="Seconds a finished Workflow's exit handler gets to record the outcome before the watcher does.",
)
@click.option(
    "--deletion-grace",
    type=float,
    default=30.0,
    envvar="PROGRESSIVE_SYNC_DELETION_GRACE",
    show_default=True,
    help="Seconds a deleted ProgressiveSync waits for its stopped Workflow before it goes.",
)
def watch(
    *,
    namespaces: tuple[str, ...],
    all_namespaces: bool,
    argocd_namespace: str | None,
    workflow_namespace: str | None,
    kubeconfig: str | None,
    context: str | None,
    engine: str,
    step_image: str | None,
    step_image_pull_policy: str | None,
    service_account: str | None,
    step_resources: str | None,
    argo_server: str | None,
    argo_token_file: Path | None,
    argo_insecure_skip_verify: bool,
    log_level: str,
    log_format: str,
    workers: int,
    resync_period: float,
    watch_timeout: int,
    request_timeout: float,
    finalize_grace: float,
    deletion_grace: float,
) -> None:
    """Watch ProgressiveSyncs and run their rollouts as Workflows (until SIGTERM or Ctrl-C)."""
    from orchestrator.cli.logsetup import configure_logging  # noqa: PLC0415
    from orchestrator.kube.client import Kube, KubeError  # noqa: PLC0415 - keeps `--help` fast
    from orchestrator.watcher.loop import Watcher  # noqa: PLC0415

    try:
        settings = build_settings(
            os.environ,
            namespaces=namespaces,
            all_namespaces=all_namespaces,
            argocd_namespace=argocd_namespace,
            workflow_namespace=workflow_namespace,
            kubeconfig=kubeconfig,
            context=context,
            engine=engine,
            step_image=step_image,
            step_image_pull_policy=step_image_pull_policy,
            service_account=service_account,
            step_resources=step_resources,
            argo_server=argo_server,
            argo_token_file=argo_token_file,
            argo_insecure_skip_verify=argo_insecure_skip_verify,
            log_level=log_level,
            log_format=log_format,
            workers=workers,
            resync_period=resync_period,
            watch_timeout=watch_timeout,
            request_timeout=request_timeout,
            finalize_grace=finalize_grace,
            deletion_grace=deletion_grace,
        )
    except (SettingsError, ValueError) as exc:
        raise click.UsageError(str(exc)) from exc

    configure_logging(settings.log_level, settings.log_format.value)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    try:
        kube = Kube.from_kubeconfig(settings.kubeconfig, settings.context, settings.kube)
    except KubeError as exc:
        raise click.ClickException(str(exc)) from exc
    try:
        code = Watcher(kube, settings).run(stop)
    except KubeError as exc:
        click.echo(f"error: {exc}", err=True)
        code = 1
    finally:
        kube.close()
    sys.exit(code)


def build_settings(
    environ: Mapping[str, str],
    *,
    namespaces: tuple[str, ...],
    all_namespaces: bool,
    argocd_namespace: str | None,
    workflow_namespace: str | None,
    kubeconfig: str | None,
    context: str | None,
    engine: str,
    step_image: str | None,
    service_account: str | None,
    argo_server: str | None,
    argo_token_file: Path | None,
    argo_insecure_skip_verify: bool,
    log_level: str,
    log_format: str,
    workers: int,
    resync_period: float,
    watch_timeout: int,
    request_timeout: float,
    finalize_grace: float,
    deletion_grace: float,
    step_image_pull_policy: str | None = None,
    step_resources: str | None = None,
) -> Settings:
    """The `Settings` of the parsed flags; `environ` gives only the token and the Workflow settings."""
    from workflow_templates.settings import StepResources, WorkflowSettings  # noqa: PLC0415

    overrides: dict[str, object] = {}
    if step_image:
        overrides["image"] = step_image
    if step_image_pull_policy:
        overrides["image_pull_policy"] = step_image_pull_policy
    if service_account:
        overrides["service_account"] = service_account
    if step_resources:
        try:
            parsed = json.loads(step_resources)
        except ValueError as exc:
            raise SettingsError(f"--step-resources is not JSON: {exc}") from exc
        overrides["resources"] = StepResources.from_kubernetes(parsed, source="--step-resources")
    if argocd_namespace:
        overrides["argocd_namespace"] = argocd_namespace
    return Settings(
        namespaces=() if all_namespaces else (tuple(namespaces) or ("argocd",)),
        argocd_namespace=argocd_namespace,
        workflow_namespace=workflow_namespace,
        kubeconfig=kubeconfig,
        context=context,
        engine=Engine(engine),
        argo_server=argo_server,
        argo_token=read_token(environ.get("PROGRESSIVE_SYNC_ARGO_TOKEN"), argo_token_file),
        argo_verify_tls=not argo_insecure_skip_verify,
        log_level=log_level.upper(),
        log_format=LogFormat(log_format),
        workers=workers,
        resync_seconds=resync_period,
        watch_timeout_seconds=watch_timeout,
        request_timeout_seconds=request_timeout,
        finalize_grace_seconds=finalize_grace,
        deletion_grace_seconds=deletion_grace,
        workflow=WorkflowSettings.from_environment(environ, **overrides),
    )
