"""Our kubeconfig reader gives what the `kubernetes` package's loader gives, or steps aside.

orchestrator/kube/kubeconfig.py reads kubeconfigs whose user is a certificate or a token, so that
most processes never import `kubernetes`; everything else goes to that package's loader. Each
row here is read both ways and the endpoints compared: URL, TLS files (by content: data becomes a
private file either way), verification, server name, and the Authorization header.
"""

from __future__ import annotations

import base64
import os
import stat
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.kube import kubeconfig
from orchestrator.kube.endpoint import Endpoint, _from_kubernetes_loader, endpoint_for

CA, CERT, KEY = b"ca-pem\n", b"cert-pem\n", b"key-pem\n"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def write(folder: Path, cluster: dict[str, Any], user: dict[str, Any], *, context: str = "here") -> Path:
    (folder / "pki").mkdir(exist_ok=True)
    for name, data in (("ca.crt", CA), ("user.crt", CERT), ("user.key", KEY)):
        (folder / "pki" / name).write_bytes(data)
    (folder / "token").write_text("from-a-file")  # the package's loader keeps a newline in the header
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": context,
        "clusters": [
            {"name": "c", "cluster": cluster},
            {"name": "other", "cluster": {"server": "https://other"}},
        ],
        "users": [{"name": "u", "user": user}],
        "contexts": [
            {"name": "here", "context": {"cluster": "c", "user": "u", "namespace": "ns"}},
            {"name": "elsewhere", "context": {"cluster": "other", "user": "u"}},
        ],
    }
    path = folder / "config"
    path.write_text(yaml.safe_dump(document))
    return path


def contents(path: str | None) -> bytes | None:
    return None if path is None else Path(path).read_bytes()


def seen(endpoint: Endpoint) -> dict[str, Any]:
    return {
        "host": endpoint.host,
        "ca": contents(endpoint.ca_file),
        "cert": contents(endpoint.cert_file),
        "key": contents(endpoint.key_file),
        "verify": endpoint.verify,
        "server_name": endpoint.server_name,
        "authorization": endpoint.authorization(),
    }


SERVER = "https://api.example:6443"
FILES = {"client-certificate": "pki/user.crt", "client-key": "pki/user.key"}
DATA = {"client-certificate-data": b64(CERT), "client-key-data": b64(KEY)}


@pytest.mark.parametrize(
    ("cluster", "user", "context"),
    [
        pytest.param(
            {"server": SERVER, "certificate-authority": "pki/ca.crt"},
            FILES,
            None,
            id="certificate-files-relative",
        ),
        pytest.param(
            {"server": SERVER + "/", "certificate-authority-data": b64(CA)}, DATA, None, id="certificate-data"
        ),
        pytest.param(
            {"server": SERVER, "certificate-authority-data": b64(CA)}, {"token": "abc"}, None, id="token"
        ),
        pytest.param({"server": SERVER}, {"tokenFile": "token"}, None, id="token-file"),
        pytest.param(
            {"server": SERVER}, {"token": "inline", "tokenFile": "token"}, None, id="token-wins-over-file"
        ),
        pytest.param(
            {"server": SERVER, "insecure-skip-tls-verify": True, "tls-server-name": "kubernetes"},
            {"token": "t"},
            None,
            id="insecure-and-server-name",
        ),
        pytest.param({"server": "http://127.0.0.1:8080"}, FILES, None, id="plain-http-takes-no-tls-files"),
        pytest.param({"server": SERVER}, {}, None, id="no-credentials"),
        pytest.param({"server": SERVER}, {"token": "t"}, "elsewhere", id="another-context"),
    ],
)
def test_our_reading_is_the_kubernetes_loaders(
    tmp_path: Path, cluster: dict[str, Any], user: dict[str, Any], context: str | None
) -> None:
    path = write(tmp_path, cluster, user)
    fields = kubeconfig.read(path, context)
    assert fields is not None, "a kubeconfig of certificates and tokens is ours to read"
    assert seen(Endpoint(**fields)) == seen(_from_kubernetes_loader(str(path), context))


@pytest.mark.parametrize(
    ("cluster", "user"),
    [
        pytest.param(
            {"server": SERVER},
            {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "aws"}},
            id="exec-plugin",
        ),
        pytest.param({"server": SERVER}, {"auth-provider": {"name": "oidc"}}, id="auth-provider"),
        pytest.param({"server": SERVER}, {"username": "u", "password": "p"}, id="basic-auth"),
        pytest.param({"server": SERVER, "proxy-url": "http://proxy:3128"}, {"token": "t"}, id="proxy"),
        pytest.param({"server": SERVER}, {"token": "t", "as": "someone"}, id="impersonation"),
    ],
)
def test_anything_else_goes_to_the_kubernetes_loader(
    tmp_path: Path, cluster: dict[str, Any], user: dict[str, Any]
) -> None:
    assert kubeconfig.read(write(tmp_path, cluster, user), None) is None


def test_a_kubeconfig_list_of_several_files_is_merged_by_the_kubernetes_loader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = write(tmp_path / "a", {"server": SERVER}, {"token": "first"})
    second = write(tmp_path / "b", {"server": "https://second"}, {"token": "second"})
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join([str(first), str(second)]))
    endpoint = endpoint_for()
    assert (endpoint.host, endpoint.authorization()) == (SERVER, "Bearer first")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        pytest.param({"current-context": "nowhere"}, "no context named 'nowhere'", id="missing-context"),
        pytest.param({"current-context": ""}, "no current-context", id="no-context"),
        pytest.param({"clusters": []}, "no cluster named 'c'", id="missing-cluster"),
    ],
)
def test_a_broken_kubeconfig_names_what_is_missing(
    tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    path = write(tmp_path, {"server": SERVER}, {"token": "t"})
    document = yaml.safe_load(path.read_text())
    document.update(change)
    path.write_text(yaml.safe_dump(document))
    with pytest.raises(kubeconfig.KubeconfigError, match=message):
        kubeconfig.read(path, None)


def test_a_token_files_newline_is_not_part_of_the_token(tmp_path: Path) -> None:
    path = write(tmp_path, {"server": SERVER}, {"tokenFile": "token"})
    (tmp_path / "token").write_text("rotated\n")
    fields = kubeconfig.read(path, None)
    assert fields is not None
    assert fields["authorization"]() == "Bearer rotated"


def test_certificate_data_is_written_where_only_this_user_can_read_it(tmp_path: Path) -> None:
    fields = kubeconfig.read(write(tmp_path, {"server": SERVER}, DATA), None)
    assert fields is not None
    key = Path(fields["key_file"])
    assert key.read_bytes() == KEY
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert stat.S_IMODE(key.parent.stat().st_mode) == 0o700


def test_a_forked_process_leaves_its_parents_certificate_files_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The local engine forks steps from its warm launcher, which may hold such files: a step's exit
    hook must not remove them from under the launcher's connections."""
    fields = kubeconfig.read(write(tmp_path, {"server": SERVER}, DATA), None)
    assert fields is not None
    key = Path(fields["key_file"])
    parent = os.getpid()
    monkeypatch.setattr(kubeconfig.os, "getpid", lambda: parent + 1)  # as seen in a forked child
    kubeconfig._remove_private_folder()
    assert key.read_bytes() == KEY
