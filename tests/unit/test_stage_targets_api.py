"""`stages[].targets` (orchestrator/api/selectors.py StageTargets): a cluster selector, an
Application selector or both are accepted; the error for what is not names the field and the fix.
The API server's twin of each refusal is checked on a real one by
tests/integration/test_api_parity.py (tests/api/invalid/targets-*.yaml). Pure.
"""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.api.selectors import NO_STAGE_SELECTOR
from orchestrator.api.validation import validate_object
from tests.support.builders import make_ps, make_spec


def _manifest(targets: Any) -> dict[str, Any]:
    return make_ps(stages=[{"name": "canary", "targets": targets}])


@pytest.mark.parametrize(
    "targets",
    [
        pytest.param({"clusters": {"selector": {"matchLabels": {"region": "eu"}}}}, id="clusters-only"),
        pytest.param(
            {"applications": {"selector": {"matchLabels": {"env": "staging"}}}}, id="applications-only"
        ),
        pytest.param(
            {
                "clusters": {"selector": {"matchLabels": {"region": "eu"}}},
                "applications": {
                    "selector": {
                        "matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["prod"]}]
                    }
                },
            },
            id="both",
        ),
        pytest.param(
            {"applications": {"selector": {}}}, id="empty-application-selector-selects-every-cluster"
        ),
    ],
)
def test_valid_targets_are_accepted(targets: dict[str, Any]) -> None:
    assert validate_object(_manifest(targets)) == []
    spec = make_spec({"name": "canary", "targets": targets})
    assert spec.stages[0].model_dump(by_alias=True, exclude_none=True)["targets"] == targets


@pytest.mark.parametrize(
    ("targets", "path", "says"),
    [
        pytest.param({}, "spec.stages[0].targets", NO_STAGE_SELECTOR, id="no-selector-at-all"),
        pytest.param(
            {"applications": {"selector": {"matchExpressions": [{"key": "env", "operator": "In"}]}}},
            "spec.stages[0].targets.applications.selector.matchExpressions[0].values",
            "needs a non-empty values list (add values, or use Exists)",
            id="in-without-values",
        ),
        pytest.param(
            {
                "applications": {
                    "selector": {"matchExpressions": [{"key": "env", "operator": "Exists", "values": ["a"]}]}
                }
            },
            "spec.stages[0].targets.applications.selector.matchExpressions[0].values",
            "takes no values (remove values, or use In/NotIn)",
            id="exists-with-values",
        ),
        pytest.param(
            {"applications": {"selector": {"matchExpressions": [{"key": "env", "operator": "Equals"}]}}},
            "spec.stages[0].targets.applications.selector.matchExpressions[0].operator",
            "In",
            id="unknown-operator",
        ),
        pytest.param(
            {"applications": {"selector": {"matchLabels": {"bad key!": "x"}}}},
            "spec.stages[0].targets.applications.selector.matchLabels",
            "",
            id="invalid-label-key",
        ),
        pytest.param(
            {"applications": {"matchLabels": {"env": "staging"}}},
            "spec.stages[0].targets.applications",
            "selector",
            id="selector-level-missing",
        ),
        pytest.param(
            {"application": {"selector": {"matchLabels": {"env": "staging"}}}},
            "spec.stages[0].targets",
            "applications",
            id="misspelt-applications",
        ),
    ],
)
def test_invalid_targets_name_the_field_and_the_fix(targets: dict[str, Any], path: str, says: str) -> None:
    errors = validate_object(_manifest(targets))
    assert errors, "refused"
    assert any(e.path.startswith(path) and says in f"{e.problem} {e.fix}" for e in errors), [
        str(e) for e in errors
    ]
