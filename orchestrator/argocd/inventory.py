"""The cluster inventory: the non-secret part of Argo CD's cluster Secrets, as one ConfigMap.

The step pods read no Secret at all (DESIGN.md §3): the watcher, which may read the cluster Secrets
of its Argo CD namespace, publishes what the steps need of them — each cluster's name, server,
labels and Secret name, never `data.config` (the credentials) — as the ConfigMap
`progressive-sync-clusters` in that namespace, and keeps it current (`orchestrator.watcher.publisher`).
The steps read it back with `clusters_from_configmap`.

Format (`FORMAT_VERSION` in an annotation): `data["clusters.json"]` holds a JSON list with one
cluster per line, sorted by Secret name, so `kubectl get cm -o yaml` shows a readable, diffable
list. A fleet whose list outgrows `PLAIN_LIMIT_BYTES` (thousands of clusters) is stored gzipped
in `binaryData["clusters.json.gz"]` instead, which keeps 10,000 clusters far below the 1 MiB a
ConfigMap may hold. A reader accepts either.

Pure: no client, no clock. Callers: the watcher's publisher, the steps (`steps.common`), tests.
"""

from __future__ import annotations

import base64
import gzip
import json
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

from orchestrator.argocd.fleet import Cluster

INVENTORY_NAME = "progressive-sync-clusters"
FORMAT_ANNOTATION = "progressivesync.io/inventory-format"
FORMAT_VERSION = "1"
INVENTORY_LABEL = "progressivesync.io/inventory"
PLAIN_KEY = "clusters.json"
GZIP_KEY = "clusters.json.gz"
# Above this the list goes gzipped into binaryData (a ConfigMap holds at most 1 MiB in all).
PLAIN_LIMIT_BYTES = 512 * 1024
MAX_BYTES = 1024 * 1024 - 16 * 1024  # leave room for metadata


class InventoryError(ValueError):
    """The inventory ConfigMap cannot be read or written; the message says why."""


def _entry(cluster: Cluster) -> dict[str, Any]:
    return {
        "secret": cluster.secret_name,
        "name": cluster.name,
        "server": cluster.server,
        "labels": dict(sorted(cluster.labels.items())),
    }


def encode_clusters(clusters: Iterable[Cluster]) -> str:
    """The JSON list, one cluster per line, sorted by (Secret name, name): equal fleets, equal text."""
    ordered = sorted(clusters, key=lambda c: (c.secret_name, c.name))
    lines = [json.dumps(_entry(c), sort_keys=True, separators=(",", ":")) for c in ordered]
    return "[\n" + ",\n".join(lines) + "\n]\n" if lines else "[]\n"


def inventory_configmap(namespace: str, clusters: Iterable[Cluster]) -> dict[str, Any]:
    """The ConfigMap body that publishes `clusters` in `namespace` (no resourceVersion)."""
    text = encode_clusters(clusters)
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": INVENTORY_NAME,
            "namespace": namespace,
            "labels": {INVENTORY_LABEL: "clusters", "app.kubernetes.io/managed-by": "progressive-sync"},
            "annotations": {FORMAT_ANNOTATION: FORMAT_VERSION},
        },
    }
    raw = text.encode()
    if len(raw) <= PLAIN_LIMIT_BYTES:
        body["data"] = {PLAIN_KEY: text}
        return body
    packed = base64.b64encode(gzip.compress(raw, mtime=0)).decode()
    if len(packed) > MAX_BYTES:
        raise InventoryError(
            f"the cluster inventory of namespace {namespace} is {len(packed)} bytes gzipped, above what "
            f"a ConfigMap holds ({MAX_BYTES}); trim the labels of the cluster Secrets"
        )
    body["binaryData"] = {GZIP_KEY: packed}
    return body


def same_content(live: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
    """True when the live ConfigMap already publishes what `desired` does (no write needed)."""
    live_meta = live.get("metadata") or {}
    desired_meta = desired.get("metadata") or {}
    return (
        (live.get("data") or {}) == (desired.get("data") or {})
        and (live.get("binaryData") or {}) == (desired.get("binaryData") or {})
        and (live_meta.get("annotations") or {}).get(FORMAT_ANNOTATION) == FORMAT_VERSION
        and all((live_meta.get("labels") or {}).get(k) == v for k, v in desired_meta["labels"].items())
    )


def clusters_from_configmap(obj: Mapping[str, Any]) -> list[Cluster]:
    """The clusters the ConfigMap publishes; InventoryError naming the problem when it is malformed."""
    metadata = obj.get("metadata") or {}
    where = f"ConfigMap {metadata.get('namespace', '')}/{metadata.get('name', INVENTORY_NAME)}"
    version = (metadata.get("annotations") or {}).get(FORMAT_ANNOTATION)
    if version != FORMAT_VERSION:
        raise InventoryError(f"{where}: inventory format {version!r}, this version reads {FORMAT_VERSION!r}")
    data = obj.get("data") or {}
    binary = obj.get("binaryData") or {}
    try:
        if GZIP_KEY in binary:
            text = gzip.decompress(base64.b64decode(binary[GZIP_KEY])).decode()
        elif PLAIN_KEY in data:
            text = str(data[PLAIN_KEY])
        else:
            raise InventoryError(f"{where}: neither data.{PLAIN_KEY} nor binaryData.{GZIP_KEY} is set")
        entries = json.loads(text)
    except (ValueError, OSError, EOFError) as exc:
        if isinstance(exc, InventoryError):
            raise
        raise InventoryError(f"{where}: the cluster list does not decode: {exc}") from exc
    if not isinstance(entries, list):
        raise InventoryError(f"{where}: the cluster list is not a JSON list")
    clusters = []
    for index, entry in enumerate(entries):
        if not isinstance(entry, Mapping) or not entry.get("name"):
            raise InventoryError(f"{where}: entry {index} has no name")
        labels = entry.get("labels") or {}
        if not isinstance(labels, Mapping):
            raise InventoryError(f"{where}: entry {index} ({entry['name']}): labels is not a mapping")
        clusters.append(
            Cluster(
                name=str(entry["name"]),
                server=str(entry.get("server") or ""),
                labels=MappingProxyType({str(k): str(v) for k, v in labels.items()}),
                secret_name=str(entry.get("secret") or ""),
            )
        )
    return clusters
