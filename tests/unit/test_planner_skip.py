"""Skipping a cluster (`progressivesync.io/skip`, `spec.skip`; orchestrator.planning.skip): which
clusters the plan holds back and why, what the stages take instead, and what a running rollout does
when a mark comes or goes. Pure: the planner over builders' views, no API server.
"""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.api.metadata import SKIP_ANNOTATION
from orchestrator.api.phases import StagePhase
from orchestrator.argocd.fleet import AppView, Cluster
from orchestrator.planning.planner import (
    RolloutPlan,
    RolloutProgress,
    StageProgress,
    StageState,
    plan_rollout,
)
from tests.support.builders import make_app, make_app_set, make_spec, make_stage, regional_fleet, up_to_date
from tests.support.planner_inputs import EU_US_AP, codes

MARKED = "eu-2"


def _apps(clusters: list[Cluster], **marked: dict[str, Any]) -> list[AppView]:
    """One out-of-date Application per cluster; `marked` gives some clusters' Applications more
    (keys with "_" for "-": eu_2={"annotations": ...})."""
    extra = {name.replace("_", "-"): kwargs for name, kwargs in marked.items()}
    return [make_app(cluster=c.name, **extra.get(c.name, {})) for c in clusters]


def _plan(
    apps: list[AppView], *stages: dict[str, Any], progress: RolloutProgress | None = None, **spec: Any
) -> RolloutPlan:
    return plan_rollout(
        make_spec(*(stages or (make_stage("all"),)), **spec),
        ps_name="myservice",
        appset=make_app_set(),
        clusters=regional_fleet(EU_US_AP),
        apps=apps,
        progress=progress,
    )


FLEET = regional_fleet(EU_US_AP)


@pytest.mark.parametrize(
    ("apps", "spec", "skipped"),
    [
        pytest.param(
            _apps(FLEET, eu_2={"annotations": {SKIP_ANNOTATION: "true"}}),
            {},
            {MARKED: f"Application myservice-eu-2 is annotated {SKIP_ANNOTATION}"},
            id="annotation-true-skips-its-cluster",
        ),
        pytest.param(
            _apps(FLEET, eu_2={"annotations": {SKIP_ANNOTATION: "INC-4411: disk pressure"}}),
            {},
            {MARKED: f"Application myservice-eu-2 is annotated {SKIP_ANNOTATION}: INC-4411: disk pressure"},
            id="annotation-value-is-the-reason",
        ),
        pytest.param(
            _apps(FLEET, eu_2={"annotations": {SKIP_ANNOTATION: ""}}),
            {},
            {MARKED: f"Application myservice-eu-2 is annotated {SKIP_ANNOTATION}"},
            id="empty-annotation-still-skips",
        ),
        pytest.param(
            _apps(FLEET, eu_2={"labels": {"hold": "yes"}}),
            {"skip": {"applications": {"selector": {"matchLabels": {"hold": "yes"}}}}},
            {MARKED: "Application myservice-eu-2 matches spec.skip.applications.selector"},
            id="application-selector-skips-its-cluster",
        ),
        pytest.param(
            _apps(FLEET),
            {"skip": {"clusters": {"selector": {"matchLabels": {"zone": "apa"}}}}},
            {
                "ap-2": "cluster ap-2 matches spec.skip.clusters.selector",
                "ap-4": "cluster ap-4 matches spec.skip.clusters.selector",
            },
            id="cluster-selector-skips-matching-secrets",
        ),
        pytest.param(
            _apps(FLEET, eu_2={"labels": {"hold": "no"}}),
            {"skip": {"applications": {"selector": {"matchLabels": {"hold": "yes"}}}}},
            {},
            id="selector-that-matches-nothing-skips-nothing",
        ),
        pytest.param(
            [
                up_to_date(c.name, annotations={SKIP_ANNOTATION: "true"})
                if c.name == MARKED
                else make_app(cluster=c.name)
                for c in FLEET
            ],
            {},
            {},
            id="up-to-date-cluster-has-nothing-to-skip",
        ),
    ],
)
def test_which_clusters_are_skipped_and_why(
    apps: list[AppView], spec: dict[str, Any], skipped: dict[str, str]
) -> None:
    result = _plan(apps, **spec)
    assert dict(result.skipped) == skipped
    targets = {t for stage in result.stages for t in stage.targets}
    assert not targets & set(skipped), "a skipped cluster is never a target"
    assert not result.uncovered and not result.errors, "a skipped cluster is not uncovered"
    assert ("SkippedClusters" in codes(result.warnings)) == bool(skipped)
    assert result.to_dict()["summary"]["skipped"] == [{"cluster": c, "reason": r} for c, r in skipped.items()]


@pytest.mark.parametrize(
    ("stages", "marked", "expected"),
    [
        pytest.param(
            [make_stage("canary", region="eu", max_targets=1), make_stage("rest")],
            (MARKED,),
            [("canary", StageState.PLANNED, 1, (MARKED,)), ("rest", StageState.PLANNED, 10, ())],
            id="first-stage-that-could-take-it-reports-it",
        ),
        pytest.param(
            # eu-2 and eu-4 are the clusters of zone "eua" (regional_fleet alternates the zones).
            [make_stage("eua", labels={"zone": "eua"}), make_stage("rest")],
            ("eu-2", "eu-4"),
            [("eua", StageState.SKIPPED, 0, ("eu-2", "eu-4")), ("rest", StageState.PLANNED, 10, ())],
            id="stage-whose-clusters-are-all-skipped-is-skipped",
        ),
    ],
)
def test_stages_report_their_skipped_clusters(
    stages: list[dict[str, Any]],
    marked: tuple[str, ...],
    expected: list[tuple[str, StageState, int, tuple[str, ...]]],
) -> None:
    apps = [
        make_app(cluster=c.name, annotations={SKIP_ANNOTATION: "hold"} if c.name in marked else None)
        for c in FLEET
    ]
    result = _plan(apps, *stages)
    assert [(s.name, s.state, len(s.targets), tuple(sorted(s.skipped))) for s in result.stages] == expected
    skipping = result.stages[0]
    assert "skipped (progressivesync.io/skip or spec.skip)" in skipping.reason
    first = skipping.to_dict()["skipped"][0]
    assert first["reason"] == f"Application myservice-{first['cluster']} is annotated {SKIP_ANNOTATION}: hold"


def test_canary_moves_to_the_next_cluster_when_the_first_is_skipped() -> None:
    stages = [make_stage("canary", max_targets=1), make_stage("rest")]
    unmarked = _plan(_apps(FLEET), *stages)
    canary = unmarked.stages[0].targets[0]
    marked = _plan(
        [
            make_app(cluster=c.name, annotations={SKIP_ANNOTATION: "true"} if c.name == canary else None)
            for c in FLEET
        ],
        *stages,
    )
    assert marked.stages[0].targets != (canary,) and len(marked.stages[0].targets) == 1
    assert marked.release_id(1) == unmarked.release_id(1), "a skip does not change the release"


@pytest.mark.parametrize(
    ("marked_now", "late", "skipped"),
    [
        pytest.param(
            False, (MARKED,), set(), id="mark-removed-after-its-stage-was-selected-is-a-late-cluster"
        ),
        pytest.param(True, (), {MARKED}, id="mark-still-there-is-neither-late-nor-uncovered"),
    ],
)
def test_running_rollout_and_a_mark_removed(
    marked_now: bool, late: tuple[str, ...], skipped: set[str]
) -> None:
    stages = [
        make_stage("eu", region="eu"),
        make_stage("rest", expressions=[{"key": "region", "operator": "NotIn", "values": ["eu"]}]),
    ]
    at_start = _plan(_apps(FLEET, eu_2={"annotations": {SKIP_ANNOTATION: "true"}}), *stages)
    eu_targets = at_start.stages[0].targets
    assert MARKED not in eu_targets
    progress = RolloutProgress(
        "r1", (StageProgress("eu", eu_targets, completed=eu_targets, phase=StagePhase.SUCCEEDED),)
    )
    now_apps = [
        up_to_date(c.name)
        if c.name in eu_targets
        else make_app(
            cluster=c.name,
            annotations={SKIP_ANNOTATION: "true"} if (c.name == MARKED and marked_now) else None,
        )
        for c in FLEET
    ]
    later = _plan(now_apps, *stages, progress=progress)
    assert set(later.skipped) == skipped
    late_issues = [w for w in later.warnings if w.code.value == "LateClusters"]
    assert tuple(s for w in late_issues for s in w.subjects) == late
    assert not later.errors and not later.uncovered
