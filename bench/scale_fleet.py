"""A synthetic fleet of N clusters as `kubectl get -o yaml` prints it, for the scale benchmark.

`write_fleet(path, clusters=10_000)` writes cluster Secrets (labels env, region, zone), the
ApplicationSet `checkout` and one OutOfSync Application per cluster, in the shape of
examples/fleets/checkout.yaml; `write_progressive_sync(path)` writes the four-stage ProgressiveSync
of issue 15 (a canary, one per region, 10 %, the rest). Used by bench/bench_scale.py; not imported
by the product.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import yaml

REGIONS = tuple(f"region-{i:02d}" for i in range(20))
ZONES = "abc"
OLD = "9d2b7e4a1c3f5e7d9b0a2c4e6f8a1b3d5e7f9c0b"
NEW = "4f1c2e9b7a3d5c8e1f0a2b4c6d8e0f1a3b5c7d9e"
APP_SET_UID = "3b0f6a52-7c1e-4d9a-8f2e-5a6b7c8d9e0f"
REPO = "https://git.example.internal/platform/checkout-deploy.git"

PROGRESSIVE_SYNC: dict[str, Any] = {
    "apiVersion": "progressivesync.io/v1alpha1",
    "kind": "ProgressiveSync",
    "metadata": {"name": "checkout", "namespace": "argocd"},
    "spec": {
        "appSetRef": {"name": "checkout"},
        "stages": [
            {
                "name": "canary",
                "targets": {"clusters": {"selector": {"matchLabels": {"region": REGIONS[0]}}}},
                "maxTargets": 1,
            },
            {
                "name": "one per region",
                "targets": {"clusters": {"selector": {}}},
                "maxTargets": len(REGIONS) - 1,
                "maxParallel": len(REGIONS) - 1,
                "spreadBy": "region",
            },
            {
                "name": "ten percent",
                "targets": {"clusters": {"selector": {}}},
                "maxTargets": "10%",
                "maxParallel": "25%",
            },
            {"name": "the rest", "targets": {"clusters": {"selector": {}}}, "maxParallel": "25%"},
        ],
    },
}


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def cluster_name(index: int) -> str:
    """The name of cluster `index` (stable, ~22 characters like real fleets' names)."""
    region = REGIONS[index % len(REGIONS)]
    return f"cell-{index:05d}-{region}{ZONES[index % 3]}"


def fleet_objects(clusters: int) -> list[dict[str, Any]]:
    """Secrets, the ApplicationSet and the Applications of a fleet of `clusters` clusters."""
    secrets, apps = [], []
    for index in range(clusters):
        name = cluster_name(index)
        region = REGIONS[index % len(REGIONS)]
        server = f"https://api.{name}.k8s.example.internal:6443"
        secrets.append(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "type": "Opaque",
                "metadata": {
                    "name": f"cluster-{name}",
                    "namespace": "argocd",
                    "labels": {
                        "argocd.argoproj.io/secret-type": "cluster",
                        "env": "prod",
                        "region": region,
                        "zone": f"{region}{ZONES[index % 3]}",
                    },
                },
                "data": {"name": _b64(name), "server": _b64(server), "config": _b64('{"bearerToken":"x"}')},
            }
        )
        destination = {"server": server, "namespace": "checkout"}
        source = {"repoURL": REPO, "targetRevision": "main", "path": "deploy/checkout"}
        apps.append(
            {
                "apiVersion": "argoproj.io/v1alpha1",
                "kind": "Application",
                "metadata": {
                    "name": f"checkout-{name}",
                    "namespace": "argocd",
                    "uid": f"00000000-0000-0000-0000-{index:012d}",
                    "ownerReferences": [
                        {
                            "apiVersion": "argoproj.io/v1alpha1",
                            "kind": "ApplicationSet",
                            "name": "checkout",
                            "uid": APP_SET_UID,
                            "controller": True,
                            "blockOwnerDeletion": True,
                        }
                    ],
                },
                "spec": {"project": "default", "source": source, "destination": destination},
                "status": {
                    "sync": {
                        "status": "OutOfSync",
                        "revision": NEW,
                        "comparedTo": {"source": source, "destination": destination},
                    },
                    "health": {"status": "Healthy"},
                    "operationState": {
                        "phase": "Succeeded",
                        "startedAt": "2026-11-20T09:14:02Z",
                        "finishedAt": "2026-11-20T09:14:31Z",
                        "syncResult": {"revision": OLD},
                    },
                    "reconciledAt": "2026-11-29T21:58:40Z",
                },
            }
        )
    app_set = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "ApplicationSet",
        "metadata": {"name": "checkout", "namespace": "argocd", "uid": APP_SET_UID, "generation": 4},
        "spec": {"generators": [{"clusters": {"selector": {"matchLabels": {"env": "prod"}}}}]},
    }
    return [
        {"apiVersion": "v1", "kind": "List", "items": secrets},
        app_set,
        {"apiVersion": "v1", "kind": "List", "items": apps},
    ]


def write_fleet(path: Path, clusters: int) -> None:
    """The fleet file (multi-document YAML, as kubectl prints it)."""
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    path.write_text(yaml.dump_all(fleet_objects(clusters), Dumper=dumper, sort_keys=False))


def write_progressive_sync(path: Path) -> None:
    """The four-stage ProgressiveSync of issue 15."""
    path.write_text(json.dumps(PROGRESSIVE_SYNC))
