"""The rollout planner's rules, one named case each (`orchestrator.planning.planner`, DESIGN §3)."""

from __future__ import annotations

import random
import string
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pytest

from orchestrator.api.models import ProgressiveSyncStatus, StagePhase
from orchestrator.api.rollout_status import close_stage, start_rollout
from orchestrator.argocd.fleet import AppSetView, AppView, Cluster
from orchestrator.planning.planner import (
    IssueCode,
    RolloutPlan,
    RolloutProgress,
    StageProgress,
    StageState,
    order_clusters,
    out_of_date_reason,
    plan_rollout,
    progress_from_status,
    release_id,
)
from tests.support.builders import (
    NEW_REVISION,
    OLD_REVISION,
    make_app,
    make_app_set,
    make_cluster,
    make_spec,
    make_stage,
    make_stage_outcomes,
    regional_fleet,
    up_to_date,
)

EU_US_AP = {"eu": 4, "us": 4, "ap": 4}
T0 = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)
NOT_EU = [{"key": "region", "operator": "NotIn", "values": ["eu"]}]


def plan(
    clusters: Sequence[Cluster],
    apps: Sequence[AppView],
    *stages: dict[str, Any],
    allow_partial: bool = False,
    ps_name: str = "myservice",
    appset: AppSetView | None = None,
    progress: RolloutProgress | None = None,
) -> RolloutPlan:
    return plan_rollout(
        make_spec(*stages, allow_partial=allow_partial),
        ps_name=ps_name,
        appset=appset or make_app_set(),
        clusters=clusters,
        apps=apps,
        progress=progress,
    )


def stale_apps(clusters: Sequence[Cluster], *, fresh: Sequence[str] = ()) -> list[AppView]:
    """One Application per cluster: up to date on the `fresh` clusters, OutOfSync elsewhere."""
    return [up_to_date(c.name) if c.name in fresh else make_app(cluster=c.name) for c in clusters]


def sizes(result: RolloutPlan) -> list[tuple[str, int, int, int]]:
    return [(s.state.value, len(s.targets), s.max_targets, s.max_parallel) for s in result.stages]


def codes(issues: Sequence[Any]) -> set[str]:
    return {issue.code.value for issue in issues}


# --- stage sizes and states ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("regions", "fresh", "stages", "expected"),
    [
        pytest.param(
            EU_US_AP,
            (),
            [
                make_stage("canary", labels={"region": "eu"}, max_targets=1),
                make_stage(
                    "per region", expressions=NOT_EU, max_targets=2, max_parallel=2, spread_by="region"
                ),
                make_stage("rest", max_targets="100%", max_parallel="25%"),
            ],
            [("planned", 1, 1, 1), ("planned", 2, 2, 2), ("planned", 9, 9, 2)],
            id="canary-in-one-region-then-one-per-other-region-then-the-rest",
        ),
        pytest.param(
            {"eu": 6, "us": 6},
            (),
            [make_stage("canary", max_targets=1), make_stage("rest", max_targets="100%", max_parallel=3)],
            [("planned", 1, 1, 1), ("planned", 11, 11, 3)],
            id="hundred-percent-takes-all-remaining-after-canary",
        ),
        pytest.param(
            {"eu": 2},
            (),
            [make_stage("ten", max_targets="10%")],
            [("planned", 1, 1, 1)],
            id="ten-percent-of-2-is-1",
        ),
        pytest.param(
            {"eu": 5},
            (),
            [make_stage("half", max_targets="50%")],
            [("planned", 2, 2, 1)],
            id="fifty-percent-of-5-is-2",
        ),
        pytest.param(
            {"eu": 50},
            (),
            [make_stage("one", max_targets="1%")],
            [("planned", 1, 1, 1)],
            id="one-percent-of-50-is-1",
        ),
        pytest.param(
            {"eu": 10},
            (),
            [make_stage("third", max_targets="33%")],
            [("planned", 3, 3, 1)],
            id="33-percent-of-10-is-3",
        ),
        pytest.param(
            {"eu": 10},
            (),
            [make_stage("first", max_targets=4), make_stage("half of rest", max_targets="50%")],
            [("planned", 4, 4, 1), ("planned", 3, 3, 1)],
            id="percent-scales-against-what-earlier-stages-left",
        ),
        pytest.param(
            {"eu": 2, "us": 8},
            (),
            [make_stage("half of eu", labels={"region": "eu"}, max_targets="50%")],
            [("planned", 1, 1, 1)],
            id="percent-scales-against-matched-clusters-not-the-fleet",
        ),
        pytest.param(
            {"eu": 10},
            ("eu-1", "eu-2", "eu-3", "eu-4", "eu-5", "eu-6"),
            [make_stage("half", max_targets="50%")],
            [("planned", 4, 5, 1)],
            id="percent-base-counts-up-to-date-clusters-so-it-stays-stable",
        ),
        pytest.param(
            {"eu": 3},
            (),
            [make_stage("five", max_targets=5)],
            [("planned", 3, 5, 1)],
            id="int-above-available-takes-all",
        ),
        pytest.param(
            {"eu": 8},
            (),
            [make_stage("all", max_parallel="50%")],
            [("planned", 8, 8, 4)],
            id="max-parallel-percent-scales-against-targets",
        ),
        pytest.param(
            {"eu": 10},
            (),
            [make_stage("some", max_targets="30%", max_parallel="50%")],
            [("planned", 3, 3, 1)],
            id="max-parallel-50-percent-of-3-targets-is-1",
        ),
        pytest.param(
            {"eu": 3},
            (),
            [make_stage("all", max_parallel="10%")],
            [("planned", 3, 3, 1)],
            id="max-parallel-percent-is-at-least-1",
        ),
        pytest.param(
            {"eu": 4},
            (),
            [make_stage("mars", labels={"region": "mars"}), make_stage("rest")],
            [("skipped", 0, 0, 0), ("planned", 4, 4, 1)],
            id="selector-matching-nothing-is-skipped",
        ),
        pytest.param(
            {"eu": 4},
            (),
            [make_stage("all"), make_stage("eu again", labels={"region": "eu"})],
            [("planned", 4, 4, 1), ("skipped", 0, 0, 0)],
            id="stage-whose-clusters-earlier-stages-took-is-skipped",
        ),
        pytest.param(
            {"eu": 2, "us": 2},
            ("eu-1", "eu-2"),
            [make_stage("eu", labels={"region": "eu"}, max_targets=1), make_stage("rest")],
            [("done", 0, 1, 0), ("planned", 2, 4, 1)],
            id="stage-whose-clusters-are-up-to-date-is-done-and-takes-nothing",
        ),
        pytest.param(
            {"eu": 2, "us": 2, "ap": 2},
            (),
            [
                make_stage(
                    "eu and us", expressions=[{"key": "region", "operator": "In", "values": ["eu", "us"]}]
                ),
                make_stage("rest"),
            ],
            [("planned", 4, 4, 1), ("planned", 2, 2, 1)],
            id="match-expression-in",
        ),
        pytest.param(
            {"eu": 2, "us": 2},
            (),
            [make_stage("not eu", expressions=NOT_EU), make_stage("rest")],
            [("planned", 2, 2, 1), ("planned", 2, 2, 1)],
            id="match-expression-not-in",
        ),
        pytest.param(
            {"eu": 3},
            (),
            [
                make_stage("zoned", expressions=[{"key": "zone", "operator": "Exists"}]),
                make_stage("unzoned", expressions=[{"key": "zone", "operator": "DoesNotExist"}]),
            ],
            [("planned", 3, 3, 1), ("skipped", 0, 0, 0)],
            id="match-expression-exists-and-does-not-exist",
        ),
    ],
)
def test_stage_sizes_and_states(
    regions: dict[str, int],
    fresh: Sequence[str],
    stages: list[dict[str, Any]],
    expected: list[tuple[Any, ...]],
) -> None:
    clusters = regional_fleet(regions)
    result = plan(clusters, stale_apps(clusters, fresh=fresh), *stages, allow_partial=True)
    assert sizes(result) == expected


def test_skipped_stage_says_why() -> None:
    clusters = regional_fleet({"eu": 2})
    result = plan(
        clusters, stale_apps(clusters), make_stage("mars", labels={"region": "mars"}), make_stage("all")
    )
    assert "matches none of the 2 clusters" in result.stages[0].reason


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


# --- warnings and errors ---------------------------------------------------------------------


def _eu(count: int = 2) -> list[Cluster]:
    return regional_fleet({"eu": count})


@pytest.mark.parametrize(
    ("clusters", "apps", "stages", "options", "warnings", "errors"),
    [
        pytest.param(
            _eu(), stale_apps(_eu()), [make_stage("all")], {}, set(), set(), id="clean-plan-has-no-issues"
        ),
        pytest.param(
            _eu(),
            [make_app(cluster="eu-1", automated={"selfHeal": True}), make_app(cluster="eu-2")],
            [make_stage("all")],
            {},
            {"AutomatedSync"},
            set(),
            id="automated-sync-on-is-a-warning",
        ),
        pytest.param(
            _eu(),
            [make_app(cluster="eu-1", automated={"enabled": False}), make_app(cluster="eu-2")],
            [make_stage("all")],
            {},
            set(),
            set(),
            id="automated-sync-disabled-is-fine",
        ),
        pytest.param(
            _eu(),
            [make_app(cluster="eu-1"), make_app(cluster="eu-2", revision=OLD_REVISION)],
            [make_stage("all")],
            {},
            {"MixedRevisions"},
            set(),
            id="applications-at-different-revisions-are-reported",
        ),
        pytest.param(
            _eu(),
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
            _eu(),
            [*stale_apps(_eu()), make_app("lost", cluster="gone")],
            [make_stage("all")],
            {},
            set(),
            {"MissingClusterSecret"},
            id="out-of-date-application-without-cluster-secret-is-an-error",
        ),
        pytest.param(
            _eu(),
            [*stale_apps(_eu()), make_app("lost", cluster="gone")],
            [make_stage("all")],
            {"allow_partial": True},
            {"MissingClusterSecret"},
            set(),
            id="missing-cluster-secret-with-partial-rollout-is-a-warning",
        ),
        pytest.param(
            _eu(),
            [*stale_apps(_eu()), up_to_date("gone", name="lost")],
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
            _eu(4),
            stale_apps(_eu(4)),
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
            _eu(),
            stale_apps(_eu()),
            [make_stage("all")],
            {"appset": AppSetView(name="other")},
            set(),
            {"AppSetMismatch"},
            id="appset-of-another-name-is-an-error",
        ),
        pytest.param(
            _eu(),
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
            _eu(),
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
        clusters=_eu(),
        apps=stale_apps(_eu()),
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
    result = plan(_eu(), apps, make_stage("all"))
    assert result.revisions == ((NEW_REVISION,),)
    assert result.stages[0].targets == ("eu-1",)
    warning = next(w for w in result.warnings if w.code.value == "NotARelease")
    assert warning.subjects == ("myservice-eu-2",)
    assert f"health is Degraded at {OLD_REVISION}" in warning.message


def test_the_release_given_to_a_running_rollout_is_the_one_planned() -> None:
    """A step passes the Workflow's release: an Application Synced at it but still Progressing stays a
    target when no other Application names the release any more."""
    apps = [make_app(cluster="eu-1", sync="Synced", health="Progressing"), up_to_date("eu-2")]
    assert plan(_eu(), apps, make_stage("all")).stages[0].targets == ()
    given = plan_rollout(
        make_spec(make_stage("all")),
        ps_name="myservice",
        appset=make_app_set(),
        clusters=_eu(),
        apps=apps,
        release=[(NEW_REVISION,)],
    )
    assert given.revisions == ((NEW_REVISION,),)
    assert given.stages[0].targets == ("eu-1",)


def test_mixed_revisions_are_all_release_revisions() -> None:
    apps = [make_app(cluster="eu-1"), make_app(cluster="eu-2", revision=OLD_REVISION)]
    result = plan(_eu(), apps, make_stage("all"))
    # Finding 4: revisions travel as data, one tuple per Application's revision set.
    assert result.revisions == ((NEW_REVISION,), (OLD_REVISION,))
    assert f"{NEW_REVISION} (1: myservice-eu-1)" in result.warnings[0].message


# --- order and spreadBy ----------------------------------------------------------------------


def test_spread_by_takes_one_cluster_per_region() -> None:
    clusters = regional_fleet(EU_US_AP)
    result = plan(clusters, stale_apps(clusters), make_stage("one each", max_targets=3, spread_by="region"))
    regions = [t.split("-")[0] for t in result.stages[0].targets]
    assert sorted(regions) == ["ap", "eu", "us"]


def test_spread_by_keeps_the_hash_first_cluster_first() -> None:
    clusters = regional_fleet(EU_US_AP)
    plain = order_clusters("myservice", clusters)
    spread = order_clusters("myservice", clusters, "region")
    assert spread[0] == plain[0]
    assert sorted(c.name for c in spread) == sorted(c.name for c in plain)
    # Each round has one cluster of every region, and each region keeps its hash order.
    for start in range(0, 12, 3):
        assert len({c.labels["region"] for c in spread[start : start + 3]}) == 3
    for region in ("eu", "us", "ap"):
        assert [c for c in spread if c.labels["region"] == region] == [
            c for c in plain if c.labels["region"] == region
        ]


def test_spread_by_puts_unlabelled_clusters_last() -> None:
    clusters = [make_cluster(f"x-{i}") for i in range(3)] + regional_fleet({"eu": 2, "us": 2})
    spread = order_clusters("myservice", clusters, "region")
    assert [c.name for c in spread[-3:]] == [c.name for c in order_clusters("myservice", clusters[:3])]


def test_order_is_stable_and_differs_between_progressive_syncs() -> None:
    clusters = regional_fleet(EU_US_AP)
    first = [c.name for c in order_clusters("web", clusters)]
    assert first == [c.name for c in order_clusters("web", list(reversed(clusters)))]
    others = {tuple(c.name for c in order_clusters(f"svc-{i}", clusters)) for i in range(5)}
    assert len(others) == 5


# --- a rollout under way ---------------------------------------------------------------------


def _three_stages() -> list[dict[str, Any]]:
    return [
        make_stage("canary", labels={"region": "eu"}, max_targets=1),
        make_stage("per region", expressions=NOT_EU, max_targets=2, spread_by="region"),
        make_stage("rest", max_parallel="50%"),
    ]


def test_running_rollout_gets_the_plan_it_started_with() -> None:
    clusters = regional_fleet(EU_US_AP)
    at_start = plan(clusters, stale_apps(clusters), *_three_stages())
    canary = at_start.stages[0].targets
    # The canary is now updated; the rollout recorded it.
    now = plan(
        clusters,
        stale_apps(clusters, fresh=canary),
        *_three_stages(),
        progress=RolloutProgress(
            "r1", (StageProgress("canary", canary, completed=canary, phase=StagePhase.SUCCEEDED),)
        ),
    )
    assert now.stages[0].state is StageState.DONE
    assert now.stages[0].from_progress
    assert [s.targets for s in now.stages] == [s.targets for s in at_start.stages]
    assert sizes(now)[1:] == sizes(at_start)[1:]
    assert not now.errors


def test_recorded_targets_are_kept_even_when_the_fleet_changed() -> None:
    clusters = regional_fleet({"eu": 4})
    recorded = ("eu-3", "eu-1")
    result = plan(
        clusters,
        stale_apps(clusters, fresh=("eu-1",)),
        make_stage("two", max_targets=2),
        make_stage("rest"),
        progress=RolloutProgress("r1", (StageProgress("two", recorded, completed=("eu-1",)),)),
    )
    assert result.stages[0].targets == recorded
    assert result.stages[0].state is StageState.PLANNED
    assert "1 of 2 clusters updated" in result.stages[0].reason
    assert set(result.stages[1].targets) == {"eu-2", "eu-4"}


def test_failed_cluster_of_a_recorded_stage_is_not_taken_again() -> None:
    clusters = regional_fleet({"eu": 3})
    result = plan(
        clusters,
        stale_apps(clusters),
        make_stage("one", max_targets=1),
        make_stage("rest"),
        progress=RolloutProgress(
            "r1", (StageProgress("one", ("eu-2",), failed=("eu-2",), phase=StagePhase.FAILED),)
        ),
    )
    assert "eu-2" not in result.stages[1].targets
    assert "1 failed (eu-2)" in result.stages[0].reason


def test_recorded_skipped_stage_stays_skipped() -> None:
    clusters = regional_fleet({"eu": 2})
    result = plan(
        clusters,
        stale_apps(clusters),
        make_stage("first"),
        progress=RolloutProgress("r1", (StageProgress("first", phase=StagePhase.SKIPPED),)),
        allow_partial=True,
    )
    assert result.stages[0].state is StageState.SKIPPED
    assert result.stages[0].reason == "skipped by rollout r1"


def test_progress_of_a_stage_the_spec_no_longer_has_is_reported() -> None:
    clusters = regional_fleet({"eu": 2})
    result = plan(
        clusters,
        stale_apps(clusters),
        make_stage("all"),
        progress=RolloutProgress("r1", (StageProgress("old stage", ("eu-1",)),)),
    )
    assert codes(result.warnings) == {"UnknownProgressStage"}
    assert len(result.stages[0].targets) == 2


def test_a_cluster_that_turned_out_of_date_after_its_stages_were_selected_is_late_not_an_error() -> None:
    """Refresh lag (issue 12 finding 5): eu-2 turned OutOfSync after the eu stage was selected; only
    that stage would take it. A warning naming it, never an error that fails the next stage."""
    clusters = regional_fleet({"eu": 2, "us": 1})
    result = plan(
        clusters,
        stale_apps(clusters, fresh=("eu-1",)),
        make_stage("eu", labels={"region": "eu"}),
        make_stage("us", labels={"region": "us"}),
        progress=RolloutProgress(
            "r1", (StageProgress("eu", ("eu-1",), completed=("eu-1",), phase=StagePhase.SUCCEEDED),)
        ),
    )
    assert not result.errors, result.errors
    (late,) = [w for w in result.warnings if w.code.value == "LateClusters"]
    assert late.subjects == ("eu-2",) and "progressive-sync retry" in late.message
    assert result.stages[1].targets == ("us-1",)


def _long_name(index: int, rng: random.Random) -> str:
    """A cluster name of 253 random characters (the most Kubernetes allows)."""
    alphabet = string.ascii_lowercase + string.digits
    return f"eu-{index:04d}-" + "".join(rng.choice(alphabet) for _ in range(245))


def test_a_stage_of_many_long_names_keeps_its_clusters_from_later_stages() -> None:
    """Issue 29 point 8, issue 30: the eu stage ended with two tolerated failures among 1,400 names
    of 253 characters (its records hold them all, in three parts). The catch-all stage after it
    must not take those two again (nor count them against its own maxFailedClusters)."""
    rng = random.Random(29)
    eu = [make_cluster(_long_name(i, rng), region="eu") for i in range(1_400)]
    us = regional_fleet({"us": 3})
    failed = [eu[0].name, eu[1].name]
    stages = [make_stage("eu", labels={"region": "eu"}), make_stage("rest")]
    status = start_rollout(ProgressiveSyncStatus(), rollout_id="r1", stage_names=["eu", "rest"], now=T0)
    status = close_stage(status, stage="eu", phase=StagePhase.SUCCEEDED, message="2 tolerated", now=T0)
    outcomes = make_stage_outcomes(
        "eu",
        targets=[c.name for c in eu],
        completed=[c.name for c in eu[2:]],
        failed=dict.fromkeys(failed, "Degraded"),
    )
    apps = [make_app(f"app-{i}", cluster=c.name) for i, c in enumerate(eu[:2])]
    apps += [up_to_date(c.name, name=f"app-{i}") for i, c in enumerate(eu[2:], start=2)]
    apps += stale_apps(us)

    result = plan(eu + us, apps, *stages, progress=progress_from_status(status, {"eu": outcomes}))

    assert set(result.stages[1].targets) == {"us-1", "us-2", "us-3"}
    assert set(result.stages[0].targets) == {c.name for c in eu}
    assert result.stages[0].state is StageState.DONE
    assert "1398 of 1400 clusters updated" in result.stages[0].reason
    assert not result.errors, result.errors


def test_progress_from_status() -> None:
    """Phases from the status, clusters from the records; a stage without records took none."""
    status = ProgressiveSyncStatus.model_validate(
        {
            "rollout": {"id": "7f3c2a1"},
            "stages": [
                {"name": "canary", "phase": "Succeeded"},
                {"name": "rest", "phase": "Progressing"},
                {"name": "later"},
            ],
        }
    )
    outcomes = {
        "canary": make_stage_outcomes("canary", targets=["a"], completed=["a"]),
        "rest": make_stage_outcomes("rest", targets=["b", "c"], failed={"c": ""}),
    }
    progress = progress_from_status(status, outcomes)
    assert progress.rollout_id == "7f3c2a1"
    assert [s.is_selected for s in progress.stages] == [True, True, False]
    assert progress.stages[0].completed == ("a",)
    assert progress.stages[1].failed == ("c",)
    assert progress.stages[1].targets == ("b", "c")


# --- release id ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        pytest.param(
            (3, [("x",), ("y",)]), (3, [("y",), ("x",)]), True, id="release-id-ignores-revision-order"
        ),
        pytest.param((3, [("x",)]), (3, [("x",), ("x",)]), True, id="release-id-ignores-duplicates"),
        pytest.param((3, [("x",)]), (4, [("x",)]), False, id="release-id-changes-with-generation"),
        pytest.param((3, [("x",)]), (3, [("y",)]), False, id="release-id-changes-with-revisions"),
        pytest.param((3, [("x", "y")]), (3, [("y", "x")]), False, id="release-id-keeps-source-order"),
    ],
)
def test_release_id(
    a: tuple[int, list[tuple[str, ...]]], b: tuple[int, list[tuple[str, ...]]], same: bool
) -> None:
    assert (release_id(*a) == release_id(*b)) is same
    assert len(release_id(*a)) == 10
    assert all(ch in "0123456789abcdef" for ch in release_id(*a))


def test_plan_release_id_uses_its_revisions() -> None:
    result = plan(_eu(), stale_apps(_eu()), make_stage("all"))
    assert result.revisions == ((NEW_REVISION,),)
    assert result.release_id(2) == release_id(2, [(NEW_REVISION,)])
