"""Finding the real components `make tools` builds: binaries and the peers' CRD folders.

`hack/tools/build.sh` builds everything into a versioned cache and prints one folder that holds it
all (binaries side by side, CRDs under `crds/<project>/`). That folder is found here, in order:
`$PROGRESSIVE_SYNC_TOOLS_DIR` (the Makefile sets it for test, demo and bench), else the cache's
stable `current` link (`~/.cache/progressive-sync/tools/current`, or under
`$PROGRESSIVE_SYNC_TOOLS_CACHE`), which every build points at what it built last.

Every lookup that fails raises `ToolsMissing` naming what is missing, where it looked, and the
command that builds it. The control plane's own three binaries may also come from
`KUBEBUILDER_ASSETS` (see `controlplane.find_tools_dir`).
"""

from __future__ import annotations

import os
from pathlib import Path

TOOLS_DIR_VARIABLE = "PROGRESSIVE_SYNC_TOOLS_DIR"
CACHE_VARIABLE = "PROGRESSIVE_SYNC_TOOLS_CACHE"
BUILD_COMMAND = "make tools"

# Which build group (`hack/tools/build.sh GROUP`) makes each binary.
GROUPS = {
    "etcd": "core",
    "kube-apiserver": "core",
    "kubectl": "core",
    "helm": "core",
    "kubelet": "node",
    "kube-scheduler": "node",
    "kube-controller-manager": "node",
    "workflow-controller": "argo",
    "argoexec": "argo",
    "argo": "argo",
    "argocd": "argocd",
    "argocd-application-controller": "argocd",
    "argocd-applicationset-controller": "argocd",
    "argocd-repo-server": "argocd",
    "git-verify-wrapper.sh": "argocd",
    "gpg-wrapper.sh": "argocd",
    "rollouts-controller": "rollouts",
}
# The peers' own CRDs, as `crds/<project>/` of the tools folder holds them, and their build group.
CRD_PROJECTS = {"argo-workflows": "crds", "argocd": "crds", "argo-rollouts": "crds"}
# Those every tier installs; Argo Rollouts' analysis kinds only where analysis runs
# (`rollouts_crd_dir`: the dev stack with --argo-rollouts, the analysis fixtures).
PEER_CRD_PROJECTS = ("argo-workflows", "argocd")


class ToolsMissing(RuntimeError):
    """A component `make tools` builds is not there; the message says what and how to build it."""


def cache_dir() -> Path:
    """The versioned tool cache that `hack/tools/build.sh` fills."""
    if os.environ.get(CACHE_VARIABLE):
        return Path(os.environ[CACHE_VARIABLE])
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "progressive-sync" / "tools"


def tools_dir() -> Path:
    """The folder holding every built component: $PROGRESSIVE_SYNC_TOOLS_DIR or the cache's `current`."""
    explicit = os.environ.get(TOOLS_DIR_VARIABLE)
    folder = Path(explicit) if explicit else cache_dir() / "current"
    if not folder.is_dir():
        origin = (
            f"${TOOLS_DIR_VARIABLE}"
            if explicit
            else f"the cache's latest build ({TOOLS_DIR_VARIABLE} is unset)"
        )
        raise ToolsMissing(
            f"no tools folder at {folder} ({origin}): run `{BUILD_COMMAND}` "
            "(hack/tools/build.sh builds every component and prints that folder)"
        )
    return folder


def binary(name: str) -> Path:
    """The path of one built executable (e.g. `kubelet`, `argo`, `argocd-repo-server`)."""
    folder = tools_dir()
    path = folder / name
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise ToolsMissing(f"{name} is not built (no executable {path}): {_how_to_build(GROUPS.get(name))}")
    return path


def crd_dir(project: str) -> Path:
    """The folder of one peer project's own CRDs: `argo-workflows`, `argocd` or `argo-rollouts`."""
    if project not in CRD_PROJECTS:
        raise ValueError(f"unknown CRD project {project!r}; known: {', '.join(CRD_PROJECTS)}")
    folder = tools_dir() / "crds" / project
    if not folder.is_dir() or not any(folder.glob("*.yaml")):
        raise ToolsMissing(
            f"{project}'s CRDs are not built (no {folder}): {_how_to_build(CRD_PROJECTS[project])}"
        )
    return folder


def minimal_workflow_crd_dir() -> Path:
    """The folder of Argo's minimal Workflow CRD (`crds/argo-workflows/minimal/`)."""
    folder = crd_dir("argo-workflows") / "minimal"
    if not any(folder.glob("*.yaml")):
        raise ToolsMissing(
            f"Argo's minimal Workflow CRD is not built (no {folder}/*.yaml): {_how_to_build('crds')}"
        )
    return folder


def peer_crd_dirs() -> list[Path]:
    """The CRD folders of Argo Workflows and Argo CD, the peers every tier installs."""
    return [crd_dir(project) for project in PEER_CRD_PROJECTS]


def rollouts_crd_dir() -> Path:
    """Argo Rollouts' analysis CRDs (AnalysisRun, AnalysisTemplate, ClusterAnalysisTemplate)."""
    return crd_dir("argo-rollouts")


def _how_to_build(group: str | None) -> str:
    only = f" (or only this part: `hack/tools/build.sh {group}`)" if group else ""
    return f"run `{BUILD_COMMAND}`{only}"
