"""`progressive-sync render`: the Workflow the watcher would create for a ProgressiveSync.

Reads the ProgressiveSync from `-f` and, with `--fleet`, plans the rollout offline over that fleet
(the planner resolves percentage maxParallel, the release revision and the rollout id exactly as the
watcher does); then builds the Workflow with `workflow_templates.builder.build_workflow`, checks
its references (`workflow_templates.validate`) and prints it as YAML or JSON on stdout.

Without a fleet it cannot know the fleet, so it assumes, and says on stderr what it assumed: every
stage takes `--assume-clusters` clusters (or its integer maxTargets), the revision is `--revision`
(or a placeholder), the rollout id is `--rollout-id` (or `render`).

Exit codes: 0 printed (or nothing to roll out, said on stderr); 1 invalid input, a plan with errors,
or a Workflow that cannot be built; 2 bad usage.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence
from pathlib import Path

import click
from hera.workflows import Workflow

from orchestrator.api.models import ProgressiveSync
from orchestrator.api.release import Release, spec_hash
from orchestrator.cli.manifest import (
    collector_paused,
    manifest_options,
    read_fleet_file,
    read_progressive_sync,
)
from orchestrator.planning.planner import RolloutPlan, plan_rollout
from workflow_templates import pieces, validate
from workflow_templates.builder import StageSizes, WorkflowBuildError, assumed_sizes, build_workflow
from workflow_templates.render import to_yaml
from workflow_templates.settings import WorkflowSettings

PLACEHOLDER_REVISION = "REVISION"
PLACEHOLDER_ROLLOUT_ID = "render"


def _note(text: str) -> None:
    click.echo(f"# {text}", err=True)


@click.command("render")
@manifest_options(fleet_help="Render the rollout the watcher would start over this fleet file")
@click.option("-o", "--output", type=click.Choice(["yaml", "json"]), default="yaml", show_default=True)
@click.option("--rollout-id", help="Use this rollout id instead of the planned release id.")
@click.option("--revision", help="Use this revision instead of the planned one.")
@click.option(
    "--assume-clusters",
    type=click.IntRange(min=0),
    default=10,
    show_default=True,
    help="Without --fleet: how many clusters each stage takes (percentages resolve against it).",
)
@click.option(
    "--namespace", help="Namespace when the manifest has none.", default="argocd", show_default=True
)
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
    ps_file: Path,
    ps_name: str | None,
    fleet_file: Path | None,
    output: str,
    rollout_id: str | None,
    revision: str | None,
    assume_clusters: int,
    namespace: str,
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
    ps = read_progressive_sync(ps_file, ps_name)
    if not ps.metadata.namespace:
        ps = ps.model_copy(update={"metadata": ps.metadata.model_copy(update={"namespace": namespace})})
        _note(f"assumed: namespace {namespace} (the manifest has none)")
    if not ps.metadata.uid:
        _note("assumed: no uid (the manifest was never applied), so no ownerReference")
    sizes: StageSizes
    if fleet_file is not None:
        with collector_paused():
            fleet = read_fleet_file(fleet_file)
            plan = plan_rollout(
                ps.spec,
                ps_name=ps.metadata.name,
                appset=fleet.app_set(ps.spec.app_set_ref.name),
                clusters=fleet.clusters,
                apps=fleet.apps,
            )
            del fleet  # freed now: the collector, on again for the Workflow build, does not walk it
        if plan.has_errors:
            errors = "; ".join(issue.message for issue in plan.errors)
            raise click.ClickException(
                f"the plan has errors, so the watcher would not start a rollout: {errors}"
            )
        generation = ps.metadata.generation or 1
        if not plan.revisions and not revision:
            _note(
                "nothing is out of date: the watcher would not start a rollout "
                "(pass --revision to render one)"
            )
            return
        release = _release(ps, generation, ((revision,),) if revision else plan.revisions, rollout_id)
        built = build_workflow_or_exit(ps, release, plan, settings)
    else:
        sizes = assumed_sizes(ps, assume_clusters)
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
            ps,
            ps.metadata.generation or 1,
            ((revision or PLACEHOLDER_REVISION,),),
            rollout_id or PLACEHOLDER_ROLLOUT_ID,
        )
        built = build_workflow_or_exit(ps, release, sizes, settings)
    obj = built.to_dict()
    library = validate.library_of(t.to_dict() for t in pieces.workflow_templates(settings))
    problems = validate.problems(obj, library=library)
    if problems:
        raise click.ClickException("the rendered Workflow is broken: " + "; ".join(problems))
    click.echo(json.dumps(obj, indent=2) if output == "json" else to_yaml(built), nl=output == "json")


def _release(
    ps: ProgressiveSync, generation: int, revisions: Sequence[Sequence[str]], rollout_id: str | None
) -> Release:
    """The release the watcher would start (its id as the planner gives it, unless --rollout-id)."""
    release = Release.of(generation=generation, spec_hash=spec_hash(ps.spec), revisions=revisions)
    return dataclasses.replace(release, id=rollout_id) if rollout_id else release


def build_workflow_or_exit(
    ps: ProgressiveSync,
    release: Release,
    plan: RolloutPlan | StageSizes,
    settings: WorkflowSettings,
) -> Workflow:
    """`build_workflow`, with its refusal turned into exit code 1 and a message."""
    try:
        return build_workflow(ps, release=release, plan=plan, settings=settings)
    except WorkflowBuildError as exc:
        raise click.ClickException(str(exc)) from exc
