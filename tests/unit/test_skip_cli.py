"""`progressive-sync plan` and `render` over a fleet file with an Application marked
`progressivesync.io/skip`: both say which cluster is skipped and why, and no stage takes it.
Real CLI (click's runner), the example fleet with one annotation added; no API server.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from orchestrator.api.metadata import SKIP_ANNOTATION
from orchestrator.cli.main import main

EXAMPLE_FLEET = Path("examples/fleets/checkout.yaml")
PS = Path("examples/canary-regions-rest.yaml")
WHY = "INC-4411: disk pressure"


def _items(document: dict[str, Any]) -> list[dict[str, Any]]:
    return document.get("items") or [] if document.get("kind", "").endswith("List") else [document]


@pytest.fixture
def marked_fleet(tmp_path: Path) -> tuple[Path, str]:
    """The example fleet with the first owned Application annotated; and that Application's name."""
    documents = [d for d in yaml.safe_load_all(EXAMPLE_FLEET.read_text()) if d]
    owned = [
        o
        for d in documents
        for o in _items(d)
        if o.get("kind") == "Application" and o["metadata"].get("ownerReferences")
    ]
    owned[0]["metadata"].setdefault("annotations", {})[SKIP_ANNOTATION] = WHY
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump_all(documents))
    return path, owned[0]["metadata"]["name"]


@pytest.mark.parametrize(
    ("command", "output", "says"),
    [
        pytest.param(
            ["plan", "-o", "table"], "stdout", "skipped:\n  - {cluster}: {why}", id="plan-table-lists-it"
        ),
        pytest.param(["plan", "-o", "json"], "json", "", id="plan-json-lists-it"),
        pytest.param(
            ["render"], "stderr", "# skipped (no stage syncs it): {cluster}: {why}", id="render-notes-it"
        ),
    ],
)
def test_plan_and_render_show_the_skipped_cluster_and_why(
    marked_fleet: tuple[Path, str], command: list[str], output: str, says: str
) -> None:
    fleet, app = marked_fleet
    cluster = app.removeprefix("checkout-")
    why = f"Application {app} is annotated {SKIP_ANNOTATION}: {WHY}"
    result = CliRunner().invoke(main, [*command, "-f", str(PS), "--fleet", str(fleet)])
    assert result.exit_code == 0, result.output
    if output == "json":
        plan = json.loads(result.stdout)
        assert plan["summary"]["skipped"] == [{"cluster": cluster, "reason": why}]
        assert all(cluster not in stage["targets"] for stage in plan["stages"])
        assert plan["stages"][0]["skipped"] == [{"cluster": cluster, "reason": why}]
        assert plan["errors"] == [] and plan["summary"]["uncovered"] == []
    else:
        text = result.stdout if output == "stdout" else result.stderr
        assert says.format(cluster=cluster, why=why) in text
