"""`spreadBy` with a `maxTargets` count above the number of values the label has among a stage's
candidates: the plan warns `SpreadValuesFewerThanTargets`, naming the stage, the label, its values
and what the stage takes; a count that fits, a percentage and a stage without spreadBy do not; over
generated fleets it warns exactly when the stage takes some value twice (Hypothesis)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.planning.planner import IssueCode
from tests.support.builders import make_stage, regional_fleet
from tests.support.planner_inputs import EU_US_AP, NOT_EU, plan, stale_apps

WARNING = IssueCode.SPREAD_VALUES_FEWER_THAN_TARGETS.value
PROPERTY_SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize(
    ("stage", "warns"),
    [
        pytest.param(
            make_stage("one per other region", expressions=NOT_EU, max_targets=3, spread_by="region"),
            True,
            id="three-targets-over-two-regions-warns",
        ),
        pytest.param(
            make_stage("one per other region", expressions=NOT_EU, max_targets=2, spread_by="region"),
            False,
            id="as-many-targets-as-regions",
        ),
        pytest.param(
            make_stage("one per region", max_targets=3, spread_by="region"),
            False,
            id="three-regions-three-targets",
        ),
        pytest.param(
            make_stage("a quarter", expressions=NOT_EU, max_targets="50%", spread_by="region"),
            False,
            id="a-percentage-is-a-share-not-a-spread",
        ),
        pytest.param(make_stage("three", expressions=NOT_EU, max_targets=3), False, id="no-spread-by"),
    ],
)
def test_a_count_above_the_spread_values_warns(stage: dict[str, Any], warns: bool) -> None:
    clusters = regional_fleet(EU_US_AP)
    result = plan(clusters, stale_apps(clusters), stage, allow_partial=True)
    found = [w for w in result.warnings if w.code.value == WARNING]
    assert bool(found) is warns


def test_the_warning_names_the_stage_the_label_its_values_and_what_the_stage_takes() -> None:
    clusters = regional_fleet(EU_US_AP)
    stage = make_stage("one per other region", expressions=NOT_EU, max_targets=3, spread_by="region")
    result = plan(clusters, stale_apps(clusters), stage, allow_partial=True)
    [warning] = [w for w in result.warnings if w.code.value == WARNING]
    assert "stage 'one per other region' spreads by 'region'" in warning.message
    assert "2 value(s) among the clusters it can take (ap, us)" in warning.message
    assert "maxTargets is 3: it will take 3 clusters" in warning.message
    assert "set maxTargets: 2 for one per region" in warning.message
    assert set(warning.subjects) == set(result.stages[0].targets)


def test_values_are_counted_among_the_out_of_date_clusters_only() -> None:
    # All of us is up to date: the stage can only take ap clusters, so 2 targets repeat ap.
    clusters = regional_fleet({"ap": 3, "us": 2})
    apps = stale_apps(clusters, fresh=["us-1", "us-2"])
    stage = make_stage("one per region", max_targets=2, spread_by="region")
    result = plan(clusters, apps, stage, allow_partial=True)
    [warning] = [w for w in result.warnings if w.code.value == WARNING]
    assert "1 value(s) among the clusters it can take (ap)" in warning.message
    assert "2 in ap" in warning.message


@PROPERTY_SETTINGS
@given(
    regions=st.dictionaries(st.sampled_from(("eu", "us", "ap", "sa")), st.integers(1, 4), min_size=1),
    max_targets=st.integers(1, 10),
)
def test_the_warning_comes_exactly_when_a_region_is_taken_twice(
    regions: dict[str, int], max_targets: int
) -> None:
    # Every cluster labelled and out of date: the stage takes a region twice iff it warns.
    clusters = regional_fleet(regions)
    stage = make_stage("spread", max_targets=max_targets, spread_by="region")
    result = plan(clusters, stale_apps(clusters), stage, allow_partial=True)
    region_of = {c.name: c.labels["region"] for c in clusters}
    taken = Counter(region_of[name] for name in result.stages[0].targets)
    warned = any(w.code.value == WARNING for w in result.warnings)
    assert warned == any(count > 1 for count in taken.values())
