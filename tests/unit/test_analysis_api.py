"""The analysis block of the API: a stage's effective analysis and the rules across both blocks.

Pure: the models of `orchestrator.api.analysis` and the spec's validator; the CRD's CEL twins run
on a real API server in tests/integration/test_api_parity.py (tests/api/invalid/analysis-*.yaml).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from orchestrator.api.analysis import AnalysisSpec, AnalysisWhen, OnInconclusive, resolve_analysis
from orchestrator.api.models import ProgressiveSyncSpec
from orchestrator.planning.contract import make_contract, parse_contract
from orchestrator.planning.sizing import StageSize


def block(**fields: Any) -> AnalysisSpec:
    return AnalysisSpec.model_validate(fields)


def spec(
    *, analysis: dict[str, Any] | None = None, analysis_override: dict[str, Any] | None = None, **stage: Any
) -> dict[str, Any]:
    if analysis_override is not None:
        stage["analysis"] = analysis_override
    data: dict[str, Any] = {
        "appSetRef": {"name": "checkout"},
        "stages": [{"name": "canary", "targets": {"clusters": {"selector": {}}}, **stage}],
    }
    if analysis is not None:
        data["analysis"] = analysis
    return data


def test_no_block_no_analysis() -> None:
    assert resolve_analysis(None, None) is None


@pytest.mark.parametrize(
    ("default", "stage", "expected"),
    [
        pytest.param(
            {"templates": [{"name": "errors"}]},
            None,
            {
                "templates": ["errors"],
                "when": ["afterHealthy"],
                "perCluster": False,
                "onInconclusive": "Fail",
            },
            id="spec-default-alone-gets-the-built-in-defaults",
        ),
        pytest.param(
            {"templates": [{"name": "errors"}], "perCluster": True},
            {"templates": [{"name": "latency"}], "onInconclusive": "Approve"},
            {"templates": ["latency"], "perCluster": True, "onInconclusive": "Approve"},
            id="stage-fields-override-field-by-field",
        ),
        pytest.param(
            None,
            {"templates": [{"name": "errors"}], "when": ["duringBake", "afterHealthy"], "timeoutSeconds": 60},
            {"when": ["duringBake", "afterHealthy"], "timeoutSeconds": 60},
            id="stage-alone",
        ),
    ],
)
def test_resolve(
    default: dict[str, Any] | None, stage: dict[str, Any] | None, expected: dict[str, Any]
) -> None:
    resolved = resolve_analysis(
        block(**default) if default is not None else None, block(**stage) if stage is not None else None
    )
    assert resolved is not None
    wire = resolved.model_dump(mode="json", by_alias=True)
    for key, value in expected.items():
        if key == "templates":
            assert [t["name"] for t in wire["templates"]] == value
        else:
            assert wire[key] == value


def test_args_merge_by_name_stage_wins_new_ones_last() -> None:
    resolved = resolve_analysis(
        block(templates=[{"name": "t"}], args=[{"name": "a", "value": "1"}, {"name": "b", "value": "2"}]),
        block(args=[{"name": "c", "value": "3"}, {"name": "a", "value": "9"}]),
    )
    assert resolved is not None
    assert [(arg.name, arg.value) for arg in resolved.args] == [("a", "9"), ("b", "2"), ("c", "3")]
    assert resolved.label == "t"
    assert resolved.when == (AnalysisWhen.AFTER_HEALTHY,)
    assert resolved.on_inconclusive is OnInconclusive.FAIL


@pytest.mark.parametrize(
    ("data", "says"),
    [
        pytest.param(
            spec(analysis={"templates": [{"name": "t"}], "when": ["duringBake"]}),
            "duringBake but the stage has no bakeSeconds",
            id="during-bake-without-bake",
        ),
        pytest.param(
            spec(analysis={"perCluster": True}),
            "analysis has no templates",
            id="no-templates-anywhere",
        ),
        pytest.param(
            spec(
                analysis={
                    "templates": [{"name": "t"}],
                    "args": [{"name": "r", "valueFrom": {"clusterLabel": "x"}}],
                }
            ),
            "'r' take their value from one cluster",
            id="cluster-arg-on-a-stage-run",
        ),
        pytest.param(
            spec(analysis={"templates": [{"name": "t"}, {"name": "t"}]}),
            "template ('t', False) is listed at [0] and [1]",
            id="template-twice",
        ),
        pytest.param(
            spec(analysis={"templates": [{"name": "t"}], "args": [{"name": "a"}]}),
            "has neither of value and valueFrom",
            id="arg-without-value",
        ),
        pytest.param(
            spec(
                analysis={
                    "templates": [{"name": "t"}],
                    "args": [{"name": "a", "valueFrom": {"stageName": False}}],
                }
            ),
            "valueFrom.stageName is false",
            id="source-set-false",
        ),
        pytest.param(
            spec(analysis={"templates": [{"name": "t"}], "when": ["afterHealthy", "afterHealthy"]}),
            "is listed at [0] and [1]",
            id="when-twice",
        ),
    ],
)
def test_invalid(data: dict[str, Any], says: str) -> None:
    with pytest.raises(ValidationError) as caught:
        ProgressiveSyncSpec.model_validate(data)
    assert says in str(caught.value)


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(
            spec(analysis={"templates": [{"name": "t"}], "when": ["duringBake"]}, bakeSeconds=60),
            id="during-bake-with-bake",
        ),
        pytest.param(
            spec(
                analysis={
                    "templates": [{"name": "t"}],
                    "args": [{"name": "r", "valueFrom": {"clusterLabel": "x"}}],
                },
                analysis_override={"args": [{"name": "r", "value": "eu"}]},
            ),
            id="stage-gives-a-value-for-a-cluster-arg",
        ),
        pytest.param(
            spec(
                analysis={
                    "templates": [{"name": "t"}],
                    "perCluster": True,
                    "args": [{"name": "r", "valueFrom": {"clusterLabel": "x"}}],
                }
            ),
            id="cluster-arg-per-cluster",
        ),
    ],
)
def test_valid(data: dict[str, Any]) -> None:
    ProgressiveSyncSpec.model_validate(data)


def test_the_contract_carries_each_stage_effective_analysis_and_reads_it_back() -> None:
    ps_spec = ProgressiveSyncSpec.model_validate(
        spec(
            analysis={
                "templates": [{"name": "t", "clusterScope": True}],
                "args": [{"name": "a", "value": "1"}],
            },
            analysis_override={
                "perCluster": True,
                "args": [{"name": "c", "valueFrom": {"clusterName": True}}],
            },
        )
    )
    contract = make_contract(
        ps_spec,
        rollout_id="r1",
        release=(("abc",),),
        sizes={"canary": StageSize(targets=1, max_parallel=1)},
        batch_threshold=1000,
        per_batch=500,
    )
    text = contract.to_json()
    assert parse_contract(text) == contract
    wire = json.loads(text)["stages"][0]["analysis"]
    assert wire["templates"] == [{"name": "t", "clusterScope": True}]
    assert "timeoutSeconds" not in wire  # unset optionals stay out of the contract
    assert wire["perCluster"] is True
    assert [arg["name"] for arg in wire["args"]] == ["a", "c"]


def test_a_contract_without_analysis_reads_as_before() -> None:
    ps_spec = ProgressiveSyncSpec.model_validate(spec())
    contract = make_contract(
        ps_spec,
        rollout_id="r1",
        release=(("abc",),),
        sizes={"canary": StageSize(targets=1, max_parallel=1)},
        batch_threshold=1000,
        per_batch=500,
    )
    assert "analysis" not in contract.to_json()
