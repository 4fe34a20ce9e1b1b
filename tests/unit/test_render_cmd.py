"""`progressive-sync render`: the Workflow the watcher would create, with and without a fleet.

Offline: the ProgressiveSync and fleet are files (examples/ and tmp files); the planner and builder
are the real ones. Nothing talks to a cluster.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result

from orchestrator.api.models import ProgressiveSync
from orchestrator.argocd.fleet import load_fleet
from orchestrator.cli.main import main
from orchestrator.cli.overlap import NO_FORK_VARIABLE
from orchestrator.planning.planner import plan_fleet
from workflow_templates import names

EXAMPLE_PS = Path("examples/canary-regions-rest.yaml")
EXAMPLE_FLEET = Path("examples/fleets/checkout.yaml")


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
    plan = plan_fleet(ps.spec, fleet, ps_name=ps.metadata.name)
    release = plan.release_id(1)
    assert obj["metadata"]["name"] == f"checkout-{release}"
    arguments = {p["name"]: p["value"] for p in obj["spec"]["arguments"]["parameters"]}
    assert json.loads(arguments["contract"])["release"] == [list(r) for r in plan.revisions]
    task_names = names.stage_task_names(stage.name for stage in plan.stages)
    sized = {s["name"]: s for s in json.loads(arguments["contract"])["stages"]}
    for stage, task_name in zip(plan.stages, task_names, strict=True):
        # maxParallel as planned; Argo's parallelism is it unless the stage's pods start at once.
        assert sized[stage.name]["maxParallel"] == max(1, stage.max_parallel), stage.name
        parallelism = templates(obj)[names.fanout_template_name(task_name)].get("parallelism")
        together = sized[stage.name].get("podsAtOnce", False)
        assert parallelism == (None if together else max(1, stage.max_parallel)), stage.name
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
    # 25% of 8: two at a time (the fan-out's node says so; its 8 pods start together, steps/turn.py)
    fanout = templates(obj)["fanout-everything-else"]
    assert fanout["annotations"][names.DISPLAY_NAME_ANNOTATION] == "clusters-2-at-a-time"
    assert "parallelism" not in fanout


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
    assert json.loads(arguments["contract"])["release"] == [["deadbeef"]]
    assert arguments["argocd-namespace"] == "argo-cd"
    assert templates(obj)["cluster"]["container"]["image"] == "registry.example/steps:9"


def test_an_invalid_manifest_exits_1(tmp_path: Path) -> None:
    manifest = yaml.safe_load(EXAMPLE_PS.read_text())
    manifest["spec"]["stages"][0]["maxParallel"] = 0
    path = tmp_path / "ps.yaml"
    path.write_text(yaml.safe_dump(manifest))
    result = run("-f", str(path))
    assert result.exit_code == 1
    # As `validate` prints it: the field and the fix, not pydantic's text.
    assert "invalid, 1 error\n  spec.stages[0].maxParallel: 0 is below 1 (use a whole number" in result.stderr


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


def fleet_missing_a_cluster_secret(tmp_path: Path) -> Path:
    """The example fleet without its first cluster Secret: that cluster's Application has no
    cluster, a plan error (the spec does not allow a partial rollout)."""
    text = EXAMPLE_FLEET.read_text()
    first = text.index("- apiVersion: v1\n  kind: Secret")
    second = text.index("- apiVersion:", first + 1)
    path = tmp_path / "fleet.yaml"
    path.write_text(text[:first] + text[second:])
    return path


def unreadable_fleet(tmp_path: Path) -> Path:
    path = tmp_path / "fleet.yaml"
    path.write_text("kind: Secret\nmetadata: {name: x\n")
    return path


@pytest.mark.parametrize(
    ("fleet", "args", "code", "said"),
    [
        pytest.param(lambda _: EXAMPLE_FLEET, ["-o", "yaml"], 0, "", id="the-planned-release"),
        pytest.param(fleet_missing_a_cluster_secret, [], 1, "the plan has errors", id="a-plan-with-errors"),
        pytest.param(unreadable_fleet, [], 1, "fleet.yaml:", id="an-unreadable-fleet-file"),
    ],
)
def test_it_prints_the_same_whether_a_forked_child_plans_the_fleet_or_not(
    fleet: Callable[[Path], Path], args: list[str], code: int, said: str, tmp_path: Path
) -> None:
    """`render --fleet` plans in a forked child while it imports Hera (orchestrator/cli/overlap.py);
    in a fresh process, as users run it, the output, the messages and the exit code are those of
    the same command in one process."""
    command = [sys.executable, "-m", "orchestrator.cli.main", "render", "-f", str(EXAMPLE_PS)]
    command += ["--fleet", str(fleet(tmp_path)), *args]
    env = {k: v for k, v in os.environ.items() if k != NO_FORK_VARIABLE}
    results = [
        subprocess.run(command, capture_output=True, text=True, timeout=120, check=False, env=env | extra)
        for extra in ({}, {NO_FORK_VARIABLE: "1"})
    ]
    forked, alone = ((r.returncode, r.stdout, r.stderr) for r in results)
    assert forked == alone
    assert forked[0] == code, forked[2]
    assert said in forked[2]
    if code == 0:
        assert "kind" in forked[1] and "Workflow" in forked[1]


def test_it_says_where_each_stages_analysis_runs(tmp_path: Path) -> None:
    manifest = yaml.safe_load(EXAMPLE_PS.read_text())
    first = manifest["spec"]["stages"][0]["name"]
    manifest["spec"]["stages"][0]["analysis"] = {"templates": [{"name": "error-rate"}]}
    path = tmp_path / "ps.yaml"
    path.write_text(yaml.safe_dump(manifest))
    result = run("-f", str(path), "--assume-clusters", "4")
    assert result.exit_code == 0, result.stderr
    notes = [line for line in result.stderr.splitlines() if line.startswith("# analysis:")]
    assert notes == [
        f"# analysis: stage {first}: error-rate: after its clusters are Synced and Healthy, before the "
        "next stage (one AnalysisRun for the stage); Inconclusive fails"
    ]
    assert "analysis" in result.stdout  # the Workflow's analysis task
