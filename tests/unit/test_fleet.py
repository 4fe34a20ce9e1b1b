"""Reading Argo CD objects and fleet files into the planner's views (`orchestrator.argocd.fleet`)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
import yaml

from orchestrator.argocd.fleet import (
    AppView,
    FleetError,
    HealthStatus,
    OperationPhase,
    SyncStatus,
    app_view_from_object,
    cluster_from_secret,
    index_clusters,
    load_fleet,
)
from orchestrator.kube.cluster_secrets import ClusterSecret
from tests.support.builders import (
    APP_SET,
    APP_SET_UID,
    b64,
    make_app,
    make_application,
    make_cluster,
    make_cluster_secret,
)


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        pytest.param(
            make_application(cluster="eu-1"),
            {
                "name": "myservice-eu-1",
                "destination_server": "https://eu-1.k8s.example.internal:6443",
                "destination_name": "",
                "sync_status": SyncStatus.OUT_OF_SYNC,
                "health_status": HealthStatus.HEALTHY,
                "automated_sync": False,
                "operation_in_progress": False,
            },
            id="out-of-sync-app-by-server",
        ),
        pytest.param(
            make_application(cluster="eu-1", by="name"),
            {"destination_server": "", "destination_name": "eu-1"},
            id="destination-by-name",
        ),
        pytest.param(
            make_application(server="https://api.example:6443/"),
            {"destination_server": "https://api.example:6443"},
            id="trailing-slash-of-server-is-dropped",
        ),
        pytest.param(make_application(automated={}), {"automated_sync": True}, id="automated-empty-is-on"),
        pytest.param(
            make_application(automated={"prune": True, "selfHeal": True}),
            {"automated_sync": True},
            id="automated-with-options-is-on",
        ),
        pytest.param(
            make_application(automated={"enabled": False}),
            {"automated_sync": False},
            id="automated-enabled-false-is-off",
        ),
        pytest.param(make_application(operation=True), {"operation_in_progress": True}, id="operation-set"),
        pytest.param(
            make_application(sync="Weird", health="Strange"),
            {"sync_status": SyncStatus.UNKNOWN, "health_status": HealthStatus.UNKNOWN},
            id="unknown-statuses-read-as-unknown",
        ),
        pytest.param(
            make_application(revisions=["aaa", "bbb"], phase="Succeeded", result_revision=["aaa", "bbb"]),
            {
                "multi_source": True,
                "sync_revisions": ("aaa", "bbb"),
                "sync_revision": "aaa,bbb",
                "operation_revisions": ("aaa", "bbb"),
            },
            id="multi-source-revisions-in-source-order",
        ),
        pytest.param(
            make_application(
                phase="Succeeded",
                result_revision="old",
                finished_at="2026-11-29T10:05:00Z",
                reconciled_at="2026-11-29T10:04:00Z",
            ),
            {
                "operation_phase": OperationPhase.SUCCEEDED,
                "operation_revisions": ("old",),
                "operation_finished_at": datetime(2026, 11, 29, 10, 5, tzinfo=UTC),
                "reconciled_at": datetime(2026, 11, 29, 10, 4, tzinfo=UTC),
                "health_is_stale": True,
            },
            id="health-reconciled-before-the-sync-finished-is-stale",
        ),
        pytest.param(
            make_application(operation=True, operation_info={"rollout-id": "7f3c2a1", "stage": "canary"}),
            {"rollout_id": "7f3c2a1", "rollout_stage": "canary"},
            id="our-operation-info",
        ),
        pytest.param(
            make_application(
                annotations={"progressivesync.io/rollout-id": "7f3c2a1", "progressivesync.io/stage": "canary"}
            ),
            {"rollout_id": "", "rollout_stage": ""},
            id="annotations-mean-nothing-the-applicationset-controller-owns-them",
        ),
    ],
)
def test_app_view_reads_application_fields(obj: dict[str, Any], expected: dict[str, Any]) -> None:
    view = app_view_from_object(obj)
    for attribute, value in expected.items():
        assert getattr(view, attribute) == value, attribute


def test_malformed_status_values_read_as_unknown() -> None:
    obj = make_application()
    obj["status"]["sync"]["status"] = ["not", "a", "string"]
    obj["status"]["health"] = {"status": {"nested": True}}
    view = app_view_from_object(obj)
    assert (view.sync_status, view.health_status) == (SyncStatus.UNKNOWN, HealthStatus.UNKNOWN)


def test_app_without_status_reads_as_unknown() -> None:
    view = app_view_from_object({"kind": "Application", "metadata": {"name": "bare"}})
    assert view == AppView(name="bare")


def test_app_without_name_is_an_error() -> None:
    with pytest.raises(FleetError, match=r"metadata\.name"):
        app_view_from_object({"kind": "Application", "metadata": {}})


@pytest.mark.parametrize(
    ("owner_kwargs", "app_set_uid", "owned"),
    [
        pytest.param({}, APP_SET_UID, True, id="kind-name-and-uid-match"),
        pytest.param({"owner_uid": None}, APP_SET_UID, True, id="ref-without-uid-matches-by-name"),
        pytest.param({}, "", True, id="uid-unknown-matches-by-name"),
        pytest.param({"owner_uid": "other-uid"}, APP_SET_UID, False, id="uid-of-a-recreated-appset-differs"),
        pytest.param({"owner": "other"}, APP_SET_UID, False, id="other-appset-name"),
        pytest.param({"owner_kind": "Deployment"}, APP_SET_UID, False, id="owner-of-another-kind"),
        pytest.param({"owner": None}, APP_SET_UID, False, id="no-owner-references"),
    ],
)
def test_ownership(owner_kwargs: dict[str, Any], app_set_uid: str, owned: bool) -> None:
    view = app_view_from_object(make_application(**owner_kwargs))
    assert view.is_owned_by(APP_SET, app_set_uid) is owned


def test_cluster_from_secret_without_name_uses_the_secret_name() -> None:
    cluster = cluster_from_secret(ClusterSecret("cluster-x", "", "https://x:6443/", {"region": "eu"}))
    assert (cluster.name, cluster.server, dict(cluster.labels)) == (
        "cluster-x",
        "https://x:6443",
        {"region": "eu"},
    )


def test_load_fleet_reads_lists_and_single_documents() -> None:
    secrets = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            make_cluster_secret("eu-1", labels={"region": "eu"}),
            make_cluster_secret("us-1", labels={"region": "us"}),
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "repo"}, "data": {"url": b64("x")}},
        ],
    }
    apps = {"apiVersion": "argoproj.io/v1alpha1", "kind": "ApplicationList", "items": [make_application()]}
    app_set = {"kind": "ApplicationSet", "metadata": {"name": APP_SET, "uid": APP_SET_UID}}
    text = yaml.safe_dump_all([secrets, apps, app_set, {"kind": "ConfigMap", "metadata": {"name": "x"}}])
    fleet = load_fleet(text)
    assert [c.name for c in fleet.clusters] == ["eu-1", "us-1"]
    assert [a.name for a in fleet.apps] == ["myservice-c1"]
    assert fleet.app_set(APP_SET) is not None
    assert fleet.app_set(APP_SET).uid == APP_SET_UID  # type: ignore[union-attr]
    assert fleet.ignored == 2  # the repository Secret and the ConfigMap


def test_load_fleet_reads_the_example_file() -> None:
    with open("examples/fleets/checkout.yaml") as handle:
        fleet = load_fleet(handle.read())
    regions = {c.labels["region"] for c in fleet.clusters}
    assert len(fleet.clusters) == 12
    assert regions == {"eu-west-1", "us-east-1", "ap-southeast-1"}
    assert sum(a.is_owned_by("checkout") for a in fleet.apps) == 12
    assert fleet.app_set("checkout") is not None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("a: [", "not valid YAML", id="broken-yaml"),
        pytest.param("- just\n- a list\n", "not a Kubernetes object", id="document-is-not-an-object"),
    ],
)
def test_load_fleet_rejects_what_it_cannot_read(text: str, message: str) -> None:
    with pytest.raises(FleetError, match=message):
        load_fleet(text)


def test_malformed_cluster_secret_names_the_secret_but_not_its_data() -> None:
    secret = make_cluster_secret("eu-1")
    secret["data"]["server"] = "%%%not-base64-SECRETMARK%%%"
    with pytest.raises(FleetError) as raised:
        load_fleet(yaml.safe_dump(secret))
    assert "cluster-eu-1" in str(raised.value)
    assert "SECRETMARK" not in str(raised.value)


# --- which cluster an Application deploys to -----------------------------------------------------

SHARED = "https://shared.example.internal:6443"


@pytest.mark.parametrize(
    ("app", "expected"),
    [
        pytest.param(make_app(cluster="eu-1"), "eu-1", id="by-server"),
        pytest.param(make_app(cluster="eu-1", by="name"), "eu-1", id="by-name"),
        pytest.param(
            make_app(cluster="eu-1", server=SHARED), "a-first", id="shared-server-goes-to-first-secret"
        ),
        pytest.param(
            make_app(cluster="eu-1", by="both", server="https://gone.example.internal"),
            "eu-1",
            id="unknown-server-falls-back-to-name",
        ),
        pytest.param(make_app(cluster="mars", by="name"), None, id="unknown-cluster"),
    ],
)
def test_an_application_deploys_to_the_cluster_of_its_server_else_of_its_name(
    app: AppView, expected: str | None
) -> None:
    clusters = [
        make_cluster("eu-1"),
        make_cluster("b-second", server=SHARED + "/", secret_name="cluster-b"),
        make_cluster("a-first", server=SHARED, secret_name="cluster-a"),
    ]
    for order in (clusters, clusters[::-1]):  # the answer does not depend on the listing order
        found = index_clusters(order).cluster_of(app)
        assert (found.name if found else None) == expected
