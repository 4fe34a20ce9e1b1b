"""`spec.rollback` (orchestrator/api/rollback.py) and the rollout contract's rollback
(orchestrator/planning/contract.py, sizing in orchestrator/planning/sizing.py): parsing with errors
that name the field and the fix, the wire round trip, each stage's rollbackParallel, and a contract
without rollback reading exactly as before. Pure: no cluster, no clock.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.api.models import ProgressiveSyncSpec
from orchestrator.api.rollback import (
    RollbackScope,
    RollbackSpec,
    RollbackTrigger,
    describe_rollback,
    rollback_deadline_seconds,
)
from orchestrator.api.validation import validate_object
from orchestrator.planning.contract import ContractError, make_contract, parse_contract
from orchestrator.planning.sizing import StageSize, rollback_parallel
from tests.support.builders import NEW_REVISION, make_ps, make_spec, make_stage

ANALYSIS = {"templates": [{"name": "error-rate"}]}


def spec_with(rollback: dict[str, Any] | None, **fields: Any) -> ProgressiveSyncSpec:
    """One stage over every cluster, with this `rollback` (wire form; None: no rollback)."""
    extra = {"rollback": rollback} if rollback is not None else {}
    return make_spec(
        make_stage("canary", max_targets=1), make_stage("rest", max_parallel="25%"), **extra, **fields
    )


# --- parsing -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("wire", "expected"),
    [
        pytest.param(
            {"on": ["StageFailed"]},
            RollbackSpec(on=[RollbackTrigger.STAGE_FAILED]),
            id="only-on-takes-the-defaults",
        ),
        pytest.param(
            {
                "on": ["StageFailed", "DeadlineExceeded", "Cancelled"],
                "scope": "Reached",
                "maxParallel": "50%",
                "progressDeadlineSeconds": 300,
            },
            RollbackSpec(
                on=[
                    RollbackTrigger.STAGE_FAILED,
                    RollbackTrigger.DEADLINE_EXCEEDED,
                    RollbackTrigger.CANCELLED,
                ],
                scope=RollbackScope.REACHED,
                max_parallel="50%",
                progress_deadline_seconds=300,
            ),
            id="every-field",
        ),
        pytest.param(
            {"on": ["Cancelled"], "maxParallel": 3.0},
            RollbackSpec(on=[RollbackTrigger.CANCELLED], max_parallel=3),
            id="3.0-is-the-integer-3-as-the-api-server-reads-it",
        ),
    ],
)
def test_rollback_parses(wire: dict[str, Any], expected: RollbackSpec) -> None:
    spec = spec_with(wire)
    assert spec.rollback == expected
    assert spec.rollback.scope is expected.scope


def test_rollback_round_trips_and_is_absent_by_default() -> None:
    wire = {"on": ["AnalysisFailed", "StageFailed"], "scope": "Reached", "maxParallel": 2}
    spec = spec_with(wire, analysis=ANALYSIS)
    assert spec.to_api()["rollback"] == {**wire}  # unset optionals omitted, order of `on` kept
    assert ProgressiveSyncSpec.model_validate(spec.to_api()) == spec
    assert "rollback" not in spec_with(None).to_api()
    assert spec_with(None).rollback is None


@pytest.mark.parametrize(
    ("rollback", "fields", "error"),
    [
        pytest.param(
            {"on": ["StageFailed", "Cancelled", "StageFailed"]},
            {},
            "spec.rollback.on: StageFailed is listed at [0] and [2] (list each trigger once)",
            id="repeated-trigger",
        ),
        pytest.param(
            {"on": []},
            {},
            "spec.rollback.on: lists no trigger (list at least one of StageFailed, AnalysisFailed, "
            "DeadlineExceeded, Cancelled)",
            id="empty-on",
        ),
        pytest.param({}, {}, "spec.rollback.on: required field is missing (add on)", id="missing-on"),
        pytest.param(
            {True: ["StageFailed"]},
            {},
            "spec.rollback: the key on was read as the boolean true, as YAML 1.1 reads an unquoted on "
            '(quote it: "on": [StageFailed])',
            id="unquoted-on-read-as-true",
        ),
        pytest.param(
            {"on": ["Failed"]},
            {},
            'spec.rollback.on[0]: "Failed" is not allowed (use StageFailed, AnalysisFailed, DeadlineExceeded '
            "or Cancelled)",
            id="unknown-trigger",
        ),
        pytest.param(
            {"on": ["StageFailed"], "scope": "Everything"},
            {},
            'spec.rollback.scope: "Everything" is not allowed (use FailedStage or Reached)',
            id="unknown-scope",
        ),
        pytest.param(
            {"on": ["StageFailed"], "maxParallel": 0},
            {},
            "spec.rollback.maxParallel: 0 is below 1",
            id="max-parallel-zero",
        ),
        pytest.param(
            {"on": ["StageFailed"], "maxParallel": "150%"},
            {},
            'spec.rollback.maxParallel: "150%" is not a size',
            id="max-parallel-150-percent",
        ),
        pytest.param(
            {"on": ["StageFailed"], "progressDeadlineSeconds": 0},
            {},
            "spec.rollback.progressDeadlineSeconds: 0 is below the minimum 1 (use 1 or more)",
            id="deadline-zero",
        ),
        pytest.param(
            {"on": ["StageFailed"], "progressDeadlineSeconds": 8 * 24 * 3600},
            {},
            "spec.rollback.progressDeadlineSeconds: 691200 is above the maximum 604800 (use at most 604800)",
            id="deadline-above-a-week",
        ),
        pytest.param(
            {"on": ["StageFailed", "AnalysisFailed"]},
            {},
            "spec.rollback: AnalysisFailed can never start a rollback: no stage has analysis (add "
            "spec.analysis or a stage's analysis, or remove AnalysisFailed from spec.rollback.on)",
            id="analysis-failed-without-analysis",
        ),
        pytest.param(
            {"on": ["StageFailed"], "onFailure": True},
            {},
            "spec.rollback.onFailure: unknown field",
            id="unknown-field",
        ),
    ],
)
def test_a_bad_rollback_names_the_field_and_the_fix(
    rollback: dict[Any, Any], fields: dict[str, Any], error: str
) -> None:
    errors = [str(e) for e in validate_object(make_ps(rollback=rollback, **fields))]
    assert any(e.startswith(error) for e in errors), errors


@pytest.mark.parametrize(
    "fields",
    [
        pytest.param({"analysis": ANALYSIS}, id="spec-analysis"),
        pytest.param({"stages": [{**make_stage("canary"), "analysis": ANALYSIS}]}, id="a-stage-s-analysis"),
    ],
)
def test_analysis_failed_is_fine_with_analysis_anywhere(fields: dict[str, Any]) -> None:
    assert validate_object(make_ps(rollback={"on": ["AnalysisFailed"]}, **fields)) == []


@pytest.mark.parametrize(
    ("rollback", "spec_deadline", "expected"),
    [
        pytest.param({"on": ["StageFailed"]}, None, 600, id="default-spec-deadline"),
        pytest.param({"on": ["StageFailed"]}, 900, 900, id="the-spec-s-deadline"),
        pytest.param(
            {"on": ["StageFailed"], "progressDeadlineSeconds": 120}, 900, 120, id="its-own-deadline"
        ),
        pytest.param(None, 900, 900, id="no-rollback-the-spec-s"),
    ],
)
def test_rollback_deadline_seconds(
    rollback: dict[str, Any] | None, spec_deadline: int | None, expected: int
) -> None:
    fields = {"progressDeadlineSeconds": spec_deadline} if spec_deadline else {}
    assert rollback_deadline_seconds(spec_with(rollback, **fields)) == expected


@pytest.mark.parametrize(
    ("wire", "parallel", "expected"),
    [
        pytest.param(
            {"on": ["StageFailed", "AnalysisFailed"], "scope": "Reached"},
            "2 at a time per stage",
            "rollback: on StageFailed, AnalysisFailed; scope Reached (later stages first); "
            "2 at a time per stage",
            id="reached",
        ),
        pytest.param(
            {"on": ["Cancelled"]},
            "each stage's maxParallel at a time",
            "rollback: on Cancelled; scope FailedStage (the failed stage's clusters); "
            "each stage's maxParallel at a time",
            id="failed-stage",
        ),
    ],
)
def test_describe_rollback(wire: dict[str, Any], parallel: str, expected: str) -> None:
    assert describe_rollback(RollbackSpec.model_validate(wire), parallel) == expected


# --- each stage's rollbackParallel -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("max_parallel", "size", "expected"),
    [
        pytest.param(None, StageSize(9, 2), 2, id="default-the-stage-s-max-parallel"),
        pytest.param(None, StageSize(0, 1), 1, id="default-on-a-stage-planned-empty"),
        pytest.param(3, StageSize(9, 2), 3, id="int-as-written"),
        pytest.param(5, StageSize(2, 1), 5, id="int-above-the-targets-as-written-like-max-parallel"),
        pytest.param("50%", StageSize(9, 1), 4, id="percent-rounds-down"),
        pytest.param("10%", StageSize(5, 1), 1, id="percent-never-below-1"),
        pytest.param("100%", StageSize(0, 1), 1, id="percent-of-no-targets-is-1"),
        pytest.param("100%", StageSize(200, 50), 200, id="percent-100-is-every-target"),
    ],
)
def test_rollback_parallel(max_parallel: int | str | None, size: StageSize, expected: int) -> None:
    assert rollback_parallel(max_parallel, size) == expected


@given(
    percent=st.integers(min_value=1, max_value=100),
    targets=st.integers(min_value=0, max_value=10_000),
    stage_parallel=st.integers(min_value=1, max_value=10_000),
)
def test_a_percent_rollback_parallel_is_between_1_and_the_targets(
    percent: int, targets: int, stage_parallel: int
) -> None:
    resolved = rollback_parallel(f"{percent}%", StageSize(targets, stage_parallel))
    assert 1 <= resolved <= max(1, targets)


@given(
    value=st.one_of(st.none(), st.integers(min_value=1, max_value=500)),
    targets=st.integers(min_value=0, max_value=10_000),
    stage_parallel=st.integers(min_value=1, max_value=10_000),
)
def test_rollback_parallel_is_at_least_1(value: int | None, targets: int, stage_parallel: int) -> None:
    assert rollback_parallel(value, StageSize(targets, stage_parallel)) >= 1


# --- the contract --------------------------------------------------------------------------------


def contract_of(spec: ProgressiveSyncSpec, sizes: dict[str, StageSize] | None = None) -> Any:
    return make_contract(
        spec,
        rollout_id="abc",
        release=[(NEW_REVISION,)],
        sizes=sizes or {"canary": StageSize(1, 1), "rest": StageSize(11, 2)},
        batch_threshold=50,
        per_batch=100,
    )


@pytest.mark.parametrize(
    ("rollback", "expected_rollback", "expected_parallel"),
    [
        pytest.param(
            {"on": ["StageFailed"]},
            {"on": ["StageFailed"], "scope": "FailedStage", "progressDeadlineSeconds": 600},
            [1, 2],
            id="defaults-each-stage-s-max-parallel",
        ),
        pytest.param(
            {
                "on": ["StageFailed", "Cancelled"],
                "scope": "Reached",
                "maxParallel": "50%",
                "progressDeadlineSeconds": 90,
            },
            {"on": ["StageFailed", "Cancelled"], "scope": "Reached", "progressDeadlineSeconds": 90},
            [1, 5],
            id="percent-of-each-stage-s-targets",
        ),
        pytest.param(
            {"on": ["DeadlineExceeded"], "maxParallel": 4},
            {"on": ["DeadlineExceeded"], "scope": "FailedStage", "progressDeadlineSeconds": 600},
            [4, 4],
            id="int-as-written",
        ),
    ],
)
def test_the_contract_carries_the_rollback(
    rollback: dict[str, Any], expected_rollback: dict[str, Any], expected_parallel: list[int]
) -> None:
    contract = contract_of(spec_with(rollback))
    data = json.loads(contract.to_json())
    assert data["rollback"] == expected_rollback
    assert [stage["rollbackParallel"] for stage in data["stages"]] == expected_parallel
    assert parse_contract(contract.to_json()) == contract
    assert contract.rollback is not None and contract.rollback.on[0] is RollbackTrigger(rollback["on"][0])


def test_a_contract_without_rollback_reads_exactly_as_before() -> None:
    contract = contract_of(spec_with(None))
    assert contract.rollback is None
    assert all(stage.rollback_parallel is None for stage in contract.stages)
    text = contract.to_json()
    assert "rollback" not in text
    assert text == contract_of(spec_with(None)).to_json()
    assert json.loads(text)["stages"][1] == {
        "name": "rest",
        "targets": 11,
        "maxParallel": 2,
        "batches": 0,
        "startSyncs": 2,
        "deadlineWaves": 6,
        "endsRollout": True,
    }


BASE = {
    "version": 1,
    "rolloutId": "r1",
    "release": [[NEW_REVISION]],
    "stages": [{"name": "canary", "targets": 1, "maxParallel": 1, "rollbackParallel": 1}],
    "rollback": {"on": ["StageFailed"], "scope": "FailedStage", "progressDeadlineSeconds": 600},
}


def contract_text(**changes: Any) -> str:
    data = json.loads(json.dumps(BASE))
    for key, value in changes.items():
        if key == "stage":
            data["stages"][0].update(value)
            data["stages"][0] = {k: v for k, v in data["stages"][0].items() if v is not None}
        elif value is None:
            del data[key]
        else:
            data[key] = value
    return json.dumps(data)


@pytest.mark.parametrize(
    ("text", "named"),
    [
        pytest.param(
            contract_text(rollback={"on": [], "progressDeadlineSeconds": 1}), "rollback.on", id="empty-on"
        ),
        pytest.param(
            contract_text(rollback={"on": ["Cancelled", "Cancelled"], "progressDeadlineSeconds": 1}),
            "trigger(s) Cancelled listed twice",
            id="repeated-trigger",
        ),
        pytest.param(
            contract_text(rollback={"on": ["Nope"], "progressDeadlineSeconds": 1}),
            "rollback.on[0]",
            id="unknown",
        ),
        pytest.param(
            contract_text(rollback={"on": ["Cancelled"]}),
            "rollback.progressDeadlineSeconds",
            id="no-deadline",
        ),
        pytest.param(
            contract_text(stage={"rollbackParallel": 0}), "stages[0].rollbackParallel", id="parallel-0"
        ),
        pytest.param(
            contract_text(stage={"rollbackParallel": None}), "have no rollbackParallel", id="rollback-unsized"
        ),
        pytest.param(
            contract_text(rollback=None), "but there is no rollback", id="parallel-without-rollback"
        ),
    ],
)
def test_a_bad_rollback_contract_is_refused_naming_the_field(text: str, named: str) -> None:
    with pytest.raises(ContractError, match=r"contract field") as caught:
        parse_contract(text)
    assert named in str(caught.value)


def test_the_good_rollback_contract_reads() -> None:
    contract = parse_contract(json.dumps(BASE))
    assert contract.rollback is not None
    assert contract.rollback.triggered_by(RollbackTrigger.STAGE_FAILED)
    assert not contract.rollback.triggered_by(RollbackTrigger.CANCELLED)
    assert contract.stages[0].rollback_parallel == 1
