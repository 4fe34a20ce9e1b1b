"""The dev stack's Helm chart repository: two versions packaged by the real helm, served over HTTP.

Real: the `helm` that `make tools` builds (the test is skipped while it is not built) and an HTTP
server on 127.0.0.1; each test has its own repository in tmp_path.
"""

from __future__ import annotations

import io
import tarfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from orchestrator.devenv import tools
from orchestrator.devenv.helmrepo import HelmRepoError, HelmRepoServer

TEMPLATE = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: app
data:
  chart: "{{ .Chart.Version }}"
  greeting: "{{ .Values.greeting }}"
"""


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[HelmRepoServer]:
    try:
        helm = tools.binary("helm")
    except tools.ToolsMissing as exc:
        pytest.skip(str(exc))
    with HelmRepoServer.start(tmp_path / "helm", helm=helm) as served:
        yield served


def fetch(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return bytes(answer.read())


def test_two_published_versions_are_in_the_served_index_with_their_archives(repo: HelmRepoServer) -> None:
    repo.publish("myservice", "1.2.3", {"configmap.yaml": TEMPLATE}, values={"greeting": "hello"})
    repo.publish("myservice", "1.2.4", {"configmap.yaml": TEMPLATE}, values={"greeting": "hi"})

    index = yaml.safe_load(fetch(f"{repo.url}/index.yaml"))
    entries = index["entries"]["myservice"]
    assert sorted(entry["version"] for entry in entries) == ["1.2.3", "1.2.4"]
    assert repo.versions("myservice")[0] == "1.2.4"
    newest = next(entry for entry in entries if entry["version"] == "1.2.4")
    assert newest["urls"] == [f"{repo.url}/myservice-1.2.4.tgz"]
    with tarfile.open(fileobj=io.BytesIO(fetch(newest["urls"][0]))) as archive:
        chart = yaml.safe_load(archive.extractfile("myservice/Chart.yaml").read())  # type: ignore[union-attr]
        values = yaml.safe_load(archive.extractfile("myservice/values.yaml").read())  # type: ignore[union-attr]
    assert (chart["version"], values) == ("1.2.4", {"greeting": "hi"})
    assert repo.index_reads() == 1


def test_an_empty_repository_has_no_index_yet(repo: HelmRepoServer) -> None:
    assert repo.versions("myservice") == []
    with pytest.raises(urllib.error.HTTPError):
        fetch(f"{repo.url}/index.yaml")


def test_a_chart_helm_refuses_says_what_helm_said(repo: HelmRepoServer) -> None:
    with pytest.raises(HelmRepoError, match="helm package"):
        repo.publish("myservice", "not-a-version", {"configmap.yaml": TEMPLATE})


def test_a_missing_helm_is_named(tmp_path: Path) -> None:
    with pytest.raises(HelmRepoError, match="make tools"):
        HelmRepoServer.start(tmp_path / "helm", helm=tmp_path / "no-helm")
