"""`progressive-sync render`: the Workflow the watcher would create for a ProgressiveSync.

Reads the ProgressiveSync from `-f` and, with `--fleet`, plans the rollout offline over that fleet
(the planner resolves percentage maxParallel, the release revision and the rollout id exactly as the
watcher does); then builds the Workflow with `workflow_templates.builder.build_workflow`, checks
its references (`workflow_templates.validate`) and prints it as YAML or JSON on stdout.

Without a fleet it cannot know the fleet, so it assumes, and says on stderr what it assumed: every
stage takes `--assume-clusters` clusters (or its integer maxTargets), the revision is `--revision`
(or a placeholder), the rollout id is `--rollout-id` (or `render`). Each stage with analysis gets a
line on stderr saying where its analysis runs (as `plan` says it), each manual gate one saying
how long it waits for a person (its `approvalWindowSeconds`, else the watcher's default), and each
stage selecting by Application labels (`targets.applications.selector`) one saying what it selects.
With `spec.groupBy` the groups are the fleet's values of the label, so it needs `--fleet` (exit 1
saying so without one: docs/groups.md).

With a fleet, the fleet is read and planned in a forked child while this process imports Hera for
the build (`orchestrator.cli.overlap`): on a 10,000-cluster file each half takes about a second, and
the output is the same bytes either way.

`-n` (else the kubeconfig context's namespace, ...: `orchestrator.cli.namespaces`) is the namespace
when the manifest has none. Exit codes: 0 printed (or nothing to roll out, said on stderr); 1
invalid input, a plan with errors, or a Workflow that cannot be built; 2 bad usage.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import click

from orchestrator.api.analysis import describe_analysis, resolve_analysis
from orchestrator.api.models import ApprovalMode, ProgressiveSync
from orchestrator.api.release import Release, Revisions, spec_hash
from orchestrator.api.selectors import describe_targets
from orchestrator.api.windows import describe_windows
from orchestrator.cli.conventions import namespace_option, output_option, resolved_namespace
from orchestrator.cli.help_catalog import epilog
from orchestrator.cli.manifest import (
    collector_paused,
    manifest_options,
    read_fleet_file,
    read_progressive_sync,
)
from orchestrator.cli.overlap import in_child
from orchestrator.planning.planner import plan_fleet, planned_sizes
from orchestrator.planning.sizing import StageSize
from workflow_templates.settings import WorkflowSettings

PLACEHOLDER_REVISION = "REVISION"
PLACEHOLDER_ROLLOUT_ID = "render"


def _note(text: str) -> None:
    click.echo(f"# {text}", err=True)


@dataclasses.dataclass(frozen=True)
class OfflinePlan:
    """What `render` takes from the plan of a fleet file: small, so the child sends it cheaply."""

    errors: tuple[str, ...]
    revisions: tuple[Revisions, ...]
    sizes: Mapping[str, StageSize]
    skipped: tuple[str, ...] = ()  # "cluster: why" for each cluster a skip holds out of the rollout


def plan_fleet_file(ps: ProgressiveSync, fleet_file: Path) -> OfflinePlan:
    """Read and plan the fleet file for `ps`; prints nothing (it may run in a forked child)."""
    with collector_paused():
        plan = plan_fleet(ps.spec, read_fleet_file(fleet_file), ps_name=ps.metadata.name)
        if plan.has_errors:
            return OfflinePlan(tuple(issue.message for issue in plan.errors), (), {})
        skipped = tuple(f"{name}: {why}" for name, why in plan.skipped.items())
        return OfflinePlan((), plan.revisions, planned_sizes(ps.spec, plan), skipped)


def _groups_need_a_fleet(ps: ProgressiveSync, fleet_file: Path | None) -> None:
    """With spec.groupBy the groups are the fleet's values of the label (docs/groups.md): without
    --fleet there is nothing to assume them from."""
    if ps.spec.group_by is not None and fleet_file is None:
        raise click.ClickException(
            f"spec.groupBy: the stages run once per value of cluster label {ps.spec.group_by!r}, so the "
            "Workflow needs the fleet's groups: render with --fleet"
        )


@click.command("render", epilog=epilog("render"))
@manifest_options(fleet_help="Render the rollout the watcher would start over this fleet file")
# A Workflow is a manifest, not a table: yaml is the default here (as for `kubectl create --dry-run`).
@output_option(default="yaml", help="The Workflow as yaml or json.")
@click.option("--rollout-id", help="Use this rollout id instead of the planned release id.")
@click.option("--revision", help="Use this revision instead of the planned one.")
@click.option(
    "--assume-clusters",
    type=click.IntRange(min=0),
    default=10,
    show_default=True,
    help="Without --fleet: how many clusters each stage takes (percentages resolve against it).",
)
@namespace_option("Namespace when the manifest has none")
@click.option("--image", envvar="PROGRESSIVE_SYNC_WORKFLOW_IMAGE", help="The steps' container image.")
@click.option(
    "--service-account",
    envvar="PROGRESSIVE_SYNC_WORKFLOW_SERVICE_ACCOUNT",
    help="The steps' service account.",
)
@click.option(
    "--argocd-namespace",
    envvar="PROGRESSIVE_SYNC_ARGOCD_NAMESPACE",
    help="Where Applications and cluster Secrets live (default: the ProgressiveSync's namespace).",
)
def render(
    *,
    filenames: str,
    ps_name: str | None,
    fleet_file: Path | None,
    output: str,
    rollout_id: str | None,
    revision: str | None,
    assume_clusters: int,
    namespace: str | None,
    image: str | None,
    service_account: str | None,
    argocd_namespace: str | None,
) -> None:
    """Print the Argo Workflow the watcher would create for the ProgressiveSync's next rollout."""
    overrides = {
        key: value
        for key, value in (
            ("image", image),
            ("service_account", service_account),
            ("argocd_namespace", argocd_namespace),
        )
        if value
    }
    settings = WorkflowSettings.from_environment(os.environ, **overrides)
    ps = read_progressive_sync(filenames, ps_name)
    if namespace and ps.metadata.namespace and namespace != ps.metadata.namespace:
        raise click.UsageError(
            f"the manifest's namespace {ps.metadata.namespace!r} is not -n {namespace!r}; "
            "drop -n or change the manifest"
        )
    if not ps.metadata.namespace:
        # Where `kubectl apply -f` would put it: -n, else the kubeconfig context's namespace, ...
        resolved = resolved_namespace(namespace, kubeconfig=None, context=None)
        ps = ps.model_copy(
            update={"metadata": ps.metadata.model_copy(update={"namespace": resolved.namespace})}
        )
        _note(f"assumed: namespace {resolved.namespace} (the manifest has none; from {resolved.source})")
    _groups_need_a_fleet(ps, fleet_file)
    if not ps.metadata.uid:
        _note("assumed: no uid (the manifest was never applied), so no ownerReference")
    planning = (
        in_child(functools.partial(plan_fleet_file, ps, fleet_file))
        if fleet_file is not None
        else contextlib.nullcontext(None)
    )
    with planning as pending:
        # Hera, about a second: imported while the child (if any) reads and plans the fleet file.
        from workflow_templates import render as workflow_render  # noqa: PLC0415 - see the docstring

        offline = pending.result() if pending is not None else None
    generation = ps.metadata.generation or 1
    if offline is not None:
        if offline.errors:
            errors = "; ".join(offline.errors)
            raise click.ClickException(
                f"the plan has errors, so the watcher would not start a rollout: {errors}"
            )
        if not offline.revisions and not revision:
            _note(
                "nothing is out of date: the watcher would not start a rollout "
                "(pass --revision to render one)"
            )
            return
        release = _release(ps, generation, ((revision,),) if revision else offline.revisions, rollout_id)
        sizes = offline.sizes
        for line in offline.skipped:
            _note(f"skipped (no stage syncs it): {line}")
    else:
        sizes = workflow_render.assumed_sizes(ps, assume_clusters)
        _note(
            f"assumed: no --fleet, so every stage takes {assume_clusters} clusters "
            "(or its integer maxTargets): "
            + ", ".join(
                f"{name}: {s.targets} cluster(s), {s.max_parallel} at a time" for name, s in sizes.items()
            )
        )
        if not revision:
            _note(f"assumed: revision {PLACEHOLDER_REVISION} (pass --revision or --fleet)")
        if not rollout_id:
            _note(f"assumed: rollout id {PLACEHOLDER_ROLLOUT_ID} (pass --rollout-id or --fleet)")
        release = _release(
            ps, generation, ((revision or PLACEHOLDER_REVISION,),), rollout_id or PLACEHOLDER_ROLLOUT_ID
        )
    try:
        text = workflow_render.rendered_text(ps, release, sizes, settings, output=output)
    except workflow_render.WorkflowBuildError as exc:
        raise click.ClickException(str(exc)) from exc
    _note_what_the_workflow_does_not_show(ps, settings)
    click.echo(text, nl=False)


def _note_what_the_workflow_does_not_show(ps: ProgressiveSync, settings: WorkflowSettings) -> None:
    """On stderr, for people: per stage its Application selector, where its analysis runs and its
    gate's window; then the rollout windows (the contract carries them, the steps obey them)."""
    for stage in ps.spec.stages:  # where the Workflow's analysis tasks run, said for people
        if stage.targets.applications is not None:  # `select` reads it; the Workflow does not show it
            _note(f"targets: stage {stage.name}: {describe_targets(stage.targets)}")
        analysis = resolve_analysis(ps.spec.analysis, stage.analysis)
        if analysis is not None:
            where = describe_analysis(analysis, bake_seconds=stage.bake_seconds)
            _note(f"analysis: stage {stage.name}: {where}")
        if stage.approval is ApprovalMode.MANUAL:  # the gate's window, as the deadline budgets it
            window = stage.approval_window_seconds
            source = "its approvalWindowSeconds" if window else "the watcher's default"
            _note(
                f"approval: stage {stage.name}: a manual gate; it waits up to "
                f"{window or settings.approval_window_seconds}s for a person ({source})"
            )
    for line in describe_windows(ps.spec.windows):  # the contract carries them; the steps obey them
        _note(
            f"window: {line}: no sync is written while the windows are closed; a wave waits, within "
            "the Workflow's activeDeadlineSeconds"
        )


def _release(
    ps: ProgressiveSync, generation: int, revisions: Sequence[Sequence[str]], rollout_id: str | None
) -> Release:
    """The release the watcher would start (its id as the planner gives it, unless --rollout-id)."""
    release = Release.of(generation=generation, spec_hash=spec_hash(ps.spec), revisions=revisions)
    return dataclasses.replace(release, id=rollout_id) if rollout_id else release
