"""`progressive-sync demo`: a staged rollout over a simulated 12-cluster fleet, on this machine.

Parses the flags into `DemoSettings`, sends the logs of the watcher, executor and simulator to a
file in a temporary directory (the terminal shows the rollout, not the logs), runs
`orchestrator.devenv.demo.run_demo` and prints its summary. Exit codes: 0 the rollout Succeeded; 1 it
failed (as it must with `--fail-cluster`) or the demo could not run; 2 bad usage; 130 interrupted.
Ctrl-C and SIGTERM stop everything the demo started and remove its temporary files.
Before it starts, the tools its options need and the cache lacks are built
(`orchestrator.devenv.demo_tools`: `make demo` builds only the control plane; `--argocd real`,
the argo engine, `--ui` and analysis add their parts here, saying what and how long on stderr).
`--engine argo` runs the Workflow on the real Argo Workflows controller with real pods (the
dev stack with a node; root, one per machine); `make demo` stays on the local engine. `--ui`
(implies `--engine argo`) keeps the Argo UI of the finished rollout open on the loopback URL the
demo prints until Ctrl-C; then everything is stopped as usual and the exit code is the rollout's.
`--analysis` gates every cluster on its error rate (a real Prometheus, the real Argo Rollouts
analysis controller); `--bad-metrics NAME` implies it and makes NAME the canary, Healthy in Argo CD
but serving errors, so the gate stops the rollout there (exit 1).
"""

from __future__ import annotations

import signal
import sys
import tempfile
import threading
from pathlib import Path
from types import FrameType

import click

from orchestrator.cli.help_catalog import epilog
from orchestrator.cli.logsetup import configure_logging
from orchestrator.core.clock import SystemClock
from orchestrator.devenv.argocd_settings import ArgoCDStackError
from orchestrator.devenv.controlplane import ControlPlaneError
from orchestrator.devenv.demo import (
    ArgoCDMode,
    DemoError,
    DemoSettings,
    demo_cluster_names,
    run_demo,
    summary,
)
from orchestrator.devenv.demo_tools import demo_tool_groups, ensure_tools
from orchestrator.devenv.machine import MachineError
from orchestrator.devenv.processes import ProcessError
from orchestrator.devenv.tools import ToolsMissing
from orchestrator.watcher.settings import Engine

LOG_TAIL_LINES = 40


def _interrupt(signum: int, frame: FrameType | None) -> None:
    # SIGTERM unwinds like Ctrl-C, so the same clean-up runs.
    raise KeyboardInterrupt


@click.command("demo", epilog=epilog("demo"))
@click.option(
    "--fail-cluster",
    metavar="NAME",
    help=f"Make this cluster the canary and fail its sync (one of {demo_cluster_names()[0]}, ...; "
    f"with --argocd real: {demo_cluster_names(ArgoCDMode.REAL)[0]}, ...).",
)
@click.option(
    "--bad-metrics",
    metavar="NAME",
    help="Make this cluster the canary, Healthy in Argo CD but serving 35% errors; the analysis gate "
    "(implied) must stop the rollout there. Builds Argo Rollouts first if it is not built.",
)
@click.option(
    "--analysis",
    is_flag=True,
    help="Gate every cluster of every stage on its error rate: a real Prometheus asked by the real "
    "Argo Rollouts analysis controller (~20-25 s more than without).",
)
@click.option(
    "--sync-seconds",
    type=click.FloatRange(min=0.05),
    default=2.0,
    show_default=True,
    help="How long a simulated sync takes (health settles in half that).",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    default=300.0,
    show_default=True,
    help="Give up when the rollout has not finished after this many seconds.",
)
@click.option(
    "--engine",
    type=click.Choice(["local", "argo"]),
    default=None,
    show_default="local; argo with --ui",
    help="Who runs the rollout's Workflow: the local executor (steps as subprocesses), or the real "
    "Argo Workflows controller on a real node (steps as pods; needs root, one node per machine).",
)
@click.option(
    "--ui",
    is_flag=True,
    help="After the rollout, keep the Argo UI showing it open (on the loopback URL printed) until "
    "Ctrl-C. Implies --engine argo.",
)
@click.option(
    "--argocd",
    type=click.Choice([mode.value for mode in ArgoCDMode]),
    default=ArgoCDMode.SIMULATED.value,
    show_default=True,
    help="Who plays Argo CD: the fleet simulator (12 clusters, seconds), or the real Argo CD "
    "(6 clusters on 3 local kube-apiservers, a Git repository; minutes; the first time builds Argo CD, "
    "~25-40 min).",
)
@click.option(
    "--tools-dir",
    type=click.Path(file_okay=False, path_type=Path),
    envvar="KUBEBUILDER_ASSETS",
    help="Folder with etcd, kube-apiserver and kubectl (default: $KUBEBUILDER_ASSETS).",
)
def demo(
    *,
    fail_cluster: str | None,
    bad_metrics: str | None,
    analysis: bool,
    sync_seconds: float,
    timeout: float,
    engine: str | None,
    ui: bool,
    argocd: str,
    tools_dir: Path | None,
) -> None:
    """Run a 3-stage rollout over a 12-cluster simulated fleet (or 6 clusters on the real Argo CD)."""
    if ui and engine == "local":
        raise click.BadParameter(
            "the local engine has no Argo UI; drop --engine local (--ui runs the real Argo Workflows)",
            param_hint="--ui",
        )
    engine = engine or ("argo" if ui else "local")
    mode = ArgoCDMode(argocd)
    names = demo_cluster_names(mode)
    if fail_cluster is not None and fail_cluster not in names:
        raise click.BadParameter(
            f"{fail_cluster!r} is not a cluster of the {mode.value} demo; pick one of: {', '.join(names)}",
            param_hint="--fail-cluster",
        )
    if bad_metrics is not None and bad_metrics not in names:
        raise click.BadParameter(
            f"{bad_metrics!r} is not a cluster of the {mode.value} demo; pick one of: {', '.join(names)}",
            param_hint="--bad-metrics",
        )
    if fail_cluster and bad_metrics and fail_cluster != bad_metrics:
        raise click.BadParameter(
            "both pick the canary: name the same cluster, or use one",
            param_hint="--fail-cluster/--bad-metrics",
        )
    clock = SystemClock()
    signal.signal(signal.SIGTERM, _interrupt)
    with tempfile.TemporaryDirectory(prefix="progressive-sync-demo-") as workdir:
        log_path = Path(workdir) / "demo.log"
        with log_path.open("a") as log_stream:
            configure_logging("INFO", "text", stream=log_stream)
            settings = DemoSettings(
                tools_dir=tools_dir,
                workdir=Path(workdir),
                sync_seconds=sync_seconds,
                health_seconds=sync_seconds / 2,
                fail_cluster=fail_cluster,
                timeout_seconds=timeout,
                tty=sys.stdout.isatty(),
                engine=Engine(engine),
                argocd=mode,
                analysis=analysis,
                bad_metrics=bad_metrics,
            )
            try:
                ensure_tools(demo_tool_groups(settings), lambda text: click.echo(text, err=True, nl=False))
                result = run_demo(
                    settings,
                    lambda text: click.echo(text, nl=False),
                    clock,
                    hold=_until_interrupted if ui else None,
                )
            except KeyboardInterrupt:
                click.echo("\ninterrupted: everything the demo started is stopped and removed", err=True)
                sys.exit(130)
            except (
                DemoError,
                ControlPlaneError,
                MachineError,
                ToolsMissing,
                ArgoCDStackError,
                ProcessError,
            ) as exc:
                _show_log_tail(log_path)
                click.echo(f"error: {exc}", err=True)
                sys.exit(1)
    click.echo("")
    click.echo(summary(result, clock.now()), nl=False)
    sys.exit(result.exit_code)


def _until_interrupted() -> None:
    """Return on Ctrl-C or SIGTERM (which `_interrupt` turns into KeyboardInterrupt)."""
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        click.echo("")


def _show_log_tail(path: Path) -> None:
    try:
        lines = path.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
    except OSError:
        return
    if lines:
        click.echo("--- last lines of the demo's log ---", err=True)
        click.echo("\n".join(lines), err=True)
