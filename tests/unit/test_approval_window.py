"""A manual gate's approval window as a field (`stages[].approvalWindowSeconds`): bounded, only with
`approval: Manual`; carried in the rollout contract (absent when not set, so such a contract reads
as before); budgeted in the Workflow's deadline in place of the watcher's setting and named in its
description; said by `render`; and shown by `status` while the gate waits (when it closes)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from click.testing import CliRunner

from orchestrator.api.metadata import workflow_name
from orchestrator.api.models import ProgressiveSync
from orchestrator.api.validation import validate_object
from orchestrator.cli.main import main
from orchestrator.ops import view as ops_view
from orchestrator.planning.contract import parse_contract
from tests.support.builders import (
    make_gate_node,
    make_ps,
    make_release,
    make_stage,
    make_stage_status,
    make_workflow,
)
from workflow_templates.builder import StageSize, active_deadline_seconds, build_workflow, contract_for
from workflow_templates.settings import WorkflowSettings

SETTINGS = WorkflowSettings()
WF = workflow_name("myservice", "7f3c2a1")
SIZES = {"canary": StageSize(1, 1), "rest": StageSize(4, 2)}


def gated(window: int | None = None, *, approval: str | None = "Manual") -> dict[str, Any]:
    stage = make_stage("rest", approval=approval)
    if window is not None:
        stage["approvalWindowSeconds"] = window
    return stage


def model(*stages: dict[str, Any]) -> ProgressiveSync:
    return ProgressiveSync.model_validate(make_ps("myservice", stages=[make_stage("canary"), *stages]))


@pytest.mark.parametrize(
    ("stage", "error"),
    [
        pytest.param(gated(3600), "", id="a-window-on-a-manual-gate"),
        pytest.param(gated(), "", id="no-window-is-the-watchers"),
        pytest.param(
            gated(3600, approval=None),
            "spec.stages[1].approvalWindowSeconds: approvalWindowSeconds is only used by a manual gate "
            "(set approval: Manual, or remove approvalWindowSeconds)",
            id="a-window-without-a-gate",
        ),
        pytest.param(
            gated(30), "spec.stages[1].approvalWindowSeconds: 30 is below the minimum 60", id="under-a-minute"
        ),
        pytest.param(
            gated(31 * 24 * 3600),
            "spec.stages[1].approvalWindowSeconds: 2678400 is above the maximum 2592000",
            id="over-a-month",
        ),
        pytest.param(
            gated("1h"),  # type: ignore[arg-type]
            "spec.stages[1].approvalWindowSeconds",
            id="a-duration-string",
        ),
    ],
)
def test_the_field_is_bounded_and_needs_a_manual_gate(stage: dict[str, Any], error: str) -> None:
    errors = [str(e) for e in validate_object(make_ps("myservice", stages=[make_stage("canary"), stage]))]
    if not error:
        assert errors == []
    else:
        assert len(errors) == 1 and errors[0].startswith(error), errors


def test_the_contract_carries_the_window_only_where_a_stage_sets_one() -> None:
    release = make_release("r1", revisions=(("x",),))
    with_window = contract_for(model(gated(3600)), release=release, plan=SIZES, settings=SETTINGS)
    without = contract_for(model(gated()), release=release, plan=SIZES, settings=SETTINGS)
    assert [s.approval_window_seconds for s in with_window.stages] == [None, 3600]
    assert "approvalWindowSeconds" not in without.to_json()
    assert json.loads(with_window.to_json())["stages"][1]["approvalWindowSeconds"] == 3600
    assert parse_contract(with_window.to_json()) == with_window


def test_the_deadline_budgets_the_stages_window_in_place_of_the_watchers() -> None:
    release = make_release("r1", revisions=(("x",),))

    def deadline(ps: ProgressiveSync) -> int:
        return active_deadline_seconds(
            ps, contract_for(ps, release=release, plan=SIZES, settings=SETTINGS), SETTINGS
        )

    default, hour = deadline(model(gated())), deadline(model(gated(3600)))
    assert default - hour == pytest.approx(
        (SETTINGS.approval_window_seconds - 3600) * SETTINGS.deadline_factor, abs=1
    )


def test_the_workflow_says_the_window_where_a_stage_sets_one() -> None:
    release = make_release("0123456789", revisions=(("x",),))
    ps = model(gated(3600)).model_copy(
        update={"metadata": model(gated(3600)).metadata.model_copy(update={"uid": "uid-1"})}
    )
    obj = build_workflow(ps, release=release, plan=SIZES, settings=SETTINGS).to_dict()
    description = obj["metadata"]["annotations"]["workflows.argoproj.io/description"]
    assert "rest (4 clusters, 2 at a time, manual approval within 3600s)" in description


def test_render_says_how_long_each_gate_waits(tmp_path: Any) -> None:
    result = CliRunner().invoke(main, ["render", "-f", "examples/manual-approval.yaml"])
    assert result.exit_code == 0, result.output
    assert (
        "# approval: stage first production cluster: a manual gate; it waits up to 28800s for a person "
        "(its approvalWindowSeconds)" in result.output
    )
    assert (
        f"# approval: stage production: a manual gate; it waits up to {SETTINGS.approval_window_seconds}s "
        "for a person (the watcher's default)" in result.output
    )


def running(window: int | None) -> ProgressiveSync:
    stages = [make_stage_status("canary", phase="Succeeded"), make_stage_status("rest")]
    return ops_view.parse_progressive_sync(
        make_ps(stages=[make_stage("canary"), gated(window)], phase="Progressing", stage_status=stages)
    )


def waiting_view(window: int | None, *, deadline: int | None = 7200) -> ops_view.RolloutView:
    ps = running(window)
    workflow = make_workflow(nodes=[make_gate_node(WF, "rest")])
    if deadline is not None:
        workflow["spec"]["activeDeadlineSeconds"] = deadline
    return ops_view.rollout_view(ps, workflow)


def test_status_says_when_a_waiting_gate_closes() -> None:
    view = waiting_view(3600)
    [rest] = [stage for stage in view.stages if stage.name == "rest"]
    # The Workflow started at 10:00:00Z with a deadline of 2 hours: the gate closes at 12:00:00Z.
    assert rest.approval_closes_at == datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
    rows = {row[0]: row for row in ops_view.stage_rows(view, datetime(2026, 11, 29, 10, 5, tzinfo=UTC))}
    assert rows["rest"][1] == "WaitingApproval"
    assert rows["rest"][5] == "gate closes 2026-11-29T12:00:00Z (approvalWindowSeconds 3600)"
    data = ops_view.render_data(view, datetime(2026, 11, 29, 10, 5, tzinfo=UTC))
    [rest_data] = [stage for stage in data["stages"] if stage["name"] == "rest"]
    assert (rest_data["approvalWindowSeconds"], rest_data["approvalClosesAt"]) == (
        3600,
        "2026-11-29T12:00:00Z",
    )


@pytest.mark.parametrize(
    ("window", "deadline", "message"),
    [
        pytest.param(None, 7200, "gate closes 2026-11-29T12:00:00Z", id="the-watchers-window"),
        pytest.param(3600, None, "", id="a-workflow-without-a-deadline-says-nothing"),
    ],
)
def test_the_stage_line_while_waiting(window: int | None, deadline: int | None, message: str) -> None:
    view = waiting_view(window, deadline=deadline)
    rows = {row[0]: row for row in ops_view.stage_rows(view, datetime(2026, 11, 29, 10, 5, tzinfo=UTC))}
    assert rows["rest"][5] == message


def test_a_gate_that_does_not_wait_shows_no_closing_time() -> None:
    ps = running(3600)
    workflow = make_workflow(nodes=[make_gate_node(WF, "rest", phase="Succeeded")])
    workflow["spec"]["activeDeadlineSeconds"] = 7200
    view = ops_view.rollout_view(ps, workflow)
    assert [stage.approval_closes_at for stage in view.stages] == [None, None]
    assert [stage.approval_window_seconds for stage in view.stages] == [None, 3600]
