"""A fleet to play with: cluster Secrets, an ApplicationSet, one Application per cluster, and the
simulated Git repository's refs.

`seed_fleet` creates cluster Secrets across regions and zones (labels `region`, `zone`, `env`;
`data.config` a dummy), an ApplicationSet with a cluster generator, and Applications owned by it,
OutOfSync at a new revision (or Synced at it) with automated sync off, each with the deployment
history Argo CD keeps. `publish_refs` writes the refs the simulated repo-server resolves
(`orchestrator.simulator.git`): a new release, as a Git push would make one.

Callers: `progressive-sync simulate seed`, the demo, the tests and the benchmarks.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from orchestrator.core.clock import SystemClock, format_time
from orchestrator.kube.client import (
    APPLICATION_SETS,
    APPLICATIONS,
    CONFIG_MAPS,
    SECRETS,
    AlreadyExists,
    Kube,
)
from orchestrator.kube.cluster_secrets import CLUSTER_SECRET_TYPE, CLUSTER_SECRET_TYPE_LABEL
from orchestrator.simulator.git import GIT_CONFIGMAP, refs_configmap

PREVIOUS_REVISION = "0000000000000000000000000000000000000000"
REPO_URL = "https://git.example.test/myservice.git"


@dataclass(frozen=True)
class SeededCluster:
    """One simulated cluster."""

    name: str
    server: str
    region: str
    zone: str


@dataclass(frozen=True)
class SeedResult:
    """What `seed_fleet` created (or found already there)."""

    clusters: tuple[SeededCluster, ...]
    app_set: str
    app_set_uid: str
    applications: tuple[str, ...]
    created: int
    existing: int


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def seed_clusters(count: int, regions: Sequence[str], zones_per_region: int = 3) -> list[SeededCluster]:
    """`count` clusters spread round-robin over regions, then zones a, b, c... within each region."""
    if count < 1:
        raise ValueError("--clusters must be at least 1")
    if not regions:
        raise ValueError("--regions needs at least one region")
    clusters = []
    for index in range(count):
        region = regions[index % len(regions)]
        zone = f"{region}{'abcdefghij'[(index // len(regions)) % zones_per_region]}"
        name = f"cells-{index + 1}-{zone}"
        clusters.append(SeededCluster(name, f"https://{name}.clusters.example.test", region, zone))
    return clusters


def cluster_secret(cluster: SeededCluster, env: str) -> dict[str, Any]:
    """The Argo CD cluster Secret of a simulated cluster."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": f"cluster-{cluster.name}",
            "labels": {
                CLUSTER_SECRET_TYPE_LABEL: CLUSTER_SECRET_TYPE,
                "region": cluster.region,
                "zone": cluster.zone,
                "env": env,
            },
        },
        "data": {
            "name": _b64(cluster.name),
            "server": _b64(cluster.server),
            # A stand-in for the credentials; nothing in progressive-sync ever reads it.
            "config": _b64('{"bearerToken": "simulated-not-a-secret"}'),
        },
    }


def seed_fleet(
    kube: Kube,
    namespace: str,
    *,
    clusters: int,
    regions: Sequence[str],
    revision: str,
    previous_revision: str = PREVIOUS_REVISION,
    app_set: str = "myservice",
    env: str = "prod",
    zones_per_region: int = 3,
    synced: bool = False,
    app_set_template_metadata: Mapping[str, Any] | None = None,
    sync_policy: Mapping[str, Any] | None = None,
    source: Mapping[str, Any] | None = None,
    now: datetime | None = None,
) -> SeedResult:
    """Create cluster Secrets, an ApplicationSet and one Application per cluster, owned by it.

    The Applications are OutOfSync at `revision` (what Argo CD compared against) and Healthy at
    `previous_revision`, or with `synced` Synced and Healthy at `revision`; automated sync off
    (`sync_policy` is their `spec.syncPolicy`). Half name their cluster by `destination.server` and
    half by `destination.name` (both are common). Objects that exist already are kept.
    `app_set_template_metadata` is the template's `metadata` beyond its name (annotations, labels).
    `source` replaces the Git source (`REPO_URL`, path `deploy`, branch main), e.g. a Helm chart
    from a chart repository, whose revisions are chart versions (`1.2.4`) instead of SHAs.
    """
    if not revision:
        raise ValueError("--revision is empty: the fleet needs a release revision to be OutOfSync at")
    now = now or SystemClock().now()
    created = existing = 0
    fleet = seed_clusters(clusters, regions, zones_per_region)

    def create(resource: Any, body: dict[str, Any]) -> dict[str, Any]:
        nonlocal created, existing
        try:
            obj = kube.create(resource, namespace, body)
            created += 1
            return obj
        except AlreadyExists:
            existing += 1
            return kube.get(resource, namespace, body["metadata"]["name"])

    for cluster in fleet:
        create(SECRETS, cluster_secret(cluster, env))
    template_source = dict(source or {"repoURL": REPO_URL, "path": "deploy", "targetRevision": "main"})
    template_metadata = {"name": f"{app_set}-{{{{name}}}}", **dict(app_set_template_metadata or {})}
    app_set_obj = create(
        APPLICATION_SETS,
        {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "ApplicationSet",
            "metadata": {"name": app_set},
            "spec": {
                "generators": [{"clusters": {"selector": {}}}],
                "template": {
                    "metadata": template_metadata,
                    "spec": {
                        "project": "default",
                        "source": template_source,
                        "destination": {"server": "{{server}}", "namespace": app_set},
                    },
                },
            },
        },
    )
    uid = str(app_set_obj["metadata"]["uid"])
    names = []
    earlier = format_time(now - timedelta(hours=1))
    applied = revision if synced else previous_revision
    for index, cluster in enumerate(fleet):
        destination = {"server": cluster.server} if index % 2 == 0 else {"name": cluster.name}
        name = f"{app_set}-{cluster.name}"
        names.append(name)
        create(
            APPLICATIONS,
            {
                "apiVersion": "argoproj.io/v1alpha1",
                "kind": "Application",
                "metadata": {
                    "name": name,
                    "ownerReferences": [
                        {
                            "apiVersion": "argoproj.io/v1alpha1",
                            "kind": "ApplicationSet",
                            "name": app_set,
                            "uid": uid,
                            "controller": True,
                            "blockOwnerDeletion": True,
                        }
                    ],
                },
                "spec": {
                    "project": "default",
                    "source": template_source,
                    "destination": {**destination, "namespace": app_set},
                    "syncPolicy": dict(sync_policy or {}),
                },
                "status": {
                    "sync": {"status": "Synced" if synced else "OutOfSync", "revision": revision},
                    "health": {"status": "Healthy"},
                    "reconciledAt": format_time(now),
                    "history": [
                        {
                            "id": 0,
                            "revision": applied,
                            "deployedAt": earlier,
                            "deployStartedAt": earlier,
                            "source": template_source,
                            "initiatedBy": {"username": "seed"},
                        }
                    ],
                    "operationState": {
                        "operation": {
                            "sync": {"revision": applied},
                            "initiatedBy": {"username": "seed"},
                        },
                        "phase": "Succeeded",
                        "message": "successfully synced (all tasks run)",
                        "startedAt": earlier,
                        "finishedAt": earlier,
                        "syncResult": {"revision": applied, "source": template_source},
                    },
                },
            },
        )
    return SeedResult(tuple(fleet), app_set, uid, tuple(names), created, existing)


def publish_refs(
    kube: Kube,
    namespace: str,
    refs: Mapping[str, str],
    charts: Mapping[str, Mapping[str, Sequence[str]]] | None = None,
) -> None:
    """Point the simulated repository's refs at commits (a push) and, when given, set the versions
    the simulated chart repositories list (`repoURL -> chart -> versions`: a chart published):
    creates or replaces the ConfigMap (charts published before stay when `charts` is None)."""
    body = refs_configmap(refs, charts)
    try:
        kube.create(CONFIG_MAPS, namespace, body)
    except AlreadyExists:
        current = kube.get(CONFIG_MAPS, namespace, GIT_CONFIGMAP)
        current["data"] = {**(current.get("data") or {}), **body["data"]}
        kube.replace(CONFIG_MAPS, namespace, current)
