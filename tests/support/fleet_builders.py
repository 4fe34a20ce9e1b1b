"""Small keyword builders for fleets: clusters, Applications, ApplicationSets and specs.

Each builder sets only what a test names and fills the rest with a plain, valid default, so a test
reads as the one fact it checks: `make_app(cluster="eu-1", health="Degraded")`. Applications are
built as API objects and read through `fleet.app_view_from_object`, so tests exercise the same
parsing the planner's callers use. Nothing here talks to a cluster.
"""

from __future__ import annotations

import base64
from typing import Any

from orchestrator.api.models import ProgressiveSyncSpec
from orchestrator.argocd.fleet import AppSetView, AppView, Cluster, app_view_from_object

APP_SET = "myservice"
APP_SET_UID = "00000000-0000-4000-8000-0000000000a5"
NEW_REVISION = "4f1c2e9b7a3d5c8e1f0a2b4c6d8e0f1a3b5c7d9e"
OLD_REVISION = "9d2b7e4a1c3f5e7d9b0a2c4e6f8a1b3d5e7f9c0b"


def server_of(cluster: str) -> str:
    """The API server URL the builders give a cluster."""
    return f"https://{cluster}.k8s.example.internal:6443"


def make_cluster(
    name: str = "c1",
    *,
    region: str | None = None,
    zone: str | None = None,
    labels: dict[str, str] | None = None,
    server: str | None = None,
    secret_name: str | None = None,
) -> Cluster:
    """A cluster with the `region`/`zone` labels given (and any other `labels`)."""
    all_labels = dict(labels or {})
    if region is not None:
        all_labels["region"] = region
    if zone is not None:
        all_labels["zone"] = zone
    return Cluster(
        name=name,
        server=server if server is not None else server_of(name),
        labels=all_labels,
        secret_name=secret_name if secret_name is not None else f"cluster-{name}",
    )


def make_app_set(name: str = APP_SET, *, uid: str = APP_SET_UID) -> AppSetView:
    """The ApplicationSet the specs of `make_spec` name."""
    return AppSetView(name=name, namespace="argocd", uid=uid)


def make_app_object(
    name: str | None = None,
    *,
    cluster: str = "c1",
    by: str = "server",
    server: str | None = None,
    owner: str | None = APP_SET,
    owner_kind: str = "ApplicationSet",
    owner_uid: str | None = APP_SET_UID,
    sync: str = "OutOfSync",
    revision: str | None = NEW_REVISION,
    revisions: list[str] | None = None,
    health: str = "Healthy",
    automated: dict[str, Any] | None = None,
    operation: bool = False,
    operation_phase: str | None = None,
    operation_revision: str | None = None,
    finished_at: str | None = None,
    reconciled_at: str | None = None,
    annotations: dict[str, str] | None = None,
    operation_info: dict[str, str] | None = None,
) -> dict[str, Any]:
    """An Application object as the API server returns it.

    `by` is "server" or "name" (how `spec.destination` names the cluster) or "both"; `revisions`
    makes it multi-source; `automated` is put under `spec.syncPolicy.automated` when not None.
    """
    app_name = name or f"{APP_SET}-{cluster}"
    metadata: dict[str, Any] = {"name": app_name, "namespace": "argocd", "uid": f"uid-{app_name}"}
    if owner is not None:
        ref: dict[str, Any] = {"apiVersion": "argoproj.io/v1alpha1", "kind": owner_kind, "name": owner}
        if owner_uid is not None:
            ref["uid"] = owner_uid
        metadata["ownerReferences"] = [ref]
    if annotations:
        metadata["annotations"] = annotations
    destination: dict[str, Any] = {"namespace": "myservice"}
    if by in ("server", "both"):
        destination["server"] = server if server is not None else server_of(cluster)
    if by in ("name", "both"):
        destination["name"] = cluster
    spec: dict[str, Any] = {"project": "default", "destination": destination}
    sync_status: dict[str, Any] = {"status": sync}
    sync_result: dict[str, Any] = {}
    if revisions is not None:
        spec["sources"] = [{"repoURL": f"https://git.example/{i}.git"} for i in range(len(revisions))]
        sync_status["revisions"] = revisions
        if operation_revision is not None:
            sync_result["revisions"] = operation_revision.split(",")
    else:
        spec["source"] = {"repoURL": "https://git.example/deploy.git", "targetRevision": "main"}
        if revision is not None:
            sync_status["revision"] = revision
        if operation_revision is not None:
            sync_result["revision"] = operation_revision
    if automated is not None:
        spec["syncPolicy"] = {"automated": automated}
    status: dict[str, Any] = {"sync": sync_status, "health": {"status": health}}
    if operation_phase is not None:
        state: dict[str, Any] = {"phase": operation_phase, "startedAt": "2026-11-29T10:00:00Z"}
        if finished_at is not None:
            state["finishedAt"] = finished_at
        if sync_result:
            state["syncResult"] = sync_result
        status["operationState"] = state
    if reconciled_at is not None:
        status["reconciledAt"] = reconciled_at
    obj: dict[str, Any] = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Application",
        "metadata": metadata,
        "spec": spec,
        "status": status,
    }
    if operation:
        obj["operation"] = {"sync": {"revision": NEW_REVISION}}
        if operation_info:
            obj["operation"]["info"] = [{"name": k, "value": v} for k, v in operation_info.items()]
    return obj


def make_app(name: str | None = None, **kwargs: Any) -> AppView:
    """The `AppView` of `make_app_object(...)`."""
    return app_view_from_object(make_app_object(name, **kwargs))


def up_to_date(cluster: str, **kwargs: Any) -> AppView:
    """An Application of `cluster` that is Synced at the new revision and Healthy."""
    return make_app(cluster=cluster, **{"sync": "Synced", "health": "Healthy", **kwargs})


def make_stage(
    name: str,
    *,
    labels: dict[str, str] | None = None,
    expressions: list[dict[str, Any]] | None = None,
    max_targets: int | str = "100%",
    max_parallel: int | str = 1,
    spread_by: str | None = None,
) -> dict[str, Any]:
    """A stage in wire form; without `labels` or `expressions` its selector matches every cluster."""
    selector: dict[str, Any] = {}
    if labels:
        selector["matchLabels"] = labels
    if expressions:
        selector["matchExpressions"] = expressions
    stage: dict[str, Any] = {
        "name": name,
        "targets": {"clusters": {"selector": selector}},
        "maxTargets": max_targets,
        "maxParallel": max_parallel,
    }
    if spread_by:
        stage["spreadBy"] = spread_by
    return stage


def make_spec(
    *stages: dict[str, Any], allow_partial: bool = False, app_set: str = APP_SET
) -> ProgressiveSyncSpec:
    """A validated spec with these stages (default: one stage taking every cluster)."""
    return ProgressiveSyncSpec.model_validate(
        {
            "appSetRef": {"name": app_set},
            "stages": list(stages) or [make_stage("all")],
            "allowPartialRollout": allow_partial,
        }
    )


def regional_fleet(regions: dict[str, int]) -> list[Cluster]:
    """Clusters `<region>-<i>` with a region label and zone `<region>a`/`b` alternating."""
    return [
        make_cluster(f"{region}-{i}", region=region, zone=f"{region}{'ab'[i % 2]}")
        for region, count in regions.items()
        for i in range(1, count + 1)
    ]


def b64(text: str) -> str:
    """Base64 of a text, as Secret data holds it."""
    return base64.b64encode(text.encode()).decode()


def cluster_secret_object(
    name: str, *, labels: dict[str, str] | None = None, config: str = "{}", server: str | None = None
) -> dict[str, Any]:
    """An Argo CD cluster Secret object; `config` is stored base64-encoded like real credentials."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": f"cluster-{name}",
            "namespace": "argocd",
            "labels": {"argocd.argoproj.io/secret-type": "cluster", **(labels or {})},
        },
        "data": {"name": b64(name), "server": b64(server or server_of(name)), "config": b64(config)},
    }
