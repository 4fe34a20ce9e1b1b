"""examples/demo.yaml is exactly the ProgressiveSync the demo applies, and the API accepts it;
`demo --ui`'s usage."""

from __future__ import annotations

import os
from pathlib import Path

import yaml
from click.testing import CliRunner

from orchestrator.api.models import ProgressiveSync
from orchestrator.cli.main import main
from orchestrator.devenv.demo import (
    CLUSTER_COUNT,
    REGIONS,
    demo_cluster_names,
    demo_progressive_sync,
    workflow_page,
)
from orchestrator.simulator.seed import seed_clusters

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "demo.yaml"


def example_yaml() -> str:
    """examples/demo.yaml as it should read (written with REGENERATE=1)."""
    header = (
        "# The ProgressiveSync of `make demo` (orchestrator/devenv/demo.py builds the same object; a test\n"
        "# keeps them equal). A canary chosen by label, then one cluster per region, then the rest,\n"
        "# half of them at a time.\n"
    )
    return header + yaml.safe_dump(demo_progressive_sync(), sort_keys=False)


def test_example_file_is_what_the_demo_applies() -> None:
    if os.environ.get("REGENERATE"):
        EXAMPLE.write_text(example_yaml())
    assert EXAMPLE.read_text() == example_yaml(), "examples/demo.yaml is stale: run with REGENERATE=1"


def test_example_is_a_valid_progressive_sync() -> None:
    ps = ProgressiveSync.model_validate(yaml.safe_load(EXAMPLE.read_text()))
    assert [stage.name for stage in ps.spec.stages] == ["canary", "one per region", "the rest"]
    assert (
        ps.model_dump(by_alias=True, exclude_none=True, mode="json")["spec"]["stages"][1]["spreadBy"]
        == "region"
    )
    assert ps.to_api()["metadata"]["name"] == demo_progressive_sync()["metadata"]["name"]


def test_demo_fleet_has_twelve_clusters_in_three_regions() -> None:
    clusters = seed_clusters(CLUSTER_COUNT, REGIONS)
    assert len(clusters) == 12
    assert len({cluster.region for cluster in clusters}) == 3
    assert demo_cluster_names() == [cluster.name for cluster in clusters]


def test_the_ui_needs_the_argo_engine() -> None:
    result = CliRunner().invoke(main, ["demo", "--ui", "--engine", "local"])
    assert result.exit_code == 2
    assert "Invalid value for --ui: the local engine has no Argo UI" in result.output


def test_the_ui_url_is_the_rollout_workflow_page() -> None:
    assert workflow_page("http://127.0.0.1:2746/", "myservice-7f3c2a1b9e") == (
        "http://127.0.0.1:2746/workflows/argocd/myservice-7f3c2a1b9e"
    )
