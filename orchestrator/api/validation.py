"""Offline validation of ProgressiveSync manifests, with messages a person can act on.

`validate_object` runs a manifest through the models and turns pydantic's errors into
`FieldError`s that read `path: problem (how to fix)`, with paths as the API server writes them
(`spec.stages[1].maxTargets`) and no pydantic URLs or `input_type=` noise. `validate_text` splits a
YAML stream into documents (several per file, `kind: List` expanded) and says for each whether it is
a valid ProgressiveSync, an invalid one (and why), or something else that was skipped. A valid one
may carry notes for people: what its `spec.rollback` and `spec.windows` do (`describe_spec`).

Pure functions over text and dicts: no files, no API server. Callers: `progressive-sync validate`
(`orchestrator.cli.validate_cmd`) and the API parity tests.
"""

from __future__ import annotations

import difflib
import types
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Annotated, Any, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from orchestrator.api import models
from orchestrator.api.depends import describe_dependency
from orchestrator.api.rollback import describe_rollback, rollback_deadline_seconds
from orchestrator.api.windows import describe_windows
from orchestrator.core import yamlio


@dataclass(frozen=True)
class FieldError:
    """One problem in a manifest: where (`spec.stages[1].maxTargets`), what, and how to fix it."""

    path: str
    problem: str
    fix: str = ""

    def __str__(self) -> str:
        return f"{self.path}: {self.problem} ({self.fix})" if self.fix else f"{self.path}: {self.problem}"


class Verdict(StrEnum):
    """What validation concluded about one document."""

    VALID = "valid"
    INVALID = "invalid"
    SKIPPED = "skipped"  # not a ProgressiveSync; nothing to check


@dataclass(frozen=True)
class DocumentResult:
    """The outcome for one YAML document (or one item of a `kind: List`)."""

    position: str  # "document 2", "document 2, item 1"
    description: str  # "ProgressiveSync argocd/myservice", "v1/ConfigMap settings"
    verdict: Verdict
    errors: tuple[FieldError, ...] = field(default=())
    notes: tuple[str, ...] = field(default=())  # what a valid one does that a person should know

    def to_dict(self) -> dict[str, Any]:
        """For `-o json|yaml` (`notes` only when there are some)."""
        data: dict[str, Any] = {
            "document": self.position,
            "object": self.description,
            "result": self.verdict.value,
            "errors": [{"path": e.path, "problem": e.problem, "fix": e.fix} for e in self.errors],
        }
        if self.notes:
            data["notes"] = list(self.notes)
        return data


# --- one object ------------------------------------------------------------------------------


def validate_object(obj: Any) -> list[FieldError]:
    """Validate one manifest (a parsed YAML/JSON object) as a ProgressiveSync; [] when valid."""
    if not isinstance(obj, dict):
        return [
            FieldError(
                "(document)", f"expected a mapping, got {_describe(obj)}", "write apiVersion, kind, ..."
            )
        ]
    try:
        models.ProgressiveSync.model_validate(obj)
    except ValidationError as exc:
        return [humanize(error) for error in exc.errors(include_url=False, include_context=True)]
    return []


def describe_spec(spec: models.ProgressiveSyncSpec) -> tuple[str, ...]:
    """Notes for people about a valid spec: one line per dependency (spec.dependsOn), one for its
    rollback and one per window (none without them)."""
    notes = tuple(
        describe_dependency(d, spec.waiting_stage(d), group_by=spec.group_by) for d in spec.depends_on or []
    )
    windows = tuple(f"window: {line}" for line in describe_windows(spec.windows))
    if spec.rollback is None:
        return (*notes, *windows)
    written = spec.rollback.max_parallel
    parallel = (
        f"{written} of a stage's clusters at a time"
        if written is not None
        else "each stage's maxParallel at a time"
    )
    return (
        *notes,
        describe_rollback(spec.rollback, parallel, grouped=spec.group_by is not None)
        + f"; each cluster within {rollback_deadline_seconds(spec)}s",
        *windows,
    )


def dependency_errors(ps: models.ProgressiveSync) -> list[FieldError]:
    """A ProgressiveSync that depends on itself (the CRD cannot see the object's name from the spec;
    on a cluster the watcher reports it as a cycle, reason DependencyCycle)."""
    return [
        FieldError(
            f"spec.dependsOn[{index}].name",
            f"{dependency.name!r} is this ProgressiveSync: it would wait for itself",
            "name another ProgressiveSync, or remove this entry",
        )
        for index, dependency in enumerate(ps.spec.depends_on or [])
        if dependency.name == ps.metadata.name
    ]


def format_path(loc: Sequence[int | str]) -> str:
    """A pydantic `loc` as the API server writes field paths: `spec.stages[1].maxTargets`."""
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text or "(document)"


def humanize(error: ErrorDetails) -> FieldError:
    """Turn one pydantic error into `path: problem (how to fix)`."""
    loc = tuple(error["loc"])
    kind = error["type"]
    ctx = error.get("ctx") or {}
    value = error.get("input")
    if loc and loc[-1] == "[key]":
        # An invalid key of a map such as matchLabels: the map is the field, the key the problem.
        key, loc = loc[-2], loc[:-2]
        inner = humanize({**error, "loc": (), "input": key})
        problem = inner.problem.removeprefix(_show(key))
        problem = f'key "{key}"{problem}' if problem != inner.problem else f'key "{key}": {problem}'
        return FieldError(format_path(loc), problem, inner.fix)
    path = format_path(loc)
    name = str(loc[-1]) if loc and isinstance(loc[-1], str) else "it"

    if kind == "missing":
        return FieldError(path, "required field is missing", f"add {name}")
    if kind == "extra_forbidden":
        return FieldError(path, "unknown field", _unknown_field_fix(loc))
    if kind == "value_error":
        # Our own validators already say "problem (how to fix)".
        message = str(ctx.get("error") or error["msg"]).removeprefix("Value error, ")
        return FieldError(path, message)
    if kind in ("int_type", "int_parsing", "int_from_float"):
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            return FieldError(
                path, f'"{value}" is a number in quotes', f"write {value.strip()} without quotes"
            )
        return FieldError(
            path, f"expected a whole number, got {_describe(value)}", "use a whole number such as 600"
        )
    if kind in ("bool_type", "bool_parsing"):
        return FieldError(
            path, f"expected true or false, got {_describe(value)}", "write true or false without quotes"
        )
    if kind == "string_type":
        return FieldError(path, f"expected a string, got {_describe(value)}", "put the value in quotes")
    if kind == "greater_than_equal":
        return FieldError(
            path, f"{value} is below the minimum {ctx.get('ge')}", f"use {ctx.get('ge')} or more"
        )
    if kind == "greater_than":
        return FieldError(path, f"{value} is not above {ctx.get('gt')}", f"use more than {ctx.get('gt')}")
    if kind == "less_than_equal":
        return FieldError(
            path, f"{value} is above the maximum {ctx.get('le')}", f"use at most {ctx.get('le')}"
        )
    if kind == "less_than":
        return FieldError(path, f"{value} is not below {ctx.get('lt')}", f"use less than {ctx.get('lt')}")
    if kind == "string_too_short":
        if ctx.get("min_length") == 1:
            return FieldError(path, "is empty", f"give {name} a value")
        return FieldError(path, f"is shorter than {ctx.get('min_length')} characters", "use a longer value")
    if kind == "string_too_long":
        limit = ctx.get("max_length")
        return FieldError(
            path, f"is {len(str(value))} characters long, more than {limit}", f"shorten it to {limit}"
        )
    if kind == "too_short":
        least = ctx.get("min_length")
        return FieldError(
            path, f"has {ctx.get('actual_length', 0)} items, needs at least {least}", f"add at least {least}"
        )
    if kind == "too_long":
        most = ctx.get("max_length")
        return FieldError(
            path, f"has {ctx.get('actual_length')} items, more than {most}", f"keep at most {most}"
        )
    if kind == "string_pattern_mismatch":
        pattern = str(ctx.get("pattern", ""))
        return FieldError(
            path, f"{_show(value)} is not valid", models.PATTERN_HINTS.get(pattern, f"match {pattern}")
        )
    if kind in ("enum", "literal_error"):
        expected = str(ctx.get("expected", "")).replace("'", "")
        return FieldError(path, f"{_show(value)} is not allowed", f"use {expected}")
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return FieldError(
            path, f"expected a mapping of fields, got {_describe(value)}", "write it as key: value pairs"
        )
    if kind in ("list_type", "tuple_type"):
        return FieldError(path, f"expected a list, got {_describe(value)}", "write it as a YAML list")
    if kind.startswith(("datetime", "date_")):
        return FieldError(
            path, f"{_show(value)} is not a timestamp", "use RFC 3339 such as 2026-05-01T12:00:00Z"
        )
    return FieldError(path, str(error["msg"]))


def _show(value: Any) -> str:
    """A value in an error about the value itself: strings in quotes, the rest described."""
    if isinstance(value, str):
        return f'"{value}"' if len(value) <= 60 else f'"{value[:57]}..."'
    return _describe(value)


def _describe(value: Any) -> str:
    """A value as a person reads it in an error: the string "abc", the number 5, a list."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, int | float):
        return f"the number {value}"
    if isinstance(value, str):
        shown = value if len(value) <= 60 else value[:57] + "..."
        return f'the string "{shown}"'
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__


def _unknown_field_fix(loc: tuple[int | str, ...]) -> str:
    known = _known_fields(loc[:-1])
    if not known:
        return "remove it"
    close = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.6)
    if close:
        return f"did you mean {close[0]}?"
    return f"remove it; fields here: {', '.join(known)}"


def _known_fields(loc: Sequence[int | str]) -> list[str]:
    """The wire names of the fields the model at `loc` accepts ([] when loc leads elsewhere)."""
    current: Any = models.ProgressiveSync
    for part in loc:
        current = _unwrap(current)
        if isinstance(current, type) and issubclass(current, BaseModel) and isinstance(part, str):
            fields = {info.alias or name: info for name, info in current.model_fields.items()}
            if part not in fields:
                return []
            current = fields[part].annotation
        elif get_origin(current) is list and isinstance(part, int):
            current = get_args(current)[0]
        elif get_origin(current) is dict and isinstance(part, str):
            current = get_args(current)[1]
        else:
            return []
    current = _unwrap(current)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return [info.alias or name for name, info in current.model_fields.items()]
    return []


def _unwrap(annotation: Any) -> Any:
    """Strip Annotated[...] and Optional[...] down to the type that holds the fields."""
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            annotation = get_args(annotation)[0]
        elif origin in (Union, types.UnionType):
            options = [arg for arg in get_args(annotation) if arg is not type(None)]
            if len(options) != 1:
                return annotation
            annotation = options[0]
        else:
            return annotation


# --- YAML streams ----------------------------------------------------------------------------


# A further check of a valid ProgressiveSync (e.g. the chart's policy, `orchestrator.api.chart_policy`).
ExtraCheck = Callable[[models.ProgressiveSync], Sequence[FieldError]]


def validate_text(text: str, check: ExtraCheck | None = None) -> list[DocumentResult]:
    """Validate every document of a YAML stream; empty documents are ignored. `check`'s errors make
    an otherwise valid ProgressiveSync invalid."""
    results: list[DocumentResult] = []
    number = 0
    try:
        for document in yamlio.safe_load_all(text):
            number += 1
            if document is None:
                continue
            results.extend(_validate_document(document, f"document {number}", check))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "(document)"
        problem = str(getattr(exc, "problem", None) or exc)
        results.append(
            DocumentResult(
                f"document {number + 1}",
                "unparseable YAML",
                Verdict.INVALID,
                (FieldError(where, f"not valid YAML: {problem}", "fix the YAML syntax"),),
            )
        )
    return results


def _validate_document(
    document: Any, position: str, check: ExtraCheck | None = None
) -> Iterator[DocumentResult]:
    if (
        isinstance(document, dict)
        and document.get("kind") == "List"
        and isinstance(document.get("items"), list)
    ):
        for index, item in enumerate(document["items"], start=1):
            yield from _validate_document(item, f"{position}, item {index}", check)
        return
    if not isinstance(document, dict):
        error = FieldError(
            "(document)", f"expected a Kubernetes object, got {_describe(document)}", "remove it"
        )
        yield DocumentResult(position, "not an object", Verdict.INVALID, (error,))
        return
    description = _describe_object(document)
    if not _claims_to_be_ours(document):
        yield DocumentResult(position, description, Verdict.SKIPPED)
        return
    errors = tuple(validate_object(document))
    if errors:
        yield DocumentResult(position, description, Verdict.INVALID, errors)
        return
    ps = models.ProgressiveSync.model_validate(document)
    refused = tuple(dependency_errors(ps)) + (tuple(check(ps)) if check is not None else ())
    if refused:
        yield DocumentResult(position, description, Verdict.INVALID, refused)
        return
    yield DocumentResult(position, description, Verdict.VALID, notes=describe_spec(ps.spec))


def _claims_to_be_ours(document: dict[str, Any]) -> bool:
    # Our group with a misspelled kind, or our kind with a wrong version, is a mistake to report,
    # not another kind of object to skip.
    api_version = str(document.get("apiVersion") or "")
    return document.get("kind") == models.KIND or api_version.split("/", maxsplit=1)[0] == models.GROUP


def _describe_object(document: dict[str, Any]) -> str:
    raw_metadata = document.get("metadata")
    metadata: dict[str, Any] = raw_metadata if isinstance(raw_metadata, dict) else {}
    name = str(metadata.get("name") or "(no name)")
    if metadata.get("namespace"):
        name = f"{metadata['namespace']}/{name}"
    kind = str(document.get("kind") or "(no kind)")
    if kind == models.KIND:
        return f"{kind} {name}"
    return f"{document.get('apiVersion') or '(no apiVersion)'}/{kind} {name}"
