"""The adapter reaches the real API server as a pod does: its service-account token and the CA.

A step pod reads the files the kubelet mounts and the `KUBERNETES_SERVICE_*` environment itself
(orchestrator/kube/endpoint.py, without the `kubernetes` package). Here the same files are written
to a temporary folder, the token minted by the real TokenRequest API, and the real kube-apiserver
decides: the token authenticates, a rotated one is used at the next request, a revoked one is
refused with 401.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import pytest

from orchestrator.devenv.controlplane import DevCluster
from orchestrator.kube.client import NAMESPACES, Forbidden, Kube, KubeError, KubeSettings
from orchestrator.kube.endpoint import in_cluster
from orchestrator.kube.transport import Transport
from tests.support.kubectl import Kubectl

ACCOUNT = "endpoint-probe"


def mount(folder: Path, control_plane: DevCluster, token: str) -> dict[str, str]:
    """Write the service-account files a pod gets; return the environment a pod gets."""
    folder.mkdir(exist_ok=True)
    (folder / "ca.crt").write_bytes(control_plane.ca_cert_path.read_bytes())
    (folder / "token").write_text(token)
    server = urlsplit(control_plane.api_url)
    return {"KUBERNETES_SERVICE_HOST": str(server.hostname), "KUBERNETES_SERVICE_PORT": str(server.port)}


def whoami(kube: Kube) -> str:
    """The user the API server took us for (SelfSubjectReview, allowed to every authenticated user)."""
    review = kube._call(
        "POST",
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
    )
    return str(review["status"]["userInfo"]["username"])


def test_the_pods_service_account_authenticates_and_a_rotated_token_is_used_next(
    control_plane: DevCluster, kubectl: Kubectl, namespace: str, tmp_path: Path
) -> None:
    kubectl.ok("create", "serviceaccount", ACCOUNT, "-n", namespace)
    first = kubectl.ok("create", "token", ACCOUNT, "-n", namespace, "--duration=1h").strip()
    folder = tmp_path / "serviceaccount"
    environ = mount(folder, control_plane, first)

    kube = Kube(Transport(in_cluster(folder, environ)), KubeSettings(retry_backoffs=()))
    try:
        assert whoami(kube) == f"system:serviceaccount:{namespace}:{ACCOUNT}"
        # Authenticated, and no more than that: RBAC grants this account nothing.
        with pytest.raises(Forbidden):
            kube.list(NAMESPACES, None)

        (folder / "token").write_text("not-a-token")
        with pytest.raises(KubeError) as refused:
            whoami(kube)
        assert refused.value.status == 401, refused.value

        second = kubectl.ok("create", "token", ACCOUNT, "-n", namespace, "--duration=1h").strip()
        assert second != first
        (folder / "token").write_text(second)
        assert whoami(kube) == f"system:serviceaccount:{namespace}:{ACCOUNT}"
    finally:
        kube.close()
