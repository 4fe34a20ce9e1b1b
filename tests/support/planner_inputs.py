"""The planner's inputs and readers for the tests/unit/test_planner_*.py files: `plan` (a
ProgressiveSync spec of the given stages planned over a fleet), a fleet's Applications out of date
but for the `fresh` clusters, and the stage sizes and issue codes of a plan.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from orchestrator.argocd.fleet import AppSetView, AppView, Cluster
from orchestrator.planning.planner import (
    RolloutPlan,
    RolloutProgress,
    plan_rollout,
)
from tests.support.builders import (
    make_app,
    make_app_set,
    make_spec,
    regional_fleet,
    up_to_date,
)

EU_US_AP = {"eu": 4, "us": 4, "ap": 4}
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


def eu_clusters(count: int = 2) -> list[Cluster]:
    return regional_fleet({"eu": count})
