"""The rollout contract (orchestrator/planning/contract.py): made once from each stage's size, read
back by the steps as it was written, and refused with the field named when it is missing or wrong.
Pure: no cluster; the steps' exit 2 on a bad contract is in tests/integration/test_steps_*.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.planning.contract import ContractError, ends_rollout, make_contract, parse_contract
from orchestrator.planning.sizing import StageSize
from tests.support.builders import NEW_REVISION, make_ps_model, make_stage
from tests.support.builders import make_contract as make_test_contract

GOOD = {
    "version": 1,
    "rolloutId": "r1",
    "release": [[NEW_REVISION]],
    "stages": [
        {"name": "canary", "targets": 1, "maxParallel": 1, "batches": 0, "startSyncs": 1, "deadlineWaves": 1}
    ],
}


def with_(path: str, value: object) -> str:
    """GOOD with one field set (`stages.0.maxParallel`), as JSON."""
    data = json.loads(json.dumps(GOOD))
    *parents, last = path.split(".")
    holder = data
    for part in parents:
        holder = holder[int(part)] if part.isdigit() else holder[part]
    if value is None:
        del holder[last]
    else:
        holder[last] = value
    return json.dumps(data)


def test_the_builder_makes_each_stage_s_sizing_once_and_the_steps_read_it_back() -> None:
    ps = make_ps_model(stages=[make_stage("canary", max_targets=1), make_stage("rest", max_parallel="25%")])
    contract = make_contract(
        ps.spec,
        rollout_id="abc",
        release=[(NEW_REVISION,), ("0ld",)],
        sizes={"canary": StageSize(1, 1), "rest": StageSize(200, 50)},
        batch_threshold=50,
        per_batch=100,
    )
    rest = contract.stage("rest")
    assert rest is not None
    assert (rest.targets, rest.max_parallel, rest.batches, rest.start_syncs, rest.deadline_waves) == (
        200,
        50,
        2,
        50,
        4,
    )
    assert contract.release == (("0ld",), (NEW_REVISION,))  # normalized: sorted, distinct
    assert parse_contract(contract.to_json()) == contract
    assert "}}" not in contract.to_json()  # nothing Argo's {{...}} substitution could mistake


def test_a_contract_is_read_from_a_file_too(tmp_path: Path) -> None:
    path = tmp_path / "contract.json"
    path.write_text(json.dumps(GOOD))
    assert parse_contract(str(path)) == parse_contract(json.dumps(GOOD))


@pytest.mark.parametrize(
    ("text", "named"),
    [
        pytest.param(None, "no rollout contract: pass --contract", id="missing"),
        pytest.param("  ", "no rollout contract", id="blank"),
        pytest.param("{not json", "not JSON", id="not-json"),
        pytest.param("/nonexistent/contract.json", "neither JSON nor a readable file", id="no-such-file"),
        pytest.param("[]", "neither JSON nor a readable file", id="a-list-is-no-file-name"),
        pytest.param(
            with_("release", []), "contract field release: expected a non-empty list", id="empty-release"
        ),
        pytest.param(with_("release", [[""]]), "contract field release: ", id="blank-revision"),
        pytest.param(with_("release", "4f1c2e9"), "contract field release: ", id="a-bare-string-is-not-data"),
        pytest.param(with_("rolloutId", ""), "contract field rolloutId:", id="empty-rollout-id"),
        pytest.param(
            with_("rolloutId", None), "contract field rolloutId: Field required", id="no-rollout-id"
        ),
        pytest.param(with_("stages", []), "contract field stages:", id="no-stage"),
        pytest.param(
            with_("stages.0.maxParallel", 0), "contract field stages[0].maxParallel", id="parallel-zero"
        ),
        pytest.param(
            with_("stages.0.batches", 2), "batches (2) above maxParallel (1)", id="batches-above-parallel"
        ),
        pytest.param(with_("stages.0.extra", 1), "contract field stages[0].extra", id="unknown-field"),
        pytest.param(with_("version", 2), "version 2 is not 1", id="unknown-version"),
    ],
)
def test_a_bad_contract_is_refused_naming_the_field(text: str | None, named: str) -> None:
    with pytest.raises(ContractError) as refused:
        parse_contract(text)
    assert named in str(refused.value)


def test_stage_names_are_unique() -> None:
    with pytest.raises(ValueError, match="listed twice"):
        make_test_contract(["canary", "canary"])


def _selects_next(stages: list[dict[str, object]], sizes: dict[str, StageSize]) -> list[str | None]:
    ps = make_ps_model(stages=stages)
    contract = make_contract(
        ps.spec, rollout_id="r1", release=[(NEW_REVISION,)], sizes=sizes, batch_threshold=50, per_batch=100
    )
    return [stage.selects_next for stage in contract.stages]


@pytest.mark.parametrize(
    ("second", "first_size", "expected"),
    [
        pytest.param({}, 1, "rest", id="nothing-between-the-closing-step-selects-the-next"),
        pytest.param({"approval": "Manual"}, 1, None, id="a-gate-on-the-next-stage-it-selects-itself"),
        pytest.param({"bake": 30}, 1, None, id="a-bake-after-the-stage"),
        pytest.param({"bake": 30}, 0, "rest", id="an-empty-stage-does-not-bake"),
    ],
)
def test_selects_next_says_which_closing_step_also_selects_the_next_stage(
    second: dict[str, object], first_size: int, expected: str | None
) -> None:
    canary = make_stage("canary", max_targets=1, bake_seconds=second.get("bake"))  # type: ignore[arg-type]
    rest = make_stage("rest", approval=second.get("approval"))  # type: ignore[arg-type]
    sizes = {"canary": StageSize(first_size, 1), "rest": StageSize(3, 3)}
    assert _selects_next([canary, rest], sizes) == [expected, None]


def test_selects_next_names_only_the_stage_after_it() -> None:
    with pytest.raises(ContractError, match="selectsNext 'rest', which is not the stage after it"):
        parse_contract(with_("stages.0.selectsNext", "rest"))


@pytest.mark.parametrize(
    ("last", "spec", "expected"),
    [
        pytest.param({}, {}, [None, True], id="the-last-stage-s-record-is-the-last-step"),
        pytest.param({"bake_seconds": 30}, {}, [None, None], id="a-bake-after-the-last-stage"),
        pytest.param({}, {"groupBy": "region"}, [None, None], id="groups-end-on-their-own"),
    ],
)
def test_ends_rollout_marks_only_the_stage_whose_record_is_the_workflow_s_last_step(
    last: dict[str, object], spec: dict[str, object], expected: list[bool | None]
) -> None:
    stages = [make_stage("canary", max_targets=1), make_stage("rest", **last)]  # type: ignore[arg-type]
    ps = make_ps_model(stages=stages, **spec)
    assert ends_rollout(ps.spec) is bool(expected[-1])
    if spec:
        return  # with groups the contract's stages are "<group>/<stage>" (tests/unit/test_groups*.py)
    contract = make_contract(
        ps.spec,
        rollout_id="r1",
        release=[(NEW_REVISION,)],
        sizes={"canary": StageSize(1, 1), "rest": StageSize(3, 3)},
        batch_threshold=50,
        per_batch=100,
    )
    assert [stage.ends_rollout for stage in contract.stages] == expected
    assert parse_contract(contract.to_json()) == contract


def test_only_the_last_stage_ends_the_rollout() -> None:
    two = json.loads(GOOD_TWO)
    two["stages"][0]["endsRollout"] = True
    with pytest.raises(
        ContractError, match="stage\\(s\\) 'canary' endsRollout; only the last stage \\('rest'\\)"
    ):
        parse_contract(json.dumps(two))


GOOD_TWO = json.dumps(
    {
        **GOOD,
        "stages": [
            *GOOD["stages"],  # type: ignore[misc]
            {"name": "rest", "targets": 2, "maxParallel": 1, "endsRollout": True},
        ],
    }
)
