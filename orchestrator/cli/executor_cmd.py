"""`progressive-sync executor`: run our Workflows on this machine, without Argo Workflows.

Starts `orchestrator.engine.executor.LocalExecutor` in the foreground until Ctrl-C or SIGTERM: it
watches Workflows labelled `progressivesync.io/name` and runs each step as a local subprocess (the
container's command and args), writing the Workflow's status the way Argo does. The steps get the
kubeconfig given here. The watcher can run the same executor in its own process (`engine:
local`); run this command only when the watcher uses the argo engine against a cluster without
Argo Workflows, and never two executors against one control plane.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import click

from orchestrator.cli.help_catalog import epilog
from orchestrator.cli.logsetup import configure_logging
from orchestrator.core.stop_signals import stop_signals
from orchestrator.engine.executor import LocalExecutor
from orchestrator.engine.executor_settings import DEFAULT_MAX_STEP_PROCESSES, ExecutorSettings
from orchestrator.kube.client import Kube, KubeError


@click.command("executor", epilog=epilog("executor"))
@click.option(
    "--kubeconfig",
    envvar=["PROGRESSIVE_SYNC_KUBECONFIG", "KUBECONFIG"],
    type=click.Path(dir_okay=False, path_type=Path),
    help="Kubeconfig of the control plane; the steps get it too.",
)
@click.option("--context", envvar="PROGRESSIVE_SYNC_CONTEXT", help="Kubeconfig context.")
@click.option("-n", "--namespace", help="Run Workflows of this namespace only (default: all).")
@click.option(
    "--workdir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where each step's outputs and logs go (default: a temporary directory removed on exit).",
)
@click.option(
    "--step-timeout", type=click.FloatRange(min=1), default=3600.0, show_default=True, help="Seconds."
)
@click.option(
    "--python",
    "python",
    default=sys.executable,
    show_default="this interpreter",
    help="The interpreter `python` in a step's command means here.",
)
@click.option(
    "--max-step-processes",
    envvar="PROGRESSIVE_SYNC_MAX_STEP_PROCESSES",
    show_envvar=True,
    type=click.IntRange(min=0),
    default=DEFAULT_MAX_STEP_PROCESSES,
    show_default=True,
    help=(
        "The most step processes run at once; a step past it waits, Pending, for a free one (each "
        "Workflow may always run two). 0: no bound."
    ),
)
@click.option("--log-level", default="INFO", show_default=True)
@click.option("--log-format", type=click.Choice(["json", "text"]), default="text", show_default=True)
def executor(
    *,
    kubeconfig: Path | None,
    context: str | None,
    namespace: str | None,
    workdir: Path | None,
    step_timeout: float,
    python: str,
    max_step_processes: int,
    log_level: str,
    log_format: str,
) -> None:
    """Run progressive-sync's Workflows locally, the way Argo Workflows would."""
    configure_logging(log_level, log_format)
    try:
        kube = Kube.from_kubeconfig(str(kubeconfig) if kubeconfig else None, context=context)
    except KubeError as exc:
        raise click.UsageError(str(exc)) from exc
    settings = ExecutorSettings(
        kubeconfig=kubeconfig,
        namespace=namespace,
        workdir=workdir,
        step_timeout_seconds=step_timeout,
        python=python,
        max_step_processes=max_step_processes,
    )
    stop = threading.Event()
    click.echo(
        f"local executor watching Workflows in {namespace or 'every namespace'} at {kube.host}", err=True
    )
    try:
        with stop_signals(lambda _signum: stop.set()):
            LocalExecutor(kube, settings).run_until(stop)
    finally:
        kube.close()
