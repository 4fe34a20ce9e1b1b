"""Finding what `make tools` built (orchestrator.devenv.tools), on folders laid out like its cache.

Real: the file system lookups and the error messages; the folders are made here the way
hack/tools/build.sh lays them out (binaries side by side, CRDs under crds/<project>/, the cache's
`current` link). Nothing is built.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.devenv import tools
from orchestrator.kube.crds import all_crd_documents


def make_tools_dir(folder: Path, binaries: list[str], crd_projects: list[str]) -> Path:
    folder.mkdir(parents=True)
    for name in binaries:
        (folder / name).write_text("#!/bin/sh\n")
        (folder / name).chmod(0o755)
    for project in crd_projects:
        (folder / "crds" / project).mkdir(parents=True)
        (folder / "crds" / project / "a-crd.yaml").write_text("kind: CustomResourceDefinition\n")
    return folder


@pytest.fixture
def no_tools_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.delenv(tools.TOOLS_DIR_VARIABLE, raising=False)
    monkeypatch.setenv(tools.CACHE_VARIABLE, str(tmp_path / "cache"))
    return tmp_path


def test_the_variable_names_the_folder(no_tools_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = make_tools_dir(no_tools_env / "set", ["kubelet"], ["argocd"])
    monkeypatch.setenv(tools.TOOLS_DIR_VARIABLE, str(folder))
    assert tools.binary("kubelet") == folder / "kubelet"
    assert tools.crd_dir("argocd") == folder / "crds" / "argocd"


def test_without_the_variable_the_cache_current_link_is_used(no_tools_env: Path) -> None:
    folder = make_tools_dir(no_tools_env / "cache" / "toolset-1", ["argo"], [])
    (no_tools_env / "cache" / "current").symlink_to("toolset-1")
    assert tools.binary("argo").resolve() == (folder / "argo").resolve()


@pytest.mark.parametrize(
    ("present", "wanted", "expected"),
    [
        pytest.param([], "kubelet", r"kubelet is not built .*`make tools`.*build.sh node", id="node-binary"),
        pytest.param(
            ["argo"], "argocd-repo-server", r"argocd-repo-server.*build.sh argocd", id="argocd-component"
        ),
    ],
)
def test_a_missing_binary_names_itself_and_the_build(
    no_tools_env: Path, monkeypatch: pytest.MonkeyPatch, present: list[str], wanted: str, expected: str
) -> None:
    monkeypatch.setenv(tools.TOOLS_DIR_VARIABLE, str(make_tools_dir(no_tools_env / "set", present, [])))
    with pytest.raises(tools.ToolsMissing, match=expected):
        tools.binary(wanted)


def test_a_file_that_is_not_executable_is_not_a_tool(
    no_tools_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = make_tools_dir(no_tools_env / "set", ["argo"], [])
    (folder / "argo").chmod(0o644)
    monkeypatch.setenv(tools.TOOLS_DIR_VARIABLE, str(folder))
    with pytest.raises(tools.ToolsMissing, match="argo is not built"):
        tools.binary("argo")


def test_no_tools_folder_at_all_says_how_to_build(no_tools_env: Path) -> None:
    with pytest.raises(tools.ToolsMissing, match=r"no tools folder at .*current.*`make tools`"):
        tools.tools_dir()


def test_missing_crds_name_the_project_and_the_build(
    no_tools_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(tools.TOOLS_DIR_VARIABLE, str(make_tools_dir(no_tools_env / "set", [], ["argocd"])))
    with pytest.raises(tools.ToolsMissing, match=r"argo-workflows's CRDs are not built.*build.sh crds"):
        tools.peer_crd_dirs()


def test_an_unknown_crd_project_is_a_programming_error(no_tools_env: Path) -> None:
    with pytest.raises(ValueError, match="argo-workflows, argocd"):
        tools.crd_dir("argo-events")


def test_a_cache_without_the_minimal_workflow_crd_says_to_rebuild_the_crds(
    no_tools_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = make_tools_dir(no_tools_env / "set", [], ["argo-workflows", "argocd"])
    monkeypatch.setenv(tools.TOOLS_DIR_VARIABLE, str(folder))
    with pytest.raises(tools.ToolsMissing, match=r"minimal Workflow CRD is not built.*build.sh crds"):
        tools.minimal_workflow_crd_dir()
    (folder / "crds" / "argo-workflows" / "minimal").mkdir()
    (folder / "crds" / "argo-workflows" / "minimal" / "w.yaml").write_text("kind: CustomResourceDefinition\n")
    assert tools.minimal_workflow_crd_dir() == folder / "crds" / "argo-workflows" / "minimal"


def test_the_minimal_workflow_crd_replaces_the_full_one_and_nothing_else(tmp_path: Path) -> None:
    def crd(folder: Path, name: str, schema: str) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{name}.yaml").write_text(
            f"kind: CustomResourceDefinition\nmetadata: {{name: {name}}}\nspec: {{schema: {schema}}}\n"
        )

    crd(tmp_path / "argo", "workflows.argoproj.io", "full")
    crd(tmp_path / "argo", "workflowtemplates.argoproj.io", "full")
    crd(tmp_path / "argo" / "minimal", "workflows.argoproj.io", "minimal")
    full = all_crd_documents([tmp_path / "argo"])
    minimal = all_crd_documents([tmp_path / "argo"], workflow_crd_dir=tmp_path / "argo" / "minimal")
    assert [d["metadata"]["name"] for d in minimal] == [d["metadata"]["name"] for d in full]
    schemas = {d["metadata"]["name"]: d["spec"].get("schema") for d in minimal[2:]}
    assert schemas == {"workflows.argoproj.io": "minimal", "workflowtemplates.argoproj.io": "full"}
    assert minimal[:2] == full[:2]  # ours (ProgressiveSync, ProgressiveSyncStage), generated from the models
