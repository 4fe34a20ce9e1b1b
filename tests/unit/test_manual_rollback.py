"""`progressive-sync rollback`'s pure parts: which clusters it restores (`manual_targets`), when it
refuses (`decide_manual_rollback`), the rollout contract it builds for the `rollback` step
(`manual_contract`), and how its end is recorded (`rollback_end`, shared with `finalize`)."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.api.models import RollbackStatus, RolloutPhase
from orchestrator.api.phases import StagePhase
from orchestrator.api.reasons import Reason
from orchestrator.api.rollback import RollbackTrigger
from orchestrator.api.stage_records import (
    ClusterRecord,
    ClusterRollback,
    ClusterState,
    RollbackState,
    StageOutcomes,
)
from orchestrator.ops import decisions as ops
from orchestrator.ops import view as ops_view
from orchestrator.planning.rollback import (
    FAILED_STAGE_SCOPE,
    MANUAL,
    REACHED_SCOPE,
    StageView,
    manual_targets,
    rollback_end,
)
from steps.manual_rollback import manual_contract
from tests.support.builders import at, make_ps, make_ps_model, make_stage


def outcomes(stage: str, records: dict[str, ClusterRecord]) -> StageOutcomes:
    return StageOutcomes(stage=stage, targets=tuple(records), clusters=records)


DONE = ClusterRecord(state=ClusterState.COMPLETED)
FAILED = ClusterRecord(state=ClusterState.FAILED, reason="Degraded")


def rolled(state: RollbackState, reason: str = "") -> ClusterRecord:
    return DONE.model_copy(update={"rollback": ClusterRollback(state=state, reason=reason)})


RECORDS = {
    0: outcomes("canary", {"c1": DONE}),
    1: outcomes("eu", {"e1": DONE, "e2": DONE}),
    2: outcomes("rest", {"r1": DONE, "r2": FAILED}),
}
S, F, P, K = StagePhase.SUCCEEDED, StagePhase.FAILED, StagePhase.PENDING, StagePhase.SKIPPED


def views(*phases: StagePhase) -> list[StageView]:
    return [StageView(name, phase) for name, phase in zip(("canary", "eu", "rest"), phases, strict=False)]


# --- which clusters ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("phases", "scope", "records", "stages", "clusters"),
    [
        pytest.param(
            (S, S, S), FAILED_STAGE_SCOPE, RECORDS, (2,), {2: ("r1", "r2")}, id="succeeded-last-stage"
        ),
        pytest.param(
            (S, S, S),
            REACHED_SCOPE,
            RECORDS,
            (2, 1, 0),
            {2: ("r1", "r2"), 1: ("e1", "e2"), 0: ("c1",)},
            id="succeeded-reached-later-first",
        ),
        pytest.param((S, F, P), FAILED_STAGE_SCOPE, RECORDS, (1,), {1: ("e1", "e2")}, id="the-failed-stage"),
        pytest.param(
            (S, F, P),
            REACHED_SCOPE,
            RECORDS,
            (1, 0),
            {1: ("e1", "e2"), 0: ("c1",)},
            id="reached-up-to-failed",
        ),
        pytest.param(
            (S, S, K), FAILED_STAGE_SCOPE, RECORDS, (1,), {1: ("e1", "e2")}, id="skipped-last-stage"
        ),
        pytest.param((P, P, P), REACHED_SCOPE, RECORDS, (), {}, id="no-stage-started"),
        pytest.param(
            (S, S, S),
            REACHED_SCOPE,
            {
                0: outcomes("canary", {"c1": rolled(RollbackState.ROLLED_BACK)}),
                2: outcomes("rest", {"r1": rolled(RollbackState.LEFT_ALONE), "r2": DONE}),
            },
            (2,),
            {2: ("r2",)},
            id="ended-rollbacks-left-out",
        ),
        pytest.param(
            (S, S, S),
            FAILED_STAGE_SCOPE,
            {2: outcomes("rest", {"r1": rolled(RollbackState.ROLLED_BACK)})},
            (),
            {},
            id="all-rolled-back-already",
        ),
        pytest.param((S, S, S), FAILED_STAGE_SCOPE, {0: RECORDS[0]}, (), {}, id="no-record-in-the-stage"),
    ],
)
def test_manual_targets(
    phases: tuple[StagePhase, ...],
    scope: str,
    records: dict[int, StageOutcomes],
    stages: tuple[int, ...],
    clusters: dict[int, tuple[str, ...]],
) -> None:
    targets = manual_targets(views(*phases), scope=scope, outcomes=records)
    assert targets.trigger.reason == MANUAL
    assert targets.stages == stages, targets.why
    assert dict(targets.clusters) == clusters
    if not stages:
        assert targets.why.startswith("nothing to roll back"), targets.why


def test_manual_is_no_trigger_a_spec_can_list() -> None:
    assert MANUAL not in {trigger.value for trigger in RollbackTrigger}


# --- when it refuses ---------------------------------------------------------------------------


def workflow(phase: str) -> dict[str, Any]:
    return {"metadata": {"name": "wf"}, "status": {"phase": phase} if phase else {}}


@pytest.mark.parametrize(
    ("ps_phase", "workflow_phase", "refusal"),
    [
        pytest.param("Succeeded", "Succeeded", None, id="succeeded"),
        pytest.param("Failed", "Failed", None, id="failed"),
        pytest.param("RolledBack", "Failed", None, id="rolled-back-already"),
        pytest.param("Cancelled", None, None, id="workflow-gone"),
        pytest.param("Progressing", "Running", "cancel it first", id="progressing"),
        pytest.param("Paused", "Running", "cancel it first", id="paused"),
        pytest.param("RollingBack", "Running", "cancel it first", id="rolling-back"),
        pytest.param("Failed", "Running", "its Workflow wf still runs", id="exit-handler-running"),
        pytest.param("Succeeded", "", "its Workflow wf still runs", id="workflow-not-started"),
    ],
)
def test_decide_manual_rollback(ps_phase: str, workflow_phase: str | None, refusal: str | None) -> None:
    ps = ops_view.parse_progressive_sync(make_ps(phase=ps_phase))
    wf = workflow(workflow_phase) if workflow_phase is not None else None
    if refusal is None:
        assert ops.decide_manual_rollback(ps, wf).id == ps.status.rollout.id  # type: ignore[union-attr]
        return
    with pytest.raises(ops_view.OpsRefused) as caught:
        ops.decide_manual_rollback(ps, wf)
    assert refusal in caught.value.message


def test_no_rollout_is_refused() -> None:
    ps = ops_view.parse_progressive_sync(make_ps(phase="Pending", rollout_id=None))
    with pytest.raises(ops_view.OpsRefused, match="has no rollout to roll back"):
        ops.decide_manual_rollback(ps, None)


# --- the contract the rollback step gets -------------------------------------------------------


@pytest.mark.parametrize(
    ("rollback", "parallel"),
    [
        pytest.param(None, (1, 2), id="the-stages-own-max-parallel"),
        pytest.param({"on": ["StageFailed"], "maxParallel": "50%"}, (1, 2), id="percent-of-records"),
        pytest.param({"on": ["StageFailed"], "maxParallel": 3}, (3, 3), id="count-as-written"),
    ],
)
def test_manual_contract(rollback: dict[str, Any] | None, parallel: tuple[int, int]) -> None:
    stages = [make_stage("canary", max_parallel=1), make_stage("rest", max_parallel="50%")]
    extra = {"rollback": rollback} if rollback else {}
    ps = make_ps_model(phase="Succeeded", stages=stages, progressDeadlineSeconds=120, **extra)
    records = {
        0: outcomes("canary", {"c1": DONE}),
        1: outcomes("rest", {f"r{i}": DONE for i in range(4)}),
    }
    contract = manual_contract(ps, records, scope=REACHED_SCOPE)
    assert contract.rollout_id == ps.status.rollout.id  # type: ignore[union-attr]
    assert [(s.name, s.targets, s.max_parallel) for s in contract.stages] == [
        ("canary", 1, 1),
        ("rest", 4, 2),
    ]
    assert tuple(s.rollback_parallel for s in contract.stages) == parallel
    assert contract.rollback is not None
    assert set(contract.rollback.on) == set(RollbackTrigger)
    assert (contract.rollback.scope, contract.rollback.progress_deadline_seconds) == (REACHED_SCOPE, 120)
    assert contract.release == (("4f1c2e9b7a3d",),)


# --- how it ends -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("records", "phase", "condition", "said"),
    [
        pytest.param(
            {"c1": rolled(RollbackState.ROLLED_BACK), "c2": rolled(RollbackState.LEFT_ALONE)},
            RolloutPhase.ROLLED_BACK,
            None,
            "rolled back (1 cluster(s) restored, 1 left alone)",
            id="complete",
        ),
        pytest.param(
            {"c1": rolled(RollbackState.ROLLED_BACK), "c2": rolled(RollbackState.FAILED, "sync Failed")},
            RolloutPhase.FAILED,
            Reason.ROLLBACK_FAILED,
            "1 cluster(s) not restored: c2 (sync Failed)",
            id="incomplete",
        ),
    ],
)
def test_rollback_end(
    records: dict[str, ClusterRecord], phase: RolloutPhase, condition: Reason | None, said: str
) -> None:
    status = RollbackStatus(trigger=MANUAL, scope=FAILED_STAGE_SCOPE, stages=["canary"], targets=2)
    ended = rollback_end(status, ["canary"], {0: outcomes("canary", records)}, reason="by hand", now=at(5))
    assert ended[0] == phase
    assert ended[1].startswith("by hand; ") and said in ended[1]
    assert ended[2] == condition
    assert status.finished_at == at(5)
    assert status.rolled_back + status.left_alone + status.failed == 2
