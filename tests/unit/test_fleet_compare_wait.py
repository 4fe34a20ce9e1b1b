"""Rule 12 of the watcher's decision: before it sizes a Workflow, Argo CD compares the whole fleet.

Pure, no API server: `fleet_comparison` (which Applications to ask, which are awaited) and `decide`
around it (ask, wait and say so, start when compared, start with what is known at the deadline,
a restarted watcher goes on with the same wait). Time is a fixed `NOW`; the wait's start lives in
the status (`FleetCompared=False`'s lastTransitionTime), as the API server stores it.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.api.conditions import ConditionType
from orchestrator.api.models import (
    Condition,
    ConditionStatus,
    ProgressiveSyncStatus,
    RolloutPhase,
    RolloutStatus,
)
from orchestrator.api.reasons import Reason
from orchestrator.argocd.fleet import AppSetView, AppView, OwnerRef, SyncStatus
from orchestrator.planning.planner import RolloutPlan, StagePlan, StageState
from orchestrator.watcher.build import build_workflows
from orchestrator.watcher.decide import decide
from orchestrator.watcher.decision import (
    ConditionPatch,
    CreateWorkflow,
    Decision,
    Observed,
    ReconcilePolicy,
    RecordEvent,
    RequestCompare,
    RequeueAfter,
    StatusPatch,
    UpdateStatus,
)
from orchestrator.watcher.fleet_compare import FleetComparison, fleet_comparison
from orchestrator.watcher.fleet_wait import wait_began, wait_over
from orchestrator.watcher.status_patch import apply_patch
from tests.support import builders
from tests.support.builders import make_stage
from workflow_templates.settings import WorkflowSettings

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
NEW = "2" * 40
OLD = "1" * 40
APP_SET = "myservice"
POLICY = ReconcilePolicy(fleet_compare_seconds=60)
SPEC = builders.make_spec(make_stage("canary", max_targets=1), make_stage("rest", max_parallel="10%"))
OWNER = OwnerRef(api_version="argoproj.io/v1alpha1", kind="ApplicationSet", name=APP_SET, uid="u1")


def app(
    name: str,
    *,
    revision: str = OLD,
    sync: SyncStatus = SyncStatus.SYNCED,
    compared: datetime | None = NOW - timedelta(minutes=5),
    refresh: bool = False,
    owner: OwnerRef | None = OWNER,
) -> AppView:
    return AppView(
        name=name,
        namespace="argocd",
        owner_references=(owner,) if owner else (),
        sync_status=sync,
        sync_revisions=(revision,),
        reconciled_at=compared,
        refresh_pending=refresh,
    )


def at_release(name: str) -> AppView:
    return app(name, revision=NEW, sync=SyncStatus.OUT_OF_SYNC)


def awaiting_since(began: datetime, rollout: RolloutStatus | None = None) -> ProgressiveSyncStatus:
    """The status a wait that began at `began` left (what the API server stores: whole seconds)."""
    return ProgressiveSyncStatus(
        observed_generation=1,
        rollout=rollout,
        conditions=[
            Condition(
                type=ConditionType.FLEET_COMPARED,
                status=ConditionStatus.FALSE,
                reason=Reason.AWAITING_FLEET_COMPARISON,
                message="waiting",
                last_transition_time=began.replace(microsecond=0),
            )
        ],
    )


def plan() -> RolloutPlan:
    return RolloutPlan(
        ps_name="web",
        app_set=APP_SET,
        stages=(
            StagePlan(name="canary", state=StageState.PLANNED, reason="", targets=("c1",), available=1),
            StagePlan(name="rest", state=StageState.DONE, reason="", available=20),
        ),
        clusters={},
        revisions=((NEW,),),
    )


def observed(
    apps: tuple[AppView, ...], status: ProgressiveSyncStatus | None = None, **changes: Any
) -> Observed:
    base: dict[str, Any] = {
        "namespace": "argocd",
        "name": "web",
        "generation": 1,
        "spec": SPEC,
        "status": status or ProgressiveSyncStatus(observed_generation=1),
        "now": NOW,
        "appset": AppSetView(name=APP_SET, namespace="argocd", uid="u1"),
        "appset_namespace": "argocd",
        "plan": plan(),
        "apps": apps,
    }
    base.update(changes)
    return Observed(**base)


def kinds(decision: Decision) -> list[str]:
    return [type(action).__name__ for action in decision.actions]


def only(decision: Decision, kind: type) -> Any:
    found = [action for action in decision.actions if isinstance(action, kind)]
    assert len(found) == 1, decision
    return found[0]


def fleet_condition(status: ProgressiveSyncStatus) -> tuple[ConditionStatus, str] | None:
    for condition in status.conditions or []:
        if condition.type == ConditionType.FLEET_COMPARED:
            return condition.status, condition.reason
    return None


# --- which Applications: the pure comparison --------------------------------------------------------


@pytest.mark.parametrize(
    ("apps", "since", "expected"),
    [
        pytest.param(
            (at_release("a"), at_release("b")), NOW, FleetComparison(owned=2), id="all-at-the-release"
        ),
        pytest.param(
            (at_release("a"), app("b")),
            NOW,
            FleetComparison(to_ask=("b",), owned=2),
            id="old-comparison-is-asked",
        ),
        pytest.param(
            (at_release("a"), app("b", refresh=True)),
            NOW,
            FleetComparison(pending=("b",), owned=2),
            id="a-pending-refresh-is-awaited-not-asked-again",
        ),
        pytest.param(
            (app("b", compared=NOW + timedelta(seconds=2)),),
            NOW,
            FleetComparison(owned=1),
            id="compared-after-the-wait-began-at-the-old-revision-is-an-answer",
        ),
        pytest.param(
            (app("b", compared=NOW),),
            NOW,
            FleetComparison(to_ask=("b",), owned=1),
            id="compared-in-the-second-the-wait-began-is-asked-again",
        ),
        pytest.param(
            (app("b", compared=None),),
            NOW,
            FleetComparison(to_ask=("b",), owned=1),
            id="never-compared-is-asked",
        ),
        pytest.param(
            (
                app("x", owner=None),
                app("y", owner=OwnerRef("argoproj.io/v1alpha1", "ApplicationSet", "other")),
            ),
            NOW,
            FleetComparison(owned=0),
            id="not-owned-is-not-ours-to-ask",
        ),
    ],
)
def test_fleet_comparison(apps: tuple[AppView, ...], since: datetime, expected: FleetComparison) -> None:
    got = fleet_comparison(apps, app_set_name=APP_SET, app_set_uid="u1", release=[(NEW,)], since=since)
    assert got == expected
    assert got.complete == (not expected.to_ask and not expected.pending)


# --- the decision ----------------------------------------------------------------------------------

LAGGING = (at_release("a"), app("b"), app("c"))


@pytest.mark.parametrize(
    ("obs", "step", "actions"),
    [
        pytest.param(
            observed((at_release("a"), at_release("b"))),
            "create",
            ["CreateWorkflow", "UpdateStatus", "RecordEvent"],
            id="every-application-compared-starts-at-once",
        ),
        pytest.param(
            observed(LAGGING),
            "await-fleet-comparison",
            ["UpdateStatus", "RecordEvent", "RequestCompare", "RequeueAfter"],
            id="lagging-fleet-asks-waits-and-says-so-once",
        ),
        pytest.param(
            observed((at_release("a"), app("b", refresh=True)), awaiting_since(NOW - timedelta(seconds=10))),
            "await-fleet-comparison",
            ["UpdateStatus", "RequeueAfter"],
            id="refresh-pending-waits-without-asking-or-a-second-event",
        ),
        pytest.param(
            observed(
                (at_release("a"), app("b", compared=NOW - timedelta(seconds=3))),
                awaiting_since(NOW - timedelta(seconds=10)),
            ),
            "create",
            ["CreateWorkflow", "UpdateStatus", "RecordEvent"],
            id="answered-at-the-old-revision-starts",
        ),
        pytest.param(
            observed(LAGGING, awaiting_since(NOW - timedelta(seconds=60))),
            "create",
            ["CreateWorkflow", "UpdateStatus", "RecordEvent", "RecordEvent"],
            id="deadline-starts-with-what-is-known-and-warns",
        ),
        pytest.param(
            observed(LAGGING, awaiting_since(NOW - timedelta(seconds=59))),
            "await-fleet-comparison",
            ["UpdateStatus", "RequestCompare", "RequeueAfter"],
            id="restarted-watcher-goes-on-with-the-same-wait",
        ),
        pytest.param(
            observed(LAGGING, spec=SPEC.model_copy(update={"paused": True})),
            "due-but-paused",
            ["UpdateStatus"],
            id="paused-asks-nothing",
        ),
    ],
)
def test_decide_waits_for_the_fleet(obs: Observed, step: str, actions: list[str]) -> None:
    decision = decide(obs, POLICY)
    assert (decision.step, kinds(decision)) == (step, actions), decision.reason


def test_the_wait_asks_the_lagging_applications_and_the_status_says_what_it_waits_for() -> None:
    decision = decide(observed(LAGGING), POLICY)
    ask = only(decision, RequestCompare)
    assert (ask.namespace, ask.names) == ("argocd", ("b", "c"))
    status = apply_patch(ProgressiveSyncStatus(), only(decision, UpdateStatus).patch, NOW)
    assert fleet_condition(status) == (ConditionStatus.FALSE, Reason.AWAITING_FLEET_COMPARISON)
    assert status.phase == RolloutPhase.PENDING
    assert "waiting until 2026-11-30T12:01:00Z (at most 60 s) for Argo CD to compare" in (
        status.message or ""
    )
    assert "starts with what is known" in (status.message or "")
    progressing = next(c for c in status.conditions or [] if c.type == "Progressing")
    assert (progressing.status, progressing.reason) == (
        ConditionStatus.TRUE,
        Reason.AWAITING_FLEET_COMPARISON,
    )
    assert wait_began(status) == NOW, "the condition's lastTransitionTime is the wait's start"
    event = only(decision, RecordEvent)
    assert (event.type, event.reason) == ("Normal", Reason.AWAITING_FLEET_COMPARISON)
    assert "2 of 3 Application(s) not compared yet" in event.message
    assert only(decision, RequeueAfter).seconds == 5.0


def test_a_wait_that_goes_on_writes_the_same_status() -> None:
    """No change, no write: a reconcile during the wait states the same patch as the first one."""
    first = decide(observed(LAGGING), POLICY)
    status = apply_patch(ProgressiveSyncStatus(observed_generation=1), only(first, UpdateStatus).patch, NOW)
    stored = ProgressiveSyncStatus.model_validate(status.to_api())  # whole seconds, as stored
    later = decide(observed(LAGGING, stored, now=NOW + timedelta(seconds=7)), POLICY)
    again = apply_patch(
        stored.model_copy(deep=True), only(later, UpdateStatus).patch, NOW + timedelta(seconds=7)
    )
    assert again.to_api() == stored.to_api()


@pytest.mark.parametrize(
    ("status", "reason", "event"),
    [
        pytest.param(awaiting_since(NOW - timedelta(seconds=10)), Reason.FLEET_COMPARED, None, id="compared"),
        pytest.param(
            awaiting_since(NOW - timedelta(seconds=60)),
            Reason.FLEET_COMPARISON_TIMED_OUT,
            Reason.FLEET_COMPARISON_TIMED_OUT,
            id="timed-out",
        ),
    ],
)
def test_the_rollout_records_how_the_wait_ended(
    status: ProgressiveSyncStatus, reason: str, event: str | None
) -> None:
    apps = (at_release("a"), app("b", compared=NOW - timedelta(seconds=2))) if event is None else LAGGING
    decision = decide(observed(apps, status), POLICY)
    assert decision.step == "create"
    after = apply_patch(status.model_copy(deep=True), only(decision, UpdateStatus).patch, NOW)
    assert fleet_condition(after) == (ConditionStatus.TRUE, reason)
    warnings = [a for a in decision.actions if isinstance(a, RecordEvent) and a.type == "Warning"]
    assert [w.reason for w in warnings] == ([event] if event else [])
    if event:
        assert (
            "did not compare 2 of 3 Application(s)" in warnings[0].message and "b, c" in warnings[0].message
        )
        assert "started with what was known" in (after.message or "")


def test_a_wait_left_by_a_rollout_that_started_is_not_this_waits_start() -> None:
    """A watcher that died between creating the Workflow and recording it left FleetCompared=False;
    the adopted rollout started after it, so the next release waits anew (and the flip makes the
    condition's lastTransitionTime this wait's start)."""
    rollout = RolloutStatus(id="old", workflow="web-old", started_at=NOW - timedelta(minutes=30))
    left = awaiting_since(NOW - timedelta(minutes=31), rollout)
    assert wait_began(left) is None
    decision = decide(observed(LAGGING, left), POLICY)
    assert decision.step == "await-fleet-comparison"
    after = apply_patch(left.model_copy(deep=True), only(decision, UpdateStatus).patch, NOW)
    assert wait_began(after) == NOW
    assert after.phase is None, "the phase of the last rollout stays (a Pending phase would read as running)"


def test_a_release_that_went_away_during_the_wait_ends_the_wait() -> None:
    waiting = awaiting_since(NOW - timedelta(seconds=10))
    nothing_due = RolloutPlan(ps_name="web", app_set=APP_SET, stages=plan().stages, clusters={})
    decision = decide(observed((app("a"),), waiting, plan=nothing_due), POLICY)
    assert decision.step == "up-to-date"
    after = apply_patch(waiting.model_copy(deep=True), only(decision, UpdateStatus).patch, NOW)
    assert fleet_condition(after) == (ConditionStatus.TRUE, Reason.NO_COMPARISON_AWAITED)


def test_the_workflow_is_sized_from_the_plan_made_after_the_wait() -> None:
    """What the wait is for: the Workflow created is built from the plan at hand, so a plan with the
    whole fleet gives the later stage its share (10% of 20 targets: 2 at a time, not 1)."""
    full = RolloutPlan(
        ps_name="web",
        app_set=APP_SET,
        stages=(
            StagePlan(name="canary", state=StageState.PLANNED, reason="", targets=("c0",), available=21),
            StagePlan(
                name="rest",
                state=StageState.PLANNED,
                reason="",
                targets=tuple(f"c{i}" for i in range(1, 21)),
                available=20,
            ),
        ),
        clusters={},
        revisions=((NEW,),),
    )
    obs = observed((at_release("a"),), plan=full)
    # Argo's `parallelism` is maxParallel when the stage's pods do not all start at once.
    decision = build_workflows(decide(obs, POLICY), obs, WorkflowSettings(pods_at_once_limit=0))
    create = only(decision, CreateWorkflow)
    fanouts = {t["name"]: t for t in create.workflow["spec"]["templates"] if "parallelism" in t}
    assert fanouts["fanout-rest"]["parallelism"] == 2, sorted(fanouts)


@given(
    st.lists(
        st.tuples(
            st.sampled_from([NEW, OLD]),
            st.sampled_from(list(SyncStatus)),
            st.none() | st.integers(-120, 120).map(lambda s: NOW + timedelta(seconds=s)),
            st.booleans(),
            st.booleans(),
        ),
        max_size=12,
    )
)
def test_an_application_is_asked_or_awaited_only_while_argo_cd_has_not_compared_it(
    rows: list[tuple[str, SyncStatus, datetime | None, bool, bool]],
) -> None:
    apps = [
        app(f"a{i}", revision=rev, sync=sync, compared=at, refresh=refresh, owner=OWNER if owned else None)
        for i, (rev, sync, at, refresh, owned) in enumerate(rows)
    ]
    got = fleet_comparison(apps, app_set_name=APP_SET, app_set_uid="u1", release=[(NEW,)], since=NOW)
    by_name = {a.name: a for a in apps}
    assert not set(got.to_ask) & set(got.pending)
    assert got.owned == sum(1 for a in apps if a.owner_references)
    for name in got.unanswered:
        view = by_name[name]
        assert view.owner_references and view.sync_revisions != (NEW,), "never one compared at the release"
    for name in got.to_ask:
        view = by_name[name]
        assert not view.refresh_pending, "a pending refresh is awaited, not asked again"
        assert view.reconciled_at is None or view.reconciled_at <= NOW, "an answer is not asked again"
    assert got.complete == (not got.unanswered)


def test_the_end_of_a_wait_decided_on_a_lagging_cache_never_overwrites_how_the_wait_ended() -> None:
    """The watcher created the Workflow and wrote FleetCompared=True/FleetCompared; its next
    reconcile, on a status cache that still had the wait's False, adopted the Workflow and ended the
    wait again (NoComparisonAwaited). Applied to the fresh status, that flip must change nothing:
    the reason stays how the wait really ended (seen once in test_watcher_scenarios under load)."""
    waiting = awaiting_since(NOW - timedelta(seconds=10))
    flip = StatusPatch(observed_generation=1, conditions=wait_over(waiting, "rollout r1 started"))
    ended = apply_patch(
        waiting.model_copy(deep=True),
        StatusPatch(
            observed_generation=1,
            conditions=(
                ConditionPatch(
                    ConditionType.FLEET_COMPARED, ConditionStatus.TRUE, Reason.FLEET_COMPARED, "all"
                ),
            ),
        ),
        NOW,
    )
    assert fleet_condition(apply_patch(ended, flip, NOW)) == (ConditionStatus.TRUE, Reason.FLEET_COMPARED)
    # On the status it was decided on, the flip does its job.
    assert fleet_condition(apply_patch(waiting.model_copy(deep=True), flip, NOW)) == (
        ConditionStatus.TRUE,
        Reason.NO_COMPARISON_AWAITED,
    )
