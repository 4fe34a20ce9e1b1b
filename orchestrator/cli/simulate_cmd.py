"""`progressive-sync simulate run|seed`: the fleet simulator on the command line.

`run` plays Argo CD's application controller for the Applications of one namespace until Ctrl-C or
SIGTERM (see `orchestrator.simulator.appcontroller`); `seed` creates a fleet to play with. Both
talk to the API server named by `--kubeconfig` (default: $KUBECONFIG, then the in-cluster service account).
"""

from __future__ import annotations

import logging
import signal
import sys
from pathlib import Path
from typing import Any

import click

from orchestrator.kube.client import Kube, KubeError

kubeconfig_option = click.option(
    "--kubeconfig",
    envvar="PROGRESSIVE_SYNC_KUBECONFIG",
    default=None,
    help="Kubeconfig file [default: $KUBECONFIG, then the in-cluster service account].",
)
namespace_option = click.option(
    "--namespace",
    "-n",
    envvar="PROGRESSIVE_SYNC_ARGOCD_NAMESPACE",
    required=True,
    help="The Argo CD namespace: where the Applications and cluster Secrets live.",
)


def _kube(kubeconfig: str | None) -> Kube:
    try:
        return Kube.from_kubeconfig(kubeconfig)
    except KubeError as exc:
        raise click.UsageError(f"{exc}") from exc


@click.group("simulate")
def simulate() -> None:
    """A fleet simulator standing in for Argo CD's application controller (demo, tests)."""


@simulate.command("run")
@namespace_option
@kubeconfig_option
@click.option(
    "--config",
    "config_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="YAML behaviour per cluster: defaults {syncSeconds, healthSeconds, fail, degrade, hang} and "
    "clusters {<name or glob>: {...}}.",
)
@click.option(
    "--events-log",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Append one JSON line per sync start/finish and health change (for order and concurrency).",
)
@click.option(
    "--sync-seconds", type=click.FloatRange(min=0), help="Default sync duration (overrides the file)."
)
@click.option("--health-seconds", type=click.FloatRange(min=0), help="Default Progressing time after a sync.")
def run(
    *,
    namespace: str,
    kubeconfig: str | None,
    config_path: Path | None,
    events_log: Path | None,
    sync_seconds: float | None,
    health_seconds: float | None,
) -> None:
    """Pick up sync operations on Applications and play them through, until Ctrl-C / SIGTERM."""
    from dataclasses import replace  # noqa: PLC0415

    from orchestrator.simulator.appcontroller import ConfigError, FleetSimulator, SimulatorConfig  # noqa: PLC0415

    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        config = SimulatorConfig.load(config_path) if config_path else SimulatorConfig()
    except (ConfigError, OSError) as exc:
        raise click.UsageError(f"--config: {exc}") from exc
    defaults: dict[str, Any] = {}
    if sync_seconds is not None:
        defaults["sync_seconds"] = sync_seconds
    if health_seconds is not None:
        defaults["health_seconds"] = health_seconds
    config = replace(config, defaults=replace(config.defaults, **defaults))
    kube = _kube(kubeconfig)
    simulator = FleetSimulator(kube, namespace, config, events_log=events_log)

    def stop(signum: int, _frame: Any) -> None:
        click.echo(f"simulate: signal {signum}; stopping", err=True)
        simulator.stop(timeout=0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    click.echo(f"simulate: playing Argo CD's application controller in namespace {namespace} on {kube.host}")
    try:
        simulator.run_forever()
    except KubeError as exc:
        click.echo(f"simulate: {exc}", err=True)
        sys.exit(75)
    finally:
        kube.close()


@simulate.command("seed")
@namespace_option
@kubeconfig_option
@click.option(
    "--clusters", type=click.IntRange(min=1), default=12, show_default=True, help="How many clusters."
)
@click.option(
    "--regions",
    default="eu-west-1,us-east-1,ap-south-1",
    show_default=True,
    help="Comma-separated regions; clusters are spread over them round-robin, then over zones a, b, c.",
)
@click.option("--revision", required=True, help="The new release revision the Applications are OutOfSync at.")
@click.option("--app-set", default="myservice", show_default=True, help="Name of the ApplicationSet.")
@click.option(
    "--env", "env_label", default="prod", show_default=True, help="Value of the clusters' env label."
)
def seed(
    *,
    namespace: str,
    kubeconfig: str | None,
    clusters: int,
    regions: str,
    revision: str,
    app_set: str,
    env_label: str,
) -> None:
    """Create N cluster Secrets, an ApplicationSet and one Application per cluster, OutOfSync."""
    from orchestrator.simulator.appcontroller import seed_fleet  # noqa: PLC0415

    region_list = [region.strip() for region in regions.split(",") if region.strip()]
    if not region_list:
        raise click.UsageError("--regions needs at least one region")
    if not revision.strip():
        raise click.UsageError("--revision is empty")
    kube = _kube(kubeconfig)
    try:
        result = seed_fleet(
            kube,
            namespace,
            clusters=clusters,
            regions=region_list,
            revision=revision.strip(),
            app_set=app_set,
            env=env_label,
        )
    except KubeError as exc:
        raise click.ClickException(str(exc)) from exc
    finally:
        kube.close()
    click.echo(
        f"seeded {len(result.clusters)} clusters across {len(region_list)} regions, ApplicationSet {app_set} "
        f"and {len(result.applications)} Applications in {namespace} "
        f"({result.created} created, {result.existing} already there)"
    )
