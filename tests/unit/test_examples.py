"""Every example in examples/ is honest: it validates, the chart installed with its default values
accepts it (`validate --values charts/progressive-sync/values.yaml`), and it plans against its own
fleet (`examples/fleets/<ApplicationSet>.yaml`, examples/README.md) with exit 0 and no warning but
those its first comment lines announce (`Expected plan warning: <Code>`). Offline, through the CLI
as a person runs it (click's CliRunner); every fleet file belongs to an example."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from orchestrator.cli.main import main

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
CHART_VALUES = REPO / "charts" / "progressive-sync" / "values.yaml"
EXPECTED_WARNING = re.compile(r"^# Expected plan warning: (\w+)", re.MULTILINE)
# examples/fleet.yaml is a link to fleets/checkout.yaml (the old path), not an example.
PATHS = sorted(path for path in EXAMPLES.glob("*.yaml") if not path.is_symlink())


def fleet_of(example: Path) -> Path:
    app_set = yaml.safe_load(example.read_text())["spec"]["appSetRef"]["name"]
    return EXAMPLES / "fleets" / f"{app_set}.yaml"


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, [str(arg) for arg in args])
    return result.exit_code, result.output


@pytest.fixture(params=PATHS, ids=[path.stem for path in PATHS])
def example(request: pytest.FixtureRequest) -> Path:
    path: Path = request.param
    return path


def test_there_are_examples() -> None:
    assert len(PATHS) >= 6


def test_the_example_validates(example: Path) -> None:
    code, output = run("validate", "-f", example)
    assert code == 0, output
    assert output.splitlines()[0].endswith(": OK"), output


def test_the_default_chart_accepts_the_example(example: Path) -> None:
    code, output = run("validate", "-f", example, "--values", CHART_VALUES)
    assert code == 0, output
    assert output.splitlines()[0].endswith(": OK"), output


def test_the_example_plans_against_its_own_fleet(example: Path) -> None:
    fleet = fleet_of(example)
    assert fleet.is_file(), f"{example.name} has no fleet: add {fleet.relative_to(REPO)}"
    code, output = run("plan", "-f", example, "--fleet", fleet, "-o", "json")
    assert code == 0, output
    plan = json.loads(output)
    assert plan["errors"] == []
    announced = sorted(EXPECTED_WARNING.findall(example.read_text()))
    assert sorted(warning["code"] for warning in plan["warnings"]) == announced, plan["warnings"]
    assert all(stage["state"] == "planned" for stage in plan["stages"]), plan["stages"]


def test_the_table_plan_exits_zero_too(example: Path) -> None:
    code, output = run("plan", "-f", example, "--fleet", fleet_of(example))
    assert code == 0, output
    announced = EXPECTED_WARNING.findall(example.read_text())
    assert ("warnings:" in output) == bool(announced), output


def test_every_fleet_file_belongs_to_an_example() -> None:
    used = {fleet_of(path) for path in PATHS}
    assert set((EXAMPLES / "fleets").glob("*.yaml")) == used


def test_the_chart_refuses_what_an_example_would_need_allowed(tmp_path: Path) -> None:
    # The same example with prune on: valid on its own, refused by the default chart, accepted by a
    # chart that allows prune (a second values file merged over the first, as helm -f does).
    manifest = yaml.safe_load((EXAMPLES / "manual-approval.yaml").read_text())
    manifest["spec"]["syncOptions"]["prune"] = True
    path = tmp_path / "ps.yaml"
    path.write_text(yaml.safe_dump(manifest))
    allow = tmp_path / "allow-prune.yaml"
    allow.write_text(yaml.safe_dump({"policy": {"allowPrune": True}}))

    assert run("validate", "-f", path)[0] == 0
    code, output = run("validate", "-f", path, "--values", CHART_VALUES)
    assert code == 1
    assert "spec.syncOptions.prune: true is not allowed by the chart (policy.allowPrune: false)" in output
    assert "install the chart with policy.allowPrune: true" in output
    assert run("validate", "-f", path, "--values", CHART_VALUES, "--values", allow)[0] == 0


def test_values_of_the_wrong_type_are_a_usage_error(tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"policy": {"allowPrune": "yes"}}))
    code, output = run("validate", "-f", EXAMPLES / "minimal.yaml", "--values", values)
    assert code == 2
    assert "policy.allowPrune: expected true or false" in output
