"""`progressive-sync dev-cluster up|down`: a real local control plane for trying things by hand.

`up` starts etcd + kube-apiserver (see `orchestrator.devenv.controlplane`), applies the CRDs that
progressive-sync and its peers need, prints the `export KUBECONFIG=...` line and stays in the
foreground until Ctrl-C, SIGTERM or `dev-cluster down`. `down` signals the running `up`.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from pathlib import Path

import click

from orchestrator.devenv import controlplane as devcluster


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


@click.group("dev-cluster")
def dev_cluster() -> None:
    """A local control plane (etcd + kube-apiserver, no nodes) for demos and trying things."""


@dev_cluster.command("up")
@state_dir_option
@click.option(
    "--tools-dir",
    type=click.Path(file_okay=False, path_type=Path),
    envvar="KUBEBUILDER_ASSETS",
    help="Folder with etcd, kube-apiserver and kubectl (default: $KUBEBUILDER_ASSETS; see `make tools`).",
)
def up(state_dir: Path, tools_dir: Path | None) -> None:
    """Start the control plane and keep it running until Ctrl-C or `dev-cluster down`."""
    from orchestrator.kube.crds import apply_all_crds  # noqa: PLC0415 - keeps `--help` fast

    pid_file = state_dir / "up.json"
    if pid_file.exists():
        existing = json.loads(pid_file.read_text())
        if _alive(int(existing.get("pid", 0))):
            raise click.ClickException(
                f"a dev-cluster is already running (pid {existing['pid']}); "
                f"export KUBECONFIG={existing['kubeconfig']} or run `progressive-sync dev-cluster down`"
            )
    if state_dir.exists():
        import shutil  # noqa: PLC0415

        shutil.rmtree(state_dir)
    state_dir.mkdir(parents=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        cluster = devcluster.DevCluster.start(tools_dir, workdir=state_dir)
    except devcluster.ControlPlaneError as exc:
        raise click.ClickException(str(exc)) from exc
    try:
        apply_all_crds(cluster.kubeconfig)
        pid_file.write_text(json.dumps({"pid": os.getpid(), "kubeconfig": str(cluster.kubeconfig)}))
        click.echo(f"# kube-apiserver at {cluster.api_url}; logs in {state_dir}")
        click.echo(f"export KUBECONFIG={cluster.kubeconfig}")
        click.echo("# running until Ctrl-C or `progressive-sync dev-cluster down`", err=True)
        sys.stdout.flush()
        try:
            while not stop.wait(1.0):
                pass
        except KeyboardInterrupt:
            pass
    finally:
        cluster.stop()
        pid_file.unlink(missing_ok=True)
        click.echo("dev-cluster stopped", err=True)


@dev_cluster.command("down")
@state_dir_option
def down(state_dir: Path) -> None:
    """Stop the control plane that `dev-cluster up` started."""
    pid_file = state_dir / "up.json"
    if not pid_file.exists():
        click.echo("no dev-cluster is running")
        return
    pid = int(json.loads(pid_file.read_text()).get("pid", 0))
    if not _alive(pid):
        pid_file.unlink(missing_ok=True)
        click.echo("no dev-cluster is running (removed a stale pid file)")
        return
    os.kill(pid, signal.SIGTERM)
    click.echo(f"asked dev-cluster (pid {pid}) to stop")


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
