"""The API models' pure helpers and rules: size resolution, selector semantics, defaults, validators."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from orchestrator.api.models import (
    LabelSelector,
    ProgressiveSync,
    ProgressiveSyncSpec,
    Stage,
)


def make_stage(name: str = "canary", **fields: Any) -> dict[str, Any]:
    return {"name": name, "targets": {"clusters": {"selector": {}}}, **fields}


def make_spec(*stages: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"appSetRef": {"name": "checkout"}, "stages": list(stages) or [make_stage()], **fields}


# --- IntOrPercent (resolving it: tests/unit/test_sizing.py) ---------------------------------


@pytest.mark.parametrize(
    ("value", "parsed"),
    [
        pytest.param(5, 5, id="int"),
        pytest.param("5%", "5%", id="percent"),
        pytest.param("100%", "100%", id="100pct"),
        pytest.param(2.0, 2, id="integral-float-is-an-int-like-on-the-server"),
    ],
)
def test_sizes_accepted(value: Any, parsed: int | str) -> None:
    assert Stage.model_validate(make_stage(maxTargets=value)).max_targets == parsed


@pytest.mark.parametrize(
    ("value", "says"),
    [
        pytest.param(0, "0 is below 1", id="zero"),
        pytest.param(-1, "-1 is below 1", id="negative"),
        pytest.param("0%", '"0%" is not a size', id="0pct"),
        pytest.param("101%", '"101%" is not a size', id="101pct"),
        pytest.param("5", '"5" is a number in quotes (write 5 without quotes', id="number-in-quotes"),
        pytest.param("abc", '"abc" is not a size', id="abc"),
        pytest.param(True, "bool True is not a size", id="bool"),
        pytest.param(1.5, "float 1.5 is not a size", id="fraction"),
    ],
)
def test_sizes_rejected_with_a_message(value: Any, says: str) -> None:
    with pytest.raises(ValidationError) as caught:
        Stage.model_validate(make_stage(maxTargets=value))
    (error,) = caught.value.errors()
    assert error["loc"] == ("maxTargets",)
    assert says in error["msg"]


# --- label selectors -------------------------------------------------------------------------

EU = {"region": "eu-west-1", "env": "prod"}
US = {"region": "us-east-1", "env": "prod"}
BARE: dict[str, str] = {}


@pytest.mark.parametrize(
    ("selector", "labels", "matches"),
    [
        pytest.param({}, EU, True, id="empty-selector-matches-all"),
        pytest.param({}, BARE, True, id="empty-selector-matches-unlabelled"),
        pytest.param({"matchLabels": {"region": "eu-west-1"}}, EU, True, id="matchLabels-equal"),
        pytest.param({"matchLabels": {"region": "eu-west-1"}}, US, False, id="matchLabels-differs"),
        pytest.param({"matchLabels": {"region": "eu-west-1"}}, BARE, False, id="matchLabels-missing-key"),
        pytest.param(
            {"matchExpressions": [{"key": "region", "operator": "In", "values": ["eu-west-1", "x"]}]},
            EU,
            True,
            id="In-value-listed",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "region", "operator": "In", "values": ["x"]}]},
            EU,
            False,
            id="In-value-not-listed",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "region", "operator": "In", "values": ["x"]}]},
            BARE,
            False,
            id="In-missing-key",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "region", "operator": "NotIn", "values": ["eu-west-1"]}]},
            EU,
            False,
            id="NotIn-value-listed",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "region", "operator": "NotIn", "values": ["eu-west-1"]}]},
            US,
            True,
            id="NotIn-other-value",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "region", "operator": "NotIn", "values": ["eu-west-1"]}]},
            BARE,
            True,
            id="NotIn-matches-missing-key",
        ),
        pytest.param({"matchExpressions": [{"key": "region", "operator": "Exists"}]}, EU, True, id="Exists"),
        pytest.param(
            {"matchExpressions": [{"key": "region", "operator": "Exists"}]}, BARE, False, id="Exists-missing"
        ),
        pytest.param(
            {"matchExpressions": [{"key": "region", "operator": "DoesNotExist"}]},
            EU,
            False,
            id="DoesNotExist-present",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "region", "operator": "DoesNotExist"}]},
            BARE,
            True,
            id="DoesNotExist-missing",
        ),
        pytest.param(
            {
                "matchLabels": {"env": "prod"},
                "matchExpressions": [{"key": "region", "operator": "NotIn", "values": ["eu-west-1"]}],
            },
            US,
            True,
            id="labels-and-expressions-all-hold",
        ),
        pytest.param(
            {
                "matchLabels": {"env": "prod"},
                "matchExpressions": [{"key": "region", "operator": "NotIn", "values": ["eu-west-1"]}],
            },
            EU,
            False,
            id="labels-hold-expression-fails",
        ),
    ],
)
def test_label_selector_semantics(selector: dict[str, Any], labels: dict[str, str], matches: bool) -> None:
    assert LabelSelector.model_validate(selector).matches(labels) is matches


# --- rules and defaults ----------------------------------------------------------------------


def test_minimal_object_gets_the_documented_defaults() -> None:
    obj = ProgressiveSync.model_validate(
        {"apiVersion": "progressivesync.io/v1alpha1", "kind": "ProgressiveSync", "metadata": {"name": "x"}}
        | {"spec": make_spec()}
    )
    spec = obj.to_api()["spec"]
    assert spec["stages"][0] == {
        "name": "canary",
        "targets": {"clusters": {"selector": {}}},
        "maxTargets": "100%",
        "maxParallel": 1,
        "approval": "Automatic",
    }
    assert spec["progressDeadlineSeconds"] == 600
    assert spec["failurePolicy"] == {"maxFailedClusters": 0}
    assert spec["syncOptions"] == {"prune": False}
    assert spec["allowPartialRollout"] is False
    assert spec["paused"] is False


def test_null_means_absent_like_on_the_api_server() -> None:
    spec = ProgressiveSyncSpec.model_validate(make_spec(make_stage(maxTargets=None, bakeSeconds=None)))
    assert spec.stages[0].max_targets == "100%"
    assert spec.stages[0].bake_seconds is None


def test_duplicate_stage_names_name_both_stages() -> None:
    with pytest.raises(ValidationError) as caught:
        ProgressiveSyncSpec.model_validate(make_spec(make_stage("a"), make_stage("b"), make_stage("a")))
    (error,) = caught.value.errors()
    assert error["loc"] == ("stages",)
    assert "stages[0] and stages[2]" in error["msg"]


@pytest.mark.parametrize(
    ("max_targets", "max_parallel", "ok"),
    [
        pytest.param(3, 3, True, id="equal"),
        pytest.param(2, 3, False, id="parallel-above-targets"),
        pytest.param("10%", 50, True, id="percentage-targets-not-compared"),
        pytest.param(5, "100%", True, id="percentage-parallel-not-compared"),
    ],
)
def test_max_parallel_not_above_integer_max_targets(max_targets: Any, max_parallel: Any, ok: bool) -> None:
    stage = make_stage(maxTargets=max_targets, maxParallel=max_parallel)
    if ok:
        Stage.model_validate(stage)
        return
    with pytest.raises(ValidationError) as caught:
        Stage.model_validate(stage)
    assert caught.value.errors()[0]["loc"] == ("maxParallel",)


@pytest.mark.parametrize(
    ("requirement", "ok"),
    [
        pytest.param({"key": "a", "operator": "In", "values": ["x"]}, True, id="In-with-values"),
        pytest.param({"key": "a", "operator": "In"}, False, id="In-without-values"),
        pytest.param({"key": "a", "operator": "NotIn", "values": []}, False, id="NotIn-empty-values"),
        pytest.param({"key": "a", "operator": "Exists"}, True, id="Exists-without-values"),
        pytest.param({"key": "a", "operator": "Exists", "values": []}, True, id="Exists-empty-values"),
        pytest.param(
            {"key": "a", "operator": "DoesNotExist", "values": ["x"]}, False, id="DoesNotExist-values"
        ),
    ],
)
def test_values_fit_the_operator(requirement: dict[str, Any], ok: bool) -> None:
    selector = {"matchExpressions": [requirement]}
    if ok:
        LabelSelector.model_validate(selector)
        return
    with pytest.raises(ValidationError) as caught:
        LabelSelector.model_validate(selector)
    assert caught.value.errors()[0]["loc"] == ("matchExpressions", 0, "values")
