"""The values inside a Workflow: `{{variable}}` substitution, Argo durations, the display-name
expression our templates carry, and the retry `expression` (`||` of `&&` of exit-code and status
comparisons). Pure functions; anything outside this subset is an `UnsupportedFeature`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from orchestrator.core.durations import duration_seconds
from orchestrator.engine.interface import UnsupportedFeature
from workflow_templates.names import DISPLAY_NAME_ANNOTATION, DISPLAY_NAME_RE, display_name_of_input


class Unresolved(Exception):
    """A `{{variable}}` that has no value where it is used."""


def parse_duration(value: Any) -> float:
    """Seconds from an Argo duration: an int, "30" (seconds), or Go-style "1m30s", "500ms"."""
    text = str(value).strip()
    try:
        return duration_seconds(text)
    except ValueError:
        raise UnsupportedFeature(f"duration {text!r} (use seconds or Go durations like 1m30s)") from None


_VAR = re.compile(r"{{\s*([^{}]*?)\s*}}")


def substitute(value: Any, scope: Mapping[str, str], *, strict: bool = True) -> Any:
    """Replace `{{name}}` in every string of `value` from `scope`.

    Strict: an unknown name raises Unresolved. Not strict: it is left as it is (a DAG template's
    task references resolve later, per task). `{{=expression}}` is not supported.
    """
    if isinstance(value, str):

        def replace(match: re.Match[str]) -> str:
            name = match.group(1)
            if name.startswith("="):
                raise UnsupportedFeature(f"expression template tag {{{{{name}}}}}")
            if name in scope:
                return scope[name]
            if strict:
                raise Unresolved(f"{{{{{name}}}}} does not resolve")
            return match.group(0)

        return _VAR.sub(replace, value)
    if isinstance(value, Mapping):
        return {key: substitute(item, scope, strict=strict) for key, item in value.items()}
    if isinstance(value, list):
        return [substitute(item, scope, strict=strict) for item in value]
    return value


def input_display_name(template: Mapping[str, Any], inputs: Mapping[str, str]) -> str | None:
    """The display name of a template whose annotation is `names.display_name_of_input(X)`.

    That expression is the one expression tag our Workflows carry (the cluster step's node shows
    the cluster's name): Argo evaluates it to input X when X passes its display-name rule, else to
    "" (the node keeps its default name). The same here, without an expression evaluator.
    """
    annotation = (template.get("annotations") or {}).get(DISPLAY_NAME_ANNOTATION)
    for name, value in inputs.items():
        if annotation == display_name_of_input(name):
            return value if DISPLAY_NAME_RE.fullmatch(value) and len(value) <= 63 else None
    return None


def without_input_display_name(template: Mapping[str, Any], inputs: Mapping[str, str]) -> dict[str, Any]:
    """The template's annotations, less a display name `input_display_name` reads."""
    annotations = dict(template.get("annotations") or {})
    if any(annotations.get(DISPLAY_NAME_ANNOTATION) == display_name_of_input(name) for name in inputs):
        del annotations[DISPLAY_NAME_ANNOTATION]
    return annotations


# --- the retry expression ----------------------------------------------------------------------

_EXIT_CODE_ATOM = re.compile(r"asInt\(lastRetry\.exitCode\)\s*(==|!=|<=|>=|<|>)\s*(-?\d+)")
_STATUS_ATOM = re.compile(r'lastRetry\.status\s*(==|!=)\s*"([A-Za-z]+)"')
_COMPARE = {
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    ">": lambda a, b: a > b,
    "<=": lambda a, b: a <= b,
    ">=": lambda a, b: a >= b,
}


def _atoms(expression: str) -> list[list[str]]:
    if any(ch in expression for ch in "()") and "asInt(" not in expression:
        raise UnsupportedFeature(f"retryStrategy.expression {expression!r}")
    return [[atom.strip() for atom in clause.split("&&")] for clause in expression.split("||")]


def check_retry_expression(expression: str) -> None:
    """Raise UnsupportedFeature unless every term is one the executor evaluates."""
    for clause in _atoms(expression):
        for atom in clause:
            if not (_EXIT_CODE_ATOM.fullmatch(atom) or _STATUS_ATOM.fullmatch(atom)):
                raise UnsupportedFeature(f"retryStrategy.expression term {atom!r}")


def retry_expression_holds(expression: str, *, exit_code: int, status: str) -> bool:
    """Evaluate a checked expression: `||` of `&&` of exit-code and status comparisons."""
    for clause in _atoms(expression):
        holds = True
        for atom in clause:
            if match := _EXIT_CODE_ATOM.fullmatch(atom):
                holds = holds and _COMPARE[match.group(1)](exit_code, int(match.group(2)))
            elif match := _STATUS_ATOM.fullmatch(atom):
                holds = holds and _COMPARE[match.group(1)](status, match.group(2))
            else:
                raise UnsupportedFeature(f"retryStrategy.expression term {atom!r}")
        if holds:
            return True
    return False


# A task's `when`, in the one form our Workflows use: `<operand> == <operand>` or `!=`, each a
# variable already substituted or a word (optionally quoted), as Argo's govaluate reads
# `{{tasks.analysis-x.outputs.parameters.verdict}} == Inconclusive`.
_WHEN = re.compile(r"^\s*(\S+?)\s*(==|!=)\s*(\S+?)\s*$")


def check_when_expression(expression: str) -> None:
    """UnsupportedFeature unless `expression` is `A == B` or `A != B` (see `_WHEN`)."""
    if not _WHEN.match(expression):
        raise UnsupportedFeature(f"dag.tasks.when other than `A == B` or `A != B`: {expression!r}")


def when_holds(expression: str) -> bool:
    """The value of a `when` whose variables are substituted already (see `check_when_expression`)."""
    match = _WHEN.match(expression)
    if match is None:
        raise UnsupportedFeature(f"dag.tasks.when other than `A == B` or `A != B`: {expression!r}")
    left, operator, right = (
        part.strip("'\"") if index != 1 else part for index, part in enumerate(match.groups())
    )
    return (left == right) if operator == "==" else (left != right)
