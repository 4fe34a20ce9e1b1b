"""Argo Rollouts' analysis CRDs (AnalysisTemplate, ClusterAnalysisTemplate, AnalysisRun) on the test
control plane, for the tests of analysis gates that run without the Argo Rollouts controller.

The CRDs are Argo Rollouts' own, as `make tools` copies them from its Go module into the tool cache
(`orchestrator.devenv.tools.rollouts_crd_dir`); else the folder named by
`PROGRESSIVE_SYNC_ARGO_ROLLOUTS_CRDS`, else the newest `github.com/argoproj/argo-rollouts@*` in the
Go module cache (`GOMODCACHE`, else ~/go/pkg/mod). Nothing is written by hand. The analysis tier
(tests/support/analysis.py: the real controller and Prometheus) installs the same CRDs;
`rollouts_crds` then finds them and changes nothing.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.devenv import tools
from orchestrator.kube.client import Kube
from orchestrator.kube.crds import apply_crds

ANALYSIS_CRD_FILES = (
    "analysis-template-crd.yaml",
    "cluster-analysis-template-crd.yaml",
    "analysis-run-crd.yaml",
)
ENV = "PROGRESSIVE_SYNC_ARGO_ROLLOUTS_CRDS"


def find_crd_dir() -> Path | None:
    """Where Argo Rollouts' CRDs are on this machine (see the module), None when nowhere."""
    with contextlib.suppress(tools.ToolsMissing, ValueError):
        return tools.rollouts_crd_dir()
    named = os.environ.get(ENV)
    if named:
        return Path(named)
    cache = Path(os.environ.get("GOMODCACHE") or Path.home() / "go" / "pkg" / "mod")
    found = sorted((cache / "github.com" / "argoproj").glob("argo-rollouts@v*/manifests/crds"))
    return found[-1] if found else None


def analysis_crds() -> list[dict[str, Any]]:
    """The three CRDs as documents; pytest.skip when they are not on this machine."""
    folder = find_crd_dir()
    if folder is None or not all((folder / name).is_file() for name in ANALYSIS_CRD_FILES):
        pytest.skip(f"Argo Rollouts' CRDs not found (set {ENV}, or build the tools: `make tools`)")
    return [yaml.safe_load((folder / name).read_text()) for name in ANALYSIS_CRD_FILES]


def install_analysis_crds(kube: Kube) -> None:
    """Create (or bring up to date) the three CRDs, and wait until each is served."""
    apply_crds(kube, analysis_crds())


@pytest.fixture(scope="session")
def rollouts_crds(kube: Kube) -> Iterator[None]:
    """Argo Rollouts' analysis CRDs installed on the session's control plane."""
    install_analysis_crds(kube)
    yield
