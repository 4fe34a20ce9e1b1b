"""`progressive-sync plan`: which clusters each stage of a ProgressiveSync would take, and why.

Reads the ProgressiveSync from `-f`, the fleet either from `--fleet` (a multi-document YAML file as
`kubectl get -o yaml` prints it: cluster Secrets, Applications, optionally the ApplicationSet) or
live from the cluster through `orchestrator.kube.client.Kube` (Applications and cluster Secrets in the
Argo CD namespace, the ApplicationSet in the ProgressiveSync's namespace), runs the pure planner
and prints the plan as a table, JSON or YAML (the stable shape in docs/design/planner.md), the
planned clusters one a line (`-o name`) or a Mermaid diagram. A live plan reads the
ProgressiveSync's namespace from the manifest, else `-n` and its defaults
(`orchestrator.cli.namespaces`); an ApplicationSet missing there is an error (`AppSetNotFound`,
exit 1), not the offline plan's `AppSetNotGiven` warning.
With `spec.groupBy` the table opens with one line per group and the JSON carries `groupBy`,
`maxParallelGroups` and `groups`; the stages are each group's, named "<group>/<stage>"
(docs/groups.md). With `spec.rollback` the table ends with one line saying when and how a rollout
rolls back, and the JSON carries `rollback` and each stage's `rollbackParallel`. A stage
selecting clusters by its Applications' labels (`targets.applications.selector`) gets a line in
the table saying so and `applicationSelector` in the JSON. With `spec.windows` the table ends with
the windows and whether they are open now (or `--at`) and when they open next; the JSON carries
`windows` (docs/windows.md).

Exit codes (orchestrator.cli.help_catalog): 0 the plan can run; 1 the plan has errors, or an input
is invalid or unreadable, or the API server did not answer; 2 bad usage (including a kubeconfig
that cannot be loaded).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

import click
import yaml

from orchestrator.api.analysis import describe_analysis, resolve_analysis
from orchestrator.api.depends import describe_dependency
from orchestrator.api.groups import group_stage_name, split_stage_name
from orchestrator.api.models import Dependency, ProgressiveSync, ProgressiveSyncSpec
from orchestrator.api.release import revision_key
from orchestrator.api.rollback import describe_rollback, rollback_deadline_seconds
from orchestrator.api.selectors import describe_targets
from orchestrator.api.windows import describe_windows, outlook
from orchestrator.argocd.fleet import (
    AppSetView,
    Fleet,
    FleetError,
    app_set_view_from_object,
    app_view_from_object,
    cluster_from_secret,
)
from orchestrator.cli.conventions import (
    api_failure,
    api_logs,
    kubeconfig_options,
    namespace_option,
    output_option,
    resolved_namespace,
    verbose_option,
)
from orchestrator.cli.help_catalog import epilog
from orchestrator.cli.manifest import (
    collector_paused,
    manifest_options,
    read_fleet_file,
    read_progressive_sync,
)
from orchestrator.core.clock import SystemClock
from orchestrator.planning.plan import IssueCode, PlanIssue
from orchestrator.planning.planner import RolloutPlan, StagePlan, StageState, plan_fleet
from orchestrator.planning.sizing import StageSize, rollback_parallel

# Lists of cluster names in the table and the diagram stop here; `-o json` always has them all.
NAMES_SHOWN = 20


class OutputFormat(StrEnum):
    """What `-o` accepts."""

    TABLE = "table"
    JSON = "json"
    YAML = "yaml"
    NAME = "name"  # the clusters the rollout would take, in order, one a line
    MERMAID = "mermaid"


@dataclass(frozen=True)
class PlanSettings:
    """Everything `plan` needs, built once from flags and the environment."""

    source: str
    ps_name: str | None
    fleet_file: Path | None
    kubeconfig: str | None
    context: str | None
    namespace: str | None  # -n as given; the live plan resolves it when the manifest has none
    argocd_namespace: str | None
    output: OutputFormat
    verbose: bool = False


@click.command("plan", epilog=epilog("plan"))
@manifest_options(fleet_help="Plan offline against this fleet file")
@namespace_option("Where the ProgressiveSync and its ApplicationSet live, when the manifest names none")
@kubeconfig_options(" for the live plan")
@click.option(
    "--argocd-namespace",
    envvar="PROGRESSIVE_SYNC_ARGOCD_NAMESPACE",
    help="Where Applications and cluster Secrets live (default: the ProgressiveSync's namespace).",
)
@output_option(
    *(f.value for f in (OutputFormat.NAME, OutputFormat.MERMAID)),
    help=(
        "table for people, json or yaml for scripts, name: the clusters in rollout order, mermaid: a diagram."
    ),
)
@click.option(
    "--at",
    type=click.DateTime(formats=["%Y-%m-%dT%H:%M:%SZ", "%Y-%m-%dT%H:%M:%S%z"]),
    default=None,
    help="Evaluate spec.windows at this RFC 3339 time instead of now (e.g. 2030-01-02T09:00:00Z).",
)
@verbose_option
@click.pass_context
def plan(
    ctx: click.Context,
    *,
    filenames: str,
    ps_name: str | None,
    fleet_file: Path | None,
    namespace: str | None,
    kubeconfig: str | None,
    context: str | None,
    argocd_namespace: str | None,
    output: str,
    at: datetime | None,
    verbose: bool,
) -> None:
    """Show which clusters each stage would take, in which order, and why.

    Reads the ProgressiveSync from -f and the fleet from --fleet (offline) or from the cluster
    (live: Applications and cluster Secrets in --argocd-namespace, the ApplicationSet beside the
    ProgressiveSync). A live plan whose ApplicationSet does not exist is an error (AppSetNotFound).
    """
    live_flags = [
        f"--{name}"
        for name in ("kubeconfig", "context")
        if ctx.get_parameter_source(name) is click.core.ParameterSource.COMMANDLINE
    ]
    if fleet_file and live_flags:
        raise click.UsageError(f"--fleet plans offline; drop {' and '.join(live_flags)} or --fleet")
    settings = PlanSettings(
        source=filenames,
        ps_name=ps_name,
        fleet_file=fleet_file,
        kubeconfig=kubeconfig,
        context=context,
        namespace=namespace,
        argocd_namespace=argocd_namespace,
        output=OutputFormat(output),
        verbose=verbose,
    )
    ps = read_progressive_sync(settings.source, settings.ps_name)
    if at is not None and at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    if settings.namespace and ps.metadata.namespace and settings.namespace != ps.metadata.namespace:
        # kubectl refuses the same mismatch: which one was meant is not ours to guess.
        raise click.UsageError(
            f"the manifest's namespace {ps.metadata.namespace!r} is not -n {settings.namespace!r}; "
            "drop -n or change the manifest"
        )
    with collector_paused():
        missing: tuple[PlanIssue, ...] = ()
        if settings.fleet_file:
            fleet = read_fleet_file(settings.fleet_file)
        else:
            fleet, missing = read_live_fleet(settings, ps)
        result = plan_fleet(ps.spec, fleet, ps_name=ps.metadata.name)
        if missing:  # the cluster has no such ApplicationSet: an error, not "not given"
            result = dataclasses.replace(
                result,
                warnings=tuple(w for w in result.warnings if w.code is not IssueCode.APP_SET_NOT_GIVEN),
                errors=(*missing, *result.errors),
            )
        # A manifest that was never applied has no generation; the API server would give it 1.
        generation = ps.metadata.generation or 1
        now = at or SystemClock().now()
        shown = render(result, settings.output, generation=generation, spec=ps.spec, now=now)
    if settings.output is OutputFormat.TABLE:
        shown += (
            application_selectors_section(ps.spec)
            + analysis_section(ps)
            + rollback_section(ps.spec, result)
            + dependencies_section(ps.spec, result)
            + windows_section(ps.spec, now)
        )
    click.echo(shown, nl=False)
    if result.has_errors:
        ctx.exit(1)


# --- inputs ----------------------------------------------------------------------------------


def app_set_not_found(namespace: str, name: str) -> PlanIssue:
    """The live plan's error when the cluster has no ApplicationSet of the name the spec gives."""
    return PlanIssue(
        IssueCode.APP_SET_NOT_FOUND,
        f"ApplicationSet {namespace}/{name} was not found: create it, or fix spec.appSetRef.name "
        "(or -n, when the ProgressiveSync lives elsewhere)",
        (name,),
    )


def live_namespaces(settings: PlanSettings, ps: ProgressiveSync) -> tuple[str, str]:
    """Where the live plan reads the ApplicationSet (the ProgressiveSync's namespace: the manifest's,
    else -n and its defaults) and the Applications and cluster Secrets (--argocd-namespace, else
    the same)."""
    ps_namespace = (
        ps.metadata.namespace
        or resolved_namespace(
            settings.namespace, kubeconfig=settings.kubeconfig, context=settings.context
        ).namespace
    )
    return ps_namespace, settings.argocd_namespace or ps_namespace


def read_live_fleet(settings: PlanSettings, ps: ProgressiveSync) -> tuple[Fleet, tuple[PlanIssue, ...]]:
    """The fleet as the API server has it now, read through the adapter, and the error when the
    ApplicationSet is missing."""
    from orchestrator.kube.client import (  # noqa: PLC0415 - the client is slow to import; offline plans skip it
        APPLICATION_SETS,
        APPLICATIONS,
        Kube,
        KubeError,
        NotFound,
    )

    ps_namespace, argocd_namespace = live_namespaces(settings, ps)
    try:
        kube = Kube.from_kubeconfig(settings.kubeconfig, settings.context)
    except KubeError as exc:
        raise _UsageProblem(str(exc)) from exc
    missing: tuple[PlanIssue, ...] = ()
    try:
        with api_logs(settings.verbose):
            app_objects, _ = kube.list(APPLICATIONS, argocd_namespace)
            clusters = tuple(cluster_from_secret(s) for s in kube.list_cluster_secrets(argocd_namespace))
            try:
                app_set = app_set_view_from_object(
                    kube.get(APPLICATION_SETS, ps_namespace, ps.spec.app_set_ref.name)
                )
                app_sets: tuple[AppSetView, ...] = (app_set,)
            except NotFound:
                app_sets = ()
                missing = (app_set_not_found(ps_namespace, ps.spec.app_set_ref.name),)
    except KubeError as exc:
        raise click.ClickException(
            api_failure(
                exc,
                what="reading the fleet",
                host=kube.host,
                kubeconfig=settings.kubeconfig,
                context=settings.context,
                verbose=settings.verbose,
            )
        ) from exc
    finally:
        kube.close()
    try:
        apps = tuple(app_view_from_object(obj) for obj in app_objects)
    except FleetError as exc:
        raise click.ClickException(f"reading Applications in {argocd_namespace}: {exc}") from exc
    return Fleet(clusters=clusters, apps=apps, app_sets=app_sets), missing


class _UsageProblem(click.ClickException):
    """A configuration problem (no usable kubeconfig): exit 2 like a usage error, without the usage text."""

    exit_code = 2


# --- outputs ---------------------------------------------------------------------------------


def application_selectors_section(spec: ProgressiveSyncSpec) -> str:
    """What each stage with `targets.applications.selector` selects, one line each ("" when none has)."""
    lines = [
        f"  {stage.name}: {describe_targets(stage.targets)}"
        for stage in spec.stages
        if stage.targets.applications is not None
    ]
    return "\nstages by Application labels:\n" + "\n".join(lines) + "\n" if lines else ""


def application_selectors_json(spec: ProgressiveSyncSpec, plan: dict[str, Any]) -> None:
    """Add `applicationSelector` (as in the spec) to each `-o json` stage that has one."""
    selectors = {
        stage.name: stage.targets.applications.selector.model_dump(by_alias=True, exclude_none=True)
        for stage in spec.stages
        if stage.targets.applications is not None
    }
    for stage in plan["stages"]:
        if stage["name"] in selectors:
            stage["applicationSelector"] = selectors[stage["name"]]


def analysis_section(ps: ProgressiveSync) -> str:
    """Where analysis gates run, one line per stage that has one ("" when none has)."""
    lines = []
    for stage in ps.spec.stages:
        analysis = resolve_analysis(ps.spec.analysis, stage.analysis)
        if analysis is not None:
            lines.append(f"  {stage.name}: {describe_analysis(analysis, bake_seconds=stage.bake_seconds)}")
    return "\nanalysis:\n" + "\n".join(lines) + "\n" if lines else ""


def waiting_stages(spec: ProgressiveSyncSpec, dependency: Dependency, groups: Iterable[str]) -> list[str]:
    """The stages of this rollout that wait for `dependency`: its beforeStage (else the first) or,
    with spec.groupBy, that stage of each of the plan's groups, each waiting on its own."""
    stage = spec.waiting_stage(dependency)
    if spec.group_by is None:
        return [stage]
    return [group_stage_name(group, stage) for group in groups] or [stage]


def dependencies_section(spec: ProgressiveSyncSpec, result: RolloutPlan | None = None) -> str:
    """Which stage waits for which other ProgressiveSync, one line each, with spec.groupBy one per
    group of `result` ("" without spec.dependsOn)."""
    groups = list(result.groups) if result is not None else []
    lines = [
        f"  {describe_dependency(d, stage, group_by=spec.group_by)}"
        for d in spec.depends_on or []
        for stage in waiting_stages(spec, d, groups)
    ]
    return "\ndependsOn:\n" + "\n".join(lines) + "\n" if lines else ""


def dependencies_json(
    spec: ProgressiveSyncSpec, plan: dict[str, Any], result: RolloutPlan | None = None
) -> None:
    """Add `dependsOn` to the `-o json` plan (only with spec.dependsOn): each entry with the stage of
    this rollout that waits for it (`beforeStage`, resolved; with spec.groupBy one entry per group
    of `result`, with its `group`) and its timeoutSeconds."""
    if not spec.depends_on:
        return
    groups = list(result.groups) if result is not None else []
    plan["dependsOn"] = [
        {
            "name": d.name,
            **({"stage": d.stage} if d.stage else {}),
            "beforeStage": stage,
            **({"group": split_stage_name(stage)[0]} if split_stage_name(stage)[0] is not None else {}),
            "timeoutSeconds": d.timeout_seconds,
        }
        for d in spec.depends_on
        for stage in waiting_stages(spec, d, groups)
    ]


def rollback_parallels(spec: ProgressiveSyncSpec, result: RolloutPlan) -> dict[str, int]:
    """Each stage's rollbackParallel as the rollout contract would resolve it from this plan; 0 for
    a stage with nothing to size (like its maxParallel). {} without spec.rollback."""
    if spec.rollback is None:
        return {}
    return {
        stage.name: (
            rollback_parallel(spec.rollback.max_parallel, StageSize(len(stage.targets), stage.max_parallel))
            if stage.targets
            else 0
        )
        for stage in result.stages
    }


def rollback_section(spec: ProgressiveSyncSpec, result: RolloutPlan) -> str:
    """One line: when the rollout rolls back, which clusters, how many at once ("" without rollback)."""
    if spec.rollback is None:
        return ""
    sized = {name: parallel for name, parallel in rollback_parallels(spec, result).items() if parallel}
    if not sized:
        parallel = "each stage's maxParallel at a time"
        if spec.rollback.max_parallel is not None:
            parallel = f"{spec.rollback.max_parallel} of a stage at a time"
    elif len(set(sized.values())) == 1:
        parallel = f"{next(iter(sized.values()))} at a time per stage"
    else:
        (first, n), *rest = sized.items()
        parallel = f"{n} at a time in {first}" + "".join(f", {m} in {name}" for name, m in rest)
    deadline = f"; each cluster within {rollback_deadline_seconds(spec)}s"
    return (
        "\n" + describe_rollback(spec.rollback, parallel, grouped=spec.group_by is not None) + deadline + "\n"
    )


def rollback_json(spec: ProgressiveSyncSpec, plan: dict[str, Any], result: RolloutPlan) -> None:
    """Add `rollback` and each stage's `rollbackParallel` to the `-o json` plan (only with spec.rollback)."""
    if spec.rollback is None:
        return
    rollback: dict[str, Any] = {"on": [t.value for t in spec.rollback.on], "scope": spec.rollback.scope.value}
    if spec.rollback.max_parallel is not None:
        rollback["maxParallel"] = spec.rollback.max_parallel
    rollback["progressDeadlineSeconds"] = rollback_deadline_seconds(spec)
    plan["rollback"] = rollback
    parallels = rollback_parallels(spec, result)
    for stage in plan["stages"]:
        stage["rollbackParallel"] = parallels[stage["name"]]


def windows_section(spec: ProgressiveSyncSpec, now: datetime) -> str:
    """The rollout's windows and what they say at `now` ("" without spec.windows)."""
    if not spec.windows:
        return ""
    lines = [f"  {line}" for line in describe_windows(spec.windows)]
    lines.append(f"  {outlook(spec.windows, now).sentence()}")
    return (
        "\nwindows (spec.windows; AppProject sync windows are checked too when a sync is due):\n"
        + "\n".join(lines)
        + "\n"
    )


def windows_json(spec: ProgressiveSyncSpec, plan: dict[str, Any], now: datetime) -> None:
    """Add `windows` (as in the spec, and whether they are open at `now`) to the `-o json` plan
    (only with spec.windows)."""
    if not spec.windows:
        return
    plan["windows"] = {
        "windows": [
            window.model_dump(by_alias=True, exclude_none=True, mode="json") for window in spec.windows
        ],
        **outlook(spec.windows, now).to_dict(),
    }


def render(
    result: RolloutPlan,
    output: OutputFormat,
    *,
    generation: int,
    spec: ProgressiveSyncSpec | None = None,
    now: datetime | None = None,
) -> str:
    """The plan in the chosen format, ending with a newline (JSON with the rollback and the windows of
    `spec`, the windows evaluated at `now`)."""
    match output:
        case OutputFormat.JSON | OutputFormat.YAML:
            data = result.to_dict(generation=generation)
            if spec is not None:
                application_selectors_json(spec, data)
                rollback_json(spec, data, result)
                dependencies_json(spec, data, result)
                windows_json(spec, data, now or SystemClock().now())
            if output is OutputFormat.YAML:
                return yaml.safe_dump(data, sort_keys=False)
            return json.dumps(data, indent=2) + "\n"
        case OutputFormat.NAME:
            return "".join(f"{target}\n" for stage in result.stages for target in stage.targets)
        case OutputFormat.MERMAID:
            return render_mermaid(result)
        case OutputFormat.TABLE:
            return render_table(result, generation=generation)


# How many skipped clusters the table lists (as it lists at most 20 targets per stage).
_SKIPPED_SHOWN = 20


def render_table(result: RolloutPlan, *, generation: int) -> str:
    """A summary line, one row per stage, the targets of each stage, then warnings and errors."""
    header = ("STAGE", "STATE", "TARGETS", "MAX TARGETS", "MAX PARALLEL", "REASON")
    rows = [
        (s.name, s.state.value, str(len(s.targets)), str(s.max_targets), str(s.max_parallel), s.reason)
        for s in result.stages
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header) - 1)]
    table = [
        "  ".join([*(cell.ljust(w) for cell, w in zip(row, widths, strict=False)), row[-1]]).rstrip()
        for row in [header, *rows]
    ]
    targets = [f"{s.name}: {_shown(s.targets)}" for s in result.stages if s.targets]
    skipped = [f"  - {name}: {why}" for name, why in list(result.skipped.items())[:_SKIPPED_SHOWN]]
    if len(result.skipped) > _SKIPPED_SHOWN:
        skipped.append(f"  - and {len(result.skipped) - _SKIPPED_SHOWN} more (-o json lists them all)")
    sections = [
        [_summary(result, generation)],
        groups_section(result),
        table,
        targets,
        ["skipped:", *skipped] if skipped else [],
    ]
    for title, issues in (("warnings", result.warnings), ("errors", result.errors)):
        if issues:
            sections.append([f"{title}:", *(f"  - [{issue.code.value}] {issue.message}" for issue in issues)])
    # One blank line between sections; a section with nothing in it (no targets) is left out.
    return "\n\n".join("\n".join(lines) for lines in sections if lines) + "\n"


def groups_section(result: RolloutPlan) -> list[str]:
    """With spec.groupBy: how many groups run at once, then one line per group (its clusters and
    what its stages take); [] without groups."""
    if result.group_by is None:
        return []
    at_once = min(result.max_parallel_groups or len(result.groups), len(result.groups))
    lines = [
        f"groups by {result.group_by}: {_count(len(result.groups), 'group')}, {at_once} at a time, "
        "each with its own stages and failure budget:"
    ]
    for group, clusters in result.groups.items():
        stages = result.stages_of_group(group)
        taken = sum(len(stage.targets) for stage in stages)
        lines.append(f"  {group}: {_count(len(clusters), 'cluster')}, {taken} to update ({_shown(clusters)})")
    return lines


def _summary(result: RolloutPlan, generation: int) -> str:
    release = (
        ", ".join(_short_revision(revision_key(r)) for r in result.revisions)
        or "none (nothing is out of date)"
    )
    rollout_id = f" (id {result.release_id(generation)}, generation {generation})" if result.revisions else ""
    return (
        f"ProgressiveSync {result.ps_name}, ApplicationSet {result.app_set}: "
        f"{_count(len(result.clusters), 'cluster')}, {len(result.out_of_date)} out of date; "
        f"release {release}{rollout_id}"
    )


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def _short_revision(revision: str) -> str:
    # Multi-source revisions are joined by ","; shorten each commit the way git log does.
    return ",".join(part[:7] if len(part) == 40 else part for part in revision.split(","))


def _shown(names: tuple[str, ...]) -> str:
    shown = ", ".join(names[:NAMES_SHOWN])
    return f"{shown} and {len(names) - NAMES_SHOWN} more" if len(names) > NAMES_SHOWN else shown


def render_mermaid(result: RolloutPlan) -> str:
    """A Mermaid flowchart: one box per stage holding its targets in order, stages chained."""
    lines = ["flowchart TD"]
    for index, stage in enumerate(result.stages, start=1):
        stage_id = f"stage{index}"
        lines.append(f'  subgraph {stage_id}["{_mermaid_text(_stage_title(index, stage))}"]')
        lines.append("    direction LR")
        if stage.targets:
            for position, target in enumerate(stage.targets[:NAMES_SHOWN], start=1):
                lines.append(f'    {stage_id}_{position}["{_mermaid_text(target)}"]')
            if len(stage.targets) > NAMES_SHOWN:
                lines.append(f'    {stage_id}_more["... and {len(stage.targets) - NAMES_SHOWN} more"]')
        else:
            lines.append(f'    {stage_id}_none["{_mermaid_text(stage.reason)}"]')
        lines.append("  end")
    # Each stage after the one before it; with groups, only within a group (the groups run side by side).
    for index in range(1, len(result.stages)):
        if result.stages[index - 1].group == result.stages[index].group:
            lines.append(f"  stage{index} --> stage{index + 1}")
    for index, stage in enumerate(result.stages, start=1):
        if stage.state is not StageState.PLANNED:
            lines.append(f"  style stage{index} fill:#eeeeee,stroke:#999999,stroke-dasharray: 4 4")
    return "\n".join(lines) + "\n"


def _stage_title(index: int, stage: StagePlan) -> str:
    if stage.state is StageState.PLANNED:
        return (
            f"{index}. {stage.name}: {_count(len(stage.targets), 'cluster')}, {stage.max_parallel} at a time"
        )
    return f"{index}. {stage.name}: {stage.state.value}"


def _mermaid_text(text: str) -> str:
    # Inside "..." labels Mermaid reads entity codes; a raw quote would end the label.
    return text.replace('"', "#quot;").replace("<", "#lt;").replace(">", "#gt;")
