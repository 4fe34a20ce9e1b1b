"""`progressive-sync validate -f FILE`: check ProgressiveSync manifests offline, before applying them.

Reads each file (a directory: its *.yaml, *.yml and *.json files, sorted; `-` is stdin),
validates every YAML document with the models (`orchestrator.api.validation`) and prints one line
per document: `OK`, the errors as `path: problem (how to fix)`, or why a document was skipped (not
a ProgressiveSync); beneath a valid one, notes such as what its rollback does (`-o table`; `-o
text`, its old name, still works). `plan` and `render` print a manifest's errors with the same
`render_text`. With `--values FILE` (repeatable, merged over the chart's defaults as helm
does) a ProgressiveSync the chart so installed would refuse is invalid too
(`orchestrator.api.chart_policy`). Exit 0 when every ProgressiveSync is valid, 1 when one is
invalid or none was found, 2 on bad usage (click).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import click
import yaml

from orchestrator.api.chart_policy import ChartPolicy, ChartValuesError, chart_values, policy_errors
from orchestrator.api.validation import DocumentResult, ExtraCheck, Verdict, validate_text
from orchestrator.cli.conventions import filename_option, output_option
from orchestrator.cli.help_catalog import epilog


@dataclass(frozen=True)
class FileReport:
    """The results of one input file."""

    source: str  # the path as given, or "<stdin>"
    results: list[DocumentResult]


@click.command("validate", epilog=epilog("validate"))
@filename_option(
    single=False,
    help=(
        "A YAML or JSON file with one or more documents, a directory (its *.yaml, *.yml and *.json "
        "files, sorted) or - for stdin. Repeat for more."
    ),
)
@output_option(
    aliases={"text": "table"}, help="table for people (one line per document), json or yaml for scripts."
)
@click.option(
    "--values",
    "values_files",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False),
    help="Also check against the chart's policy as installed with this values file (merged over the "
    "chart's defaults; repeat like helm -f): prune, sync options, namespaces, analysis rights.",
)
def validate(filenames: Sequence[str], output: str, values_files: Sequence[str] = ()) -> None:
    """Validate ProgressiveSync manifests offline, the way the API server will."""
    check = chart_policy_check(values_files) if values_files else None
    reports = [_read_and_validate(filename, check) for filename in filenames]
    if output == "table":
        for line in render_text(reports):
            click.echo(line)
    else:
        data = [
            {"file": report.source, "documents": [result.to_dict() for result in report.results]}
            for report in reports
        ]
        click.echo(json.dumps(data, indent=2) if output == "json" else yaml.safe_dump(data, sort_keys=False))
    checked = [r for report in reports for r in report.results if r.verdict is not Verdict.SKIPPED]
    if not checked:
        click.echo(f"no ProgressiveSync found in {', '.join(r.source for r in reports)}", err=True)
        sys.exit(1)
    if any(result.verdict is Verdict.INVALID for result in checked):
        sys.exit(1)


def _read_and_validate(filename: str, check: ExtraCheck | None = None) -> FileReport:
    if filename == "-":
        return FileReport("<stdin>", validate_text(sys.stdin.read(), check))
    with open(filename, encoding="utf-8") as stream:
        return FileReport(filename, validate_text(stream.read(), check))


def chart_policy_check(values_files: Sequence[str]) -> ExtraCheck:
    """The chart's policy as installed with these values files (`orchestrator.api.chart_policy`)."""
    overrides = []
    for path in values_files:
        with open(path, encoding="utf-8") as stream:
            loaded = yaml.safe_load(stream)
        if loaded is not None and not isinstance(loaded, dict):
            raise click.BadParameter(f"{path}: expected a map of chart values", param_hint="--values")
        overrides.append(loaded or {})
    try:
        policy = ChartPolicy.from_values(chart_values(*overrides))
    except ChartValuesError as exc:
        raise click.BadParameter(str(exc), param_hint="--values") from exc
    return lambda ps: policy_errors(ps, policy)


def render_text(reports: Sequence[FileReport]) -> list[str]:
    """One line per document, then its errors (or a valid one's notes) indented beneath it."""
    lines: list[str] = []
    for report in reports:
        several = len(report.results) > 1
        for result in report.results:
            where = f"{report.source} ({result.position})" if several else report.source
            if result.verdict is Verdict.VALID:
                lines.append(f"{where}: {result.description}: OK")
                lines.extend(f"  {note}" for note in result.notes)
            elif result.verdict is Verdict.SKIPPED:
                lines.append(f"{where}: {result.description}: skipped, not a ProgressiveSync")
            else:
                count = len(result.errors)
                lines.append(
                    f"{where}: {result.description}: invalid, {count} error{'s' if count != 1 else ''}"
                )
                lines.extend(f"  {error}" for error in result.errors)
    return lines
