"""`plan` and `render` print the same bytes for one fleet however its file is parsed.

The fleet file is read by one of three parsers (orchestrator/core/yamlio.py): the C JSON parser for
a JSON file, yaml-rs for a large YAML file whose plain scalars read alike in YAML 1.1 and 1.2, and
PyYAML (the reference) for anything else. The same fleet is written as kubectl-shaped YAML and as
one JSON List, and read by each path; the outputs must not differ by a byte. Offline, pure.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from orchestrator.cli.main import main
from orchestrator.cli.overlap import NO_FORK_VARIABLE
from orchestrator.core import yamlio
from tests.support.builders import (
    APP_SET,
    APP_SET_UID,
    NEW_REVISION,
    make_application,
    make_cluster_secret,
)

REGIONS = ("eu-west-1", "us-east-1", "ap-south-1")
CLUSTERS = 120  # the YAML file is then well above yamlio.NATIVE_MIN_CHARS


def fleet_objects() -> list[dict[str, Any]]:
    """Cluster Secrets, the ApplicationSet and one Application per cluster, some of them up to date,
    with the timestamps, uids and revisions a live fleet has (all strings YAML 1.1 could misread)."""
    secrets = [
        make_cluster_secret(f"c{i:03d}", labels={"region": REGIONS[i % 3], "tier": str(i % 4)})
        for i in range(CLUSTERS)
    ]
    app_set = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "ApplicationSet",
        "metadata": {"name": APP_SET, "namespace": "argocd", "uid": APP_SET_UID},
    }
    apps = [
        make_application(
            cluster=f"c{i:03d}",
            sync="Synced" if i % 5 == 0 else "OutOfSync",
            phase="Succeeded",
            started_at="2026-11-20T09:14:02Z",
            finished_at="2026-11-20T09:14:31Z",
            reconciled_at="2026-11-29T21:58:40Z",
        )
        for i in range(CLUSTERS)
    ]
    return [{"apiVersion": "v1", "kind": "List", "items": secrets}, app_set, *apps]


def progressive_sync() -> dict[str, Any]:
    return {
        "apiVersion": "progressivesync.io/v1alpha1",
        "kind": "ProgressiveSync",
        "metadata": {"name": "fleetwide", "namespace": "argocd"},
        "spec": {
            "appSetRef": {"name": APP_SET},
            "stages": [
                {
                    "name": "canary",
                    "targets": {"clusters": {"selector": {"matchLabels": {"region": "eu-west-1"}}}},
                    "maxTargets": 1,
                },
                {
                    "name": "one per region",
                    "targets": {"clusters": {"selector": {}}},
                    "maxTargets": 3,
                    "maxParallel": 3,
                    "spreadBy": "region",
                },
                {"name": "the rest", "targets": {"clusters": {"selector": {}}}, "maxParallel": "25%"},
            ],
        },
    }


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("fleet-files")
    objects = fleet_objects()
    as_yaml, as_json, ps = root / "fleet.yaml", root / "fleet.json", root / "ps.yaml"
    as_yaml.write_text(yaml.safe_dump_all(objects, sort_keys=False))
    items = [item for obj in objects for item in (obj["items"] if obj["kind"] == "List" else [obj])]
    as_json.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    ps.write_text(yaml.safe_dump(progressive_sync()))
    assert as_yaml.stat().st_size >= yamlio.NATIVE_MIN_CHARS
    return {"yaml": as_yaml, "json": as_json, "ps": ps}


@pytest.fixture
def parsers_used(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Which parser read each YAML stream of 64 KiB or more: "yaml-rs" or "pyyaml"."""
    used: list[str] = []
    native = yamlio._native_load_all

    def spy(text: str) -> list[Any] | None:
        documents = native(text)
        used.append("pyyaml" if documents is None else "yaml-rs")
        return documents

    monkeypatch.setattr(yamlio, "_native_load_all", spy)
    yield used


def run(*args: str | Path) -> tuple[int, str]:
    result = CliRunner().invoke(main, [*map(str, args)], catch_exceptions=False)
    return result.exit_code, result.stdout


# The output formats differ after planning, not in what was read: one of each command suffices.
# Each command with something its output holds only when the fleet was read: a cluster the plan
# takes or how many are out of date (plan; 96: every fifth Application is Synced), the release
# revision the Workflow pins (render).
COMMANDS = [
    pytest.param(["plan", "-o", "json"], '"c119"', id="plan-json"),
    pytest.param(["plan"], "96 out of date", id="plan-table"),
    pytest.param(["render", "-o", "json"], NEW_REVISION, id="render-json"),
]


@pytest.mark.parametrize(("command", "marker"), COMMANDS)
def test_every_parser_path_prints_the_same_bytes(
    command: list[str],
    marker: str,
    files: dict[str, Path],
    parsers_used: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # `render` reads the fleet in a forked child (orchestrator/cli/overlap.py), where this process's
    # spy on the parsers would not see the read: one process here.
    monkeypatch.setenv(NO_FORK_VARIABLE, "1")
    outputs: dict[str, tuple[int, str]] = {}
    outputs["json"] = run(*command, "-f", files["ps"], "--fleet", files["json"])
    outputs["yaml-rs"] = run(*command, "-f", files["ps"], "--fleet", files["yaml"])
    assert parsers_used == ["yaml-rs"], "the kubectl-shaped YAML file was not read by yaml-rs"
    monkeypatch.setattr(yamlio, "yaml_rs", None)  # what a machine without the wheel does
    outputs["pyyaml"] = run(*command, "-f", files["ps"], "--fleet", files["yaml"])
    assert parsers_used == ["yaml-rs", "pyyaml"]

    code, text = outputs["json"]
    assert code == 0, text
    assert marker in text
    assert outputs["yaml-rs"] == outputs["json"]
    assert outputs["pyyaml"] == outputs["json"]
