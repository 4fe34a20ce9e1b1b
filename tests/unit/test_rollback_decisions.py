"""The pure rollback rules: what a forward sync records, what rolling one Application back takes,
which clusters of which stages a rollout's end rolls back, and how a rollback's end is counted."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.api.metadata import INFO_PREVIOUS_REVISIONS, INFO_ROLLBACK
from orchestrator.api.phases import StagePhase
from orchestrator.api.stage_records import (
    ClusterRecord,
    ClusterRollback,
    ClusterState,
    RollbackState,
    StageOutcomes,
    merge_rollback,
)
from orchestrator.argocd import appsync
from orchestrator.argocd.rollback import (
    RollbackAction,
    build_rollback_request,
    decide_rollback,
    recorded_previous,
)
from orchestrator.planning.rollback import (
    ANALYSIS_FAILED,
    CANCELLED,
    DEADLINE_EXCEEDED,
    FAILED_STAGE_SCOPE,
    REACHED_SCOPE,
    STAGE_FAILED,
    StageView,
    Trigger,
    batches_with_work,
    plan_rollback,
    rollback_batch_share,
    rollback_trigger,
    tally_rollback,
)
from tests.support.builders import (
    NEW_REVISION,
    OLD_REVISION,
    ROLLOUT,
    T0,
    at,
    foreign_operation,
    history_entry,
    make_application,
    our_operation,
)

PREVIOUS = "1" * 40


def forward_op(previous: list[str] | None = None, *, rollback: bool = False) -> dict[str, Any]:
    """Our forward (or rollback) operation as `build_sync_request` writes it."""
    op = our_operation()
    if previous is not None:
        op["info"].append({"name": INFO_PREVIOUS_REVISIONS, "value": json.dumps(previous)})
    if rollback:
        op["info"].append({"name": INFO_ROLLBACK, "value": "true"})
        op["sync"]["revision"] = PREVIOUS
    return op


# --- the forward sync records what ran before ------------------------------------------------


def test_forward_sync_records_the_newest_deployed_revision() -> None:
    app = make_application(
        history=[
            history_entry(revision=OLD_REVISION, entry_id=1),
            history_entry(revision=PREVIOUS, entry_id=2),
        ]
    )
    body = appsync.build_sync_request(
        app,
        revisions=[NEW_REVISION],
        rollout_id=ROLLOUT,
        stage="canary",
        prune=False,
        sync_options=[],
        now=T0,
    )
    assert appsync.info_value(body["operation"], INFO_PREVIOUS_REVISIONS) == json.dumps([PREVIOUS])
    assert appsync.info_value(body["operation"], INFO_ROLLBACK) is None


def test_forward_sync_of_a_never_deployed_application_records_nothing() -> None:
    body = appsync.build_sync_request(
        make_application(),
        revisions=[NEW_REVISION],
        rollout_id=ROLLOUT,
        stage="c",
        prune=False,
        sync_options=[],
        now=T0,
    )
    assert appsync.info_value(body["operation"], INFO_PREVIOUS_REVISIONS) is None


def test_multi_source_history_gives_one_revision_per_source() -> None:
    app = make_application(revisions=[NEW_REVISION, "b" * 40])
    app["status"]["history"] = [{"id": 1, "revisions": [PREVIOUS, "c" * 40]}]
    assert appsync.deployed_revisions(app) == [PREVIOUS, "c" * 40]


def test_rollback_request_is_pinned_and_marked() -> None:
    app = make_application(
        phase="Succeeded", state_operation=forward_op([PREVIOUS]), history=[history_entry()]
    )
    body = build_rollback_request(
        app, revisions=(PREVIOUS,), rollout_id=ROLLOUT, stage="canary", prune=False, sync_options=[], now=T0
    )
    assert body["operation"]["sync"]["revision"] == PREVIOUS
    assert appsync.info_value(body["operation"], INFO_ROLLBACK) == "true"
    assert appsync.info_value(body["operation"], INFO_PREVIOUS_REVISIONS) is None
    assert "operationState" not in body["status"]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param(json.dumps([PREVIOUS]), (PREVIOUS,), id="one-source"),
        pytest.param(json.dumps(["a", "b"]), ("a", "b"), id="two-sources"),
        pytest.param("not json", (), id="garbage-is-nothing"),
        pytest.param(json.dumps([]), (), id="empty-list-is-nothing"),
        pytest.param(json.dumps(["a", ""]), (), id="blank-revision-is-nothing"),
        pytest.param(json.dumps("a"), (), id="not-a-list-is-nothing"),
    ],
)
def test_recorded_previous(raw: str, expected: tuple[str, ...]) -> None:
    op = {"info": [{"name": INFO_PREVIOUS_REVISIONS, "value": raw}]}
    assert recorded_previous(op) == expected


# --- one Application ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("app", "action"),
    [
        pytest.param(
            make_application(phase="Succeeded", state_operation=forward_op([PREVIOUS])),
            RollbackAction.ROLL_BACK,
            id="our-finished-sync-is-rolled-back",
        ),
        pytest.param(
            make_application(phase="Failed", state_operation=forward_op([PREVIOUS])),
            RollbackAction.ROLL_BACK,
            id="our-failed-sync-is-rolled-back-too",
        ),
        pytest.param(
            make_application(phase="Running", state_operation=forward_op([PREVIOUS])),
            RollbackAction.END_FORWARD,
            id="our-running-sync-is-ended-first",
        ),
        pytest.param(
            make_application(operation=forward_op([PREVIOUS])),
            RollbackAction.END_FORWARD,
            id="our-request-not-taken-up-is-withdrawn-first",
        ),
        pytest.param(
            make_application(operation=forward_op(rollback=True)),
            RollbackAction.DONE,
            id="our-rollback-requested-is-not-written-again",
        ),
        pytest.param(
            make_application(phase="Succeeded", state_operation=forward_op(rollback=True)),
            RollbackAction.DONE,
            id="our-rollback-finished-is-not-written-again",
        ),
        pytest.param(
            make_application(
                phase="Succeeded",
                state_operation=foreign_operation(),
                history=[history_entry(started_at=at(5))],
            ),
            RollbackAction.MOVED_ON,
            id="someone-synced-after-us",
        ),
        pytest.param(
            make_application(operation=foreign_operation(), history=[history_entry(started_at=at(5))]),
            RollbackAction.MOVED_ON,
            id="someone-requested-after-us",
        ),
        pytest.param(
            make_application(phase="Succeeded", state_operation=foreign_operation()),
            RollbackAction.NOT_OURS,
            id="never-synced-by-us",
        ),
        pytest.param(make_application(), RollbackAction.NOT_OURS, id="no-operation-at-all"),
        pytest.param(
            make_application(phase="Succeeded", state_operation=forward_op(None)),
            RollbackAction.NO_EARLIER,
            id="no-earlier-revision-recorded",
        ),
        pytest.param(
            make_application(phase="Succeeded", state_operation=our_operation(rollout_id="older")),
            RollbackAction.NOT_OURS,
            id="another-rollouts-sync-is-not-ours",
        ),
    ],
)
def test_decide_rollback(app: dict[str, Any], action: RollbackAction) -> None:
    decision = decide_rollback(app, ROLLOUT, since=T0)
    assert decision.action == action, decision.reason
    if action == RollbackAction.ROLL_BACK:
        assert decision.revisions == (PREVIOUS,)
    if action == RollbackAction.DONE:
        assert decision.revisions == (PREVIOUS,)


def test_being_deleted_is_refused() -> None:
    app = make_application(phase="Succeeded", state_operation=forward_op([PREVIOUS]))
    app["metadata"]["deletionTimestamp"] = "2030-01-01T00:00:00Z"
    assert decide_rollback(app, ROLLOUT).action == RollbackAction.REFUSED


@given(st.sampled_from([True, False]), st.sampled_from(["Succeeded", "Failed", "Error", "Running"]))
def test_a_rollback_is_never_written_twice(requested: bool, phase: str) -> None:
    """Once our rollback sync is on the Application (requested, or run to any phase), nothing
    leads to another write: the decision is DONE."""
    op = forward_op(rollback=True)
    app = make_application(operation=op) if requested else make_application(phase=phase, state_operation=op)
    assert decide_rollback(app, ROLLOUT, since=T0).action == RollbackAction.DONE


# --- which clusters --------------------------------------------------------------------------


def outcomes(stage: str, records: dict[str, ClusterRecord]) -> StageOutcomes:
    return StageOutcomes(stage=stage, targets=tuple(records), clusters=records)


DONE = ClusterRecord(state=ClusterState.COMPLETED)
FAILED = ClusterRecord(state=ClusterState.FAILED, reason="Degraded")
ANALYSIS = ClusterRecord(
    state=ClusterState.FAILED,
    reason="cluster c1: AnalysisFailed: analysis psync-x failed: metric error-rate = 0.3",
)
THREE = [
    StageView("canary", StagePhase.SUCCEEDED),
    StageView("eu", StagePhase.SUCCEEDED),
    StageView("rest", StagePhase.FAILED),
]
RECORDS = {
    0: outcomes("canary", {"c1": DONE}),
    1: outcomes("eu", {"e1": DONE, "e2": DONE}),
    2: outcomes("rest", {"r1": DONE, "r2": FAILED}),
}


@pytest.mark.parametrize(
    ("stages", "kwargs", "records", "reason", "stage"),
    [
        pytest.param(THREE, {}, RECORDS, STAGE_FAILED, 2, id="stage-failed"),
        pytest.param(
            [StageView("canary", StagePhase.FAILED, "Failed")],
            {},
            {},
            ANALYSIS_FAILED,
            0,
            id="stage-analysis-failed",
        ),
        pytest.param(
            [StageView("canary", StagePhase.FAILED)],
            {},
            {0: outcomes("canary", {"c1": ANALYSIS})},
            ANALYSIS_FAILED,
            0,
            id="per-cluster-analysis-failed",
        ),
        pytest.param(
            [StageView("canary", StagePhase.SUCCEEDED), StageView("rest", StagePhase.PROGRESSING)],
            {"stopped": True},
            {},
            CANCELLED,
            1,
            id="stopped-in-second-stage",
        ),
        pytest.param(
            [StageView("canary", StagePhase.PROGRESSING)],
            {"stopped": True, "stopped_by_watcher": "a new release supersedes it"},
            {},
            "",
            0,
            id="the-watchers-own-stop-is-no-trigger",
        ),
        pytest.param(
            [StageView("canary", StagePhase.PROGRESSING)],
            {"deadline_passed": True},
            {},
            DEADLINE_EXCEEDED,
            0,
            id="deadline",
        ),
        pytest.param(
            [StageView("canary", StagePhase.SUCCEEDED)],
            {"succeeded": True},
            {},
            "",
            None,
            id="succeeded-is-none",
        ),
        pytest.param(
            [StageView("canary", StagePhase.PROGRESSING)], {}, {}, "", 0, id="step-error-is-no-trigger"
        ),
    ],
)
def test_rollback_trigger(
    stages: list[StageView],
    kwargs: dict[str, bool],
    records: dict[int, StageOutcomes],
    reason: str,
    stage: int | None,
) -> None:
    args = {"succeeded": False, "stopped": False, "deadline_passed": False, **kwargs}
    trigger = rollback_trigger(stages, outcomes=records, **args)
    assert (trigger.reason, trigger.stage) == (reason, stage), trigger.why


@pytest.mark.parametrize(
    ("scope", "on", "stages", "clusters"),
    [
        pytest.param(FAILED_STAGE_SCOPE, [STAGE_FAILED], (2,), {2: ("r1", "r2")}, id="failed-stage-only"),
        pytest.param(
            REACHED_SCOPE,
            [STAGE_FAILED],
            (2, 1, 0),
            {2: ("r1", "r2"), 1: ("e1", "e2"), 0: ("c1",)},
            id="reached-later-stages-first",
        ),
        pytest.param(REACHED_SCOPE, [CANCELLED], (), {}, id="trigger-not-listed"),
    ],
)
def test_plan_rollback(
    scope: str, on: list[str], stages: tuple[int, ...], clusters: dict[int, tuple[str, ...]]
) -> None:
    trigger = Trigger(STAGE_FAILED, 2, "stage 'rest' failed")
    targets = plan_rollback(trigger, on=on, scope=scope, outcomes=RECORDS)
    assert targets.stages == stages, targets.why
    assert dict(targets.clusters) == clusters


def test_a_cluster_whose_rollback_ended_is_not_planned_again() -> None:
    ended = DONE.model_copy(update={"rollback": ClusterRollback(state=RollbackState.ROLLED_BACK)})
    records = {0: outcomes("canary", {"c1": ended, "c2": DONE})}
    targets = plan_rollback(
        Trigger(STAGE_FAILED, 0, "x"), on=[STAGE_FAILED], scope=REACHED_SCOPE, outcomes=records
    )
    assert dict(targets.clusters) == {0: ("c2",)}


def test_tally_counts_every_recorded_cluster() -> None:
    def rolled(state: RollbackState, reason: str = "") -> ClusterRecord:
        return DONE.model_copy(update={"rollback": ClusterRollback(state=state, reason=reason)})

    records = {
        1: outcomes("eu", {"e1": rolled(RollbackState.ROLLED_BACK), "e2": rolled(RollbackState.LEFT_ALONE)}),
        0: outcomes("canary", {"c1": rolled(RollbackState.FAILED, "sync Failed"), "c2": DONE}),
    }
    tally = tally_rollback((1, 0), records)
    assert (tally.rolled_back, tally.left_alone) == (1, 1)
    assert tally.failed == (("c1", "sync Failed"), ("c2", "its rollback did not finish"))
    assert not tally.complete


# --- the record's merge rule -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("current", "proposed", "expected"),
    [
        pytest.param(None, RollbackState.ROLLING_BACK, RollbackState.ROLLING_BACK, id="first-write"),
        pytest.param(
            RollbackState.ROLLING_BACK, RollbackState.ROLLED_BACK, RollbackState.ROLLED_BACK, id="ends"
        ),
        pytest.param(RollbackState.ROLLED_BACK, RollbackState.FAILED, None, id="an-end-is-never-replaced"),
        pytest.param(RollbackState.FAILED, RollbackState.ROLLING_BACK, None, id="never-back-to-rolling"),
    ],
)
def test_merge_rollback(
    current: RollbackState | None, proposed: RollbackState, expected: RollbackState | None
) -> None:
    start = at(1)
    existing = ClusterRollback(state=current, started_at=start) if current else None
    merged = merge_rollback(existing, ClusterRollback(state=proposed, started_at=at(9)))
    assert (merged.state if merged else None) == expected
    if merged is not None and existing is not None:
        assert merged.started_at == start  # the first start stays: a restarted step keeps its deadline


# --- a stage in batches --------------------------------------------------------------------


@given(
    st.integers(min_value=0, max_value=40),
    st.integers(min_value=1, max_value=8),
    st.integers(min_value=1, max_value=8),
    st.sets(st.integers(min_value=0, max_value=39)),
)
def test_batch_shares_deal_out_every_cluster_once_and_skip_the_ended(
    count: int, batches: int, parallel: int, ended: set[int]
) -> None:
    """The batches of a stage's rollback restore every recorded cluster whose rollback has not
    ended, each in exactly one batch; which batch holds a cluster never depends on which ended."""
    batches = min(batches, parallel)  # sizing.rollback_batch_count
    names = [f"c{i}" for i in range(count)]
    done = DONE.model_copy(update={"rollback": ClusterRollback(state=RollbackState.ROLLED_BACK)})
    records = {name: (done if i in ended else DONE) for i, name in enumerate(names)}
    stage = outcomes("rest", records)
    shares = [
        rollback_batch_share(stage, batches=batches, batch=b, parallel=parallel) for b in range(batches)
    ]
    dealt = [name for share in shares for name in share]
    assert sorted(dealt) == sorted(name for i, name in enumerate(names) if i not in ended)
    assert len(dealt) == len(set(dealt))
    fresh = outcomes("rest", dict.fromkeys(names, DONE))
    for batch, share in enumerate(shares):
        whole = rollback_batch_share(fresh, batches=batches, batch=batch, parallel=parallel)
        assert set(share) <= set(whole)
    assert batches_with_work(stage, batches=batches, parallel=parallel) == [
        b for b, s in enumerate(shares) if s
    ]
