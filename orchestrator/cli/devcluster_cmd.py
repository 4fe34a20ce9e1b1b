"""`progressive-sync dev-cluster up|down`: the dev stack, for trying things by hand.

`up` starts etcd + kube-apiserver (see `orchestrator.devenv.controlplane`) and applies the CRDs
progressive-sync and its peers need; `--node` adds a real node (containerd, kubelet, scheduler,
controller-manager: pods run), `--argo-workflows` adds the real Argo Workflows controller and Argo
Server (and implies `--node`). It prints `export` lines (KUBECONFIG, and with Argo the step image,
the Argo Server, the tools on PATH) and stays in the foreground until Ctrl-C, SIGTERM or
`dev-cluster down`; then it stops everything and undoes every change to the machine
(`orchestrator.devenv.stack`). `down` signals the running `up`, and when none runs, cleans up what a
killed one left on the machine.

`--argocd` adds the real Argo CD (`orchestrator.devenv.argocd`): redis, the repo-server, the
application controller and the ApplicationSet controller as processes, destination clusters behind
cluster Secrets, a local Git repository with a starter app and its ApplicationSet, release 1
deployed everywhere. `release` commits the starter app's next release to that repository.

`--argo-rollouts` adds what analysis gates need (`orchestrator.devenv.analysis_stack`): the real Argo
Rollouts analysis controller with its CRDs, a real Prometheus, and a metrics endpoint serving each
cluster's request counters (Argo CD's clusters, or `--metrics-cluster`), whose control URL
(PROGRESSIVE_SYNC_METRICS_CONTROL_URL) makes a cluster's service bad at runtime.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import click

from orchestrator.cli.help_catalog import epilog
from orchestrator.core.stop_signals import stop_signals

if TYPE_CHECKING:
    from orchestrator.devenv.stack import DevStack


def _default_state_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "progressive-sync" / "dev-cluster"


state_dir_option = click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=_default_state_dir,
    show_default="~/.cache/progressive-sync/dev-cluster",
    envvar="PROGRESSIVE_SYNC_DEV_CLUSTER_DIR",
    help="Where the running control plane keeps its kubeconfig, certs and logs.",
)


@click.group("dev-cluster", epilog=epilog("dev-cluster"))
def dev_cluster() -> None:
    """A local control plane, optionally with a real node and real Argo Workflows."""


@dev_cluster.command("up")
@state_dir_option
@click.option(
    "--tools-dir",
    type=click.Path(file_okay=False, path_type=Path),
    envvar="KUBEBUILDER_ASSETS",
    help="Folder with the tools `make tools` builds (default: $KUBEBUILDER_ASSETS).",
)
@click.option("--node", is_flag=True, help="Add a real node: pods run (root; one per machine).")
@click.option(
    "--argo-workflows",
    is_flag=True,
    help="Add the real Argo Workflows controller and Argo Server (implies --node).",
)
@click.option(
    "--argocd",
    is_flag=True,
    help="Add the real Argo CD (repo-server, application controller, ApplicationSet controller), "
    "destination clusters and a Git repository with a starter app (`make tools` builds Argo CD).",
)
@click.option(
    "--argocd-clusters",
    type=click.IntRange(min=1),
    default=4,
    show_default=True,
    help="Argo CD clusters (cluster Secrets labelled region=eu|us, env=dev) with --argocd.",
)
@click.option(
    "--argocd-servers",
    type=click.IntRange(min=1),
    default=2,
    show_default=True,
    help="Distinct destination kube-apiservers behind them (two cluster names per server at most).",
)
@click.option(
    "--argocd-refresh-seconds",
    type=click.IntRange(min=0),
    default=10,
    show_default=True,
    help="How often Argo CD compares each Application with Git (0: only when asked to refresh).",
)
@click.option(
    "--argo-rollouts",
    is_flag=True,
    help="Add the real Argo Rollouts analysis controller, a real Prometheus and a per-cluster metrics "
    "endpoint it scrapes (analysis gates; `make tools` builds the controller).",
)
@click.option(
    "--metrics-cluster",
    "metrics_clusters",
    multiple=True,
    help="A cluster the metrics endpoint serves from the start (repeatable; default with --argocd: its "
    "clusters). Others appear when their error rate is first set.",
)
@click.option(
    "--requeue-time",
    default="10s",
    show_default=True,
    help="How soon the Argo controller looks at a Workflow again (its DEFAULT_REQUEUE_TIME).",
)
def up(
    state_dir: Path,
    tools_dir: Path | None,
    *,
    node: bool,
    argo_workflows: bool,
    argocd: bool,
    argocd_clusters: int,
    argocd_servers: int,
    argocd_refresh_seconds: int,
    argo_rollouts: bool,
    metrics_clusters: tuple[str, ...],
    requeue_time: str,
) -> None:
    """Start the stack and keep it running until Ctrl-C or `dev-cluster down`."""
    from orchestrator.devenv import argocd_settings as argocd_stack_settings  # noqa: PLC0415 - keeps `--help` fast
    from orchestrator.devenv import machine  # noqa: PLC0415
    from orchestrator.devenv.stack import DevStack, StackOptions, shell_exports  # noqa: PLC0415

    pid_file = state_dir / "up.json"
    if pid_file.exists():
        existing = json.loads(pid_file.read_text())
        if _alive(int(existing.get("pid", 0))):
            raise click.ClickException(
                f"a dev-cluster is already running (pid {existing['pid']}); "
                f"export KUBECONFIG={existing['kubeconfig']} or run `progressive-sync dev-cluster down`"
            )
    if state_dir.exists():
        shutil.rmtree(state_dir)
    state_dir.mkdir(parents=True)
    stop = threading.Event()
    # Ctrl-C stays a KeyboardInterrupt (it also interrupts the start); SIGTERM asks for a clean stop.
    with stop_signals(lambda _signum: stop.set(), signals=(signal.SIGTERM,)):
        try:
            argocd_settings = (
                argocd_stack_settings.ArgoCDSettings(
                    clusters=argocd_stack_settings.default_clusters(argocd_clusters),
                    servers=argocd_servers,
                    reconciliation_seconds=argocd_refresh_seconds,
                )
                if argocd
                else None
            )
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--argocd-clusters/--argocd-servers") from exc
        options = StackOptions(
            node=node,
            argo_workflows=argo_workflows,
            requeue_time=requeue_time,
            tools_dir=tools_dir,
            workdir=state_dir,
            argocd=argocd_settings,
            argo_rollouts=argo_rollouts,
            metrics_clusters=metrics_clusters,
        )
        if options.wants_node:
            click.echo("# starting the control plane and a real node (about half a minute)...", err=True)
        if argocd:
            click.echo(
                "# starting the real Argo CD and its destination clusters (about a minute)...", err=True
            )
        if argo_rollouts:
            click.echo(
                "# starting Prometheus and the Argo Rollouts analysis controller (about 10 s)...", err=True
            )
        try:
            stack = DevStack.start(options)
        except (machine.MachineError, argocd_stack_settings.ArgoCDStackError, RuntimeError) as exc:
            raise click.ClickException(str(exc)) from exc
        try:
            assert stack.cluster is not None
            pid_file.write_text(json.dumps(_state(stack)))
            for line in _describe(stack, state_dir):
                click.echo(line)
            for line in shell_exports(stack.exports()):
                click.echo(line)
            click.echo("# running until Ctrl-C or `progressive-sync dev-cluster down`", err=True)
            sys.stdout.flush()
            try:
                while not stop.wait(1.0):
                    pass
            except KeyboardInterrupt:
                pass
        finally:
            stack.stop()
            pid_file.unlink(missing_ok=True)
            click.echo("dev-cluster stopped", err=True)


def _state(stack: DevStack) -> dict[str, object]:
    """What `up.json` records for `down` and `release`: the pid, the kubeconfig, the Argo CD repo."""
    assert stack.cluster is not None
    state: dict[str, object] = {"pid": os.getpid(), "kubeconfig": str(stack.cluster.kubeconfig)}
    if stack.argocd is not None:
        state["argocd"] = {
            "namespace": stack.argocd.namespace,
            "repo": str(stack.argocd.repo.path),
            "app_set": stack.argocd.settings.app_set,
        }
    return state


def _describe(stack: DevStack, state_dir: Path) -> list[str]:
    """The comment lines `up` prints about what runs."""
    from orchestrator.devenv import argocd as argocd_stack  # noqa: PLC0415

    assert stack.cluster is not None
    lines = [f"# kube-apiserver at {stack.cluster.api_url}; logs in {state_dir}"]
    if stack.node is not None:
        lines.append(f"# node {stack.node.name} Ready; its logs in {stack.node.root / 'logs'}")
    if stack.argo is not None:
        lines.append(
            f"# Argo Workflows controller (namespace argo); Argo Server and UI: {stack.argo.server_url}"
        )
        lines.append("# rollouts run in namespace argocd; steps as service account progressive-sync-steps")
    if stack.argocd is not None:
        lines += [f"# {line}" for line in argocd_stack.describe(stack.argocd)]
    if stack.analysis is not None:
        lines += [f"# {line}" for line in stack.analysis.describe()]
    return lines


@dev_cluster.command("down")
@state_dir_option
@click.option(
    "--wait/--no-wait", default=True, show_default=True, help="Wait until the stack has stopped (up to 60 s)."
)
def down(state_dir: Path, wait: bool) -> None:
    """Stop the stack `dev-cluster up` started; clean up what a killed one left on this machine."""
    from orchestrator.devenv import machine  # noqa: PLC0415

    pid_file = state_dir / "up.json"
    pid = int(json.loads(pid_file.read_text()).get("pid", 0)) if pid_file.exists() else 0
    if _alive(pid):
        os.kill(pid, signal.SIGTERM)
        click.echo(f"asked dev-cluster (pid {pid}) to stop")
        if wait and not _wait_gone(pid, 60.0):
            raise click.ClickException(f"dev-cluster (pid {pid}) did not stop within 60s")
        return
    pid_file.unlink(missing_ok=True)
    if os.geteuid() != 0:
        click.echo("no dev-cluster is running")
        return
    try:
        with machine.node_lock():
            done = machine.clean_up(owner_gone=True)  # we hold the lock: no owner is alive
    except machine.NodeBusy as exc:
        raise click.ClickException(str(exc)) from exc
    if done:
        click.echo(f"no dev-cluster is running; cleaned up what a stopped one left: {'; '.join(done)}")
    else:
        click.echo("no dev-cluster is running")


@dev_cluster.command("release")
@state_dir_option
@click.option("-m", "--message", help="The commit message (default: 'Release N').")
@click.option(
    "--refresh/--no-refresh",
    default=False,
    help="Ask Argo CD to compare the starter Applications at once (as a Git webhook would) instead "
    "of at its next timed comparison.",
)
def release(state_dir: Path, message: str | None, refresh: bool) -> None:
    """Commit the starter app's next release to the Git repository of `up --argocd`."""
    from orchestrator.devenv import argocd_requests  # noqa: PLC0415
    from orchestrator.devenv.gitrepo import GitError, ReleaseRepo  # noqa: PLC0415
    from orchestrator.kube.client import Kube  # noqa: PLC0415

    pid_file = state_dir / "up.json"
    state = json.loads(pid_file.read_text()) if pid_file.exists() else {}
    if not _alive(int(state.get("pid", 0))) or "argocd" not in state:
        raise click.ClickException(
            "no dev-cluster with Argo CD is running: start one with "
            "`progressive-sync dev-cluster up --argocd`"
        )
    argocd = state["argocd"]
    try:
        number, sha = argocd_requests.commit_next_release(
            ReleaseRepo.open(argocd["repo"]), argocd["app_set"], message
        )
    except GitError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"release {number}: {sha}")
    if refresh:
        kube = Kube.from_kubeconfig(state["kubeconfig"])
        try:
            names = argocd_requests.app_set_applications(kube, argocd["namespace"], argocd["app_set"])
            argocd_requests.request_refresh(kube, argocd["namespace"], names)
        finally:
            kube.close()
        click.echo(f"asked Argo CD to refresh {len(names)} Applications")


def _alive(pid: int) -> bool:
    """True while `pid` runs (an exited child its parent has not reaped yet counts as gone)."""
    if pid <= 0:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def _wait_gone(pid: int, timeout: float) -> bool:
    import time  # noqa: PLC0415

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.2)
    return False
