"""Which clusters the rollout planner takes (`orchestrator.planning.planner`, DESIGN §3), one named
case each: a stage's targets by selector and by earlier stages, the Applications of one cluster
moving together, and why an Application is out of date.
"""

from __future__ import annotations

import pytest

from orchestrator.argocd.fleet import AppView, Cluster
from orchestrator.planning.planner import (
    out_of_date_reason,
)
from tests.support.builders import (
    NEW_REVISION,
    OLD_REVISION,
    make_app,
    make_cluster,
    make_stage,
    up_to_date,
)
from tests.support.planner_inputs import (
    plan,
)

# --- which clusters are targets --------------------------------------------------------------


@pytest.mark.parametrize(
    ("clusters", "apps", "fleet", "targets"),
    [
        pytest.param(
            [make_cluster("eu-1")],
            [make_app(cluster="eu-1", by="name")],
            {"eu-1"},
            {"eu-1"},
            id="destination-by-name",
        ),
        pytest.param(
            [make_cluster("eu-1")],
            [make_app(cluster="eu-1", by="server")],
            {"eu-1"},
            {"eu-1"},
            id="destination-by-server",
        ),
        pytest.param(
            [make_cluster("eu-1", server="https://eu-1:6443/")],
            [make_app(cluster="eu-1", server="https://eu-1:6443")],
            {"eu-1"},
            {"eu-1"},
            id="servers-compare-without-trailing-slash",
        ),
        pytest.param(
            [make_cluster("eu-1"), make_cluster("eu-2")],
            [make_app(cluster="eu-1"), make_app(cluster="eu-2", owner=None)],
            {"eu-1"},
            {"eu-1"},
            id="application-without-owner-is-ignored",
        ),
        pytest.param(
            [make_cluster("eu-1"), make_cluster("eu-2")],
            [make_app(cluster="eu-1"), make_app(cluster="eu-2", owner="another-appset")],
            {"eu-1"},
            {"eu-1"},
            id="application-of-another-appset-is-ignored",
        ),
        pytest.param(
            [make_cluster("eu-1"), make_cluster("eu-2")],
            [make_app(cluster="eu-1"), make_app(cluster="eu-2", owner_uid="uid-of-an-older-appset")],
            {"eu-1"},
            {"eu-1"},
            id="owner-uid-mismatch-is-ignored",
        ),
        pytest.param(
            [make_cluster("eu-1"), make_cluster("eu-2")],
            [up_to_date("eu-1"), make_app(cluster="eu-2")],
            {"eu-1", "eu-2"},
            {"eu-2"},
            id="synced-at-release-and-healthy-is-skipped",
        ),
        pytest.param(
            [make_cluster("eu-1"), make_cluster("eu-2")],
            [make_app(cluster="eu-2"), make_app(cluster="eu-1", sync="Synced", health="Degraded")],
            {"eu-1", "eu-2"},
            {"eu-1", "eu-2"},
            id="synced-at-the-release-but-degraded-is-a-target",
        ),
        pytest.param(
            [make_cluster("eu-1"), make_cluster("eu-2")],
            [make_app(cluster="eu-2"), make_app(cluster="eu-1", sync="Synced", health="Progressing")],
            {"eu-1", "eu-2"},
            {"eu-1", "eu-2"},
            id="synced-at-the-release-but-progressing-is-a-target",
        ),
        pytest.param(
            [make_cluster("eu-1"), make_cluster("eu-2")],
            [
                make_app(cluster="eu-2"),
                up_to_date(
                    "eu-1",
                    phase="Succeeded",
                    finished_at="2026-11-29T10:05:00Z",
                    reconciled_at="2026-11-29T10:04:59Z",
                ),
            ],
            {"eu-1", "eu-2"},
            {"eu-1", "eu-2"},
            id="healthy-at-the-release-observed-before-the-sync-finished-is-a-target",
        ),
        pytest.param(
            [make_cluster("eu-1")],
            [
                up_to_date(
                    "eu-1",
                    phase="Succeeded",
                    finished_at="2026-11-29T10:05:00Z",
                    reconciled_at="2026-11-29T10:06:00Z",
                )
            ],
            {"eu-1"},
            set(),
            id="healthy-observed-after-the-sync-is-up-to-date",
        ),
        pytest.param(
            [make_cluster("eu-1"), make_cluster("eu-2")],
            [make_app(cluster="eu-2"), up_to_date("eu-1", operation=True)],
            {"eu-1", "eu-2"},
            {"eu-1", "eu-2"},
            id="operation-in-progress-at-the-release-is-a-target",
        ),
        pytest.param(
            [make_cluster("eu-1")],
            [make_app(cluster="eu-1", sync="Synced", health="Degraded")],
            {"eu-1"},
            set(),
            id="degraded-at-its-current-revision-alone-is-not-a-release",
        ),
        pytest.param(
            [make_cluster("eu-1"), make_cluster("eu-2")],
            [
                make_app(cluster="eu-1", sync="Synced", revision=OLD_REVISION, health="Degraded"),
                make_app(cluster="eu-2"),
            ],
            {"eu-1", "eu-2"},
            {"eu-2"},
            id="degraded-at-the-old-commit-is-not-a-target-of-the-new-release",
        ),
        pytest.param(
            [make_cluster("eu-1")],
            [up_to_date("eu-1", operation=True)],
            {"eu-1"},
            set(),
            id="operation-in-progress-at-its-current-revision-is-not-a-release",
        ),
        pytest.param(
            [make_cluster("eu-1")],
            [make_app(cluster="eu-1", sync="Unknown", revision=None)],
            {"eu-1"},
            {"eu-1"},
            id="never-compared-application-is-a-target",
        ),
        pytest.param(
            [make_cluster("eu-1"), make_cluster("eu-2")],
            [
                up_to_date("eu-1", name="web-eu-1"),
                make_app("worker-eu-1", cluster="eu-1"),
                up_to_date("eu-2"),
            ],
            {"eu-1", "eu-2"},
            {"eu-1"},
            id="one-stale-application-makes-its-cluster-a-target",
        ),
        pytest.param(
            [make_cluster("eu-1"), make_cluster("no-apps")],
            [make_app(cluster="eu-1")],
            {"eu-1"},
            {"eu-1"},
            id="cluster-without-applications-of-the-appset-is-not-in-the-fleet",
        ),
        pytest.param(
            [make_cluster("eu-1")],
            [make_app(cluster="eu-1", revisions=[NEW_REVISION, OLD_REVISION])],
            {"eu-1"},
            {"eu-1"},
            id="multi-source-out-of-sync-is-a-target",
        ),
        pytest.param(
            [make_cluster("eu-1")],
            [up_to_date("eu-1", revisions=[NEW_REVISION, OLD_REVISION])],
            {"eu-1"},
            set(),
            id="multi-source-synced-and-healthy-is-up-to-date",
        ),
    ],
)
def test_which_clusters_are_targets(
    clusters: list[Cluster], apps: list[AppView], fleet: set[str], targets: set[str]
) -> None:
    result = plan(clusters, apps, make_stage("all"))
    assert set(result.clusters) == fleet
    assert {t for s in result.stages for t in s.targets} == targets


def test_applications_of_one_cluster_move_together() -> None:
    apps = [
        make_app("web-eu-1", cluster="eu-1"),
        up_to_date("eu-1", name="worker-eu-1"),
        make_app(cluster="eu-2"),
    ]
    result = plan([make_cluster("eu-1"), make_cluster("eu-2")], apps, make_stage("all", max_targets=2))
    stage = result.stages[0]
    assert stage.apps["eu-1"] == ("web-eu-1", "worker-eu-1")
    assert result.clusters["eu-1"].stale_apps == ("web-eu-1",)
    assert result.clusters["eu-1"].reasons == ("web-eu-1: sync status is OutOfSync",)


@pytest.mark.parametrize(
    ("app", "reason"),
    [
        pytest.param(make_app(operation=True), "an operation is in progress", id="reason-operation"),
        pytest.param(make_app(sync="OutOfSync"), "sync status is OutOfSync", id="reason-out-of-sync"),
        pytest.param(
            make_app(sync="Synced", revision=None),
            "Synced, but Argo CD reports no revision",
            id="reason-no-rev",
        ),
        pytest.param(make_app(sync="Synced", health="Missing"), "health is Missing", id="reason-health"),
        pytest.param(make_app(sync="Synced"), None, id="reason-none-when-up-to-date"),
    ],
)
def test_out_of_date_reason(app: AppView, reason: str | None) -> None:
    assert out_of_date_reason(app) == reason
