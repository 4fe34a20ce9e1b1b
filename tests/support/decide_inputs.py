"""What the watcher's pure decision (`decide`) is given, built with small keyword builders, for the
tests/unit/test_reconcile_*.py files: a ProgressiveSync spec, its plan, rollout and status, its
Workflows, the `Observed` they make (time is a fixed `NOW`), and readers of the `Decision` (its
action kinds, its status patch, a condition of the patched status).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from orchestrator.api.models import (
    ConditionStatus,
    ProgressiveSyncSpec,
    ProgressiveSyncStatus,
    RolloutPhase,
    RolloutStatus,
)
from orchestrator.api.release import spec_hash
from orchestrator.argocd.fleet import AppSetView
from orchestrator.planning.planner import IssueCode, PlanIssue, RolloutPlan, StagePlan, StageState, release_id
from orchestrator.watcher.decision import (
    Decision,
    Observed,
    ReconcilePolicy,
    UpdateStatus,
)
from orchestrator.workflows.view import WorkflowView
from tests.support import builders
from tests.support.builders import make_stage

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
PS = "web"
REVISION = "4f1c2e9"
OLD_REVISION = "9d2b7e4"
POLICY = ReconcilePolicy(finalize_grace_seconds=30, deletion_grace_seconds=30)


def make_spec(
    *, paused: bool = False, stages: tuple[str, ...] = ("canary", "rest"), max_parallel: int = 1
) -> ProgressiveSyncSpec:
    return builders.make_spec(
        *(make_stage(name, max_parallel=max_parallel) for name in stages), paused=paused
    )


SPEC = make_spec()
HASH = spec_hash(SPEC)
RELEASE = release_id(1, [(REVISION,)])
WF_NAME = f"{PS}-{RELEASE}"


def make_plan(
    *, revisions: tuple[tuple[str, ...], ...] = ((REVISION,),), errors: tuple[str, ...] = ()
) -> RolloutPlan:
    return RolloutPlan(
        ps_name=PS,
        app_set="myservice",
        stages=(
            StagePlan(name="canary", state=StageState.PLANNED, reason="", targets=("c1",)),
            StagePlan(name="rest", state=StageState.PLANNED, reason="", targets=("c2", "c3")),
        ),
        clusters={},
        revisions=revisions,
        errors=tuple(PlanIssue(IssueCode.UNCOVERED_CLUSTERS, message) for message in errors),
    )


def make_rollout(
    *,
    rollout_id: str = RELEASE,
    attempt: int = 1,
    generation: int = 1,
    spec_hash_: str = HASH,
    retry_token: str | None = None,
    workflow: str | None = None,
    finished_at: datetime | None = None,
) -> RolloutStatus:
    return RolloutStatus(
        id=rollout_id,
        revision=REVISION,
        workflow=workflow if workflow is not None else f"{PS}-{rollout_id}",
        attempt=attempt,
        started_at=NOW - timedelta(minutes=10),
        generation=generation,
        spec_hash=spec_hash_,
        retry_token=retry_token,
        finished_at=finished_at,
    )


def make_status(
    phase: RolloutPhase | None = None, rollout: RolloutStatus | None = None
) -> ProgressiveSyncStatus:
    return ProgressiveSyncStatus(phase=phase, rollout=rollout, observed_generation=1)


def make_wf(
    *,
    rollout_id: str = RELEASE,
    phase: str = "Running",
    suspended: bool = False,
    by_us: bool = False,
    shutdown: str = "",
    spec_hash_: str = HASH,
    stage: str = "",
    waiting: str = "",
    finished_at: str = "",
    generation: int = 1,
    attempt: int = 1,
    started_at: str = "2026-11-30T11:50:00Z",
    created: str = "",
    name: str = "",
) -> WorkflowView:
    return WorkflowView(
        name=name or f"{PS}-{rollout_id}",
        created=created,
        namespace="argocd",
        ps_label=PS,
        rollout_id=rollout_id,
        release_id=rollout_id.split("-", maxsplit=1)[0],
        attempt=attempt,
        generation=generation,
        spec_hash=spec_hash_,
        revision=REVISION,
        phase=phase,
        suspended=suspended,
        suspended_by_us=by_us,
        shutdown=shutdown,
        current_stage=stage,
        waiting=waiting,
        started_at=started_at,
        finished_at=finished_at,
    )


def observed(**overrides: Any) -> Observed:
    base: dict[str, Any] = {
        "namespace": "argocd",
        "name": PS,
        "generation": 1,
        "spec": SPEC,
        "status": make_status(),
        "now": NOW,
        "appset": AppSetView(name="myservice", namespace="argocd", uid="u1"),
        "appset_namespace": "argocd",
        "plan": make_plan(),
    }
    base.update(overrides)
    return Observed(**base)


def kinds(decision: Decision) -> list[str]:
    return [type(action).__name__ for action in decision.actions]


def actions_of(decision: Decision, kind: type) -> list[Any]:
    """The decision's actions of one type, in order."""
    return [action for action in decision.actions if isinstance(action, kind)]


FINISHED = "2026-11-30T11:59:50Z"  # 10 s before NOW
LONG_AGO = "2026-11-30T11:00:00Z"


def patch_of(decision: Decision) -> Any:
    patches = [action.patch for action in actions_of(decision, UpdateStatus)]
    assert patches, decision
    return patches[0]


def condition_of(status: ProgressiveSyncStatus, type_: str) -> tuple[ConditionStatus, str] | None:
    for condition in status.conditions or []:
        if condition.type == type_:
            return condition.status, condition.reason
    return None
