"""Generate the ProgressiveSync and ProgressiveSyncStage CustomResourceDefinitions from the pydantic models.

`build_crd()` turns the JSON schema pydantic derives from `orchestrator.api.models.ProgressiveSync` into
a structural `apiextensions.k8s.io/v1` CRD: `$ref`s inlined, `Optional[...]` unions collapsed to
the one real type (an absent field, never `nullable`), titles and `additionalProperties: false`
dropped, map key patterns turned into CEL rules, and the `x-kubernetes-*` markers the models
declare (int-or-string, CEL validations, list types) kept. Anything it does not know how to make
structural is an error here, not a CRD the API server refuses later.

`build_stage_crd()` does the same for `orchestrator.api.stage_records.ProgressiveSyncStage`, the
per-cluster records of a rollout stage (issue 30): no status subresource (the steps merge-patch
the object itself: one verb, one RBAC rule), and `spec` immutable (`select` writes it once).

Callers: `orchestrator.kube.crds` (tests, dev-cluster, demo install both), `make crds` /
`python -m orchestrator.api.crdgen`, which writes the files the Helm chart ships
(`CRD_FILES`: `charts/progressive-sync/crds/progressivesync.io_progressivesyncs.yaml` and
`..._progressivesyncstages.yaml`). A golden test fails when those files and the models disagree.
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path
from typing import Any

import yaml

from orchestrator.api import models, stage_records

CRD_FILE = Path("charts/progressive-sync/crds/progressivesync.io_progressivesyncs.yaml")
STAGE_CRD_FILE = Path("charts/progressive-sync/crds/progressivesync.io_progressivesyncstages.yaml")
HEADER = (
    "# Generated from orchestrator/api/models.py by `make crds` (python -m orchestrator.api.crdgen).\n"
    "# Do not edit by hand: change the models and regenerate.\n"
)
STAGE_HEADER = HEADER.replace("models.py", "stage_records.py")
CATEGORIES = ["progressive-sync"]

# Keys a structural schema node may carry, in the order we print them.
_KEY_ORDER = (
    "description",
    "type",
    "format",
    "enum",
    "default",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "x-kubernetes-int-or-string",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-preserve-unknown-fields",
    "required",
    "properties",
    "additionalProperties",
    "items",
    "x-kubernetes-validations",
)
_ALLOWED_KEYS = frozenset(_KEY_ORDER)


class SchemaError(ValueError):
    """The models use a construct that has no structural CRD equivalent."""


def build_crd() -> dict[str, Any]:
    """The ProgressiveSync CustomResourceDefinition, as a dict ready to create or dump to YAML."""
    schema = models.ProgressiveSync.model_json_schema(by_alias=True, mode="validation")
    return _crd(
        schema,
        description="ProgressiveSync rolls a change out to the Applications of one ApplicationSet, "
        "cluster by cluster, in stages.",
        kind=models.KIND,
        plural=models.PLURAL,
        singular=models.SINGULAR,
        short_name=models.SHORT_NAME,
        subresources={"status": {}},
        columns=[
            {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
            {"name": "Stage", "type": "string", "jsonPath": ".status.currentStage"},
            {"name": "Progress", "type": "string", "jsonPath": ".status.progress"},
            {"name": "AppSet", "type": "string", "jsonPath": ".spec.appSetRef.name", "priority": 1},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ],
    )


# The steps merge-patch a record's `status.clusters` on the main resource (no status subresource);
# `spec` is written once by `select` when it creates the object.
SPEC_IMMUTABLE = models.cel(
    "self == oldSelf",
    "spec is immutable: select writes it once, when it creates the record (create a new rollout instead)",
)


def build_stage_crd() -> dict[str, Any]:
    """The ProgressiveSyncStage CustomResourceDefinition (`orchestrator.api.stage_records`)."""
    schema = stage_records.ProgressiveSyncStage.model_json_schema(by_alias=True, mode="validation")
    crd = _crd(
        schema,
        description="ProgressiveSyncStage records each cluster of one part of one stage of a rollout "
        "of a ProgressiveSync (written by the rollout's steps; owned by the ProgressiveSync).",
        kind=stage_records.RECORD_KIND,
        plural=stage_records.RECORD_PLURAL,
        singular=stage_records.RECORD_SINGULAR,
        short_name=stage_records.RECORD_SHORT_NAME,
        subresources=None,
        columns=[
            {"name": "ProgressiveSync", "type": "string", "jsonPath": ".spec.progressiveSync"},
            {"name": "Rollout", "type": "string", "jsonPath": ".spec.rolloutId"},
            {"name": "Stage", "type": "string", "jsonPath": ".spec.stage"},
            {"name": "Part", "type": "integer", "jsonPath": ".spec.part"},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ],
    )
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec["x-kubernetes-validations"] = [*spec.get("x-kubernetes-validations", []), SPEC_IMMUTABLE]
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"] = _ordered(spec, "spec")
    return crd


def _crd(
    schema: dict[str, Any],
    *,
    description: str,
    kind: str,
    plural: str,
    singular: str,
    short_name: str,
    subresources: dict[str, Any] | None,
    columns: list[dict[str, Any]],
) -> dict[str, Any]:
    defs = schema.get("$defs", {})
    properties = schema["properties"]
    root = {
        "description": description,
        "type": "object",
        "required": ["spec"],
        "properties": {
            "apiVersion": {
                "description": "APIVersion defines the versioned schema of this representation of an object.",
                "type": "string",
            },
            "kind": {
                "description": "Kind is the REST resource this object represents.",
                "type": "string",
            },
            # The API server validates metadata itself; a CRD may only say `type: object` here.
            "metadata": {"type": "object"},
            "spec": _structural(properties["spec"], defs, "spec"),
            "status": _structural(properties["status"], defs, "status"),
        },
    }
    version: dict[str, Any] = {"name": models.VERSION, "served": True, "storage": True}
    if subresources is not None:
        version["subresources"] = subresources
    version["additionalPrinterColumns"] = columns
    version["schema"] = {"openAPIV3Schema": root}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{plural}.{models.GROUP}",
            "labels": {"app.kubernetes.io/part-of": "progressive-sync"},
        },
        "spec": {
            "group": models.GROUP,
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": singular,
                "shortNames": [short_name],
                "categories": list(CATEGORIES),
            },
            "scope": "Namespaced",
            "versions": [version],
        },
    }


def _structural(node: dict[str, Any], defs: dict[str, Any], path: str) -> dict[str, Any]:
    """Convert one JSON schema node (pydantic's dialect) into a structural CRD schema node."""
    node = copy.deepcopy(node)
    node.pop("title", None)
    if "$ref" in node:
        target = _resolve(node.pop("$ref"), defs)
        # The field's own keys (its description, default, rules) win over the referenced type's.
        rules = target.get("x-kubernetes-validations", []) + node.pop("x-kubernetes-validations", [])
        node = {**target, **node}
        if rules:
            node["x-kubernetes-validations"] = rules
        node.pop("title", None)
    if node.get("x-kubernetes-int-or-string"):
        # The int and string branches and their bounds live in the CEL rule the model declares.
        node.pop("anyOf", None)
        return _ordered(node, path)
    if "anyOf" in node:
        branches = [branch for branch in node.pop("anyOf") if branch.get("type") != "null"]
        if len(branches) != 1:
            raise SchemaError(f"{path}: unions other than Optional[...] have no structural form")
        if node.get("default", ...) is None:
            node.pop("default")  # Optional fields are absent when unset, never null
        rules = node.pop("x-kubernetes-validations", [])
        node = {**_structural(branches[0], defs, path), **node}
        if rules:
            node["x-kubernetes-validations"] = node.get("x-kubernetes-validations", []) + rules
        return _ordered(node, path)

    if node.get("additionalProperties") is False:
        node.pop("additionalProperties")  # structural schemas prune unknown fields instead
    if "patternProperties" in node:
        _map_with_key_rules(node, defs, path)
    if "properties" in node:
        node["properties"] = {
            name: _structural(child, defs, f"{path}.{name}") for name, child in node["properties"].items()
        }
    if isinstance(node.get("additionalProperties"), dict):
        node["additionalProperties"] = _structural(node["additionalProperties"], defs, f"{path}[*]")
    if "items" in node:
        node["items"] = _structural(node["items"], defs, f"{path}[*]")
    if "enum" in node and "type" not in node:
        node["type"] = "string"

    if "type" not in node:
        raise SchemaError(f"{path}: every structural schema node needs a type")
    return _ordered(node, path)


_RULE_KEY_ORDER = ("rule", "messageExpression", "message", "fieldPath", "reason", "optionalOldSelf")


def _map_with_key_rules(node: dict[str, Any], defs: dict[str, Any], path: str) -> None:
    """`dict[Key, Value]` with a key pattern: values via additionalProperties, keys via CEL."""
    pattern_properties = node.pop("patternProperties")
    if len(pattern_properties) != 1:
        raise SchemaError(f"{path}: only one key pattern per map is supported")
    ((pattern, value_schema),) = pattern_properties.items()
    key_limits = node.pop("propertyNames", {})
    max_length = key_limits.get("maxLength")
    if "'" in pattern:
        raise SchemaError(f"{path}: key pattern {pattern!r} cannot be quoted in CEL")
    checks = [f"k.matches(r'{pattern}')"]
    if max_length is not None:
        checks.insert(0, f"size(k) <= {max_length}")
    hint = models.PATTERN_HINTS.get(pattern, f"match {pattern}")
    limit = f" of at most {max_length} characters" if max_length is not None else ""
    rule = models.cel(
        f"self.all(k, {' && '.join(checks)})",
        f"every key must be a valid key{limit} ({hint})",
    )
    node["x-kubernetes-validations"] = [*node.get("x-kubernetes-validations", []), rule]
    node["additionalProperties"] = value_schema


def _resolve(ref: str, defs: dict[str, Any]) -> dict[str, Any]:
    prefix = "#/$defs/"
    if not ref.startswith(prefix) or ref[len(prefix) :] not in defs:
        raise SchemaError(f"cannot resolve {ref}")
    return copy.deepcopy(defs[ref[len(prefix) :]])


def _ordered(node: dict[str, Any], path: str) -> dict[str, Any]:
    """Keys in a fixed, readable order (the same on every run, for the golden file); no strangers."""
    unknown = set(node) - _ALLOWED_KEYS
    if unknown:
        raise SchemaError(f"{path}: no structural form for {sorted(unknown)}")
    rank = {key: index for index, key in enumerate(_KEY_ORDER)}
    if "x-kubernetes-validations" in node:
        node["x-kubernetes-validations"] = [
            {key: rule[key] for key in _RULE_KEY_ORDER if key in rule}
            for rule in node["x-kubernetes-validations"]
        ]
    return {key: node[key] for key in sorted(node, key=lambda key: (rank.get(key, len(rank)), key))}


def render_crd_yaml(crd: dict[str, Any] | None = None, header: str = HEADER) -> str:
    """The CRD as the YAML file the chart ships (header comment included)."""
    body = yaml.safe_dump(crd or build_crd(), sort_keys=False, width=100, allow_unicode=True)
    return header + body


def render_stage_crd_yaml() -> str:
    """The ProgressiveSyncStage CRD as the YAML file the chart ships."""
    return render_crd_yaml(build_stage_crd(), STAGE_HEADER)


def all_crds() -> list[dict[str, Any]]:
    """Every CRD of progressive-sync: ProgressiveSync, then ProgressiveSyncStage."""
    return [build_crd(), build_stage_crd()]


def main(argv: list[str] | None = None) -> int:
    """`python -m orchestrator.api.crdgen [--check] [--output FILE] [--stage-output FILE]`: write or
    check the chart's CRDs."""
    parser = argparse.ArgumentParser(
        prog="python -m orchestrator.api.crdgen", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--output", type=Path, default=CRD_FILE, help=f"file to write (default {CRD_FILE})")
    parser.add_argument(
        "--stage-output",
        type=Path,
        default=STAGE_CRD_FILE,
        help=f"the ProgressiveSyncStage CRD's file (default {STAGE_CRD_FILE})",
    )
    parser.add_argument(
        "--check", action="store_true", help="do not write; exit 1 when a file differs from the models"
    )
    args = parser.parse_args(argv)
    code = 0
    for output, rendered in ((args.output, render_crd_yaml()), (args.stage_output, render_stage_crd_yaml())):
        code = max(code, _write_or_check(output, rendered, check=args.check))
    return code


def _write_or_check(output: Path, rendered: str, *, check: bool) -> int:
    current = output.read_text() if output.exists() else None
    if check:
        if current != rendered:
            print(f"{output} is out of date: run `make crds`", file=sys.stderr)
            return 1
        print(f"{output} is up to date")
        return 0
    if current == rendered:
        print(f"{output} unchanged")
        return 0
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(rendered)
    print(f"wrote {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
