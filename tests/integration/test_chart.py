"""The Helm chart renders, lints, is accepted by the real API server, and its RBAC grants what the
watcher and the steps need (checked with `kubectl auth can-i` as the chart's service accounts)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from orchestrator.devenv.controlplane import DevCluster
from tests.support.kubectl import Kubectl

pytestmark = pytest.mark.integration

CHART = Path(__file__).resolve().parents[2] / "charts" / "progressive-sync"


@pytest.fixture(scope="module")
def helm(control_plane: DevCluster) -> Path:
    binary = control_plane.tools_dir / "helm"
    if not binary.exists():
        pytest.skip(
            f"no helm in {control_plane.tools_dir} (KUBEBUILDER_ASSETS lacks it); `make tools` builds it"
        )
    return binary


def render(helm: Path, namespace: str, *values: str) -> list[dict]:
    args = [str(helm), "template", "psync", str(CHART), "--namespace", namespace]
    for value in values:
        args += ["--set", value]
    result = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def test_helm_lint_passes(helm: Path) -> None:
    result = subprocess.run(
        [str(helm), "lint", str(CHART)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 chart(s) failed" in result.stdout


def test_the_crd_ships_in_the_chart(helm: Path) -> None:
    crd_files = sorted((CHART / "crds").glob("*.yaml"))
    assert [path.name for path in crd_files] == ["progressivesync.io_progressivesyncs.yaml"]


# What each component's code does against the API, as (verb, resource) pairs.
WATCHER_NEEDS = [
    ("watch", "progressivesyncs.progressivesync.io"),
    ("update", "progressivesyncs.progressivesync.io/status"),
    ("update", "progressivesyncs.progressivesync.io/finalizers"),
    ("list", "applications.argoproj.io"),
    ("watch", "applicationsets.argoproj.io"),
    ("create", "workflows.argoproj.io"),
    ("patch", "workflows.argoproj.io"),
    ("list", "secrets"),
]
STEPS_NEED = [
    ("get", "progressivesyncs.progressivesync.io"),
    ("update", "progressivesyncs.progressivesync.io/status"),
    ("update", "applications.argoproj.io"),
    ("watch", "applications.argoproj.io"),
    ("list", "secrets"),
    ("get", "workflows.argoproj.io"),
]
STEPS_MUST_NOT = [
    ("delete", "applications.argoproj.io"),
    ("create", "workflows.argoproj.io"),
    ("update", "progressivesyncs.progressivesync.io"),
    ("update", "secrets"),
    ("update", "progressivesyncs.progressivesync.io/finalizers"),
]


def can_i(kubectl: Kubectl, user: str, verb: str, resource: str, namespace: str) -> bool:
    # kubectl reads TYPE/NAME as an object name, so a subresource goes in --subresource.
    resource, _, subresource = resource.partition("/")
    extra = [f"--subresource={subresource}"] if subresource else []
    result = kubectl.run("auth", "can-i", verb, resource, *extra, "--as", user, "-n", namespace)
    return result.stdout.strip() == "yes"


def test_rendered_chart_applies_and_rbac_fits_the_code(helm: Path, kubectl: Kubectl, namespace: str) -> None:
    documents = render(helm, namespace, f"argocdNamespace={namespace}", f"workflowNamespace={namespace}")
    kinds = sorted({doc["kind"] for doc in documents})
    assert {"Deployment", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "WorkflowTemplate"} <= set(
        kinds
    )
    # Cluster-scoped names must not collide across tests: give them the namespace as a suffix.
    for doc in documents:
        if doc["kind"] in ("ClusterRole", "ClusterRoleBinding"):
            doc["metadata"]["name"] += f"-{namespace}"
        if doc["kind"] == "ClusterRoleBinding":
            doc["roleRef"]["name"] += f"-{namespace}"
    kubectl.ok("apply", "-f", "-", stdin=yaml.safe_dump_all(documents))

    watcher = f"system:serviceaccount:{namespace}:psync-progressive-sync-watcher"
    steps = f"system:serviceaccount:{namespace}:progressive-sync-steps"
    missing = [
        (verb, res) for verb, res in WATCHER_NEEDS if not can_i(kubectl, watcher, verb, res, namespace)
    ]
    assert missing == [], f"watcher lacks {missing}"
    missing = [(verb, res) for verb, res in STEPS_NEED if not can_i(kubectl, steps, verb, res, namespace)]
    assert missing == [], f"steps lack {missing}"
    too_much = [(verb, res) for verb, res in STEPS_MUST_NOT if can_i(kubectl, steps, verb, res, namespace)]
    assert too_much == [], f"steps may do more than they need: {too_much}"


def test_workflow_templates_follow_the_chart_values(helm: Path) -> None:
    documents = render(
        helm,
        "argocd",
        "image.tag=1.2.3",
        "workflowNamespace=rollouts",
        "steps.serviceAccountName=rollout-steps",
    )
    templates = [doc for doc in documents if doc["kind"] == "WorkflowTemplate"]
    assert sorted(t["metadata"]["name"] for t in templates) == [
        "progressive-sync-cluster",
        "progressive-sync-steps",
    ]
    for template in templates:
        assert template["metadata"]["namespace"] == "rollouts"
        assert template["spec"]["serviceAccountName"] == "rollout-steps"
        images = {t["container"]["image"] for t in template["spec"]["templates"] if "container" in t}
        assert images <= {"ghcr.io/progressive-sync/progressive-sync:1.2.3"}
