"""`progressive-sync plan` offline: output formats, exit codes, and that credentials never leak."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result

from orchestrator.cli.main import main
from tests.support.builders import make_application, make_cluster_secret

EXAMPLE_FLEET = Path("examples/fleets/checkout.yaml")
MARKER = "CREDENTIAL-MARKER-5b1f0c"


def ps_manifest(
    stages: list[dict[str, Any]] | None = None, name: str = "checkout", **spec: Any
) -> dict[str, Any]:
    """The design's three stages over the example fleet's regions (unless `stages` is given).

    `name` is the ProgressiveSync's and its ApplicationSet's: examples/fleets/checkout.yaml holds `checkout`.
    """
    default_stages = [
        {
            "name": "canary in eu-west-1",
            "targets": {"clusters": {"selector": {"matchLabels": {"region": "eu-west-1"}}}},
            "maxTargets": 1,
        },
        {
            "name": "one per other region",
            "targets": {
                "clusters": {
                    "selector": {
                        "matchExpressions": [{"key": "region", "operator": "NotIn", "values": ["eu-west-1"]}]
                    }
                }
            },
            "maxTargets": 2,
            "maxParallel": 2,
            "spreadBy": "region",
        },
        {
            "name": "everything else",
            "targets": {"clusters": {"selector": {}}},
            "maxTargets": "100%",
            "maxParallel": "25%",
        },
    ]
    return {
        "apiVersion": "progressivesync.io/v1alpha1",
        "kind": "ProgressiveSync",
        "metadata": {"name": name, "namespace": "argocd"},
        "spec": {"appSetRef": {"name": name}, "stages": stages or default_stages, **spec},
    }


def write(tmp_path: Path, name: str, *documents: dict[str, Any]) -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump_all(documents, sort_keys=False))
    return path


def run(*args: str | Path) -> Result:
    return CliRunner().invoke(main, ["plan", *map(str, args)])


@pytest.fixture
def ps_file(tmp_path: Path) -> Path:
    return write(tmp_path, "ps.yaml", ps_manifest())


def test_table_lists_every_stage_and_its_clusters(ps_file: Path) -> None:
    result = run("-f", ps_file, "--fleet", EXAMPLE_FLEET)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith(
        "ProgressiveSync checkout, ApplicationSet checkout: 12 clusters, 12 out of date"
    )
    assert "release 4f1c2e9 (id " in lines[0]
    assert lines[2].split() == ["STAGE", "STATE", "TARGETS", "MAX", "TARGETS", "MAX", "PARALLEL", "REASON"]
    for stage in ("canary in eu-west-1", "one per other region", "everything else"):
        assert any(line.startswith(f"{stage}: cells-1-") for line in lines), stage
    assert "warnings:" not in result.stdout and "errors:" not in result.stdout


def test_json_has_the_documented_shape(ps_file: Path) -> None:
    result = run("-f", ps_file, "--fleet", EXAMPLE_FLEET, "-o", "json")
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    assert set(plan) == {"progressiveSync", "appSet", "release", "summary", "stages", "warnings", "errors"}
    assert plan["release"]["revisions"] == ["4f1c2e9b7a3d5c8e1f0a2b4c6d8e0f1a3b5c7d9e"]
    assert len(plan["release"]["id"]) == 10
    assert plan["summary"] == {
        "clusters": 12,
        "outOfDate": 12,
        "uncovered": [],
        "ignoredApplications": 1,
        "skipped": [],
    }
    stages = plan["stages"]
    assert [s["name"] for s in stages] == ["canary in eu-west-1", "one per other region", "everything else"]
    for stage in stages:
        assert {"name", "targets", "maxTargets", "maxParallel", "state", "reason"} <= set(stage)
    assert [(len(s["targets"]), s["maxTargets"], s["maxParallel"], s["state"]) for s in stages] == [
        (1, 1, 1, "planned"),
        (2, 2, 2, "planned"),
        (9, 9, 2, "planned"),
    ]
    assert sorted(t for s in stages for t in s["targets"]) == sorted(
        f"cells-1-{r}{z}-{i}"
        for r in ("eu-west-1", "us-east-1", "ap-southeast-1")
        for z in "ab"
        for i in (1, 2)
    )
    canary = stages[0]["targets"][0]
    assert stages[0]["applications"] == {canary: [f"checkout-{canary}"]}
    assert plan["warnings"] == [] and plan["errors"] == []


def test_mermaid_draws_stages_in_order(ps_file: Path) -> None:
    result = run("-f", ps_file, "--fleet", EXAMPLE_FLEET, "-o", "mermaid")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "flowchart TD"
    assert lines[1] == '  subgraph stage1["1. canary in eu-west-1: 1 cluster, 1 at a time"]'
    assert "  stage1 --> stage2" in lines and "  stage2 --> stage3" in lines
    assert sum(line.strip().startswith("stage3_") for line in lines) == 9


def test_plan_with_errors_exits_1_and_shows_them(tmp_path: Path) -> None:
    only_canary = ps_manifest(stages=[ps_manifest()["spec"]["stages"][0]])
    ps_file = write(tmp_path, "ps.yaml", only_canary)
    table = run("-f", ps_file, "--fleet", EXAMPLE_FLEET)
    assert table.exit_code == 1
    assert "errors:\n  - [UncoveredClusters] 11 out-of-date clusters are in no stage" in table.stdout
    as_json = run("-f", ps_file, "--fleet", EXAMPLE_FLEET, "-o", "json")
    assert as_json.exit_code == 1
    assert [e["code"] for e in json.loads(as_json.stdout)["errors"]] == ["UncoveredClusters"]


def test_partial_rollout_allowed_is_a_warning_and_exits_0(tmp_path: Path) -> None:
    manifest = ps_manifest(stages=[ps_manifest()["spec"]["stages"][0]], allowPartialRollout=True)
    result = run("-f", write(tmp_path, "ps.yaml", manifest), "--fleet", EXAMPLE_FLEET, "-o", "json")
    assert result.exit_code == 0, result.output
    assert [w["code"] for w in json.loads(result.stdout)["warnings"]] == ["UncoveredClusters"]


def test_name_chooses_among_several_progressive_syncs(tmp_path: Path) -> None:
    other = ps_manifest()
    other["metadata"]["name"] = "other"  # another ProgressiveSync of the same ApplicationSet
    ps_file = write(tmp_path, "ps.yaml", ps_manifest(), other)
    assert run("-f", ps_file, "--fleet", EXAMPLE_FLEET).exit_code == 2
    chosen = run("-f", ps_file, "--fleet", EXAMPLE_FLEET, "--name", "other", "-o", "json")
    assert chosen.exit_code == 0, chosen.output
    assert json.loads(chosen.stdout)["progressiveSync"] == "other"


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        pytest.param(
            ["--fleet", EXAMPLE_FLEET, "--kubeconfig", "/x"], 2, "--fleet plans offline", id="fleet-and-live"
        ),
        pytest.param(["--fleet", EXAMPLE_FLEET, "-o", "xml"], 2, "Invalid value", id="unknown-output-format"),
        pytest.param(["--fleet", "/no/such/fleet.yaml"], 2, "does not exist", id="missing-fleet-file"),
        pytest.param(
            ["--kubeconfig", "/no/such/kubeconfig"], 2, "cannot load kubeconfig", id="unusable-kubeconfig"
        ),
    ],
)
def test_usage_errors_exit_2(ps_file: Path, args: list[Any], code: int, message: str) -> None:
    result = run("-f", ps_file, *args)
    assert result.exit_code == code, result.output
    assert message in result.output


def test_missing_ps_file_is_a_usage_error() -> None:
    assert run("--fleet", EXAMPLE_FLEET).exit_code == 2


@pytest.mark.parametrize(
    ("documents", "message"),
    [
        pytest.param(
            [{**ps_manifest(), "spec": {**ps_manifest()["spec"], "stages": []}}],
            "invalid, 1 error\n  spec.stages: ",
            id="invalid-spec",
        ),
        pytest.param(
            [{"kind": "ConfigMap", "metadata": {"name": "x"}}], "no ProgressiveSync", id="no-progressive-sync"
        ),
    ],
)
def test_invalid_progressive_sync_exits_1(
    tmp_path: Path, documents: list[dict[str, Any]], message: str
) -> None:
    result = run("-f", write(tmp_path, "ps.yaml", *documents), "--fleet", EXAMPLE_FLEET)
    assert result.exit_code == 1
    assert message in result.output


def test_unreadable_fleet_exits_1(tmp_path: Path, ps_file: Path) -> None:
    broken = tmp_path / "fleet.yaml"
    broken.write_text("items: [")
    result = run("-f", ps_file, "--fleet", broken)
    assert result.exit_code == 1
    assert "not valid YAML" in result.output


@pytest.mark.parametrize("output", ["table", "json", "mermaid"])
def test_cluster_credentials_never_appear_in_any_output(tmp_path: Path, output: str) -> None:
    config = json.dumps({"bearerToken": MARKER, "tlsClientConfig": {"caData": MARKER}})
    regions = ("eu-west-1", "us-east-1")
    secrets = [
        make_cluster_secret(f"{r}-{i}", labels={"region": r}, config=config) for r in regions for i in (1, 2)
    ]
    secrets[0]["stringData"] = {"config": config}  # a manifest not yet applied carries stringData too
    apps = [
        make_application(cluster=s["metadata"]["name"].removeprefix("cluster-"), owner_uid=None)
        for s in secrets
    ]
    apps.append(make_application("orphan", cluster="gone"))  # errors and warnings mention clusters too
    fleet = write(tmp_path, "fleet.yaml", {"apiVersion": "v1", "kind": "List", "items": secrets}, *apps)
    ps_file = write(tmp_path, "ps.yaml", ps_manifest(name="myservice"))  # the builders' ApplicationSet
    result = run("-f", ps_file, "--fleet", fleet, "-o", output)
    assert result.exit_code == 1, result.output  # the orphan is an error: proves the error path ran
    encoded = base64.b64encode(config.encode()).decode()
    for text in (result.stdout, result.stderr):
        assert MARKER not in text
        assert encoded not in text


def test_the_api_examples_plan_cleanly_against_the_example_fleet() -> None:
    result = run("-f", "examples/canary-regions-rest.yaml", "--fleet", EXAMPLE_FLEET, "-o", "json")
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    assert plan["summary"]["uncovered"] == [] and plan["errors"] == [] and plan["warnings"] == []
    assert sum(len(stage["targets"]) for stage in plan["stages"]) == 12


def test_the_table_says_where_analysis_runs(tmp_path: Path) -> None:
    analysis = {"templates": [{"name": "error-rate"}], "perCluster": True, "onInconclusive": "Approve"}
    ps_file = write(tmp_path, "ps.yaml", ps_manifest(analysis=analysis))
    result = run("-f", ps_file, "--fleet", EXAMPLE_FLEET)
    assert result.exit_code == 0, result.output
    section = result.stdout.split("\nanalysis:\n", 1)[1].splitlines()
    assert section[0] == (
        "  canary in eu-west-1: error-rate: after its clusters are Synced and Healthy, before the next stage "
        "(one AnalysisRun per cluster); Inconclusive waits for approval"
    )
    assert len(section) == 3  # spec.analysis: every stage
    assert (
        "analysis:"
        not in run("-f", write(tmp_path, "plain.yaml", ps_manifest()), "--fleet", EXAMPLE_FLEET).stdout
    )


@pytest.mark.parametrize(
    ("rollback", "line"),
    [
        pytest.param(
            {"on": ["StageFailed", "Cancelled"], "scope": "Reached", "maxParallel": 2},
            "rollback: on StageFailed, Cancelled; scope Reached (later stages first); 2 at a time per stage; "
            "each cluster within 600s",
            id="int-max-parallel-is-one-number",
        ),
        pytest.param(
            {"on": ["StageFailed"], "progressDeadlineSeconds": 120},
            "rollback: on StageFailed; scope FailedStage (the failed stage's clusters); 1 at a time in "
            "canary in eu-west-1, 2 in one per other region, 2 in everything else; each cluster within 120s",
            id="default-each-stage-s-max-parallel",
        ),
        pytest.param(
            {"on": ["DeadlineExceeded"], "maxParallel": "50%"},
            "rollback: on DeadlineExceeded; scope FailedStage (the failed stage's clusters); 1 at a time in "
            "canary in eu-west-1, 1 in one per other region, 4 in everything else; each cluster within 600s",
            id="percent-of-each-stage-s-targets",
        ),
    ],
)
def test_the_table_and_json_say_how_the_rollout_rolls_back(
    tmp_path: Path, rollback: dict[str, Any], line: str
) -> None:
    ps_file = write(tmp_path, "ps.yaml", ps_manifest(rollback=rollback))
    table = run("-f", ps_file, "--fleet", EXAMPLE_FLEET)
    assert table.exit_code == 0, table.output
    assert table.stdout.endswith("\n\n" + line + "\n")
    as_json = json.loads(run("-f", ps_file, "--fleet", EXAMPLE_FLEET, "-o", "json").stdout)
    expected = {"on": rollback["on"], "scope": rollback.get("scope", "FailedStage")}
    if "maxParallel" in rollback:
        expected["maxParallel"] = rollback["maxParallel"]
    expected["progressDeadlineSeconds"] = rollback.get("progressDeadlineSeconds", 600)
    assert as_json["rollback"] == expected
    parallels = [stage["rollbackParallel"] for stage in as_json["stages"]]
    assert all(parallel >= 1 for parallel in parallels)
    assert str(parallels[2]) in line.split("; ")[2]  # the table's numbers are the JSON's


def test_without_rollback_neither_output_mentions_it(ps_file: Path) -> None:
    assert "rollback" not in run("-f", ps_file, "--fleet", EXAMPLE_FLEET).stdout
    plan = json.loads(run("-f", ps_file, "--fleet", EXAMPLE_FLEET, "-o", "json").stdout)
    assert "rollback" not in plan and all("rollbackParallel" not in stage for stage in plan["stages"])


def test_the_rollback_example_plans_cleanly_against_the_example_fleet() -> None:
    result = run("-f", "examples/rollback.yaml", "--fleet", EXAMPLE_FLEET, "-o", "json")
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    assert plan["errors"] == [] and plan["warnings"] == []
    assert plan["rollback"]["scope"] == "Reached"
    assert [stage["rollbackParallel"] for stage in plan["stages"]] == [1, 1, 4]
