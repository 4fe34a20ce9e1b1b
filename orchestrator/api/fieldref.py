"""The ProgressiveSync field reference, docs/reference/progressivesync.md, generated from the models.

Every field of `spec` gets a row: its name on the wire (the camelCase alias), its type, whether it
is required or its default, its constraints (ranges, lengths, patterns with their meaning in
words, enum values) and its description, which is the attribute docstring in the model
(`orchestrator.api.models`, `.analysis`, `.rollback`). Each object gets a section of its own
(one per model, however many places use it), with the rules the API server checks across its
fields (the CEL twins of the models' validators). The source is the JSON schema pydantic derives
from the models, the same one `orchestrator.api.crdgen` turns into the CRD, so the page, the CRD
and `progressive-sync validate` cannot disagree.

    python -m orchestrator.api.fieldref --write docs/reference/progressivesync.md     (make docs)

`tests/unit/test_fieldref.py` fails when the checked-in page differs from what this renders.
Callers: `make docs`, that test. Pure: no API server, no clock.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import Any

from orchestrator.api.base import PATTERN_HINTS
from orchestrator.api.models import API_VERSION, KIND, ProgressiveSyncSpec
from orchestrator.core.generated_page import page_main

Schema = dict[str, Any]

HEADER = f"""\
# ProgressiveSync field reference

<!-- Generated from the models (orchestrator/api/models.py, analysis.py, rollback.py) by `make docs`
     (python -m orchestrator.api.fieldref --write docs/reference/progressivesync.md); do not edit by
     hand: tests/unit/test_fieldref.py fails when this file and the models disagree. -->

Every field of a `{KIND}` (`apiVersion: {API_VERSION}`) spec: its type, its default (or that it is
required), the values it accepts and what it does. `progressive-sync validate -f FILE` checks a
manifest against exactly these rules offline, and the API server checks them on apply (the CRD is
generated from the same models); `kubectl explain progressivesync.spec` shows the descriptions.
What the fields mean together: [concepts](../concepts.md); what the status says:
[status](../status.md).
"""


@dataclass
class _Section:
    """One object of the spec: where it appears, its description, its fields and its rules."""

    name: str  # the model's name in the schema's $defs ("" for the spec itself)
    paths: list[str]
    schema: Schema
    rows: list[tuple[str, str, str, str, str]] = field(default_factory=list)
    children: list[_Section] = field(default_factory=list)  # the objects first met in its fields


def _ref_name(node: Schema) -> str | None:
    ref = node.get("$ref")
    return ref.rsplit("/", 1)[-1] if isinstance(ref, str) else None


def _without_null(node: Schema) -> Schema:
    """The node with an `anyOf [X, null]` (an optional field) reduced to X, keeping its siblings."""
    options = node.get("anyOf")
    if not options:
        return node
    kept = [option for option in options if option.get("type") != "null"]
    if len(kept) != 1:
        return node
    rest = {key: value for key, value in node.items() if key != "anyOf"}
    return {**kept[0], **rest}


def _map_values(node: Schema) -> Schema | None:
    """The schema of a map's values (`additionalProperties`, or the one `patternProperties` entry)."""
    extra = node.get("additionalProperties")
    if isinstance(extra, dict):
        return extra
    patterns = node.get("patternProperties")
    if isinstance(patterns, dict) and len(patterns) == 1:
        return next(iter(patterns.values()))
    return None


def _count(number: int, word: str, plural: str = "") -> str:
    return f"{number} {word if number == 1 else plural or word + 's'}"


def _first_paragraph(text: str) -> str:
    """A model's docstring up to its first blank line, on one line (the rest is for developers)."""
    return " ".join(text.strip().split("\n\n", 1)[0].split())


def _anchor(path: str) -> str:
    """The GitHub heading anchor of a section titled by `path` in backticks."""
    return "".join(ch for ch in path.lower() if ch.isalnum() or ch in "-_ ").replace(" ", "-")


class _Walk:
    """Collects a section per object model, in the order a reader meets them from `spec` down."""

    def __init__(self, root: Schema) -> None:
        self.defs: dict[str, Schema] = root.get("$defs", {})
        self.sections: dict[str, _Section] = {}
        self.parent: _Section | None = None  # the section fill() is filling

    def section_for(self, name: str, path: str) -> _Section:
        section = self.sections.get(name)
        if section is None:
            section = _Section(name=name, paths=[path], schema=self.defs[name])
            self.sections[name] = section
            if self.parent is not None:
                self.parent.children.append(section)
        elif path not in section.paths:
            section.paths.append(path)
        return section

    def is_object(self, name: str) -> bool:
        return self.defs[name].get("type") == "object"

    def type_of(self, node: Schema, path: str) -> str:
        """The type in words; an object type links to its section (made on first sight)."""
        node = _without_null(node)
        name = _ref_name(node)
        if name is not None:
            target = self.defs[name]
            if self.is_object(name):
                section = self.section_for(name, path)
                return f"object ([`{section.paths[0]}`](#{_anchor(section.paths[0])}))"
            return self.type_of({**target, **{k: v for k, v in node.items() if k != "$ref"}}, path)
        if node.get("x-kubernetes-int-or-string"):
            return 'integer or percentage ("N%")'
        if "enum" in node:
            return "string, one of " + ", ".join(f"`{value}`" for value in node["enum"])
        kind = node.get("type")
        if kind == "array":
            return "list of " + self.type_of(node.get("items", {}), path + "[]")
        values = _map_values(node)
        if kind == "object" and values is not None:
            return "map of string to " + self.type_of(values, path + ".*")
        if isinstance(kind, str):
            return kind
        if "anyOf" in node:
            return " or ".join(self.type_of(option, path) for option in node["anyOf"])
        return "any"

    def constraints(self, node: Schema) -> str:
        """Ranges, lengths, sizes and patterns (with their meaning) of a field, as short phrases."""
        node = _without_null(node)
        name = _ref_name(node)
        if name is not None and not self.is_object(name):
            node = {**self.defs[name], **node}
        said: list[str] = []
        for key, word in (("minimum", ">="), ("maximum", "<=")):
            if key in node:
                said.append(f"{word} {node[key]}")
        for key, word in (("minItems", "at least {}"), ("maxItems", "at most {}")):
            if key in node:
                said.append(word.format(_count(node[key], "item")))
        if not node.get("x-kubernetes-int-or-string"):
            for key, word in (("minLength", "at least {}"), ("maxLength", "at most {}")):
                if key in node:
                    said.append(word.format(_count(node[key], "character")))
        if "maxProperties" in node:
            said.append(f"at most {_count(node['maxProperties'], 'entry', 'entries')}")
        pattern = node.get("pattern")
        if isinstance(pattern, str):
            said.append(PATTERN_HINTS.get(pattern, f"matches `{pattern}`"))
        if node.get("x-kubernetes-int-or-string"):
            said.append('a whole number >= 1, or "1%" to "100%"')
        items = node.get("items")
        if isinstance(items, dict) and _ref_name(items) is None:
            inner = self.constraints(items)
            if inner:
                said.append(f"each item: {inner}")
        extra = _map_values(node)
        if extra is not None:
            keys = next(iter(node.get("patternProperties", {})), None) or node.get("propertyNames", {}).get(
                "pattern"
            )
            if isinstance(keys, str):
                said.append("keys: " + PATTERN_HINTS.get(keys, f"match `{keys}`"))
            inner = self.constraints(extra)
            if inner:
                said.append(f"values: {inner}")
        return "; ".join(said)

    def fill(self, section: _Section) -> None:
        self.parent = section
        schema = section.schema
        required = set(schema.get("required", []))
        for wire_name, node in schema.get("properties", {}).items():
            path = f"{section.paths[0]}.{wire_name}"
            if wire_name in required:
                default = "required"
            elif "default" in node and node["default"] is not None:
                default = f"`{json.dumps(node['default'])}`"
            else:
                default = "none"
            section.rows.append(
                (
                    f"`{wire_name}`",
                    self.type_of(node, path),
                    default,
                    self.constraints(node),
                    " ".join(str(node.get("description", "")).split()),
                )
            )


def _rules(schema: Schema) -> list[str]:
    """The messages of the CEL rules on an object and on its fields (the cross-field checks)."""
    messages = [rule["message"] for rule in schema.get("x-kubernetes-validations", [])]
    for wire_name, node in schema.get("properties", {}).items():
        for rule in _without_null(node).get("x-kubernetes-validations", []):
            # The int-or-percent rule repeats the type column; every other rule says something new.
            if _without_null(node).get("x-kubernetes-int-or-string"):
                continue
            messages.append(f"`{wire_name}`: {rule['message']}")
    return messages


def _cell(text: str) -> str:
    return text.replace("|", "\\|") or "-"


def _in_reading_order(walk: _Walk, section: _Section) -> list[_Section]:
    """`section` filled, then each object it introduced with theirs, depth first (as a reader goes)."""
    walk.fill(section)
    ordered = [section]
    for child in section.children:
        ordered += _in_reading_order(walk, child)
    return ordered


def render() -> str:
    """docs/reference/progressivesync.md: a section per object of the spec, from `spec` down."""
    root = ProgressiveSyncSpec.model_json_schema(by_alias=True, mode="validation")
    walk = _Walk(root)
    lines = [HEADER]
    for section in _in_reading_order(walk, _Section(name="", paths=["spec"], schema=root)):
        lines += [f"## `{section.paths[0]}`", ""]
        description = _first_paragraph(str(section.schema.get("description", "")))
        if description:
            lines += [description, ""]
        if len(section.paths) > 1:
            lines += ["Also at " + ", ".join(f"`{path}`" for path in section.paths[1:]) + ".", ""]
        lines += ["| field | type | default | accepts | description |", "| --- | --- | --- | --- | --- |"]
        lines += ["| " + " | ".join(_cell(cell) for cell in row) + " |" for row in section.rows]
        rules = _rules(section.schema)
        if rules:
            lines += ["", "Checked across fields (offline and by the API server):", ""]
            lines += [f"- {message}" for message in rules]
        lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    """`python -m orchestrator.api.fieldref [--write PATH]`: print or write the field reference."""
    return page_main(render, __doc__.splitlines()[0] if __doc__ else "", argv)


if __name__ == "__main__":
    sys.exit(main())
