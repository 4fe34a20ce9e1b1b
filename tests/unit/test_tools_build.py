"""hack/tools/build.sh on a cache laid out in a temp folder: what it prints, links and refuses.

Real: the script itself (bash), run with PROGRESSIVE_SYNC_TOOLS_CACHE pointing at a temp folder that
holds finished component folders, so nothing is compiled or downloaded; what is checked is the
bookkeeping around the builds: the printed folder, its links, the cache's `current`, the fast path
and the errors. The builds themselves are what `make tools` runs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

BUILD = Path(__file__).resolve().parents[2] / "hack" / "tools" / "build.sh"


def run(cache: Path, *args: str, assets: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "KUBEBUILDER_ASSETS"}
    env["PROGRESSIVE_SYNC_TOOLS_CACHE"] = str(cache)
    if assets is not None:
        env["KUBEBUILDER_ASSETS"] = str(assets)
    return subprocess.run(
        ["bash", str(BUILD), *args], capture_output=True, text=True, env=env, timeout=60, check=False
    )


def executable(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)


def finished_core_and_crds(cache: Path) -> Path:
    """A cache whose core (from an outside KUBEBUILDER_ASSETS, plus helm) and crds groups are built."""
    assets = cache.parent / "envtest"
    for name in ("etcd", "kube-apiserver", "kubectl"):
        executable(assets / name)
    executable(cache / _core_dir_name() / "helm")
    rollouts_crds = f"argo-rollouts-crds-{_pinned('ROLLOUTS_VERSION')}"
    crds = [
        (f"argo-workflows-crds-{_pinned('ARGO_VERSION')}", "argoproj.io_workflows"),
        (f"argocd-crds-{_pinned('ARGOCD_VERSION')}", "application-crd"),
        *(
            (rollouts_crds, kind)
            for kind in ("analysis-run-crd", "analysis-template-crd", "cluster-analysis-template-crd")
        ),
    ]
    for folder, name in [*crds, (f"{crds[0][0]}/minimal", "argoproj.io_workflows")]:
        (cache / folder).mkdir(parents=True, exist_ok=True)
        (cache / folder / f"{name}.yaml").write_text("kind: CustomResourceDefinition\n")
        (cache / folder / f"{name}.json").write_text('{"kind": "CustomResourceDefinition"}\n')
    return assets


def _pinned(key: str) -> str:
    """A version build.sh pins (KEY=value at the start of a line)."""
    return next(
        line.split("=", 1)[1] for line in BUILD.read_text().splitlines() if line.startswith(f"{key}=")
    )


def _core_dir_name() -> str:
    """The core group's cache folder, named by the versions build.sh pins."""
    return f"k8s-{_pinned('K8S_VERSION')}-etcd-{_pinned('ETCD_VERSION')}-helm-{_pinned('HELM_VERSION')}"


def test_print_names_a_folder_of_the_cache_and_builds_nothing(tmp_path: Path) -> None:
    result = run(tmp_path / "cache", "--print")
    assert result.returncode == 0, result.stderr
    printed = Path(result.stdout.strip())
    assert printed.parent == tmp_path / "cache" and printed.name.startswith("toolset-")
    assert not printed.exists()


def test_an_unknown_group_is_refused_naming_the_known_ones(tmp_path: Path) -> None:
    result = run(tmp_path / "cache", "core", "kubelets")
    assert result.returncode == 1
    assert "unknown group 'kubelets'" in result.stderr and "node" in result.stderr


def test_finished_components_are_linked_into_the_printed_folder_and_current(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    assets = finished_core_and_crds(cache)
    result = run(cache, "core", "crds", assets=assets)
    assert result.returncode == 0, result.stderr
    folder = Path(result.stdout.strip())
    assert (folder / "kube-apiserver").resolve() == (assets / "kube-apiserver").resolve()
    assert (folder / "helm").resolve() == (cache / _core_dir_name() / "helm").resolve()
    assert (folder / "crds" / "argocd" / "application-crd.json").is_file()
    assert (folder / "crds" / "argo-rollouts" / "analysis-run-crd.json").is_file()
    assert (cache / "current").resolve() == folder.resolve()
    assert "nothing to build" in result.stderr
    assert not (cache / "work").exists(), "scratch space is removed"

    again = run(cache, "core", "crds", assets=assets)
    assert again.stdout == result.stdout
    assert "everything is built" in again.stderr, "the second run takes the fast path"


def test_an_outside_kubebuilder_assets_gets_its_own_printed_folder(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    assets = finished_core_and_crds(cache)
    own = run(cache, "--print").stdout
    outside = run(cache, "--print", assets=assets).stdout
    assert own != outside


@pytest.mark.parametrize("group", ["node", "argo", "argocd", "rollouts"])
def test_a_group_that_is_not_built_is_not_linked(tmp_path: Path, group: str) -> None:
    cache = tmp_path / "cache"
    assets = finished_core_and_crds(cache)
    run(cache, "core", "crds", assets=assets)
    folder = Path(run(cache, "--print", assets=assets).stdout.strip())
    names = {
        "node": "kubelet",
        "argo": "argo",
        "argocd": "argocd-repo-server",
        "rollouts": "rollouts-controller",
    }
    assert not (folder / names[group]).exists()


def test_missing_names_the_groups_not_built_or_not_yet_linked_and_builds_nothing(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    assets = finished_core_and_crds(cache)
    before = run(cache, "--missing", "core", "crds", "argocd", "rollouts", assets=assets)
    assert before.returncode == 0, before.stderr
    # core and crds are built but not linked into the printed folder yet: a run of build.sh is due.
    assert before.stdout.split() == ["core", "crds", "argocd", "rollouts"]
    assert not (cache / "current").exists(), "--missing builds and links nothing"

    run(cache, "core", "crds", assets=assets)
    after = run(cache, "--missing", "core", "crds", "argocd", "rollouts", assets=assets)
    assert after.stdout.split() == ["argocd", "rollouts"]
    assert run(cache, "--missing", "core", "crds", assets=assets).stdout == ""


def test_missing_refuses_an_unknown_group(tmp_path: Path) -> None:
    result = run(tmp_path / "cache", "--missing", "core", "argocd-ui")
    assert result.returncode == 1
    assert "unknown group 'argocd-ui'" in result.stderr


PACKAGES = BUILD.parent / "debian-packages.sh"


def fake_debian(bin_dir: Path, installed: set[str], uid: int = 0) -> Path:
    """dpkg-query, apt-get and id stand-ins on PATH: dpkg-query reports `installed` (and what apt-get
    installed since), apt-get appends its arguments to a log and marks packages installed."""
    state = bin_dir / "installed"
    calls = bin_dir / "apt-get.calls"
    state.parent.mkdir(parents=True, exist_ok=True)
    state.write_text("".join(f"{name}\n" for name in sorted(installed)))
    programs = {
        "dpkg-query": f'grep -qx "${{@: -1}}" {state} && printf "install ok installed"\nexit 0\n',
        "apt-get": (
            f'echo "$*" >>{calls}\n'
            'if [[ " $* " == *" install "* ]]; then\n'
            f'  for arg in "$@"; do [[ "$arg" == -* || "$arg" == install ]] || echo "$arg" >>{state}; done\n'
            "fi\n"
        ),
        "id": f"echo {uid}\n",
    }
    for name, body in programs.items():
        path = bin_dir / name
        path.write_text("#!/usr/bin/env bash\n" + body)
        path.chmod(0o755)
    return calls


def run_packages(bin_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    return subprocess.run(
        ["bash", str(PACKAGES), *args], capture_output=True, text=True, env=env, timeout=60, check=False
    )


def wanted_packages() -> list[str]:
    """The packages debian-packages.sh asks for (the words of its PACKAGES=( ... ) list)."""
    text = PACKAGES.read_text().split("PACKAGES=(", 1)[1].split("\n)", 1)[0]
    lines = (line.split("#", 1)[0] for line in text.splitlines())
    return [word for line in lines for word in line.split()]


def test_the_package_list_names_what_the_stack_runs() -> None:
    wanted = wanted_packages()
    for package in (
        "containerd",
        "runc",
        "containernetworking-plugins",
        "mmdebstrap",
        "redis-server",
        "git",
        "chromium",
        "prometheus",
    ):
        assert package in wanted


def test_with_every_package_present_nothing_is_installed_and_nothing_said(tmp_path: Path) -> None:
    calls = fake_debian(tmp_path / "bin", set(wanted_packages()))
    result = run_packages(tmp_path / "bin")
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
    assert not calls.exists(), "apt-get is not run"
    assert run_packages(tmp_path / "bin", "--check").returncode == 0


def test_check_lists_the_missing_packages_and_installs_nothing(tmp_path: Path) -> None:
    calls = fake_debian(tmp_path / "bin", set(wanted_packages()) - {"redis-server", "runc"})
    result = run_packages(tmp_path / "bin", "--check")
    assert result.returncode == 1
    assert result.stdout.strip() == "missing Debian packages: runc redis-server"
    assert not calls.exists()


def test_as_root_the_missing_ones_are_installed_once_saying_so(tmp_path: Path) -> None:
    calls = fake_debian(tmp_path / "bin", set(wanted_packages()) - {"chromium", "mmdebstrap"})
    result = run_packages(tmp_path / "bin")
    assert result.returncode == 0, result.stderr
    assert "installing Debian packages: mmdebstrap chromium" in result.stderr
    lines = calls.read_text().splitlines()
    assert len(lines) == 2 and lines[0].endswith("update")
    assert lines[1].endswith("install -y --no-install-recommends mmdebstrap chromium")

    again = run_packages(tmp_path / "bin")
    assert (again.returncode, again.stderr) == (0, "")
    assert len(calls.read_text().splitlines()) == 2, "the second run installs nothing"


def test_not_root_it_fails_naming_the_packages_and_the_command(tmp_path: Path) -> None:
    calls = fake_debian(tmp_path / "bin", set(wanted_packages()) - {"git"}, uid=1000)
    result = run_packages(tmp_path / "bin")
    assert result.returncode == 1
    assert "missing Debian packages: git" in result.stderr
    assert "apt-get install --no-install-recommends git" in result.stderr
    assert not calls.exists()


def test_a_missing_go_is_named_before_anything_is_built(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "KUBEBUILDER_ASSETS"}
    env["PROGRESSIVE_SYNC_TOOLS_CACHE"] = str(tmp_path / "cache")
    env["PATH"] = "/usr/bin:/bin"  # the system's programs, without Go's own folder
    if shutil.which("go", path=env["PATH"]):
        pytest.skip("Go is installed in /usr/bin here: no PATH without it to run the script with")
    result = subprocess.run(
        ["bash", str(BUILD), "core"], capture_output=True, text=True, env=env, timeout=60, check=False
    )
    assert result.returncode == 1
    assert "go is not on PATH" in result.stderr
    assert not (tmp_path / "cache" / "work").exists(), "nothing started"
