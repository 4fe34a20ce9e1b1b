"""The operator commands: `status`, `cancel`, `pause`, `unpause`, `approve`, `retry`, `rollback`.

Each parses its flags into `OpsSettings` (the namespace: `-n`, else the kubeconfig context's, else
$PROGRESSIVE_SYNC_NAMESPACE, else argocd; `orchestrator.cli.conventions`), builds the adapter, calls
one action of `orchestrator.ops.actions`, and prints the outcome (a sentence by default, `-o
json|yaml` for scripts, `-o name` the object as `kubectl -o name` prints it). An API server that
does not answer is one line (`-v`: the retries and the full error). `resume`, the old name of
`unpause`, still works, hidden, and says on stderr that it was renamed. Exit codes (also in
`orchestrator.cli.help_catalog`, which every command's --help prints): 0 done (or already so); 1 the
command could not act on that object (no such object, no rollout, nothing to approve, already
finished, API errors); 2 bad usage, including a kubeconfig that cannot be loaded and an unknown
stage. `status --watch` has its own codes, one per way a follow ends
(`orchestrator.ops.view.WatchExit`): 0 Succeeded, 1 Failed, 3 Cancelled, 4 not finished within
`--timeout`, 5 nothing to follow (no such object, API errors), 6 RolledBack; 2 usage.

`rollback` runs the rollback in this process (`steps.manual_rollback`, imported only by it, so the
other commands do not pay for the steps); its exit codes: 0 every cluster restored or left alone
(or nothing to roll back; with --dry-run: the plan was shown), 1 a cluster not restored, or
refused (no rollout, one still running), 2 usage.

`status --watch` follows the rollout until it finishes: on a terminal it redraws one progress bar
per stage, elsewhere it prints one plain line per change.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import click
import yaml
from rich.console import Console

from orchestrator.api.models import GROUP, PLURAL, ProgressiveSync
from orchestrator.api.phases import StagePhase
from orchestrator.api.rollback import RollbackScope
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
from orchestrator.core.clock import Clock, SystemClock
from orchestrator.core.errors import PermanentError, TemporaryError
from orchestrator.kube.client import Kube, KubeError
from orchestrator.ops import actions as ops_actions
from orchestrator.ops import decisions as ops
from orchestrator.ops import tables
from orchestrator.ops import view as ops_view
from orchestrator.ops.live import LiveDisplay
from orchestrator.planning.rollback import (
    FAILED_STAGE_SCOPE,
    RollbackTargets,
    StageView,
    manual_group_targets,
    manual_targets,
)

DEFAULT_WATCH_TIMEOUT = 3600.0
RESOURCE = f"{PLURAL.removesuffix('s')}.{GROUP}"  # what `kubectl get -o name` prints before the name


@dataclass(frozen=True)
class OpsSettings:
    """What every operator command needs, built once from flags and `PROGRESSIVE_SYNC_*` variables."""

    namespace: str
    kubeconfig: str | None
    context: str | None
    workflow_namespace: str | None
    output: ops_view.OutputFormat
    verbose: bool = False


def _options(*outputs: ops_view.OutputFormat) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """The flags every operator command shares, handed to the command as one `settings` argument;
    `-o` takes table, json, yaml and `outputs`."""

    def decorate(command: Callable[..., None]) -> Callable[..., None]:
        @functools.wraps(command)
        def with_settings(
            *,
            namespace: str | None,
            kubeconfig: str | None,
            context: str | None,
            workflow_namespace: str | None,
            output: str,
            verbose: bool,
            **kwargs: Any,
        ) -> None:
            settings = OpsSettings(
                namespace=resolved_namespace(namespace, kubeconfig=kubeconfig, context=context).namespace,
                kubeconfig=kubeconfig,
                context=context,
                workflow_namespace=workflow_namespace,
                output=ops_view.OutputFormat(output),
                verbose=verbose,
            )
            command(settings=settings, **kwargs)

        options: list[Callable[[Callable[..., Any]], Callable[..., Any]]] = [
            namespace_option(),
            kubeconfig_options(),
            click.option(
                "--workflow-namespace",
                envvar="PROGRESSIVE_SYNC_WORKFLOW_NAMESPACE",
                help="Where the rollout Workflows live (default: the ProgressiveSync's namespace).",
            ),
            output_option(*(f.value for f in outputs)),
            verbose_option,
        ]
        decorated: Callable[..., None] = with_settings
        for option in reversed(options):
            decorated = option(decorated)
        return decorated

    return decorate


common_options = _options(ops_view.OutputFormat.WIDE, ops_view.OutputFormat.NAME)


def _connect(settings: OpsSettings) -> Kube:
    try:
        return Kube.from_kubeconfig(settings.kubeconfig, settings.context)
    except KubeError as exc:
        raise click.UsageError(str(exc)) from exc


def _api_failure(exc: KubeError, kube: Kube, target: ops_actions.Target, settings: OpsSettings) -> str:
    return api_failure(
        exc,
        what=target.display,
        host=kube.host,
        kubeconfig=settings.kubeconfig,
        context=settings.context,
        verbose=settings.verbose,
    )


def _dump(data: Any, output: ops_view.OutputFormat) -> str:
    if output is ops_view.OutputFormat.JSON:
        return json.dumps(data, indent=2) + "\n"
    return yaml.safe_dump(data, sort_keys=False)


def _fail(message: str, exit_code: int = 1) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(exit_code)


def _run_action(
    settings: OpsSettings, name: str, act: Callable[[Kube, ops_actions.Target], ops.Outcome]
) -> None:
    """Connect, act, print the outcome; map refusals and API errors to their exit codes."""
    kube = _connect(settings)
    target = ops_actions.Target(settings.namespace, name, settings.workflow_namespace)
    try:
        with api_logs(settings.verbose):
            outcome = act(kube, target)
    except ops_view.OpsRefused as exc:
        _fail(exc.message, exc.exit_code)
        return
    except KubeError as exc:
        _fail(_api_failure(exc, kube, target, settings))
        return
    finally:
        kube.close()
    if settings.output is ops_view.OutputFormat.NAME:
        click.echo(f"{RESOURCE}/{name}")
    elif _is_table(settings.output):
        click.echo(outcome.message)
    else:
        click.echo(_dump(outcome.to_data(), settings.output), nl=False)


# --- status ------------------------------------------------------------------------------------


class _FollowTimedOut(Exception):
    """`status --watch` gave up at --timeout; the message says what to do."""


@click.command("status", epilog=epilog("status"))
@click.argument("name")
@common_options
@click.option("-w", "--watch", is_flag=True, help="Follow the rollout live until it finishes.")
@click.option(
    "--clusters",
    "every_cluster",
    is_flag=True,
    help=(
        "List every cluster of the current rollout (state, reason, note, revisions, times) from its "
        "ProgressiveSyncStage objects; -o wide does the same, -o json|yaml always does."
    ),
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=DEFAULT_WATCH_TIMEOUT,
    show_default=True,
    help="With --watch: give up (exit 4) after this many seconds.",
)
def status(*, name: str, settings: OpsSettings, watch: bool, timeout: float, every_cluster: bool) -> None:
    """Show a ProgressiveSync's rollout: phase, stages, clusters, failures and durations.

    The table reads the ProgressiveSync's summary; --clusters (or -o wide) adds every cluster of the
    current rollout from its records, and -o json|yaml always lists them. With --watch it follows
    the rollout until it finishes; with -o json|yaml it then prints the final status once. Exit
    codes with --watch: 0 Succeeded, 1 Failed, 3 Cancelled, 4 not finished within --timeout, 5
    nothing to follow (no such object, API errors), 6 RolledBack, 2 usage.
    """
    clock = SystemClock()
    # wide, json, yaml list every cluster; name needs none
    clusters = every_cluster or settings.output not in (
        ops_view.OutputFormat.TABLE,
        ops_view.OutputFormat.NAME,
    )
    kube = _connect(settings)
    target = ops_actions.Target(settings.namespace, name, settings.workflow_namespace)
    # Under --watch a refusal must not look like a Failed rollout (1): scripts branch on the code.
    unreadable = int(ops_view.WatchExit.UNREADABLE) if watch else 1
    try:
        if watch:
            with api_logs(settings.verbose):
                view = _follow(kube, target, settings, clock, timeout, every_cluster=clusters)
        else:
            with api_logs(settings.verbose):
                view = ops_actions.read_view(kube, target, clusters=clusters)
            _print_view(view, settings.output, clock.now())
            return
    except _FollowTimedOut as exc:
        _fail(str(exc), int(ops_view.WatchExit.TIMEOUT))
        return
    except ops_view.OpsRefused as exc:
        _fail(exc.message, exc.exit_code if exc.exit_code == 2 else unreadable)
        return
    except KubeError as exc:
        _fail(_api_failure(exc, kube, target, settings), unreadable)
        return
    finally:
        kube.close()
    sys.exit(int(ops_view.watch_exit_code(view)))


def _is_table(output: ops_view.OutputFormat) -> bool:
    return output in (ops_view.OutputFormat.TABLE, ops_view.OutputFormat.WIDE)


def _print_view(view: ops_view.RolloutView, output: ops_view.OutputFormat, now: datetime) -> None:
    if output is ops_view.OutputFormat.NAME:
        click.echo(f"{RESOURCE}/{view.name}")
    elif _is_table(output):
        _print_table(view, now)
    else:
        click.echo(_dump(ops_view.render_data(view, now), output), nl=False)


def _print_table(view: ops_view.RolloutView, now: datetime) -> None:
    """The status table: drawn by rich on a terminal (colours, fitted to its width), plain text elsewhere."""
    if sys.stdout.isatty():
        Console(highlight=False).print(tables.status_table(view, now))
    else:
        click.echo(tables.render_table(view, now), nl=False)


def _follow(
    kube: Kube,
    target: ops_actions.Target,
    settings: OpsSettings,
    clock: Clock,
    timeout: float,
    *,
    every_cluster: bool,
) -> ops_view.RolloutView:
    """Follow on the ProgressiveSync alone (one small read per tick, whatever the fleet); the last
    view is read again with every cluster when they are to be shown."""
    table = _is_table(settings.output)
    try:
        with LiveDisplay(lambda text: click.echo(text, nl=False), clock, tty=sys.stdout.isatty()) as display:
            view = ops_actions.follow(
                kube,
                target,
                clock=clock,
                timeout=timeout,
                on_view=display.show if table else lambda _view: None,
            )
    except ops_actions.FollowTimeout as exc:
        if not table:
            _print_view(exc.view, settings.output, clock.now())
        raise _FollowTimedOut(
            f"{exc}; it is {ops_view.phase_text(exc.view)}: run the command again, or raise --timeout"
        ) from exc
    shown = ops_actions.read_view(kube, target, clusters=True) if every_cluster else view
    if table:
        click.echo("")
    _print_view(shown, settings.output, clock.now())
    return view


# --- actions -----------------------------------------------------------------------------------


@click.command("cancel", epilog=epilog("cancel"))
@click.argument("name")
@common_options
def cancel(*, name: str, settings: OpsSettings) -> None:
    """Stop the running rollout (like `argo stop`); its exit handler marks it Cancelled."""
    _run_action(settings, name, ops_actions.cancel)


@click.command("pause", epilog=epilog("pause"))
@click.argument("name")
@common_options
def pause(*, name: str, settings: OpsSettings) -> None:
    """Pause a ProgressiveSync: no new step starts; running syncs finish. Undo with unpause."""
    _run_action(settings, name, lambda kube, target: ops_actions.set_paused(kube, target, paused=True))


@click.command("unpause", epilog=epilog("unpause"))
@click.argument("name")
@common_options
def unpause(*, name: str, settings: OpsSettings) -> None:
    """Unpause a paused ProgressiveSync: the rollout carries on where it stood.

    Not a gate: `progressive-sync approve` (or `argo resume` on the gate's node) opens a stage's
    manual approval gate.
    """
    _run_action(settings, name, lambda kube, target: ops_actions.set_paused(kube, target, paused=False))


RENAMED = (
    "note: `progressive-sync resume` is now `progressive-sync unpause` (it clears spec.paused); "
    "to open a stage's approval gate use `progressive-sync approve` (or `argo resume` on its node)"
)


@click.command("resume", hidden=True, epilog=epilog("unpause"))
@click.argument("name")
@common_options
def resume(*, name: str, settings: OpsSettings) -> None:
    """The old name of unpause: does what unpause does, after saying so on stderr."""
    click.echo(RENAMED, err=True)
    _run_action(settings, name, lambda kube, target: ops_actions.set_paused(kube, target, paused=False))


@click.command("approve", epilog=epilog("approve"))
@click.argument("name")
@click.option("--stage", help="The stage whose approval gate to open (default: the one waiting).")
@common_options
def approve(*, name: str, stage: str | None, settings: OpsSettings) -> None:
    """Open a stage's manual approval gate (like `argo resume` on that node)."""
    clock = SystemClock()
    _run_action(settings, name, lambda kube, target: ops_actions.approve(kube, target, stage, clock))


@click.command("retry", epilog=epilog("retry"))
@click.argument("name")
@common_options
def retry(*, name: str, settings: OpsSettings) -> None:
    """Run a failed (or cancelled) rollout again, as a new attempt of the same release."""
    clock = SystemClock()
    _run_action(settings, name, lambda kube, target: ops_actions.retry(kube, target, clock))


@click.command("rollback", epilog=epilog("rollback"))
@click.argument("name")
@click.option(
    "--scope",
    type=click.Choice([scope.value for scope in RollbackScope]),
    help=(
        "FailedStage: the clusters of the stage the rollout ended in (the one that failed, else the "
        "last that started); Reached: that stage and every one before it, later stages first. "
        "Default: spec.rollback.scope, else FailedStage."
    ),
)
@click.option(
    "--group",
    "groups",
    multiple=True,
    metavar="NAME",
    help=(
        "With spec.groupBy: roll back this group (repeatable). Default: the groups that did not "
        "succeed (those the exit handler would pick), or every group when all of them succeeded."
    ),
)
@click.option("--dry-run", is_flag=True, help="Print what it would do to each Application; write nothing.")
@_options(ops_view.OutputFormat.WIDE)
def rollback(
    *, name: str, scope: str | None, groups: tuple[str, ...], dry_run: bool, settings: OpsSettings
) -> None:
    """Roll the last rollout back by hand: its clusters back to what they ran before it.

    Does what the exit handler's rollback does (spec.rollback), for the rollout the status records,
    also after a Succeeded rollout (with spec.groupBy per group: --group picks them, by default the
    groups that did not succeed): each Application this rollout synced is synced back to the
    revision(s) it ran before, stage by stage, later stages first, the stage's rollbackParallel
    clusters at a time; one line per cluster as it ends, then the end recorded in the status
    (phase RolledBack, or Failed with RollbackFailed; status.rollback.trigger Manual). Refused
    while the rollout or its Workflow still runs (cancel it first). With --dry-run it prints each
    Application in scope and what the rollback would do to it, and writes nothing. Exit codes: 0
    every cluster restored or left alone (or nothing to roll back; --dry-run: shown), 1 a cluster
    not restored, or refused (no rollout, one still running, API errors), 2 usage.
    """
    with api_logs(settings.verbose):
        _rollback(name, scope, groups, dry_run, settings)


def _rollback(
    name: str, scope: str | None, groups: tuple[str, ...], dry_run: bool, settings: OpsSettings
) -> None:
    from steps import manual_rollback  # noqa: PLC0415 - only this command needs the steps

    clock = SystemClock()
    kube = _connect(settings)
    target = ops_actions.Target(settings.namespace, name, settings.workflow_namespace)
    table = _is_table(settings.output)
    try:
        ps = ops_actions.read_for_rollback(kube, target)
        outcomes = manual_rollback.read_stage_outcomes(kube, ps)
        chosen = scope or (ps.spec.rollback.scope.value if ps.spec.rollback else FAILED_STAGE_SCOPE)
        targets = _rollback_targets(ps, outcomes, scope=chosen, groups=groups)
        names = manual_rollback.rollout_stage_names(ps)
        order = [names[index] for index in targets.stages]
        rollout_id = ps.status.rollout.id if ps.status and ps.status.rollout else ""
        data: dict[str, Any] = {
            "action": "rollback",
            "namespace": target.namespace,
            "name": target.name,
            "rollout": rollout_id,
            "scope": chosen,
            "dryRun": dry_run,
            "stages": order,
            "message": targets.why,
        }
        if targets.groups:
            data["groups"] = [
                {
                    "name": group.name,
                    "phase": group.phase.value,
                    "rolledBack": group.rolls_back,
                    "targets": group.clusters,
                    "reason": group.why,
                }
                for group in targets.groups
            ]
        if dry_run:
            rows = manual_rollback.preview(kube, ps, targets, clock=clock)
            _print_rollback_preview(rows, data, settings.output)
            return
        if not targets.stages:
            if table:
                click.echo(f"rollout {rollout_id} of ProgressiveSync {target.display}: {targets.why}")
            else:
                click.echo(_dump({**data, "changed": False, "clusters": []}, settings.output), nl=False)
            return
        if table:
            click.echo(
                f"rolling back rollout {rollout_id} of ProgressiveSync {target.display}: {targets.why}; "
                f"stages {', '.join(order)}, in this order"
            )
        result = manual_rollback.run(
            kube,
            ps,
            targets,
            scope=chosen,
            clock=clock,
            on_result=(lambda ended: click.echo(ended.summary)) if table else (lambda _ended: None),
        )
    except ops_view.OpsRefused as exc:
        _fail(exc.message, exc.exit_code)
        return
    except KubeError as exc:
        _fail(_api_failure(exc, kube, target, settings))
        return
    except (PermanentError, TemporaryError) as exc:
        _fail(f"{target.display}: {exc}")
        return
    finally:
        kube.close()
    if table:
        click.echo(f"rollout {rollout_id} {result.phase}: {result.message}")
    else:
        clusters = [
            {"cluster": ended.cluster, "state": ended.state.value, "reason": ended.reason}
            for ended in result.results
        ]
        summary = {**data, "changed": True, "phase": result.phase, "message": result.message}
        click.echo(_dump({**summary, "clusters": clusters}, settings.output), nl=False)
    sys.exit(1 if result.failed else 0)


def _rollback_targets(
    ps: ProgressiveSync, outcomes: Mapping[int, Any], *, scope: str, groups: tuple[str, ...]
) -> RollbackTargets:
    """The clusters `progressive-sync rollback` restores: per group with spec.groupBy (`--group`
    checked against the rollout's groups), else the stage the rollout ended in."""
    stages = (ps.status.stages if ps.status else None) or []
    # A stage that never started reads Pending: the end closes it Cancelled ("not started"),
    # and the rollout did not end in it. A Skipped one stays Skipped: a group whose later stage had
    # nothing to do still Succeeded.
    views = [
        StageView(
            stage.name,
            stage.phase if stage.started_at or stage.phase == StagePhase.SKIPPED else StagePhase.PENDING,
        )
        for stage in stages
    ]
    picked = ops.decide_rollback_groups(ps, groups)
    if ps.spec.group_by is not None:
        # Each group on its own (docs/groups.md, "Groups and rollback").
        return manual_group_targets(views, scope=scope, outcomes=outcomes, groups=picked)
    return manual_targets(views, scope=scope, outcomes=outcomes)


ROLLBACK_PREVIEW_COLUMNS = ("STAGE", "CLUSTER", "APPLICATION", "ACTION", "REASON")


def _print_rollback_preview(rows: list[Any], data: dict[str, Any], output: ops_view.OutputFormat) -> None:
    """`rollback --dry-run`: a header line and one row per Application, or the data."""
    if not _is_table(output):
        click.echo(_dump({**data, "applications": [row.to_data() for row in rows]}, output), nl=False)
        return
    click.echo(f"dry run, nothing written: rollout {data['rollout']}: {data['message']}")
    if rows:
        cells = [(row.stage, row.cluster, row.application or "-", row.action, row.reason) for row in rows]
        click.echo(tables.rows_text(ROLLBACK_PREVIEW_COLUMNS, cells), nl=False)
