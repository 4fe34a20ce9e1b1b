"""Where the adapter finds the API server and its credentials (orchestrator/kube/endpoint.py).

Files and environment only; the real API server's side is tests/integration/test_kube_in_cluster.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orchestrator.kube.endpoint import EndpointError, TokenFile, endpoint_for, in_cluster

SERVICE = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}


def service_account(folder: Path, *, token: str = "t0ken", ca: str = "-----BEGIN CERTIFICATE-----") -> Path:
    folder.mkdir(exist_ok=True)
    (folder / "token").write_text(token)
    (folder / "ca.crt").write_text(ca)
    return folder


@pytest.mark.parametrize(
    ("host", "url"),
    [
        pytest.param("10.96.0.1", "https://10.96.0.1:443", id="ipv4"),
        pytest.param("fd00:10:96::1", "https://[fd00:10:96::1]:443", id="ipv6-in-brackets"),
        pytest.param("kubernetes.default.svc", "https://kubernetes.default.svc:443", id="a-name"),
    ],
)
def test_a_pod_reaches_its_service_with_its_token_and_ca(tmp_path: Path, host: str, url: str) -> None:
    folder = service_account(tmp_path / "sa")
    endpoint = in_cluster(folder, {**SERVICE, "KUBERNETES_SERVICE_HOST": host})
    assert endpoint.host == url
    assert endpoint.ca_file == str(folder / "ca.crt")
    assert endpoint.verify
    assert endpoint.authorization() == "Bearer t0ken"


@pytest.mark.parametrize(
    ("environ", "files", "message"),
    [
        pytest.param({}, {}, "KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT", id="no-service"),
        pytest.param(SERVICE, {"token": ""}, "token is empty", id="empty-token"),
        pytest.param(SERVICE, {"ca.crt": None}, "cannot read", id="no-ca"),
    ],
)
def test_not_in_a_pod_says_what_is_missing(
    tmp_path: Path, environ: dict[str, str], files: dict[str, str | None], message: str
) -> None:
    folder = service_account(tmp_path / "sa")
    for name, text in files.items():
        if text is None:
            (folder / name).unlink()
        else:
            (folder / name).write_text(text)
    with pytest.raises(EndpointError, match=message):
        in_cluster(folder, environ)


def test_a_token_file_is_read_again_when_it_changes_and_kept_while_it_is_replaced(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("first\n")
    token = TokenFile(path)
    assert token() == "Bearer first"
    path.write_text("second-token")
    assert token() == "Bearer second-token"
    path.write_text("")  # being rewritten: the token we have stays
    assert token() == "Bearer second-token"
    path.unlink()
    assert token() == "Bearer second-token"
    path.write_text("third")
    assert token() == "Bearer third"


def test_without_a_kubeconfig_and_outside_a_pod_the_error_names_both_and_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    for name in SERVICE:
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(EndpointError) as failed:
        endpoint_for()
    message = str(failed.value)
    assert f"no kubeconfig at {tmp_path / '.kube' / 'config'}" in message
    assert "not in a cluster (KUBERNETES_SERVICE_HOST" in message
    assert message.endswith("set KUBECONFIG or pass --kubeconfig")


def test_a_named_kubeconfig_that_does_not_load_is_an_error_not_a_fallback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")  # even in a pod
    missing = tmp_path / "nope.kubeconfig"
    with pytest.raises(EndpointError, match=f"cannot load kubeconfig {missing}"):
        endpoint_for(str(missing))


def test_a_kubeconfig_gives_its_server_certificates_and_token(tmp_path: Path) -> None:
    ca, cert, key = (tmp_path / name for name in ("ca.crt", "user.crt", "user.key"))
    for path in (ca, cert, key):
        path.write_text("x")
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        f"""
apiVersion: v1
kind: Config
current-context: there
clusters:
- name: c
  cluster: {{server: "https://api.example:6443", certificate-authority: "{ca}", tls-server-name: api}}
users:
- name: u
  user: {{client-certificate: "{cert}", client-key: "{key}", token: abc}}
contexts:
- name: there
  context: {{cluster: c, user: u}}
"""
    )
    endpoint = endpoint_for(str(kubeconfig))
    assert (endpoint.host, endpoint.ca_file, endpoint.cert_file, endpoint.key_file) == (
        "https://api.example:6443",
        str(ca),
        str(cert),
        str(key),
    )
    assert endpoint.server_name == "api"
    assert endpoint.authorization() == "Bearer abc"


def test_a_kubeconfig_token_file_is_followed(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("one")
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        """
apiVersion: v1
kind: Config
current-context: there
clusters: [{name: c, cluster: {server: "https://api.example:6443", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {tokenFile: token}}]
contexts: [{name: there, context: {cluster: c, user: u}}]
"""
    )
    endpoint = endpoint_for(str(kubeconfig))
    assert not endpoint.verify
    assert endpoint.authorization() == "Bearer one"
    (tmp_path / "token").write_text("two")
    os.utime(tmp_path / "token", ns=(1, 1))  # a different stamp even within one clock tick
    assert endpoint.authorization() == "Bearer two"
