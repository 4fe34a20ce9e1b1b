"""The rollout planner's stages (`orchestrator.planning.planner`, DESIGN §3), one named case each:
each stage's size (maxTargets, maxParallel) and state, why a stage is skipped, and the order of its
clusters (spreadBy, stable per ProgressiveSync).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from orchestrator.planning.planner import (
    order_clusters,
)
from tests.support.builders import (
    make_cluster,
    make_stage,
    regional_fleet,
)
from tests.support.planner_inputs import (
    EU_US_AP,
    NOT_EU,
    plan,
    sizes,
    stale_apps,
)

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
