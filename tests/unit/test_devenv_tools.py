"""Finding what `make tools` built (orchestrator.devenv.tools), on folders laid out like its cache.

Real: the file system lookups and the error messages; the folders are made here the way
hack/tools/build.sh lays them out (binaries side by side, CRDs under crds/<project>/, the cache's
`current` link). Nothing is built.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.devenv import tools


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
