"""Reading Argo CD cluster Secrets: their label, `name` and `server`, never their credentials.

Kept apart from `orchestrator.kube.client` so that reading a fleet file (`plan --fleet`,
`render --fleet`, `orchestrator.argocd.fleet`) does not import the `kubernetes` package (about
a second of CPU). `client` re-exports everything here; `Kube.list_cluster_secrets` uses it.
"""

from __future__ import annotations

import binascii
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# Argo CD marks its cluster Secrets with this label; the adapter lists (and reads) only those.
CLUSTER_SECRET_TYPE_LABEL = "argocd.argoproj.io/secret-type"
CLUSTER_SECRET_TYPE = "cluster"
CLUSTER_SECRET_LABEL = f"{CLUSTER_SECRET_TYPE_LABEL}={CLUSTER_SECRET_TYPE}"  # as a label selector


@dataclass(frozen=True)
class ClusterSecret:
    """What we read of an Argo CD cluster Secret: never its credentials (`data.config`)."""

    secret_name: str
    name: str
    server: str
    labels: Mapping[str, str]


def cluster_secret_from_object(secret: Mapping[str, Any]) -> ClusterSecret:
    """Read an Argo CD cluster Secret's metadata and its `name`/`server` keys; never `config`."""
    metadata = secret.get("metadata") or {}
    data = secret.get("data") or {}
    string_data = secret.get("stringData") or {}

    def read_key(key: str) -> str:
        if key in string_data:
            return str(string_data[key])
        raw = data.get(key)
        if not raw:
            return ""
        # What base64.b64decode calls, without its wrapper (the same errors): 20,000 keys a fleet.
        return binascii.a2b_base64(raw).decode("utf-8", errors="replace")

    return ClusterSecret(
        secret_name=str(metadata.get("name", "")),
        name=read_key("name"),
        server=read_key("server"),
        labels=dict(metadata.get("labels") or {}),
    )
