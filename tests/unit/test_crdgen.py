"""The generated CRD: structural, complete, and identical to the committed chart copy (golden)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.api import crdgen

REPO = Path(__file__).resolve().parents[2]
COMMITTED = REPO / crdgen.CRD_FILE


def test_committed_crd_matches_the_models() -> None:
    rendered = crdgen.render_crd_yaml()
    if os.environ.get("REGENERATE") == "1":
        COMMITTED.write_text(rendered)
    assert COMMITTED.read_text() == rendered, (
        f"{crdgen.CRD_FILE} differs from the models: run `make crds` (or REGENERATE=1 pytest {__file__})"
    )


def test_committed_stage_crd_matches_the_models() -> None:
    rendered = crdgen.render_stage_crd_yaml()
    committed = REPO / crdgen.STAGE_CRD_FILE
    if os.environ.get("REGENERATE") == "1":
        committed.write_text(rendered)
    assert committed.read_text() == rendered, (
        f"{crdgen.STAGE_CRD_FILE} differs from the models: run `make crds` "
        f"(or REGENERATE=1 pytest {__file__})"
    )


def test_stage_crd_has_no_status_subresource_and_an_immutable_spec() -> None:
    crd = crdgen.build_stage_crd()
    (version,) = crd["spec"]["versions"]
    assert "subresources" not in version  # the steps merge-patch the object itself
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert crdgen.SPEC_IMMUTABLE in spec["x-kubernetes-validations"]
    assert [c["name"] for c in version["additionalPrinterColumns"]] == [
        "ProgressiveSync",
        "Rollout",
        "Stage",
        "Part",
        "Age",
    ]


def test_check_mode_reports_drift(tmp_path: Path) -> None:
    target, stage = tmp_path / "crd.yaml", tmp_path / "stage-crd.yaml"
    files = ["--output", str(target), "--stage-output", str(stage)]
    assert crdgen.main([*files, "--check"]) == 1
    assert crdgen.main(files) == 0
    assert crdgen.main([*files, "--check"]) == 0
    assert stage.read_text() == crdgen.render_stage_crd_yaml()


def _nodes(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, schema
    for name, child in (schema.get("properties") or {}).items():
        yield from _nodes(child, f"{path}.{name}")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from _nodes(schema["additionalProperties"], f"{path}[*]")
    if "items" in schema:
        yield from _nodes(schema["items"], f"{path}[*]")


@pytest.fixture(scope="module")
def version() -> dict[str, Any]:
    crd = crdgen.build_crd()
    (only,) = crd["spec"]["versions"]
    return only


def test_schema_is_structural(version: dict[str, Any]) -> None:
    for path, node in _nodes(version["schema"]["openAPIV3Schema"]):
        forbidden = {
            "$ref",
            "anyOf",
            "oneOf",
            "allOf",
            "nullable",
            "title",
            "patternProperties",
            "const",
        } & set(node)
        assert not forbidden, f"{path or '(root)'} has {forbidden}"
        assert "type" in node or node.get("x-kubernetes-int-or-string"), f"{path} has no type"
        if "properties" in node:
            assert "additionalProperties" not in node, f"{path} has both properties and additionalProperties"


def test_names_subresources_and_columns() -> None:
    crd = crdgen.build_crd()
    spec = crd["spec"]
    assert crd["metadata"]["name"] == "progressivesyncs.progressivesync.io"
    assert spec["scope"] == "Namespaced"
    assert spec["names"]["shortNames"] == ["psync"]
    assert spec["names"]["categories"]
    (version,) = spec["versions"]
    assert version["subresources"] == {"status": {}}
    columns = {column["name"]: column["jsonPath"] for column in version["additionalPrinterColumns"]}
    assert columns["Phase"] == ".status.phase"
    assert columns["Stage"] == ".status.currentStage"
    assert columns["Progress"] == ".status.progress"
    assert columns["Age"] == ".metadata.creationTimestamp"


def test_sizes_are_int_or_string_with_a_cel_rule(version: dict[str, Any]) -> None:
    stage = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["stages"]["items"]
    for field, default in (("maxTargets", "100%"), ("maxParallel", 1)):
        node = stage["properties"][field]
        assert node["x-kubernetes-int-or-string"] is True
        assert node["default"] == default
        assert "self.matches" in node["x-kubernetes-validations"][0]["rule"]


def test_every_cel_rule_has_a_message(version: dict[str, Any]) -> None:
    rules = [
        (path, rule)
        for path, node in _nodes(version["schema"]["openAPIV3Schema"])
        for rule in node.get("x-kubernetes-validations", [])
    ]
    assert len(rules) >= 6
    for path, rule in rules:
        assert rule.get("message"), f"{path}: rule {rule['rule']} has no message"
        assert "(" in rule["message"], f"{path}: message should say how to fix it: {rule['message']}"


def test_yaml_is_loadable_and_equal_to_the_dict() -> None:
    assert yaml.safe_load(crdgen.render_crd_yaml()) == crdgen.build_crd()
