"""`progressive-sync validate -f FILE`: check ProgressiveSync manifests offline, before applying them.

Reads each file (a directory: its *.yaml, *.yml and *.json files, sorted; `-` is stdin),
validates every YAML document with the models (`orchestrator.api.validation`) and prints one line
per document: `OK`, the errors as `path: problem (how to fix)`, or why a document was skipped (not
a ProgressiveSync); beneath a valid one, notes such as what its rollback does (`-o table`; `-o
text`, its old name, still works). `plan` and `render` print a manifest's errors with the same
`render_text`. Exit 0 when every ProgressiveSync is valid, 1 when one is invalid or none was found,
2 on bad usage (click).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import click
import yaml

from orchestrator.api.validation import DocumentResult, Verdict, validate_text
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
def validate(filenames: Sequence[str], output: str) -> None:
    """Validate ProgressiveSync manifests offline, the way the API server will."""
    reports = [_read_and_validate(filename) for filename in filenames]
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


def _read_and_validate(filename: str) -> FileReport:
    if filename == "-":
        return FileReport("<stdin>", validate_text(sys.stdin.read()))
    with open(filename, encoding="utf-8") as stream:
        return FileReport(filename, validate_text(stream.read()))


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
