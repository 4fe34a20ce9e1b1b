"""One truth for "this stage's selectors match this cluster" (orchestrator/planning/stage_match.py):
`StageMatcher.matching`, which the planner calls, agrees with `stage_matches` cluster by cluster for
cluster selectors, Application selectors and both. Pure.
"""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.api.models import StageTargets
from orchestrator.planning.stage_match import StageMatcher, stage_matches
from tests.support.builders import make_app, regional_fleet
from tests.support.planner_inputs import EU_US_AP

FLEET = {c.name: c for c in regional_fleet(EU_US_AP)}
# Applications: env from the zone ("a" zones staging), a second Application on us-2 labelled
# tier=canary, none at all on ap-4.
APPS = {
    name: [make_app(cluster=name, labels={"env": "staging" if c.labels["zone"].endswith("a") else "prod"})]
    for name, c in FLEET.items()
    if name != "ap-4"
}
APPS["us-2"].append(make_app("myservice-us-2-b", cluster="us-2", labels={"tier": "canary"}))


@pytest.mark.parametrize(
    "targets",
    [
        pytest.param({"clusters": {"selector": {}}}, id="every-cluster"),
        pytest.param({"clusters": {"selector": {"matchLabels": {"region": "eu"}}}}, id="cluster-labels"),
        pytest.param({"applications": {"selector": {}}}, id="every-cluster-with-an-application"),
        pytest.param(
            {"applications": {"selector": {"matchLabels": {"env": "staging"}}}}, id="application-labels"
        ),
        pytest.param(
            {"applications": {"selector": {"matchExpressions": [{"key": "tier", "operator": "Exists"}]}}},
            id="one-application-of-two",
        ),
        pytest.param(
            {
                "applications": {
                    "selector": {"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}
                }
            },
            id="does-not-exist-any-application",
        ),
        pytest.param(
            {
                "clusters": {
                    "selector": {
                        "matchExpressions": [{"key": "region", "operator": "NotIn", "values": ["eu"]}]
                    }
                },
                "applications": {
                    "selector": {"matchExpressions": [{"key": "env", "operator": "In", "values": ["prod"]}]}
                },
            },
            id="both",
        ),
    ],
)
def test_the_fleet_answer_is_the_per_cluster_answer(targets: dict[str, Any]) -> None:
    model = StageTargets.model_validate(targets)
    expected = {
        name
        for name, cluster in FLEET.items()
        if stage_matches(model, cluster.labels, [app.labels for app in APPS.get(name, ())])
    }
    assert StageMatcher(FLEET, APPS).matching(model) == expected
    assert expected, "each case matches something"
    if "applications" in targets:
        assert "ap-4" not in expected, "a cluster without Applications matches no Application selector"
