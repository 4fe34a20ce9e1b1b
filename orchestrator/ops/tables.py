"""The operator commands' tables and progress bars, drawn with rich.

`status_table` is what `progressive-sync status` prints (a header, the stages, and the clusters in
flight and failed from the summary, or every cluster of the rollout from its records) and
`stage_bars` the block `status --watch` and the demo redraw on a terminal (one progress bar per
stage). Both are rich renderables built from the rows `orchestrator.ops.view` computes, so
what is shown stays a pure decision and only the drawing is here. rich measures cells by their
display width (a stage named in CJK or with an emoji still lines up, where `str.ljust` counts code
points), fits a table to the terminal instead of overflowing it, colours phases only when the
output is a terminal, and draws progress bars the same way everywhere.

`to_text` renders without colour or terminal codes, and without the width limit of a terminal:
what goes to a pipe, a file or a test. Columns are separated by two spaces and headers are plain,
as the hand-aligned tables were, so scripts reading `status` see the same text.

Pure (a renderable is a value; rendering writes into a string). Callers: `orchestrator.cli.ops_cmd`,
`orchestrator.ops.live`, the demo (`stage_durations` for its summary), tests.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from datetime import datetime

from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from orchestrator.ops import view as ops_view
from orchestrator.ops.analysis_runs import RUN_COLUMNS, run_rows

# Off a terminal nothing is wrapped: a line of the table is one line of text whatever its length.
TEXT_WIDTH = 10_000
BAR_WIDTH = 20

PHASE_STYLES = {
    "Succeeded": "green",
    "Failed": "bold red",
    "Cancelled": "yellow",
    "Progressing": "cyan",
    "Paused": "yellow",
    "WaitingApproval": "bold magenta",
    "Pending": "dim",
    "Skipped": "dim",
    # An AnalysisRun's and its metrics' phases.
    "Successful": "green",
    "Error": "bold red",
    "Inconclusive": "bold magenta",
    "Running": "cyan",
}


def _phase(text: str) -> Text:
    return Text(text, style=PHASE_STYLES.get(text.split(" ", 1)[0], ""))


def _cluster_state(state: str) -> Text:
    return Text(state, style="red" if state.lower().startswith("failed") else "")


def _plain_table(columns: Sequence[str]) -> Table:
    """Columns two spaces apart, no borders, plain headers: the look of `kubectl get`.

    Only the last column wraps when a terminal is too narrow; the others keep their one line.
    """
    table = Table(box=None, pad_edge=False, padding=(0, 1), header_style="bold", show_edge=False)
    for index, column in enumerate(columns):
        table.add_column(column, no_wrap=index < len(columns) - 1)
    return table


def status_table(view: ops_view.RolloutView, now: datetime) -> RenderableType:
    """The `status` output: the header lines, the stage table and, once targets exist, the clusters."""
    header = Table.grid(padding=(0, 2), pad_edge=False)
    header.add_column(no_wrap=True, min_width=len("progress:"))  # values line up whatever is shown
    header.add_column()
    for label, value in ops_view.header_rows(view, now):
        header.add_row(Text(label), _phase(value) if label == "phase:" else Text(value))
    stages = _plain_table(ops_view.STAGE_COLUMNS)
    for name, phase, *rest in ops_view.stage_rows(view, now):
        stages.add_row(Text(name), _phase(phase), *map(Text, rest))
    parts: list[RenderableType] = [
        Text(f"ProgressiveSync {view.display}"),
        Padding(header, (0, 0, 0, 2)),
        Text(""),
        stages,
    ]
    if view.analysis_runs:
        # Each AnalysisRun of the rollout, one row per metric (its phase and last value).
        runs = _plain_table(RUN_COLUMNS)
        for stage, cluster, run, phase, metric, metric_phase, value in run_rows(view.analysis_runs):
            runs.add_row(
                Text(stage),
                Text(cluster),
                Text(run),
                _phase(phase),
                Text(metric),
                _phase(metric_phase),
                Text(value),
            )
        parts += [Text(""), runs]
    analysis = ops_view.analysis_lines(view)
    if analysis:
        parts += [Text(""), *(Text(line) for line in analysis)]
    if view.clusters is not None:
        # --clusters / -o wide: every cluster of the rollout, from its records.
        table = _plain_table(ops_view.WIDE_CLUSTER_COLUMNS)
        for cluster, stage, state, *rest in ops_view.wide_cluster_rows(view):
            table.add_row(Text(cluster), Text(stage), _cluster_state(state), *map(Text, rest))
        parts += [Text(""), table]
    else:
        # The clusters that matter now, from the summary the ProgressiveSync holds.
        clusters = ops_view.cluster_rows(view)
        if clusters:
            table = _plain_table(ops_view.CLUSTER_COLUMNS)
            for cluster, stage, state in clusters:
                table.add_row(Text(cluster), Text(stage), _cluster_state(state))
            parts += [Text(""), table]
        left_out = ops_view.left_out_lines(view)
        if left_out:
            parts += [Text(""), *(Text(line) for line in left_out)]
    return Group(*parts)


def stage_bar(done: int, total: int, *, width: int = BAR_WIDTH) -> ProgressBar:
    """`done` of `total` as a bar of `width` cells (empty before the stage has targets)."""
    return ProgressBar(
        total=max(1, total),
        completed=min(done, total),
        width=width,
        complete_style="cyan",
        finished_style="green",
    )


def stage_bars(view: ops_view.RolloutView, now: datetime, *, width: int = BAR_WIDTH) -> RenderableType:
    """The live block: the rollout's phase, then per stage a bar, done/targets, state and duration."""
    title = Text(f"{view.display}: ")
    title.append_text(_phase(ops_view.phase_text(view)))
    if view.message:
        title.append(f" - {view.message}")
    bars = Table.grid(padding=(0, 2), pad_edge=False)
    for justify in ("left", "left", "right", "left", "right"):
        bars.add_column(justify=justify, no_wrap=True)  # type: ignore[arg-type]
    for stage in view.stages:
        bars.add_row(
            Text(stage.name),
            stage_bar(stage.done_count, stage.target_count, width=width),
            Text(ops_view.stage_progress(stage)),
            _phase(ops_view.stage_state_text(stage)),
            Text(ops_view.format_duration(stage.duration(now))),
        )
    parts: list[RenderableType] = [title, Padding(bars, (0, 0, 0, 2))]
    hint = ops_view.next_step_hint(view)
    if hint:
        parts.append(Text(f"  {hint}"))
    return Group(*parts)


def stage_durations(view: ops_view.RolloutView, now: datetime) -> RenderableType:
    """The demo's closing list: each stage, its phase and how long it took."""
    grid = Table.grid(padding=(0, 2), pad_edge=False)
    for justify in ("left", "left", "right"):
        grid.add_column(justify=justify, no_wrap=True)  # type: ignore[arg-type]
    for name, phase, took in ops_view.stage_durations(view, now):
        grid.add_row(Text(name), _phase(phase), Text(took))
    return Padding(grid, (0, 0, 0, 2))


def to_text(renderable: RenderableType, *, width: int = TEXT_WIDTH) -> str:
    """`renderable` as plain text: no colour, no terminal codes, trailing blanks removed."""
    buffer = io.StringIO()
    Console(file=buffer, width=width, color_system=None, force_terminal=False, highlight=False).print(
        renderable
    )
    return "".join(line.rstrip() + "\n" for line in buffer.getvalue().splitlines())


def rows_text(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain table of `rows` under `columns`, as text (`progressive-sync rollback --dry-run`)."""
    table = _plain_table(columns)
    for row in rows:
        table.add_row(*row)
    return to_text(table)


def render_table(view: ops_view.RolloutView, now: datetime) -> str:
    """`status_table` as plain text (pipes, files, the demo's summary, tests)."""
    return to_text(status_table(view, now))
