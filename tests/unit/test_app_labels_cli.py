"""`plan` and `render` show the Application selector of a stage (`targets.applications.selector`):
the table's "stages by Application labels" lines, `applicationSelector` in `-o json`, a note on
render's stderr; and the clusters each stage of examples/app-labels.yaml takes over its fleet.
Offline, through the CLI as a person runs it; nothing talks to a cluster.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from orchestrator.api.models import LabelSelector
from orchestrator.api.selectors import selector_text
from orchestrator.cli.main import main

EXAMPLE = Path("examples/app-labels.yaml")
FLEET = Path("examples/fleets/storefront.yaml")


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_the_table_says_what_each_application_selector_selects() -> None:
    result = run("plan", "-f", str(EXAMPLE), "--fleet", str(FLEET))
    assert result.exit_code == 0, result.output
    section = result.output.split("stages by Application labels:\n", 1)[1].splitlines()
    assert section == [
        "  staging: clusters with an Application labelled env=staging",
        "  prod canary in eu-west-1: clusters with an Application labelled env=prod, among clusters "
        "labelled region=eu-west-1",
        "  prod: clusters with an Application labelled env in (prod)",
    ]


def test_json_carries_each_stage_application_selector_and_its_targets() -> None:
    result = run("plan", "-f", str(EXAMPLE), "--fleet", str(FLEET), "-o", "json")
    assert result.exit_code == 0, result.output
    stages = {stage["name"]: stage for stage in json.loads(result.output)["stages"]}
    assert stages["staging"]["applicationSelector"] == {"matchLabels": {"env": "staging"}}
    assert stages["prod"]["applicationSelector"] == {
        "matchExpressions": [{"key": "env", "operator": "In", "values": ["prod"]}]
    }
    # The fleet: store-1 (eu-west-1) and store-2 (us-east-1) are staging; store-3..6 prod, the odd
    # ones in eu-west-1.
    assert sorted(stages["staging"]["targets"]) == ["store-1", "store-2"]
    assert stages["prod canary in eu-west-1"]["targets"][0] in {"store-3", "store-5"}
    assert len(stages["prod canary in eu-west-1"]["targets"]) == 1
    taken = [t for stage in stages.values() for t in stage["targets"]]
    assert sorted(taken) == [f"store-{i}" for i in range(1, 7)], "each cluster once"


def test_a_stage_without_an_application_selector_has_no_such_key() -> None:
    result = run(
        "plan", "-f", "examples/minimal.yaml", "--fleet", "examples/fleets/guestbook.yaml", "-o", "json"
    )
    assert result.exit_code == 0, result.output
    assert all("applicationSelector" not in stage for stage in json.loads(result.output)["stages"])
    table = run("plan", "-f", "examples/minimal.yaml", "--fleet", "examples/fleets/guestbook.yaml").output
    assert "stages by Application labels" not in table


def test_render_notes_each_application_selector() -> None:
    result = run("render", "-f", str(EXAMPLE), "--fleet", str(FLEET))
    assert result.exit_code == 0, result.stderr
    assert "# targets: stage staging: clusters with an Application labelled env=staging\n" in result.stderr
    assert "# targets: stage prod: clusters with an Application labelled env in (prod)\n" in result.stderr


@pytest.mark.parametrize(
    ("selector", "text"),
    [
        pytest.param({}, "(everything)", id="empty"),
        pytest.param({"matchLabels": {"env": "prod", "tier": "web"}}, "env=prod,tier=web", id="match-labels"),
        pytest.param(
            {
                "matchExpressions": [
                    {"key": "env", "operator": "In", "values": ["a", "b"]},
                    {"key": "zone", "operator": "NotIn", "values": ["x"]},
                    {"key": "canary", "operator": "Exists"},
                    {"key": "hold", "operator": "DoesNotExist"},
                ]
            },
            "env in (a,b),zone notin (x),canary,!hold",
            id="every-operator",
        ),
    ],
)
def test_selector_text_is_what_kubectl_l_takes(selector: dict[str, object], text: str) -> None:
    assert selector_text(LabelSelector.model_validate(selector)) == text
