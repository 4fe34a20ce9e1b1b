"""`progressive-sync simulate run|seed`: the fleet simulator on the command line.

`run` plays Argo CD's application controller for the Applications of one namespace until Ctrl-C or
SIGTERM (see `orchestrator.simulator.appcontroller` and docs/simulator.md); `seed` creates a fleet to
play with; `publish` points the simulated Git repository's refs at commits (a new release). All
talk to the API server named by `--kubeconfig` (default: $KUBECONFIG, then the in-cluster service
account). `run` rides out API server outages: it retries for as long as it runs.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import click

from orchestrator.cli.help_catalog import epilog
from orchestrator.core.stop_signals import stop_signals
from orchestrator.kube.client import Kube, KubeError, KubeSettings
from orchestrator.simulator.config import DEFAULT_WORKERS

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


def _kube(kubeconfig: str | None, settings: KubeSettings | None = None) -> Kube:
    try:
        return Kube.from_kubeconfig(kubeconfig, settings=settings)
    except KubeError as exc:
        raise click.UsageError(f"{exc}") from exc


@click.group("simulate", epilog=epilog("simulate"))
def simulate() -> None:
    """A fleet simulator standing in for Argo CD's application controller (demo, tests)."""


@simulate.command("run")
@namespace_option
@kubeconfig_option
@click.option(
    "--config",
    "config_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="YAML behaviour per cluster: defaults {syncSeconds, healthSeconds, health, fail, hang, ...}, "
    "clusters {<name or glob>: {...}}, preservedAnnotations, preservedLabels (docs/simulator.md).",
)
@click.option(
    "--events-log",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Append one JSON line per transition written: sync start/finish, comparisons, health changes "
    "(docs/simulator.md).",
)
@click.option(
    "--sync-seconds", type=click.FloatRange(min=0), help="Default sync duration (overrides the file)."
)
@click.option("--health-seconds", type=click.FloatRange(min=0), help="Default Progressing time after a sync.")
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=DEFAULT_WORKERS,
    show_default=True,
    help="Applications written at once (each Application by one worker at a time).",
)
def run(
    *,
    namespace: str,
    kubeconfig: str | None,
    config_path: Path | None,
    events_log: Path | None,
    sync_seconds: float | None,
    health_seconds: float | None,
    workers: int,
) -> None:
    """Pick up sync operations on Applications and play them through, until Ctrl-C / SIGTERM."""
    from dataclasses import replace  # noqa: PLC0415

    from orchestrator.simulator.appcontroller import FleetSimulator  # noqa: PLC0415
    from orchestrator.simulator.config import ConfigError, SimulatorConfig  # noqa: PLC0415

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
    # The simulator retries on its own, for as long as it runs: the adapter's own retries stay short so
    # that a stop is never stuck behind them.
    kube = _kube(kubeconfig, KubeSettings(read_timeout=15.0, retry_backoffs=(0.2, 0.5)))
    simulator = FleetSimulator(kube, namespace, config, events_log=events_log, workers=workers)

    def stop(signum: int) -> None:
        click.echo(f"simulate: signal {signum}; stopping", err=True)
        simulator.stop(timeout=0)

    click.echo(f"simulate: playing Argo CD's application controller in namespace {namespace} on {kube.host}")
    try:
        with stop_signals(stop):
            simulator.run_forever()
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
    from orchestrator.simulator.seed import seed_fleet  # noqa: PLC0415

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


@simulate.command("publish")
@namespace_option
@kubeconfig_option
@click.argument("refs", nargs=-1, required=True)
def publish(*, namespace: str, kubeconfig: str | None, refs: tuple[str, ...]) -> None:
    """Point refs of the simulated Git repository at commits: REF=SHA... (e.g. main=4f1c2e9b...).

    Applications whose targetRevision is REF compare against SHA from their next refresh on.
    """
    from orchestrator.simulator.seed import publish_refs  # noqa: PLC0415

    parsed: dict[str, str] = {}
    for item in refs:
        ref, _, sha = item.partition("=")
        if not ref.strip() or not sha.strip():
            raise click.UsageError(
                f"{item!r}: expected REF=SHA, e.g. main=4f1c2e9b7a3d5c8e1f0a2b4c6d8e0f1a3b5c7d9e"
            )
        parsed[ref.strip()] = sha.strip()
    kube = _kube(kubeconfig)
    try:
        publish_refs(kube, namespace, parsed)
    except KubeError as exc:
        raise click.ClickException(str(exc)) from exc
    finally:
        kube.close()
    click.echo(f"published {', '.join(f'{ref}={sha}' for ref, sha in parsed.items())} in {namespace}")
