"""Stages by Application labels (`stages[].targets.applications.selector`,
orchestrator/planning/stage_match.py): which clusters a stage takes when its Applications' labels
decide, alone or together with its cluster selector, and what the plan says of the others. Pure:
the planner over builders' views, no API server.

The fleet: 12 clusters in regions eu, us and ap (`regional_fleet`), one out-of-date Application
each, labelled `env: staging` on eu-1 and us-1, `env: prod` elsewhere, and `tier: canary` on ap-1
(as an ApplicationSet template writes cluster labels onto its Applications for Argo CD RollingSync).
"""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.argocd.fleet import AppView
from orchestrator.planning.planner import RolloutPlan, StageState, plan_rollout
from tests.support.builders import make_app, make_app_set, make_spec, make_stage, regional_fleet
from tests.support.planner_inputs import EU_US_AP, codes

FLEET = regional_fleet(EU_US_AP)
ALL = {c.name for c in FLEET}
STAGING = {"eu-1", "us-1"}


def _labels(cluster: str) -> dict[str, str]:
    labels = {"env": "staging" if cluster in STAGING else "prod"}
    if cluster == "ap-1":
        labels["tier"] = "canary"
    return labels


APPS = [make_app(cluster=c.name, labels=_labels(c.name)) for c in FLEET]


def _plan(*stages: dict[str, Any], apps: list[AppView] = APPS, **spec: Any) -> RolloutPlan:
    return plan_rollout(
        make_spec(*stages, **spec),
        ps_name="myservice",
        appset=make_app_set(),
        clusters=FLEET,
        apps=apps,
    )


def _taken(result: RolloutPlan) -> list[set[str]]:
    return [set(stage.targets) for stage in result.stages]


def _expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    expression: dict[str, Any] = {"key": key, "operator": operator}
    if values:
        expression["values"] = list(values)
    return {"matchExpressions": [expression]}


@pytest.mark.parametrize(
    ("stages", "expected"),
    [
        pytest.param(
            [make_stage("staging", applications={"matchLabels": {"env": "staging"}}), make_stage("rest")],
            [STAGING, ALL - STAGING],
            id="application-selector-alone-takes-the-clusters-of-matching-applications",
        ),
        pytest.param(
            [
                make_stage("eu staging", region="eu", applications={"matchLabels": {"env": "staging"}}),
                make_stage("rest"),
            ],
            [{"eu-1"}, ALL - {"eu-1"}],
            id="and-with-the-cluster-selector",
        ),
        pytest.param(
            [
                make_stage("eu prod", region="eu", applications={"matchLabels": {"env": "prod"}}),
                make_stage("staging", applications={"matchLabels": {"env": "staging"}}),
                make_stage("rest"),
            ],
            [{"eu-2", "eu-3", "eu-4"}, STAGING, ALL - STAGING - {"eu-2", "eu-3", "eu-4"}],
            id="cluster-whose-applications-do-not-match-is-left-to-a-later-stage",
        ),
        pytest.param(
            [make_stage("staging", applications={"matchLabels": {"env": "staging"}}), make_stage("again")],
            [STAGING, ALL - STAGING],
            id="a-cluster-is-taken-once-by-the-first-stage-that-matches-it",
        ),
        pytest.param(
            [make_stage("in", applications=_expr("env", "In", "staging")), make_stage("rest")],
            [STAGING, ALL - STAGING],
            id="match-expressions-in",
        ),
        pytest.param(
            [make_stage("not in", applications=_expr("env", "NotIn", "staging")), make_stage("rest")],
            [ALL - STAGING, STAGING],
            id="match-expressions-not-in",
        ),
        pytest.param(
            [make_stage("exists", applications=_expr("tier", "Exists")), make_stage("rest")],
            [{"ap-1"}, ALL - {"ap-1"}],
            id="match-expressions-exists",
        ),
        pytest.param(
            [make_stage("no tier", applications=_expr("tier", "DoesNotExist")), make_stage("rest")],
            [ALL - {"ap-1"}, {"ap-1"}],
            id="match-expressions-does-not-exist",
        ),
        pytest.param(
            [make_stage("every application", applications={}), make_stage("rest")],
            [ALL, set()],
            id="empty-application-selector-takes-every-cluster-of-the-application-set",
        ),
    ],
)
def test_which_clusters_a_stage_takes_by_application_labels(
    stages: list[dict[str, Any]], expected: list[set[str]]
) -> None:
    result = _plan(*stages)
    assert _taken(result) == expected
    assert not result.errors and not result.uncovered


def test_one_matching_application_of_several_on_a_cluster_is_enough() -> None:
    apps = [*APPS, make_app("myservice-eu-2-extra", cluster="eu-2", labels={"env": "staging"})]
    result = _plan(
        make_stage("staging", applications={"matchLabels": {"env": "staging"}}), make_stage("rest"), apps=apps
    )
    assert _taken(result) == [STAGING | {"eu-2"}, ALL - STAGING - {"eu-2"}]
    assert result.stages[0].apps["eu-2"] == ("myservice-eu-2", "myservice-eu-2-extra"), (
        "the cluster moves whole"
    )


def test_an_application_of_another_application_set_does_not_count() -> None:
    stranger = make_app(
        "other-eu-2", cluster="eu-2", owner="other", owner_uid=None, labels={"env": "staging"}
    )
    result = _plan(
        make_stage("staging", applications={"matchLabels": {"env": "staging"}}),
        make_stage("rest"),
        apps=[*APPS, stranger],
    )
    assert _taken(result)[0] == STAGING


@pytest.mark.parametrize(
    ("stages", "state", "says"),
    [
        pytest.param(
            [make_stage("qa", applications={"matchLabels": {"env": "qa"}}), make_stage("rest")],
            StageState.SKIPPED,
            "its selector matches none of the 12 clusters",
            id="selector-matching-no-application-skips-the-stage",
        ),
        pytest.param(
            [
                make_stage("us staging", region="us", applications={"matchLabels": {"env": "staging"}}),
                make_stage("rest"),
            ],
            StageState.PLANNED,
            "takes 1 of 1 out-of-date clusters (1 available)",
            id="and-counts-only-clusters-matching-both",
        ),
    ],
)
def test_stage_state_and_reason(stages: list[dict[str, Any]], state: StageState, says: str) -> None:
    first = _plan(*stages).stages[0]
    assert first.state is state
    assert says in first.reason


def test_clusters_no_application_selector_matches_are_uncovered() -> None:
    result = _plan(make_stage("staging", applications={"matchLabels": {"env": "staging"}}))
    assert set(result.uncovered) == ALL - STAGING
    assert codes(result.errors) == {"UncoveredClusters"}
    assert "no stage selector matches" in result.errors[0].message


def test_percent_max_targets_scales_against_the_clusters_the_application_selector_matches() -> None:
    result = _plan(
        make_stage("prod half", applications={"matchLabels": {"env": "prod"}}, max_targets="50%"),
        make_stage("rest"),
    )
    prod = result.stages[0]
    assert (prod.matched, prod.available, len(prod.targets)) == (10, 10, 5)
    assert set(prod.targets) <= ALL - STAGING
