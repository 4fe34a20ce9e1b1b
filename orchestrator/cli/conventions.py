"""The flags and messages every `progressive-sync` command shares, spelled once (kubectl's habits).

- `-n/--namespace` with no fixed default: `resolved_namespace` asks `orchestrator.cli.namespaces`
  (`-n`, the kubeconfig context's namespace, $PROGRESSIVE_SYNC_NAMESPACE, argocd), for every command.
- `--kubeconfig` / `--context` (and their `PROGRESSIVE_SYNC_*` variables).
- `-o/--output`: one vocabulary, `table|json|yaml` plus `wide`, `name` or `mermaid` where they fit,
  default `table`; an older spelling (validate's `text`) stays as a hidden alias that says so.
- `-f/--filename`: a file, a directory (its *.yaml, *.yml and *.json, sorted, not recursive, like
  kubectl) or `-` for stdin; a command that reads one input refuses a repeated `-f`.
- `-v/--verbose` and `api_failure`: an API server that does not answer is one line naming it and
  what to check; the retries' log lines and the full error come only with `-v`.

Nothing here imports the Kubernetes client (plan, render and validate must stay quick to start).
Callers: the command modules under orchestrator/cli.
"""

from __future__ import annotations

import logging
import os
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from orchestrator.cli.namespaces import ResolvedNamespace, namespace_for

F = Callable[..., Any]
MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
STDIN = "-"


# --- namespace and kubeconfig ------------------------------------------------------------------


def namespace_option(what: str = "Namespace of the ProgressiveSync") -> Callable[[F], F]:
    """`-n/--namespace`, unset by default: `resolved_namespace` decides then."""
    return click.option(
        "-n",
        "--namespace",
        default=None,
        help=(
            f"{what} [default: the kubeconfig context's namespace, then $PROGRESSIVE_SYNC_NAMESPACE, "
            "then argocd]."
        ),
    )


def kubeconfig_options(what: str = "") -> Callable[[F], F]:
    """`--kubeconfig` and `--context`, as every command that talks to the API server spells them."""

    def decorate(command: F) -> F:
        command = click.option(
            "--context", envvar="PROGRESSIVE_SYNC_CONTEXT", help=f"kubeconfig context{what}."
        )(command)
        return click.option(
            "--kubeconfig",
            envvar="PROGRESSIVE_SYNC_KUBECONFIG",
            help=f"kubeconfig file{what} [default: $KUBECONFIG, then ~/.kube/config, then the "
            "in-cluster service account].",
        )(command)

    return decorate


def resolved_namespace(
    flag: str | None,
    *,
    kubeconfig: str | None,
    context: str | None,
    environ: Mapping[str, str] | None = None,
) -> ResolvedNamespace:
    """The namespace a command acts on (`orchestrator.cli.namespaces.namespace_for`, this process's env)."""
    return namespace_for(
        flag, kubeconfig=kubeconfig, context=context, environ=os.environ if environ is None else environ
    )


# --- -o ----------------------------------------------------------------------------------------


class OutputChoice(click.Choice):  # type: ignore[type-arg]
    """`click.Choice` that also takes hidden older spellings, saying on stderr what replaced them."""

    def __init__(self, choices: Sequence[str], aliases: Mapping[str, str]) -> None:
        super().__init__(list(choices))
        self.aliases = dict(aliases)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        """The value, an alias turned into what it now means (with a note on stderr)."""
        if isinstance(value, str) and value in self.aliases:
            replacement = self.aliases[value]
            click.echo(f"note: -o {value} is now -o {replacement}", err=True)
            return replacement
        return super().convert(value, param, ctx)


def output_option(
    *extra: str, default: str = "table", aliases: Mapping[str, str] | None = None, help: str = ""
) -> Callable[[F], F]:
    """`-o/--output`: `table|json|yaml`, then `extra` (e.g. "wide", "name", "mermaid")."""
    choices = [*(c for c in ("table", "json", "yaml") if c != "table" or default == "table"), *extra]
    return click.option(
        "-o",
        "--output",
        type=OutputChoice(choices, aliases or {}),
        default=default,
        show_default=True,
        help=help or "Output format: table for people, json or yaml for scripts.",
    )


# --- -f ----------------------------------------------------------------------------------------


def expand_filenames(values: Sequence[str]) -> tuple[str, ...]:
    """Each `-f` value as the files it stands for: a file itself, `-` itself, a directory its
    *.yaml, *.yml and *.json files in name order (not recursive). A directory with none of
    them is a usage error, as it is for kubectl."""
    files: list[str] = []
    for value in values:
        path = Path(value)
        if value == STDIN or not path.is_dir():
            files.append(value)
            continue
        found = sorted(p for p in path.iterdir() if p.is_file() and p.suffix in MANIFEST_SUFFIXES)
        if not found:
            raise click.BadParameter(
                f"{value} is a directory without a .yaml, .yml or .json file", param_hint="'-f'"
            )
        files.extend(str(p) for p in found)
    return tuple(files)


def filename_option(*, single: bool, help: str) -> Callable[[F], F]:
    """`-f/--filename` (required): files, directories, `-`. With `single` the command reads one
    input, so a second `-f` (which it would ignore) is refused; the value is then one string."""

    def expand(ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]) -> Any:
        if single and len(values) > 1:
            raise click.UsageError(
                f"-f was given {len(values)} times, but {ctx.info_name} reads one ProgressiveSync: pass one "
                "file or directory (choose among several ProgressiveSyncs with --name)",
                ctx,
            )
        if single:
            return values[0]
        return expand_filenames(values)

    return click.option(
        "-f",
        "--filename",
        "filenames",
        multiple=True,
        required=True,
        type=click.Path(exists=True, allow_dash=True),
        callback=expand,
        help=help,
    )


def read_sources(value: str, stdin: Callable[[], str]) -> list[tuple[str, str]]:
    """(label, text) of each file one `-f` value stands for; `-` is read from `stdin`."""
    sources = []
    for name in expand_filenames((value,)):
        if name == STDIN:
            sources.append(("<stdin>", stdin()))
        else:
            sources.append((name, Path(name).read_text(encoding="utf-8")))
    return sources


# --- -v and the API server ---------------------------------------------------------------------


def verbose_option(command: F) -> F:
    """`-v/--verbose`: the retries as they happen, and the full error (with its traceback)."""
    return click.option(
        "-v", "--verbose", is_flag=True, help="Show retries and the full error when the API server fails."
    )(command)


@contextmanager
def api_logs(verbose: bool) -> Iterator[None]:
    """While a command talks to the API server: its retry lines on stderr with -v, none without.

    Without a handler Python prints warnings by itself (logging.lastResort); a command's output
    must not carry them. The loggers' levels are put back when the block ends.
    """
    loggers = [logging.getLogger(name) for name in ("orchestrator", "urllib3", "kubernetes")]
    saved = [(logger, logger.level) for logger in loggers]
    handler: logging.Handler | None = None
    if verbose:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        loggers[0].addHandler(handler)
        loggers[0].setLevel(logging.INFO)
    else:
        for logger in loggers:
            logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for logger, level in saved:
            logger.setLevel(level)
        if handler is not None:
            loggers[0].removeHandler(handler)


def unreachable_message(host: str, *, kubeconfig: str | None, context: str | None) -> str:
    """One line: which API server did not answer, from which kubeconfig, and what to check."""
    config = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
    which = f"kubeconfig {config}" + (f", context {context}" if context else "")
    return (
        f"cannot reach the API server at {host} ({which}): check that the cluster is up and that "
        "--kubeconfig/--context point at it (-v shows details)"
    )


def api_failure(
    exc: Exception, *, what: str, host: str, kubeconfig: str | None, context: str | None, verbose: bool
) -> str:
    """The message for an API call that failed: one line when no answer came, the server's answer
    otherwise; with `verbose`, the full error and its traceback follow."""
    from orchestrator.kube.client import Retryable  # noqa: PLC0415 - loaded already: an API call failed

    # A Retryable error without a status is a call no answer came to (refused, timed out, dropped).
    no_answer = isinstance(exc, Retryable) and exc.status == 0
    message = (
        unreachable_message(host, kubeconfig=kubeconfig, context=context)
        if no_answer
        else f"{what}: the API server refused: {exc}"
    )
    if verbose:
        details = "".join(traceback.format_exception(exc)).rstrip()
        message += f"\n{details}"
    return message
