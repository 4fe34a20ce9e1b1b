"""The watcher publishes the cluster inventory the steps read instead of Secrets, and keeps it current.

Real: the control plane and the watcher (in this process). The inventory is checked as the steps
read it (`steps.common.list_clusters`) and as stored (no credential in it).
"""

from __future__ import annotations

import base64
import json

import pytest

from orchestrator.argocd.inventory import INVENTORY_NAME
from orchestrator.kube.client import CONFIG_MAPS, SECRETS, Kube
from steps.common import list_clusters
from tests.support.wait import wait_for
from tests.support.watcher_harness import in_process_watcher, seed

pytestmark = pytest.mark.integration

CREDENTIAL = "not-to-be-published-" + "x" * 8


def inventory(kube: Kube, namespace: str) -> dict[str, tuple[str, dict[str, str]]]:
    return {c.name: (c.server, dict(c.labels)) for c in list_clusters(kube, namespace)}


def test_the_inventory_follows_the_cluster_secrets_and_never_holds_credentials(
    kube: Kube, namespace: str
) -> None:
    fleet = seed(kube, namespace, clusters=3)
    first = fleet.clusters[0]
    secret = kube.get(SECRETS, namespace, f"cluster-{first}")
    secret["data"]["config"] = base64.b64encode(json.dumps({"bearerToken": CREDENTIAL}).encode()).decode()
    kube.replace(SECRETS, namespace, secret)

    with in_process_watcher(kube, namespace) as watcher:
        published = inventory(kube, namespace)
        assert sorted(published) == sorted(fleet.clusters)
        assert published[first][1]["region"] in ("eu", "us")
        stored = json.dumps(kube.get(CONFIG_MAPS, namespace, INVENTORY_NAME))
        assert CREDENTIAL not in stored and "config" not in stored.replace("ConfigMap", "")

        # A label change, a new cluster and a deleted one reach the inventory.
        secret = kube.get(SECRETS, namespace, f"cluster-{first}")
        secret["metadata"]["labels"]["tier"] = "canary"
        kube.replace(SECRETS, namespace, secret)
        extra = json.loads(json.dumps(secret))
        extra["metadata"] = {"name": "cluster-extra", "labels": secret["metadata"]["labels"]}
        extra["data"] = {
            "name": base64.b64encode(b"extra").decode(),
            "server": base64.b64encode(b"https://extra.example:6443").decode(),
        }
        kube.create(SECRETS, namespace, extra)
        kube.delete(SECRETS, namespace, f"cluster-{fleet.clusters[1]}")
        expected = {first, "extra", fleet.clusters[2]}
        wait_for(
            lambda: (
                set(inventory(kube, namespace)) == expected
                and inventory(kube, namespace)[first][1].get("tier") == "canary"
            ),
            what="the inventory to follow the Secrets",
        )
        assert inventory(kube, namespace)["extra"][0] == "https://extra.example:6443"

        # Someone edits the inventory by hand: the next resync puts the truth back.
        tampered = kube.get(CONFIG_MAPS, namespace, INVENTORY_NAME)
        tampered["data"]["clusters.json"] = tampered["data"]["clusters.json"].replace(
            "https://extra.example:6443", "https://attacker.example:6443"
        )
        kube.replace(CONFIG_MAPS, namespace, tampered)
        writes = watcher.publisher.writes
        watcher.publisher.mark_all()  # what each resync does
        wait_for(lambda: watcher.publisher.writes > writes, what="the inventory repaired")
        assert inventory(kube, namespace)["extra"][0] == "https://extra.example:6443"

        # Converged: checking again writes nothing.
        writes = watcher.publisher.writes
        assert not watcher.publisher.publish(namespace)
        assert watcher.publisher.writes == writes
