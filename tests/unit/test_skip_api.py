"""`spec.skip` (orchestrator/api/models.py SkipSpec): what is accepted, and the error, naming the
field and the fix, for what is not. The API server's twin of each refusal is checked on a real one
by tests/integration/test_api_parity.py (tests/api/invalid/skip-*.yaml). Pure.
"""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.api.models import EMPTY_SKIP_SELECTOR
from orchestrator.api.validation import validate_object
from tests.support.builders import make_ps, make_spec, make_stage


def _manifest(skip: Any) -> dict[str, Any]:
    manifest = make_ps()
    manifest["spec"]["skip"] = skip
    return manifest


@pytest.mark.parametrize(
    "skip",
    [
        pytest.param({"clusters": {"selector": {"matchLabels": {"hold": "true"}}}}, id="clusters-by-label"),
        pytest.param(
            {"applications": {"selector": {"matchExpressions": [{"key": "hold", "operator": "Exists"}]}}},
            id="applications-by-expression",
        ),
        pytest.param(
            {
                "applications": {"selector": {"matchLabels": {"hold": "true"}}},
                "clusters": {"selector": {"matchLabels": {"maintenance": "true"}}},
            },
            id="both",
        ),
        pytest.param({}, id="empty-skip-skips-nothing"),
    ],
)
def test_valid_skip_is_accepted(skip: dict[str, Any]) -> None:
    assert validate_object(_manifest(skip)) == []
    spec = make_spec(make_stage("all"), skip=skip)
    assert spec.skip is not None
    assert spec.model_dump(by_alias=True, exclude_none=True)["skip"] == skip


@pytest.mark.parametrize(
    ("skip", "path", "says"),
    [
        pytest.param(
            {"clusters": {"selector": {}}},
            "spec.skip.clusters.selector",
            EMPTY_SKIP_SELECTOR,
            id="empty-cluster-selector",
        ),
        pytest.param(
            {"applications": {"selector": {"matchLabels": {}, "matchExpressions": []}}},
            "spec.skip.applications.selector",
            EMPTY_SKIP_SELECTOR,
            id="selector-with-empty-lists",
        ),
        pytest.param(
            {"applications": {"selector": {"matchExpressions": [{"key": "hold", "operator": "In"}]}}},
            "spec.skip.applications.selector.matchExpressions[0].values",
            "needs a non-empty values list",
            id="in-without-values",
        ),
        pytest.param(
            {"clusters": {"selector": {"matchLabels": {"bad key!": "x"}}}},
            "spec.skip.clusters.selector.matchLabels",
            "",
            id="invalid-label-key",
        ),
        pytest.param(
            {"clusters": {"labels": {"a": "b"}}}, "spec.skip.clusters", "selector", id="misspelt-selector"
        ),
        pytest.param(
            {"cluster": {"selector": {"matchLabels": {"a": "b"}}}}, "spec.skip", "clusters", id="unknown-key"
        ),
    ],
)
def test_invalid_skip_names_the_field_and_the_fix(skip: dict[str, Any], path: str, says: str) -> None:
    errors = validate_object(_manifest(skip))
    assert errors, "refused"
    assert any(e.path.startswith(path) and says in f"{e.problem} {e.fix}" for e in errors), [
        str(e) for e in errors
    ]
