"""`progressive-sync convert`: an Argo CD RollingSync, or a Skyscanner ProgressiveSync, as ours.

`--from-applicationset FILE` reads ApplicationSets and turns each one's
`spec.strategy.rollingSync.steps` into a ProgressiveSync; `--from-skyscanner FILE` reads Skyscanner's
applicationset-progressive-sync objects (`argoproj.skyscanner.net/v1alpha1`). The source is named by
its flag, never guessed. FILE is a file, a directory (its *.yaml, *.yml and *.json) or `-`.

The ProgressiveSyncs go to stdout (`-o yaml`, documents separated by `---`, or `-o json`: one object,
or a `List` of several), ready for `kubectl apply -f -` or `progressive-sync plan -f -`; what to
change in the ApplicationSet, what does not map exactly, and what was skipped go to stderr. Exit 1
(nothing on stdout) when a source cannot be converted (the field and the fix said) or none was
found. The conversion itself is `orchestrator.api.convert` (pure); this module reads and prints.
"""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Sequence
from typing import Any

import click
import yaml

from orchestrator.api.convert import Conversion, FileConversion, Source, convert_documents
from orchestrator.cli.conventions import STDIN, output_option, read_sources, resolved_namespace
from orchestrator.cli.help_catalog import epilog
from orchestrator.core import yamlio


@click.command("convert", epilog=epilog("convert"))
@click.option(
    "--from-applicationset",
    "application_sets",
    type=click.Path(exists=True, allow_dash=True),
    help="ApplicationSets with spec.strategy.type: RollingSync: a YAML or JSON file, a directory "
    "(its *.yaml, *.yml and *.json files) or - for stdin.",
)
@click.option(
    "--from-skyscanner",
    "skyscanner",
    type=click.Path(exists=True, allow_dash=True),
    help="Skyscanner applicationset-progressive-sync ProgressiveSyncs (argoproj.skyscanner.net/v1alpha1), "
    "read the same way.",
)
@click.option("--name", "name", help="Convert only the object of this name, when the input holds several.")
@click.option(
    "-n",
    "--namespace",
    default=None,
    help="Namespace of the ProgressiveSync; its appSetRef then names the ApplicationSet's own "
    "[default: the source's namespace, then the kubeconfig context's, then $PROGRESSIVE_SYNC_NAMESPACE, "
    "then argocd].",
)
@output_option(default="yaml", help="yaml or json: the ProgressiveSync manifests, for kubectl apply -f -.")
def convert(
    *,
    application_sets: str | None,
    skyscanner: str | None,
    name: str | None,
    namespace: str | None,
    output: str,
) -> None:
    """Convert an Argo CD RollingSync (or a Skyscanner ProgressiveSync) into a ProgressiveSync.

    Prints the ProgressiveSync on stdout (for `kubectl apply -f -` or `progressive-sync plan -f -`)
    and on stderr what to change in the ApplicationSet and what does not map exactly.
    """
    if (application_sets is None) == (skyscanner is None):
        raise click.UsageError("give one of --from-applicationset FILE and --from-skyscanner FILE")
    source = Source.APPLICATION_SET if application_sets is not None else Source.SKYSCANNER
    given = application_sets if application_sets is not None else skyscanner
    assert given is not None
    # Where `kubectl apply -f` would put a ProgressiveSync whose source names no namespace.
    fallback = resolved_namespace(None, kubeconfig=None, context=None).namespace
    results: list[tuple[str, FileConversion]] = []
    try:
        sources = read_sources(given, sys.stdin.read)
    except (OSError, UnicodeDecodeError) as exc:
        raise click.ClickException(f"{given}: cannot read: {exc}") from exc
    for label, text in sources:
        try:
            documents = list(yamlio.safe_load_all(text))
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" (line {mark.line + 1})" if mark is not None else ""
            raise click.ClickException(f"{label}: not YAML{where}: {getattr(exc, 'problem', exc)}") from None
        results.append(
            (
                label,
                convert_documents(
                    _items(documents), source, name=name, namespace=namespace, fallback_namespace=fallback
                ),
            )
        )
    conversions = [c for _, result in results for c in result.conversions]
    several = len(results) > 1
    for label, result in results:
        for skipped in result.skipped:
            click.echo(f"skipped: {label + ': ' if several or given == STDIN else ''}{skipped}", err=True)
    errors = [(label, error) for label, result in results for error in result.errors]
    if errors:
        for label, error in errors:
            click.echo(f"error: {label}: {error.source}:", err=True)
            for problem in error.problems:
                click.echo(f"  {problem}", err=True)
        raise click.ClickException(
            f"{len(errors)} object(s) could not be converted; nothing was printed (fix the fields above)"
        )
    if not conversions:
        wanted = (
            "ApplicationSet with a RollingSync strategy"
            if source is Source.APPLICATION_SET
            else ("Skyscanner ProgressiveSync (argoproj.skyscanner.net/v1alpha1)")
        )
        which = f" named {name!r}" if name else ""
        raise click.ClickException(f"{_shown(given)}: no {wanted}{which} to convert")
    for conversion in conversions:
        _report(conversion)
    click.echo(_render([c.manifest for c in conversions], output), nl=False)


def _items(documents: Sequence[object]) -> list[object]:
    """The documents, a `kind: List`'s items in its place (as `kubectl get -o yaml` writes several)."""
    out: list[object] = []
    for document in documents:
        if (
            isinstance(document, dict)
            and document.get("kind") == "List"
            and isinstance(document.get("items"), list)
        ):
            out.extend(document["items"])
        else:
            out.append(document)
    return out


def _shown(given: str) -> str:
    return "<stdin>" if given == STDIN else given


def _report(conversion: Conversion) -> None:
    """On stderr: what was converted, what to change, what differs."""
    ps = conversion.progressive_sync
    count = len(ps.spec.stages)
    click.echo(
        f"converted {conversion.source} into ProgressiveSync {ps.metadata.namespace}/{ps.metadata.name} "
        f"({count} stage{'s' if count != 1 else ''})",
        err=True,
    )
    for title, notes in (
        ("to change:", conversion.changes),
        ("not the same as before:", conversion.differences),
    ):
        if notes:
            click.echo(f"  {title}", err=True)
        for note in notes:
            click.echo(
                textwrap.fill(str(note), width=100, initial_indent="  - ", subsequent_indent="    "), err=True
            )


class _Dumper(yaml.SafeDumper):
    """YAML as a person writes a ProgressiveSync: a selector requirement and a list of values on one
    line (`- {key: env, operator: In, values: [dev]}`), the rest in block style."""


def _represent_list(dumper: yaml.SafeDumper, data: list[Any]) -> yaml.Node:
    flow = bool(data) and all(isinstance(item, str | int | float | bool) for item in data)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)


def _represent_dict(dumper: yaml.SafeDumper, data: dict[str, Any]) -> yaml.Node:
    flow = set(data) == {"key", "operator", "values"} or set(data) == {"key", "operator"}
    return dumper.represent_mapping("tag:yaml.org,2002:map", data.items(), flow_style=flow)


_Dumper.add_representer(list, _represent_list)
_Dumper.add_representer(dict, _represent_dict)


def _render(manifests: Sequence[dict[str, object]], output: str) -> str:
    """The manifests as YAML documents, or JSON (one object, or a List of several)."""
    if output == "json":
        data: object = (
            manifests[0]
            if len(manifests) == 1
            else {"apiVersion": "v1", "kind": "List", "items": list(manifests)}
        )
        return json.dumps(data, indent=2) + "\n"
    return yaml.dump_all(manifests, Dumper=_Dumper, sort_keys=False, default_flow_style=False)
