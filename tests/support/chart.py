"""The Helm chart in tests: render it with the real `helm`, apply what it renders to the test control
plane, and act as the service accounts it creates (tokens from the real TokenRequest API).

Cluster-scoped objects (ClusterRoles, admission policies and their bindings) get the test
namespace as a suffix, so charts rendered by several tests into one control plane do not collide.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.devenv.controlplane import DevCluster
from tests.support.kubectl import Kubectl

CHART = Path(__file__).resolve().parents[2] / "charts" / "progressive-sync"
RELEASE = "psync"
FULLNAME = f"{RELEASE}-progressive-sync"
CLUSTER_SCOPED = {
    "ClusterRole",
    "ClusterRoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
}


def helm_binary(control_plane: DevCluster) -> Path:
    """The helm that `make tools` built (skips the test when the tool folder lacks it)."""
    binary = control_plane.tools_dir / "helm"
    if not binary.exists():
        pytest.skip(f"no helm in {control_plane.tools_dir}; `make tools` builds it")
    return binary


# The chart requires image.repository (no registry publishes the image); tests render with this one
# unless they set their own.
TEST_IMAGE_REPOSITORY = "registry.example/progressive-sync"


def render(
    helm: Path, namespace: str, *values: str, values_file: Path | None = None, release: str = RELEASE
) -> list[dict[str, Any]]:
    """`helm template` of the chart with `--set` values; the documents it prints.

    image.repository is `TEST_IMAGE_REPOSITORY` unless `values` or `values_file` set it.
    """
    args = [str(helm), "template", release, str(CHART), "--namespace", namespace]
    if not _sets_image_repository(values, values_file):
        args += ["--set", f"image.repository={TEST_IMAGE_REPOSITORY}"]
    if values_file is not None:
        args += ["--values", str(values_file)]
    for value in values:
        args += ["--set", value]
    result = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def _sets_image_repository(values: tuple[str, ...], values_file: Path | None) -> bool:
    if any(value.startswith("image.repository=") for value in values):
        return True
    if values_file is None:
        return False
    given = yaml.safe_load(values_file.read_text()) or {}
    return bool((given.get("image") or {}).get("repository"))


def isolate(documents: list[dict[str, Any]], suffix: str) -> list[dict[str, Any]]:
    """Give cluster-scoped names (and the references to them) a suffix; returns the documents."""
    for doc in documents:
        if doc["kind"] in CLUSTER_SCOPED:
            doc["metadata"]["name"] += f"-{suffix}"
        if doc["kind"] == "ClusterRoleBinding":
            doc["roleRef"]["name"] += f"-{suffix}"
        if doc["kind"] == "ValidatingAdmissionPolicyBinding":
            doc["spec"]["policyName"] += f"-{suffix}"
    return documents


def apply(kubectl: Kubectl, documents: list[dict[str, Any]], *, kinds: set[str] | None = None) -> None:
    """Server-side apply the documents (only those of `kinds`, when given)."""
    chosen = [doc for doc in documents if kinds is None or doc["kind"] in kinds]
    kubectl.ok("apply", "--server-side", "-f", "-", stdin=yaml.safe_dump_all(chosen))


def service_account_kubeconfig(
    control_plane: DevCluster, kubectl: Kubectl, namespace: str, name: str
) -> Path:
    """A kubeconfig authenticating as the service account `namespace/name` with a bound token."""
    token = kubectl.ok("create", "token", name, "-n", namespace, "--duration=1h").strip()
    admin = yaml.safe_load(control_plane.kubeconfig.read_text())
    cluster = admin["clusters"][0]
    user = f"system:serviceaccount:{namespace}:{name}"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [cluster],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": user, "context": {"cluster": cluster["name"], "user": user}}],
        "current-context": user,
    }
    path = control_plane.workdir / f"sa-{namespace}-{name}.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path
