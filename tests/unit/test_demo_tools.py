"""The demo's tool groups: which build groups each demo option needs, and what is asked of build.sh.

Real: the mapping and the build plan (pure), and `ensure_tools` running a stand-in build script (a
few lines of bash in a temp folder that records its arguments), so nothing is built or downloaded.
hack/tools/build.sh's own `--missing` is tested in test_tools_build.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.devenv.demo import ArgoCDMode, DemoSettings
from orchestrator.devenv.demo_tools import GROUP_COSTS, build_plan, demo_tool_groups, ensure_tools
from orchestrator.devenv.tools import ToolsMissing
from orchestrator.watcher.settings import Engine

BUILD = Path(__file__).resolve().parents[2] / "hack" / "tools" / "build.sh"


@pytest.mark.parametrize(
    ("settings", "groups"),
    [
        pytest.param(DemoSettings(), ("core", "crds"), id="default-demo-only-the-control-plane"),
        pytest.param(
            DemoSettings(fail_cluster="eu-west-1a"), ("core", "crds"), id="fail-cluster-adds-nothing"
        ),
        pytest.param(
            DemoSettings(engine=Engine.ARGO),
            ("packages", "core", "crds", "node", "argo"),
            id="argo-engine-node-and-argo",
        ),
        pytest.param(
            DemoSettings(argocd=ArgoCDMode.REAL),
            ("packages", "core", "crds", "argocd"),
            id="argocd-real",
        ),
        pytest.param(
            DemoSettings(analysis=True), ("packages", "core", "crds", "rollouts"), id="analysis-rollouts"
        ),
        pytest.param(
            DemoSettings(bad_metrics="eu-west-1a"),
            ("packages", "core", "crds", "rollouts"),
            id="bad-metrics-implies-analysis",
        ),
        pytest.param(
            DemoSettings(engine=Engine.ARGO, argocd=ArgoCDMode.REAL, bad_metrics="eu-west-1a"),
            ("packages", "core", "crds", "node", "argo", "argocd", "rollouts"),
            id="everything-every-group",
        ),
    ],
)
def test_each_demo_option_needs_its_groups(settings: DemoSettings, groups: tuple[str, ...]) -> None:
    assert demo_tool_groups(settings) == groups


def test_the_groups_are_build_sh_s_own_in_its_order() -> None:
    line = next(line for line in BUILD.read_text().splitlines() if line.startswith("ALL_GROUPS=("))
    assert tuple(GROUP_COSTS) == tuple(line.removeprefix("ALL_GROUPS=(").removesuffix(")").split())


@pytest.mark.parametrize(
    ("needed", "missing", "command"),
    [
        pytest.param(("core", "crds"), [], None, id="all-built-nothing-to-run"),
        pytest.param(("core", "crds"), ["crds"], ("crds",), id="only-the-missing-group"),
        pytest.param(
            ("packages", "core", "crds", "argocd"),
            ["argocd", "core"],
            ("core", "argocd"),
            id="missing-in-build-order",
        ),
        pytest.param(("core", "crds"), ["argocd"], None, id="a-group-not-needed-is-not-built"),
    ],
)
def test_the_build_asks_for_exactly_the_missing_needed_groups(
    needed: tuple[str, ...], missing: list[str], command: tuple[str, ...] | None
) -> None:
    plan = build_plan(Path("/x/build.sh"), needed, missing)
    if command is None:
        assert plan.command is None and plan.message == ""
        return
    assert plan.command == ("/x/build.sh", *command)
    for group in command:
        assert f"  {group}: {GROUP_COSTS[group][0]}, {GROUP_COSTS[group][1]} cold" in plan.message


def test_argocd_says_what_it_builds_and_how_long() -> None:
    plan = build_plan(Path("build.sh"), ("core", "crds", "argocd"), ["argocd"])
    assert "argocd: Argo CD, ~25-40 min cold on 2 cores" in plan.message


def stand_in_build(tmp_path: Path, missing: str, exit_code: int = 0) -> tuple[Path, Path]:
    """A build script that answers --missing with `missing` and records every call's arguments."""
    calls = tmp_path / "calls"
    script = tmp_path / "build.sh"
    script.write_text(
        "#!/bin/bash\n"
        f'echo "$*" >> {calls}\n'
        f'if [[ "$1" == --missing ]]; then printf "{missing}"; exit 0; fi\n'
        f"echo /cache/toolset-x\nexit {exit_code}\n"
    )
    script.chmod(0o755)
    return script, calls


def test_ensure_tools_builds_the_missing_groups_and_says_so(tmp_path: Path) -> None:
    script, calls = stand_in_build(tmp_path, "argocd\\n")
    said: list[str] = []
    ensure_tools(("packages", "core", "crds", "argocd"), said.append, script=script)
    assert calls.read_text().splitlines() == ["--missing packages core crds argocd", "argocd"]
    assert len(said) == 1 and "argocd: Argo CD" in said[0]


def test_ensure_tools_with_everything_built_runs_no_build_and_says_nothing(tmp_path: Path) -> None:
    script, calls = stand_in_build(tmp_path, "")
    said: list[str] = []
    ensure_tools(("core", "crds"), said.append, script=script)
    assert calls.read_text().splitlines() == ["--missing core crds"]
    assert said == []


def test_a_failed_build_is_tools_missing_naming_the_groups(tmp_path: Path) -> None:
    script, _ = stand_in_build(tmp_path, "rollouts\\n", exit_code=1)
    with pytest.raises(ToolsMissing, match="building rollouts failed"):
        ensure_tools(("core", "crds", "rollouts"), lambda text: None, script=script)


def test_without_the_build_script_nothing_is_run(tmp_path: Path) -> None:
    said: list[str] = []
    ensure_tools(("core", "argocd"), said.append, script=tmp_path / "absent.sh")
    assert said == []
