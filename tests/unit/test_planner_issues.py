"""The rollout planner's warnings and errors (`orchestrator.planning.planner`, DESIGN §3), one
named case each, and what the release is made of (an unhealthy Application at the old commit adds
nothing, mixed revisions are all release revisions, a running rollout keeps the release planned).
"""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.argocd.fleet import AppSetView, AppView, Cluster
from orchestrator.planning.planner import (
    IssueCode,
    plan_rollout,
)
from tests.support.builders import (
    NEW_REVISION,
    OLD_REVISION,
    make_app,
    make_app_set,
    make_cluster,
    make_spec,
    make_stage,
    regional_fleet,
    up_to_date,
)
from tests.support.planner_inputs import (
    codes,
    eu_clusters,
    plan,
    stale_apps,
)

# --- warnings and errors ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("clusters", "apps", "stages", "options", "warnings", "errors"),
    [
        pytest.param(
            eu_clusters(),
            stale_apps(eu_clusters()),
            [make_stage("all")],
            {},
            set(),
            set(),
            id="clean-plan-has-no-issues",
        ),
        pytest.param(
            eu_clusters(),
            [make_app(cluster="eu-1", automated={"selfHeal": True}), make_app(cluster="eu-2")],
            [make_stage("all")],
            {},
            {"AutomatedSync"},
            set(),
            id="automated-sync-on-is-a-warning",
        ),
        pytest.param(
            eu_clusters(),
            [make_app(cluster="eu-1", automated={"enabled": False}), make_app(cluster="eu-2")],
            [make_stage("all")],
            {},
            set(),
            set(),
            id="automated-sync-disabled-is-fine",
        ),
        pytest.param(
            eu_clusters(),
            [make_app(cluster="eu-1"), make_app(cluster="eu-2", revision=OLD_REVISION)],
            [make_stage("all")],
            {},
            {"MixedRevisions"},
            set(),
            id="applications-at-different-revisions-are-reported",
        ),
        pytest.param(
            eu_clusters(),
            [
                make_app(cluster="eu-1"),
                make_app(cluster="eu-2", sync="Synced", revision=OLD_REVISION, health="Degraded"),
            ],
            [make_stage("all")],
            {},
            {"MixedRevisions", "NotARelease"},
            set(),
            id="degraded-at-the-old-commit-is-reported-not-released",
        ),
        pytest.param(
            eu_clusters(),
            [*stale_apps(eu_clusters()), make_app("lost", cluster="gone")],
            [make_stage("all")],
            {},
            set(),
            {"MissingClusterSecret"},
            id="out-of-date-application-without-cluster-secret-is-an-error",
        ),
        pytest.param(
            eu_clusters(),
            [*stale_apps(eu_clusters()), make_app("lost", cluster="gone")],
            [make_stage("all")],
            {"allow_partial": True},
            {"MissingClusterSecret"},
            set(),
            id="missing-cluster-secret-with-partial-rollout-is-a-warning",
        ),
        pytest.param(
            eu_clusters(),
            [*stale_apps(eu_clusters()), up_to_date("gone", name="lost")],
            [make_stage("all")],
            {},
            {"MissingClusterSecret"},
            set(),
            id="up-to-date-application-without-cluster-secret-is-a-warning",
        ),
        pytest.param(
            [make_cluster("a", server="https://same:6443"), make_cluster("b", server="https://same:6443")],
            [make_app(cluster="a", server="https://same:6443")],
            [make_stage("all")],
            {},
            {"SharedServer"},
            set(),
            id="two-secrets-sharing-a-server-are-reported",
        ),
        pytest.param(
            [
                make_cluster("a", secret_name="s1"),
                make_cluster("a", secret_name="s2", server="https://other"),
            ],
            [make_app(cluster="a", by="name")],
            [make_stage("all")],
            {},
            set(),
            {"DuplicateClusterName"},
            id="two-secrets-with-one-cluster-name-are-an-error",
        ),
        pytest.param(
            regional_fleet({"eu": 2, "us": 2}),
            stale_apps(regional_fleet({"eu": 2, "us": 2})),
            [make_stage("eu", labels={"region": "eu"})],
            {},
            set(),
            {"UncoveredClusters"},
            id="uncovered-clusters-are-an-error-without-partial-rollout",
        ),
        pytest.param(
            regional_fleet({"eu": 2, "us": 2}),
            stale_apps(regional_fleet({"eu": 2, "us": 2})),
            [make_stage("eu", labels={"region": "eu"})],
            {"allow_partial": True},
            {"UncoveredClusters"},
            set(),
            id="uncovered-clusters-are-a-warning-with-partial-rollout",
        ),
        pytest.param(
            eu_clusters(4),
            stale_apps(eu_clusters(4)),
            [make_stage("two", max_targets=2)],
            {},
            set(),
            {"UncoveredClusters"},
            id="clusters-left-over-by-max-targets-are-uncovered",
        ),
        pytest.param(
            regional_fleet({"eu": 2, "us": 2}),
            stale_apps(regional_fleet({"eu": 2, "us": 2}), fresh=("us-1", "us-2")),
            [make_stage("eu", labels={"region": "eu"})],
            {},
            set(),
            set(),
            id="up-to-date-clusters-outside-every-stage-are-not-uncovered",
        ),
        pytest.param(
            eu_clusters(),
            stale_apps(eu_clusters()),
            [make_stage("all")],
            {"appset": AppSetView(name="other")},
            set(),
            {"AppSetMismatch"},
            id="appset-of-another-name-is-an-error",
        ),
        pytest.param(
            eu_clusters(),
            [],
            [make_stage("all")],
            {},
            {"NoApplications"},
            set(),
            id="no-applications-is-a-warning",
        ),
        pytest.param(
            [make_cluster("a"), make_cluster("b")],
            [make_app(cluster="a", by="both", server="https://b.k8s.example.internal:6443")],
            [make_stage("all")],
            {},
            {"DestinationConflict"},
            set(),
            id="server-and-name-pointing-at-different-clusters-are-reported",
        ),
        pytest.param(
            [make_cluster("a", region="eu"), make_cluster("b")],
            [make_app(cluster="a"), make_app(cluster="b")],
            [make_stage("all", spread_by="region")],
            {},
            {"SpreadLabelMissing"},
            set(),
            id="targets-without-the-spread-label-are-reported",
        ),
        pytest.param(
            eu_clusters(),
            [make_app(cluster="eu-1", sync="Unknown", revision=None), make_app(cluster="eu-2")],
            [make_stage("all")],
            {},
            {"UnknownRevision"},
            set(),
            id="target-without-a-revision-is-reported",
        ),
    ],
)
def test_warnings_and_errors(
    *,
    clusters: list[Cluster],
    apps: list[AppView],
    stages: list[dict[str, Any]],
    options: dict[str, Any],
    warnings: set[str],
    errors: set[str],
) -> None:
    result = plan(clusters, apps, *stages, **options)
    assert codes(result.warnings) == warnings
    assert codes(result.errors) == errors
    assert result.has_errors is bool(errors)


def test_appset_not_at_hand_matches_by_name_with_a_warning() -> None:
    result = plan_rollout(
        make_spec(make_stage("all")),
        ps_name="myservice",
        appset=None,
        clusters=eu_clusters(),
        apps=stale_apps(eu_clusters()),
    )
    assert codes(result.warnings) == {"AppSetNotGiven"}
    assert len(result.stages[0].targets) == 2


def test_uncovered_error_lists_the_clusters_and_why() -> None:
    clusters = regional_fleet({"eu": 3, "us": 1})
    result = plan(clusters, stale_apps(clusters), make_stage("eu", labels={"region": "eu"}, max_targets=2))
    (error,) = result.errors
    assert error.code is IssueCode.UNCOVERED_CLUSTERS
    assert set(error.subjects) == set(result.uncovered)
    assert len(result.uncovered) == 2 and "us-1" in result.uncovered
    assert "no stage selector matches us-1" in error.message
    assert "maxTargets leave out" in error.message


def test_shared_server_goes_to_the_secret_that_sorts_first() -> None:
    clusters = [
        make_cluster("b", server="https://same:6443", secret_name="cluster-2"),
        make_cluster("a", server="https://same:6443", secret_name="cluster-1"),
    ]
    apps = [
        make_app("by-server", cluster="x", server="https://same:6443"),
        make_app("by-name", cluster="b", by="name"),
    ]
    result = plan(clusters, apps, make_stage("all"))
    assert result.clusters["a"].apps == ("by-server",)
    assert result.clusters["b"].apps == ("by-name",)


def test_an_unhealthy_application_at_the_old_commit_adds_nothing_to_the_release() -> None:
    """Issue 29, finding 2: the old commit of a Degraded Application is not a release revision, so an
    Application still compared against it is not "at the release"; the warning names it."""
    apps = [
        make_app(cluster="eu-1"),
        make_app(cluster="eu-2", sync="Synced", revision=OLD_REVISION, health="Degraded"),
    ]
    result = plan(eu_clusters(), apps, make_stage("all"))
    assert result.revisions == ((NEW_REVISION,),)
    assert result.stages[0].targets == ("eu-1",)
    warning = next(w for w in result.warnings if w.code.value == "NotARelease")
    assert warning.subjects == ("myservice-eu-2",)
    assert f"health is Degraded at {OLD_REVISION}" in warning.message


def test_the_release_given_to_a_running_rollout_is_the_one_planned() -> None:
    """A step passes the Workflow's release: an Application Synced at it but still Progressing stays a
    target when no other Application names the release any more."""
    apps = [make_app(cluster="eu-1", sync="Synced", health="Progressing"), up_to_date("eu-2")]
    assert plan(eu_clusters(), apps, make_stage("all")).stages[0].targets == ()
    given = plan_rollout(
        make_spec(make_stage("all")),
        ps_name="myservice",
        appset=make_app_set(),
        clusters=eu_clusters(),
        apps=apps,
        release=[(NEW_REVISION,)],
    )
    assert given.revisions == ((NEW_REVISION,),)
    assert given.stages[0].targets == ("eu-1",)


def test_mixed_revisions_are_all_release_revisions() -> None:
    apps = [make_app(cluster="eu-1"), make_app(cluster="eu-2", revision=OLD_REVISION)]
    result = plan(eu_clusters(), apps, make_stage("all"))
    # Finding 4: revisions travel as data, one tuple per Application's revision set.
    assert result.revisions == ((NEW_REVISION,), (OLD_REVISION,))
    assert f"{NEW_REVISION} (1: myservice-eu-1)" in result.warnings[0].message
