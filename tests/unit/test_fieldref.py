"""The ProgressiveSync field reference (docs/reference/progressivesync.md) is generated from the models
and checked in: this fails when the page and the models disagree (golden, like the CRD and the
troubleshooting page), and when a field of the spec is missing from it. Pure: no API server."""

from __future__ import annotations

import os
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

from orchestrator.api import fieldref
from orchestrator.api.analysis import AnalysisSpec, ArgValueFrom
from orchestrator.api.models import (
    AppSetRef,
    LabelSelector,
    LabelSelectorRequirement,
    ProgressiveSyncSpec,
    ProgressiveSyncStatus,
    Stage,
)
from orchestrator.api.rollback import RollbackSpec
from orchestrator.api.stage_records import ProgressiveSyncStage

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "reference" / "progressivesync.md"


def test_the_field_reference_is_generated_from_the_models() -> None:
    rendered = fieldref.render()
    if os.environ.get("REGENERATE") == "1":
        PAGE.write_text(rendered)
    assert PAGE.read_text() == rendered, (
        "docs/reference/progressivesync.md differs from the models (orchestrator/api/models.py, "
        f"analysis.py, rollback.py): run `make docs` (or REGENERATE=1 pytest {__file__})"
    )


@pytest.mark.parametrize(
    ("model", "section"),
    [
        pytest.param(ProgressiveSyncSpec, "spec", id="spec"),
        pytest.param(AppSetRef, "spec.appSetRef", id="app-set-ref"),
        pytest.param(Stage, "spec.stages[]", id="stage"),
        pytest.param(LabelSelector, "spec.stages[].targets.clusters.selector", id="selector"),
        pytest.param(
            LabelSelectorRequirement,
            "spec.stages[].targets.clusters.selector.matchExpressions[]",
            id="selector-requirement",
        ),
        pytest.param(AnalysisSpec, "spec.analysis", id="analysis"),
        pytest.param(ArgValueFrom, "spec.analysis.args[].valueFrom", id="arg-value-from"),
        pytest.param(RollbackSpec, "spec.rollback", id="rollback"),
    ],
)
def test_every_field_has_a_row_with_its_description(model: type[BaseModel], section: str) -> None:
    page = fieldref.render()
    heading = f"## `{section}`\n"
    assert heading in page, f"no section for {section}"
    body = page.split(heading, 1)[1].split("\n## ", 1)[0]
    for name, info in model.model_fields.items():
        wire = info.alias or name
        rows = [line for line in body.splitlines() if line.startswith(f"| `{wire}` |")]
        assert len(rows) == 1, f"{section}.{wire}: {len(rows)} rows"
        assert info.description, f"{model.__name__}.{name} has no attribute docstring"
        assert " ".join(info.description.split()) in rows[0], f"{section}.{wire}: description missing"


@pytest.mark.parametrize(
    "expected",
    [
        pytest.param('| `maxTargets` | integer or percentage ("N%") | `"100%"` |', id="int-or-percent"),
        pytest.param('| `approval` | string, one of `Automatic`, `Manual` | `"Automatic"` |', id="enum"),
        pytest.param("| `bakeSeconds` | integer | none | >= 0; <= 604800 |", id="range"),
        pytest.param(
            "| `targets` | object ([`spec.stages[].targets`](#specstagestargets)) | required |", id="object"
        ),
    ],
)
def test_a_row_says_type_default_and_constraints(expected: str) -> None:
    assert expected in fieldref.render()


def test_cross_field_rules_are_listed_under_their_object() -> None:
    stage = fieldref.render().split("## `spec.stages[]`\n", 1)[1].split("\n## ", 1)[0]
    assert "maxParallel is above maxTargets" in stage


def test_write_mode_writes_the_page(tmp_path: Path) -> None:
    target = tmp_path / "reference" / "progressivesync.md"
    assert fieldref.main(["--write", str(target)]) == 0
    assert target.read_text() == fieldref.render()


def _wire_fields(model: type[BaseModel], path: str, seen: set[type[BaseModel]]) -> list[str]:
    """`path.field` for every field of `model` and of the models its fields hold (metadata aside)."""
    if model in seen or model.__name__ == "ObjectMeta":
        return []
    seen.add(model)
    found = []
    for name, info in model.model_fields.items():
        wire = info.alias or name
        found.append(f"{path}.{wire}")
        for inner in _models_in(info.annotation):
            found += _wire_fields(inner, f"{path}.{wire}", seen)
    return found


def _models_in(annotation: object) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [model for arg in typing.get_args(annotation) for model in _models_in(arg)]


@pytest.mark.parametrize(
    ("model", "root"),
    [
        pytest.param(ProgressiveSyncStatus, "status", id="progressivesync-status"),
        pytest.param(ProgressiveSyncStage, "psstage", id="progressivesyncstage"),
    ],
)
def test_the_status_reference_names_every_status_field(model: type[BaseModel], root: str) -> None:
    """docs/status.md is written by hand; it must at least name every field a person may read."""
    page = (REPO / "docs" / "status.md").read_text()
    missing = [
        path
        for path in _wire_fields(model, root, set())
        if f"`{path.rsplit('.', 1)[1]}" not in page and f"{path.rsplit('.', 1)[1]}:" not in page
    ]
    assert not missing, f"docs/status.md does not mention: {missing}"
