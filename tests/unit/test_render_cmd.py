"""`progressive-sync render`: the Workflow the watcher would create, with and without a fleet.

Offline: the ProgressiveSync and fleet are files (examples/ and tmp files); the planner and builder
are the real ones. Nothing talks to a cluster.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner, Result

from orchestrator.api.models import ProgressiveSync
from orchestrator.argocd.fleet import load_fleet
from orchestrator.cli.main import main
from orchestrator.planning.planner import plan_rollout
from workflow_templates import names

EXAMPLE_PS = Path("examples/canary-regions-rest.yaml")
EXAMPLE_FLEET = Path("examples/fleet.yaml")


def run(*args: str) -> Result:
    return CliRunner().invoke(main, ["render", *args], catch_exceptions=False)


def templates(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in obj["spec"]["templates"]}


def test_with_a_fleet_it_renders_the_planned_release() -> None:
    result = run("-f", str(EXAMPLE_PS), "--fleet", str(EXAMPLE_FLEET), "-o", "json")
    assert result.exit_code == 0, result.stderr
    obj = json.loads(result.stdout)
    ps = ProgressiveSync.model_validate(yaml.safe_load(EXAMPLE_PS.read_text()))
    fleet = load_fleet(EXAMPLE_FLEET.read_text())
    plan = plan_rollout(
        ps.spec,
        ps_name=ps.metadata.name,
        appset=fleet.app_set(ps.spec.app_set_ref.name),
        clusters=fleet.clusters,
        apps=fleet.apps,
    )
    release = plan.release_id(1)
    assert obj["metadata"]["name"] == f"checkout-{release}"
    arguments = {p["name"]: p["value"] for p in obj["spec"]["arguments"]["parameters"]}
    assert json.loads(arguments["revisions"]) == [list(r) for r in plan.revisions]
    task_names = names.stage_task_names(stage.name for stage in plan.stages)
    for stage, task_name in zip(plan.stages, task_names, strict=True):
        parallelism = templates(obj)[names.fanout_template_name(task_name)]["parallelism"]
        assert parallelism == max(1, stage.max_parallel), stage.name
    assert "assumed: no uid" in result.stderr
    assert "no --fleet" not in result.stderr


def test_without_a_fleet_it_says_what_it_assumed() -> None:
    result = run("-f", str(EXAMPLE_PS), "--assume-clusters", "8")
    assert result.exit_code == 0, result.stderr
    obj = yaml.safe_load(result.stdout)
    assert obj["metadata"]["name"] == "checkout-render"
    assert "assumed: no --fleet, so every stage takes 8 clusters" in result.stderr
    assert "assumed: revision REVISION" in result.stderr
    assert "assumed: rollout id render" in result.stderr
    assert templates(obj)["fanout-everything-else"]["parallelism"] == 2  # 25% of 8


def test_overrides_and_settings_from_flags() -> None:
    result = run(
        "-f",
        str(EXAMPLE_PS),
        "--rollout-id",
        "abc123",
        "--revision",
        "deadbeef",
        "--image",
        "registry.example/steps:9",
        "--argocd-namespace",
        "argo-cd",
        "-o",
        "json",
    )
    assert result.exit_code == 0, result.stderr
    obj = json.loads(result.stdout)
    assert obj["metadata"]["name"] == "checkout-abc123"
    arguments = {p["name"]: p["value"] for p in obj["spec"]["arguments"]["parameters"]}
    assert json.loads(arguments["revisions"]) == [["deadbeef"]]
    assert arguments["argocd-namespace"] == "argo-cd"
    assert templates(obj)["cluster"]["container"]["image"] == "registry.example/steps:9"


def test_an_invalid_manifest_exits_1(tmp_path: Path) -> None:
    manifest = yaml.safe_load(EXAMPLE_PS.read_text())
    manifest["spec"]["stages"][0]["maxParallel"] = 0
    path = tmp_path / "ps.yaml"
    path.write_text(yaml.safe_dump(manifest))
    result = run("-f", str(path))
    assert result.exit_code == 1
    assert "not a valid ProgressiveSync" in result.stderr


def test_nothing_out_of_date_renders_nothing(tmp_path: Path) -> None:
    fleet = yaml.safe_load_all(EXAMPLE_FLEET.read_text())
    updated = []
    for doc in fleet:
        if isinstance(doc, dict) and doc.get("kind") == "Application":
            doc.setdefault("status", {})["sync"] = {"status": "Synced", "revision": "x"}
            doc["status"]["health"] = {"status": "Healthy"}
        updated.append(doc)
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump_all(updated))
    result = run("-f", str(EXAMPLE_PS), "--fleet", str(path))
    assert result.exit_code == 0, result.stderr
    assert result.stdout == ""
    assert "nothing is out of date" in result.stderr
