"""The cluster inventory ConfigMap: what the watcher publishes is exactly what the steps read back,
it stays small enough for 10,000 clusters, and a malformed one is refused with a reason."""

from __future__ import annotations

import json
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.argocd.fleet import Cluster
from orchestrator.argocd.inventory import (
    FORMAT_ANNOTATION,
    GZIP_KEY,
    INVENTORY_NAME,
    PLAIN_KEY,
    InventoryError,
    clusters_from_configmap,
    inventory_configmap,
    same_content,
)


def cluster(name: str, **labels: str) -> Cluster:
    return Cluster(
        name=name,
        server=f"https://{name}.example:6443",
        labels=MappingProxyType(dict(labels)),
        secret_name=f"cluster-{name}",
    )


def test_round_trip_keeps_every_field_and_orders_by_secret_name() -> None:
    clusters = [cluster("b", region="us"), cluster("a", region="eu", tier="canary")]
    body = inventory_configmap("argocd", clusters)
    assert body["metadata"]["name"] == INVENTORY_NAME
    assert body["metadata"]["namespace"] == "argocd"
    assert list(body["data"]) == [PLAIN_KEY]
    assert clusters_from_configmap(body) == sorted(clusters, key=lambda c: c.secret_name)
    # One cluster per line: `kubectl get cm -o yaml` reads as a list.
    assert body["data"][PLAIN_KEY].splitlines()[1].startswith('{"labels":{"region":"eu","tier":"canary"}')


def test_an_empty_fleet_is_an_empty_list() -> None:
    assert clusters_from_configmap(inventory_configmap("argocd", [])) == []


def test_ten_thousand_clusters_fit_in_one_configmap_gzipped() -> None:
    clusters = [
        cluster(f"cells-{i}", region=f"region-{i % 12}", zone=f"zone-{i % 36}", env="prod", tier="general")
        for i in range(10_000)
    ]
    body = inventory_configmap("argocd", clusters)
    assert "data" not in body and list(body["binaryData"]) == [GZIP_KEY]
    assert len(json.dumps(body)) < 1024 * 1024
    assert clusters_from_configmap(body) == sorted(clusters, key=lambda c: c.secret_name)


def test_same_content_ignores_server_fields_and_sees_a_change() -> None:
    desired = inventory_configmap("argocd", [cluster("a")])
    live = json.loads(json.dumps(desired))
    live["metadata"].update(resourceVersion="7", uid="u", labels={**live["metadata"]["labels"], "x": "y"})
    assert same_content(live, desired)
    changed = inventory_configmap("argocd", [cluster("a", region="eu")])
    assert not same_content(live, changed)


def _with(**changes: Any) -> dict[str, Any]:
    body = inventory_configmap("argocd", [cluster("a")])
    for key, value in changes.items():
        if key == "annotations":
            body["metadata"]["annotations"] = value
        else:
            body[key] = value
    return body


@pytest.mark.parametrize(
    ("body", "message"),
    [
        pytest.param(_with(annotations={}), "inventory format None", id="no-format-annotation"),
        pytest.param(_with(annotations={FORMAT_ANNOTATION: "9"}), "format '9'", id="newer-format"),
        pytest.param(_with(data={}), "neither data.clusters.json", id="no-list"),
        pytest.param(_with(data={PLAIN_KEY: "{not json"}), "does not decode", id="not-json"),
        pytest.param(_with(data={PLAIN_KEY: "{}"}), "not a JSON list", id="not-a-list"),
        pytest.param(_with(data={PLAIN_KEY: '[{"server": "x"}]'}), "entry 0 has no name", id="no-name"),
        pytest.param(_with(binaryData={GZIP_KEY: "bm90IGd6aXA="}), "does not decode", id="bad-gzip"),
    ],
)
def test_a_malformed_inventory_is_refused_with_the_reason(body: dict[str, Any], message: str) -> None:
    with pytest.raises(InventoryError, match="ConfigMap argocd/progressive-sync-clusters") as raised:
        clusters_from_configmap(body)
    assert message in str(raised.value)


names = st.from_regex(r"[a-z][a-z0-9-]{0,20}", fullmatch=True)


@given(st.dictionaries(names, st.dictionaries(names, names, max_size=4), max_size=30))
def test_what_is_published_is_what_is_read(fleet: dict[str, dict[str, str]]) -> None:
    clusters = [cluster(name, **labels) for name, labels in fleet.items()]
    read = clusters_from_configmap(inventory_configmap("ns", clusters))
    assert read == sorted(clusters, key=lambda c: (c.secret_name, c.name))
