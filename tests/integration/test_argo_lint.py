"""`argo lint --offline` on everything we render: Argo's own validation, where the argo CLI builds.

`make tools` builds the argo CLI from Go modules into the tool cache (the `argo` fixture finds it
there and fails saying how to build it when it is missing). Real: the argo CLI of the pinned Argo
Workflows version, its offline linter (template references, variables, DAG structure). Input: the
committed WorkflowTemplates and the Workflows `render` makes of every example ProgressiveSync.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from orchestrator.api.groups import group_stage_name
from orchestrator.api.models import ProgressiveSync
from tests.support.builders import make_release
from tests.support.rollback_contracts import rollback_workflow
from workflow_templates import pieces, render
from workflow_templates.builder import StageSize, assumed_sizes, build_workflow
from workflow_templates.settings import WorkflowSettings

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
# With the analysis gates' every shape (a gate per stage, per cluster, approve-analysis, a bake
# that is an analysis): tests/api/valid/analysis.yaml.
EXAMPLES = sorted(
    [*(REPO / "examples").glob("*.yaml"), render.EXAMPLE_PS, REPO / "tests/api/valid/analysis.yaml"]
)


def progressive_syncs() -> list[ProgressiveSync]:
    found = []
    for path in EXAMPLES:
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "ProgressiveSync":
                found.append(ProgressiveSync.model_validate(doc))
    return found


def sizes_of(ps: ProgressiveSync) -> dict[str, StageSize]:
    """12 clusters per stage; with spec.groupBy (docs/groups.md) two groups of them, as a fleet's
    labels would make (`render` needs --fleet for the groups)."""
    sizes = assumed_sizes(ps, 12)
    if ps.spec.group_by is None:
        return sizes
    return {
        group_stage_name(group, name): size for group in ("team-a", "team-b") for name, size in sizes.items()
    }


def lint(argo: Path, *paths: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(argo), "lint", "--offline", "--output", "simple", *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "KUBECONFIG": "/dev/null"},
    )


def test_workflow_templates_pass_argo_lint(argo: Path) -> None:
    files = [render.HERE / f"{t.name}.yaml" for t in pieces.workflow_templates(WorkflowSettings())]
    result = lint(argo, *files)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    "batch_threshold",
    [
        pytest.param(WorkflowSettings().batch_threshold, id="pod-per-cluster"),
        # Stages in batches: record-and-select-for-batches hands over without a targets output.
        pytest.param(4, id="batches"),
    ],
)
@pytest.mark.parametrize("ps", progressive_syncs(), ids=lambda ps: ps.metadata.name)
def test_rendered_workflows_pass_argo_lint(
    argo: Path, ps: ProgressiveSync, batch_threshold: int, tmp_path: Path
) -> None:
    if not ps.metadata.namespace:
        ps = ps.model_copy(update={"metadata": ps.metadata.model_copy(update={"namespace": "argocd"})})
    workflow = build_workflow(
        ps,
        release=make_release("0123456789", revisions=(("4f1c2e9",),)),
        plan=sizes_of(ps),
        settings=WorkflowSettings(batch_threshold=batch_threshold),
    )
    path = tmp_path / "workflow.yaml"
    path.write_text(render.to_yaml(workflow))
    result = lint(argo, path)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("ps", progressive_syncs(), ids=lambda ps: ps.metadata.name)
def test_rendered_workflows_with_a_rollback_pass_argo_lint(
    argo: Path, ps: ProgressiveSync, tmp_path: Path
) -> None:
    """The exit handler DAG of the rollback branch (rollback-plan's outputs with defaults, a `when`
    on a task's status, a fan-out per stage; with spec.groupBy one chain per group side by side,
    bounded by the exit DAG's parallelism): contracts with a rollback made by hand."""
    if not ps.metadata.namespace:
        ps = ps.model_copy(update={"metadata": ps.metadata.model_copy(update={"namespace": "argocd"})})
    workflow = rollback_workflow(
        ps,
        release=make_release("0123456789", revisions=(("4f1c2e9",),)),
        sizes=sizes_of(ps),
        settings=WorkflowSettings(),
    )
    path = tmp_path / "workflow.yaml"
    path.write_text(render.to_yaml(workflow))
    result = lint(argo, path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_argo_lint_does_catch_a_broken_reference(argo: Path, tmp_path: Path) -> None:
    ps = progressive_syncs()[0]
    if not ps.metadata.namespace:
        ps = ps.model_copy(update={"metadata": ps.metadata.model_copy(update={"namespace": "argocd"})})
    obj = build_workflow(
        ps,
        release=make_release("0123456789", revisions=(("4f1c2e9",),)),
        plan=assumed_sizes(ps, 3),
        settings=WorkflowSettings(),
    ).to_dict()
    obj["spec"]["templates"] = [t for t in obj["spec"]["templates"] if t["name"] != "record"]
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(obj))
    result = lint(argo, path)
    assert result.returncode != 0
    assert "record" in result.stdout + result.stderr
