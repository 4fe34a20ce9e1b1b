"""The exit codes and environment variables of every `progressive-sync` command, in one place.

`EXIT_CODES` and `ENVIRONMENT` hold them per command; `epilog(name)` turns them into the end of
that command's `--help` (each command module passes it to `click.command(epilog=...)`), and
`markdown()` into docs/cli-reference.md (`make docs`: `python -m orchestrator.cli.help_catalog
--write docs/cli-reference.md`).
tests/unit/test_cli_conventions.py checks every variable a command's options read is listed here.
Importing it costs nothing: `--help` and every command read it (no click, no models).

Callers: each command module under orchestrator/cli, and the docs generator below.
"""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Mapping
from types import MappingProxyType

from orchestrator.core.generated_page import page_main

# The codes scripts branch on. 2 is click's usage error everywhere; `status --watch` has one code
# per way a follow ends (orchestrator.ops.view.WatchExit, which these numbers must match).
USAGE = (
    2,
    "bad usage: an unknown flag or value, a file that cannot be read, a kubeconfig that cannot be loaded",
)
_OPERATOR = (
    (0, "done (or already so)"),
    (
        1,
        "could not act: no such ProgressiveSync, nothing to act on, the API server refused or did not answer",
    ),
    USAGE,
)

EXIT_CODES: Mapping[str, tuple[tuple[int, str], ...]] = MappingProxyType(
    {
        "status": (
            (0, "shown; with --watch: the rollout Succeeded"),
            (1, "no such ProgressiveSync or the API server did not answer; with --watch: the rollout Failed"),
            USAGE,
            (3, "with --watch: the rollout was Cancelled"),
            (4, "with --watch: not finished within --timeout"),
            (5, "with --watch: nothing to follow (no such object, the API server did not answer)"),
            (6, "with --watch: the rollout was RolledBack"),
        ),
        "approve": _OPERATOR,
        "pause": _OPERATOR,
        "unpause": _OPERATOR,
        "cancel": _OPERATOR,
        "retry": _OPERATOR,
        "rollback": (
            (0, "every cluster restored or left alone, nothing to roll back, or (--dry-run) the plan shown"),
            (1, "a cluster not restored, or refused (no rollout, one still running, API errors)"),
            USAGE,
        ),
        "plan": (
            (0, "the plan can run (warnings, if any, are printed)"),
            (
                1,
                "the plan has errors (the ApplicationSet missing included), a manifest is invalid, or "
                "the API server did not answer",
            ),
            USAGE,
        ),
        "render": (
            (0, "printed (or nothing to roll out, said on stderr)"),
            (1, "a manifest is invalid, the plan has errors, or the Workflow cannot be built"),
            USAGE,
        ),
        "validate": (
            (0, "every ProgressiveSync is valid"),
            (1, "one is invalid, or no ProgressiveSync was found"),
            USAGE,
        ),
        "convert": (
            (0, "converted: the ProgressiveSyncs on stdout, what to change and what differs on stderr"),
            (
                1,
                "a source cannot be converted (the field and the fix are said; nothing is printed), or "
                "the input holds nothing to convert",
            ),
            USAGE,
        ),
        "watch": (
            (0, "stopped cleanly (SIGTERM or Ctrl-C)"),
            (1, "a watch loop gave up: the API server stayed unreachable past every backoff"),
            USAGE,
        ),
        "executor": ((0, "stopped cleanly (SIGTERM or Ctrl-C)"), (1, "could not start"), USAGE),
        "simulate": ((0, "done, or stopped cleanly"), (1, "could not run"), USAGE),
        "demo": (
            (0, "the rollout Succeeded"),
            (1, "it failed (as it must with --fail-cluster), or the demo could not run"),
            USAGE,
            (130, "interrupted"),
        ),
        "dev-cluster": ((0, "stopped cleanly, or done"), (1, "could not start or clean up"), USAGE),
        "completion": ((0, "printed"), USAGE),
    }
)

_KUBECONFIG = (
    ("KUBECONFIG", "kubeconfig file(s) when --kubeconfig is not given (then ~/.kube/config)"),
    ("PROGRESSIVE_SYNC_KUBECONFIG", "--kubeconfig"),
    ("PROGRESSIVE_SYNC_CONTEXT", "--context"),
)
_NAMESPACE = (
    (
        "PROGRESSIVE_SYNC_NAMESPACE",
        "the namespace when -n is not given and the kubeconfig context names none (then argocd)",
    ),
)
_OPERATOR_ENV = (
    *_NAMESPACE,
    *_KUBECONFIG,
    ("PROGRESSIVE_SYNC_WORKFLOW_NAMESPACE", "--workflow-namespace"),
)

ENVIRONMENT: Mapping[str, tuple[tuple[str, str], ...]] = MappingProxyType(
    {
        "status": _OPERATOR_ENV,
        "approve": _OPERATOR_ENV,
        "pause": _OPERATOR_ENV,
        "unpause": _OPERATOR_ENV,
        "cancel": _OPERATOR_ENV,
        "retry": _OPERATOR_ENV,
        "rollback": _OPERATOR_ENV,
        "plan": (
            *_NAMESPACE,
            *_KUBECONFIG,
            ("PROGRESSIVE_SYNC_ARGOCD_NAMESPACE", "--argocd-namespace"),
        ),
        "render": (
            *_NAMESPACE,
            ("KUBECONFIG", "read for its context's namespace only (render never calls the API server)"),
            ("PROGRESSIVE_SYNC_ARGOCD_NAMESPACE", "--argocd-namespace"),
            ("PROGRESSIVE_SYNC_WORKFLOW_IMAGE", "--image"),
            ("PROGRESSIVE_SYNC_WORKFLOW_SERVICE_ACCOUNT", "--service-account"),
            ("PROGRESSIVE_SYNC_WORKFLOW_<FIELD>", "every other field of the Workflow settings"),
        ),
        "validate": (),
        "convert": (
            *_NAMESPACE,
            ("KUBECONFIG", "read for its context's namespace only (convert never calls the API server)"),
        ),
        "watch": (
            ("PROGRESSIVE_SYNC_<FLAG>", "every flag (--resync-period is PROGRESSIVE_SYNC_RESYNC_PERIOD)"),
            ("PROGRESSIVE_SYNC_KUBECONFIG", "--kubeconfig"),
            ("KUBECONFIG", "--kubeconfig, after PROGRESSIVE_SYNC_KUBECONFIG"),
            ("PROGRESSIVE_SYNC_ARGO_TOKEN", "the Argo Server bearer token (or --argo-token-file)"),
        ),
        "executor": (*_KUBECONFIG, ("PROGRESSIVE_SYNC_MAX_STEP_PROCESSES", "--max-step-processes")),
        "simulate": (
            ("PROGRESSIVE_SYNC_KUBECONFIG", "--kubeconfig"),
            ("KUBECONFIG", "when --kubeconfig is not given"),
            ("PROGRESSIVE_SYNC_ARGOCD_NAMESPACE", "-n/--namespace"),
        ),
        "demo": (("KUBEBUILDER_ASSETS", "--tools-dir"),),
        "dev-cluster": (
            ("PROGRESSIVE_SYNC_DEV_CLUSTER_DIR", "--state-dir"),
            ("KUBEBUILDER_ASSETS", "--tools-dir"),
        ),
        "completion": (),
    }
)


def _rows(rows: tuple[tuple[object, str], ...], width: int) -> list[str]:
    """Two aligned columns, the second wrapped under itself within `width`."""
    if not rows:
        return ["  (none)"]
    first = max(len(str(key)) for key, _ in rows)
    lines = []
    for key, meaning in rows:
        lead = f"  {str(key).ljust(first)}  "
        lines += textwrap.wrap(
            meaning,
            width=width,
            initial_indent=lead,
            subsequent_indent=" " * len(lead),
            break_on_hyphens=False,
        )
    return lines


def epilog(command: str, width: int = 78) -> str:
    """The end of `command`'s --help: the variables it reads, then its exit codes.

    Click rewraps help paragraphs; a paragraph starting with a line of only backspace ("\\b") is
    printed as written, so the lists keep their columns (wrapped here, to `width`).
    """
    variables = ["\b", "Environment:", *_rows(ENVIRONMENT[command], width)]
    codes = ["\b", "Exit codes:", *_rows(EXIT_CODES[command], width)]
    return "\n".join(variables) + "\n\n" + "\n".join(codes)


def markdown() -> str:
    """Every command's variables and exit codes as Markdown, for the docs."""
    out = [
        "# Command reference: environment variables and exit codes",
        "",
        "Generated from `orchestrator/cli/help_catalog.py` by `make docs`; do not edit by hand. Each",
        "command's `--help` ends with the same lists.",
    ]
    for command in EXIT_CODES:
        out += ["", f"## progressive-sync {command}", ""]
        if ENVIRONMENT[command]:
            out += ["| Variable | Meaning |", "|---|---|"]
            out += [f"| `{name}` | {meaning} |" for name, meaning in ENVIRONMENT[command]]
            out.append("")
        out += ["| Exit code | Meaning |", "|---|---|"]
        out += [f"| {code} | {meaning} |" for code, meaning in EXIT_CODES[command]]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    """`python -m orchestrator.cli.help_catalog [--write PATH]`: print or write docs/cli-reference.md."""
    return page_main(markdown, "Every command's environment variables and exit codes.", argv)


if __name__ == "__main__":
    sys.exit(main())
