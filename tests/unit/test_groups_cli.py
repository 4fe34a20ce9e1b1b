"""`progressive-sync plan`, `render` and `validate` with spec.groupBy (docs/groups.md): a section per group in
the table, `groups` in the JSON, the diagram chaining stages only within a group; the refusals of
maxParallelGroups without groupBy name the field. Offline, pure."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from orchestrator.cli.main import main
from tests.unit.test_plan_cmd import EXAMPLE_FLEET, ps_manifest, run, write

TWO_STAGES: list[dict[str, Any]] = [
    {"name": "canary", "targets": {"clusters": {"selector": {}}}, "maxTargets": 1},
    {"name": "rest", "targets": {"clusters": {"selector": {}}}, "maxParallel": "50%"},
]


@pytest.fixture
def grouped(tmp_path: Path) -> Path:
    return write(tmp_path, "ps.yaml", ps_manifest(TWO_STAGES, groupBy="region", maxParallelGroups=2))


def test_table_opens_with_one_line_per_group(grouped: Path) -> None:
    result = run("-f", grouped, "--fleet", EXAMPLE_FLEET)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[2] == "groups by region: 3 groups, 2 at a time, each with its own stages and failure budget:"
    assert lines[3].startswith("  ap-southeast-1: 4 clusters, 4 to update (cells-1-ap-southeast-1a-1, ")
    assert lines[4].startswith("  eu-west-1: 4 clusters, 4 to update (")
    assert lines[5].startswith("  us-east-1: 4 clusters, 4 to update (")
    for group in ("ap-southeast-1", "eu-west-1", "us-east-1"):
        assert any(line.startswith(f"{group}/canary  ") and " planned " in line for line in lines), group
        assert any(line.startswith(f"{group}/rest: cells-1-{group}") for line in lines), group


def test_json_lists_the_groups_and_each_groups_stages(grouped: Path) -> None:
    result = run("-f", grouped, "--fleet", EXAMPLE_FLEET, "-o", "json")
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    assert plan["groupBy"] == "region" and plan["maxParallelGroups"] == 2
    assert [g["name"] for g in plan["groups"]] == ["ap-southeast-1", "eu-west-1", "us-east-1"]
    assert all(len(g["clusters"]) == 4 for g in plan["groups"])
    stages = {s["name"]: s for s in plan["stages"]}
    assert stages["eu-west-1/canary"]["group"] == "eu-west-1"
    assert stages["eu-west-1/canary"]["stage"] == "canary"
    assert [(len(s["targets"]), s["maxParallel"]) for s in plan["stages"]] == [(1, 1), (3, 1)] * 3


def test_mermaid_chains_stages_only_within_a_group(grouped: Path) -> None:
    result = run("-f", grouped, "--fleet", EXAMPLE_FLEET, "-o", "mermaid")
    assert result.exit_code == 0, result.output
    edges = [line.strip() for line in result.stdout.splitlines() if "-->" in line]
    assert edges == ["stage1 --> stage2", "stage3 --> stage4", "stage5 --> stage6"]


def test_without_group_by_the_table_has_no_groups_section(tmp_path: Path) -> None:
    result = run("-f", write(tmp_path, "ps.yaml", ps_manifest(TWO_STAGES)), "--fleet", EXAMPLE_FLEET)
    assert result.exit_code == 0, result.output
    assert "groups by" not in result.stdout


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        pytest.param(
            {"maxParallelGroups": 2},
            "spec.maxParallelGroups: maxParallelGroups is only used with groupBy",
            id="max-parallel-groups-without-group-by",
        ),
        pytest.param({"groupBy": "Bad Key"}, "spec.groupBy: ", id="group-by-not-a-label-key"),
        pytest.param(
            {"groupBy": "region", "maxParallelGroups": 0}, "spec.maxParallelGroups: 0", id="zero-groups"
        ),
    ],
)
def test_plan_refuses_a_wrong_group_spec_naming_the_field(
    tmp_path: Path, spec: dict[str, Any], says: str
) -> None:
    result = run("-f", write(tmp_path, "ps.yaml", ps_manifest(TWO_STAGES, **spec)), "--fleet", EXAMPLE_FLEET)
    assert result.exit_code == 1
    assert says in result.output


def render(*args: str | Path) -> Result:
    return CliRunner().invoke(main, ["render", *map(str, args)])


def test_render_with_a_fleet_has_a_branch_per_group(grouped: Path) -> None:
    result = render("-f", grouped, "--fleet", EXAMPLE_FLEET, "-o", "json")
    assert result.exit_code == 0, result.output
    workflow = json.loads(result.stdout)
    entry = next(t for t in workflow["spec"]["templates"] if t["name"] == "rollout")
    assert entry["dag"]["failFast"] is False and entry["parallelism"] == 2
    assert [t["name"] for t in entry["dag"]["tasks"]] == ["ap-southeast-1", "eu-west-1", "us-east-1"]
    description = workflow["metadata"]["annotations"]["workflows.argoproj.io/description"]
    assert description.startswith("3 groups by region, 2 at a time: ap-southeast-1/canary (1 cluster) -> ")


def test_render_without_a_fleet_says_groups_need_one(grouped: Path) -> None:
    result = render("-f", grouped)
    assert result.exit_code == 1
    assert "spec.groupBy: " in result.output and "render with --fleet" in result.output
    assert "assumed:" not in result.output
