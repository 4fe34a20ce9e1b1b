"""The operator commands' pure side: the status view, its renderings, and every decision.

No cluster: objects come from `tests.support.builders`, `now` is a fixed time.
"""

from __future__ import annotations

import base64
import gzip
import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from orchestrator.api.metadata import workflow_name
from orchestrator.api.models import MoreClusters, StageAnalysisStatus, StageCounts, StagePhase, StageStatus
from orchestrator.api.stage_records import ProgressiveSyncStage, new_records
from orchestrator.ops import decisions as ops
from orchestrator.ops import tables
from orchestrator.ops import view as ops_view
from orchestrator.ops.live import LiveDisplay
from tests.support.builders import (
    OPERATOR_STAGES,
    make_bake_node,
    make_gate_node,
    make_ps,
    make_stage_status,
    make_workflow,
)
from tests.support.clock import ManualClock

NOW = datetime(2026, 11, 29, 10, 2, 5, tzinfo=UTC)
WF = workflow_name("myservice", "7f3c2a1")


def ps(**kwargs: Any) -> ops_view.ProgressiveSync:
    return ops_view.parse_progressive_sync(make_ps(stages=OPERATOR_STAGES, **kwargs))


def running_stages() -> list[StageStatus]:
    return [
        make_stage_status(
            "canary",
            phase="Succeeded",
            targets=("eu-1",),
            completed=("eu-1",),
            started_at="2026-11-29T10:00:00Z",
            finished_at="2026-11-29T10:00:08Z",
            message="1 of 1 clusters updated",
        ),
        make_stage_status(
            "one per region",
            phase="Progressing",
            targets=("us-1", "ap-1", "eu-2"),
            completed=("us-1",),
            syncing=("ap-1",),
            failed={"eu-2": "Degraded after the sync"},
            started_at="2026-11-29T10:00:10Z",
        ),
        make_stage_status("everything else"),
    ]


# --- the view ----------------------------------------------------------------------------------


def test_view_without_status_lists_the_spec_stages_as_pending() -> None:
    view = ops_view.rollout_view(ps())
    assert [stage.name for stage in view.stages] == ["canary", "one per region", "everything else"]
    assert {stage.phase for stage in view.stages} == {StagePhase.PENDING}
    assert view.stages[2].approval == ops_view.ApprovalMode.MANUAL
    assert not view.is_finished


@pytest.mark.parametrize(
    ("kwargs", "finished"),
    [
        pytest.param({"phase": "Succeeded"}, True, id="succeeded"),
        pytest.param({"phase": "Failed"}, True, id="failed"),
        pytest.param({"phase": "Cancelled"}, True, id="cancelled"),
        pytest.param({"phase": "Progressing"}, False, id="progressing"),
        pytest.param({"phase": "Paused"}, False, id="paused"),
        pytest.param({"phase": "Succeeded", "rollout_id": None}, False, id="no-rollout-yet"),
        pytest.param(
            {"phase": "Succeeded", "generation": 3, "observed_generation": 2},
            False,
            id="status-predates-the-spec",
        ),
        pytest.param(
            {"phase": "Succeeded", "generation": 3, "observed_generation": 3},
            True,
            id="status-of-the-current-spec",
        ),
    ],
)
def test_when_a_rollout_counts_as_finished(kwargs: dict[str, Any], finished: bool) -> None:
    assert ops_view.rollout_view(ps(**kwargs)).is_finished is finished


@pytest.mark.parametrize(
    ("workflow_phase", "settled"),
    [
        pytest.param("Running", False, id="exit-handler-still-running"),
        pytest.param("Succeeded", True, id="workflow-ended"),
        pytest.param(None, True, id="no-workflow-found"),
    ],
)
def test_settled_waits_for_the_workflow_to_end(workflow_phase: str | None, settled: bool) -> None:
    workflow = make_workflow(phase=workflow_phase) if workflow_phase else None
    assert ops_view.rollout_view(ps(phase="Succeeded"), workflow).is_settled is settled


@pytest.mark.parametrize(
    ("phase", "code"),
    [
        pytest.param("Succeeded", 0, id="succeeded-0"),
        pytest.param("Failed", 1, id="failed-1"),
        pytest.param("Cancelled", 3, id="cancelled-3"),
        pytest.param("RolledBack", 6, id="rolled-back-6"),
    ],
)
def test_watch_exit_codes_tell_the_ends_apart(phase: str, code: int) -> None:
    assert ops_view.watch_exit_code(ops_view.rollout_view(ps(phase=phase))) == code


def test_watch_exit_codes_are_distinct() -> None:
    codes = [member.value for member in ops_view.WatchExit]
    assert len(codes) == len(set(codes))
    assert ops_view.WatchExit.USAGE == 2  # click's own usage code


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        pytest.param(None, "-", id="unknown"),
        pytest.param(0, "0s", id="zero"),
        pytest.param(8.9, "8s", id="seconds"),
        pytest.param(65, "1m05s", id="minutes"),
        pytest.param(7380, "2h03m", id="hours"),
    ],
)
def test_format_duration(seconds: float | None, text: str) -> None:
    value = None if seconds is None else timedelta(seconds=seconds)
    assert ops_view.format_duration(value) == text


@pytest.mark.parametrize(
    ("done", "total", "bar"),
    [
        pytest.param(0, 4, "", id="none"),
        pytest.param(1, 4, "━", id="quarter"),
        pytest.param(4, 4, "━━━━", id="all"),
        pytest.param(5, 4, "━━━━", id="never-overflows"),
        pytest.param(0, 0, "", id="no-targets-yet"),
    ],
)
def test_progress_bar(done: int, total: int, bar: str) -> None:
    assert tables.to_text(tables.stage_bar(done, total, width=4)).strip() == bar


def test_table_shows_stages_clusters_failures_and_durations() -> None:
    view = ops_view.rollout_view(ps(phase="Progressing", stage_status=running_stages()))
    text = tables.render_table(view, NOW)
    lines = text.splitlines()
    assert lines[0] == "ProgressiveSync argocd/myservice"
    assert "phase:     Progressing" in text
    assert "rollout:   7f3c2a1 (attempt 1) to revision 4f1c2e9b7a3d" in text
    assert "running for 2m05s" in text
    canary = next(line for line in lines if line.startswith("canary "))
    assert canary.split()[:4] == ["canary", "Succeeded", "1/1", "-"]
    assert "8s" in canary
    region = next(line for line in lines if line.startswith("one per region "))
    assert "Progressing" in region
    assert "2/3" in region  # one updated, one failed: two of three done
    assert "1m55s" in region  # running since 10:00:10
    # The summary lists the clusters that matter now (failed, in flight); not the updated ones.
    assert "eu-2     one per region  failed: Degraded after the sync" in text
    assert "ap-1     one per region  syncing" in text
    assert "us-1" not in text
    assert "--clusters" not in text  # nothing left out of the summary's lists


def test_table_says_which_gate_waits_and_what_to_run() -> None:
    stages = [
        *running_stages()[:1],
        make_stage_status("one per region", phase="Succeeded"),
        make_stage_status("everything else"),
    ]
    workflow = make_workflow(nodes=[make_gate_node(WF, "everything else")])
    view = ops_view.rollout_view(ps(phase="Progressing", stage_status=stages), workflow)
    text = tables.render_table(view, NOW)
    assert "Progressing (waiting for approval)" in text
    assert "progressive-sync approve myservice --stage 'everything else'" in text
    assert "WaitingApproval" in text


def test_failed_rollout_points_at_retry() -> None:
    view = ops_view.rollout_view(
        ps(phase="Failed", finished_at="2026-11-29T10:01:00Z", message="stage failed")
    )
    assert "progressive-sync retry myservice -n argocd" in tables.render_table(view, NOW)


def test_data_form_has_durations_in_seconds() -> None:
    data = ops_view.render_data(
        ops_view.rollout_view(ps(phase="Progressing", stage_status=running_stages())), NOW
    )
    assert data["phase"] == "Progressing"
    assert data["finished"] is False
    assert data["rollout"]["id"] == "7f3c2a1"
    assert data["rollout"]["durationSeconds"] == 125.0
    assert [s["durationSeconds"] for s in data["stages"]] == [8.0, 115.0, None]
    assert data["stages"][1]["failed"] == [{"name": "eu-2", "reason": "Degraded after the sync"}]
    json.dumps(data)  # the JSON form must serialize as is


def test_bars_have_one_line_per_stage() -> None:
    view = ops_view.rollout_view(ps(phase="Progressing", stage_status=running_stages()))
    lines = tables.to_text(tables.stage_bars(view, NOW, width=6)).splitlines()
    assert lines[0].startswith("argocd/myservice: Progressing")
    assert "━━━━━━  1/1  Succeeded" in lines[1]
    assert "━━━━    2/3  Progressing" in lines[2]
    assert "-  Pending" in lines[3]


def test_change_lines_report_only_what_changed() -> None:
    before = ops_view.rollout_view(ps(phase="Progressing", stage_status=running_stages()))
    first = ops_view.change_lines(None, before)
    assert first[0] == "argocd/myservice: rollout 7f3c2a1 Progressing"
    assert any(line.startswith("stage 'canary': Succeeded 1/1") for line in first)
    assert not any("everything else" in line for line in first)  # pending stages stay quiet at first
    assert ops_view.change_lines(before, before) == []
    stages = running_stages()
    stages[1] = make_stage_status(
        "one per region",
        phase="Progressing",
        targets=("us-1", "ap-1", "eu-2"),
        completed=("us-1", "ap-1"),
        failed={"eu-2": "Degraded after the sync"},
        started_at="2026-11-29T10:00:10Z",
    )
    after = ops_view.rollout_view(ps(phase="Progressing", stage_status=stages))
    assert ops_view.change_lines(before, after) == [
        "stage 'one per region': Progressing 3/3, failed eu-2 (Degraded after the sync)"
    ]


def records_of(stage: str, index: int, targets: list[str], clusters: dict[str, Any]) -> ProgressiveSyncStage:
    (record,) = new_records(
        "myservice", "7f3c2a1", stage, stage_index=index, targets=targets, namespace="argocd"
    )
    return ProgressiveSyncStage.model_validate({**record.to_api(), "status": {"clusters": clusters}})


RECORDS = [
    records_of("canary", 0, ["eu-1"], {"eu-1": {"state": "Completed", "revisions": ["4f1c2e9b7a3d99"]}}),
    records_of(
        "one per region",
        1,
        ["us-1", "ap-1", "eu-2"],
        {
            "eu-2": {
                "state": "Failed",
                "reason": "Degraded after the sync",
                "finishedAt": "2026-11-29T10:01:00Z",
            },
            "us-1": {"state": "Syncing", "note": "sync window: deny until 14:00"},
        },
    ),
    # a record of another rollout: not this one's
    ProgressiveSyncStage.model_validate(
        {
            **records_of("canary", 0, ["old-1"], {}).to_api(),
            "spec": {**records_of("canary", 0, ["old-1"], {}).spec.to_api(), "rolloutId": "0ld"},
        }
    ),
]


def test_every_cluster_of_the_rollout_from_its_records() -> None:
    view = ops_view.rollout_view(ps(phase="Progressing", stage_status=running_stages()), None, RECORDS)
    assert [(c.name, c.stage, c.state) for c in view.clusters or ()] == [
        ("eu-1", "canary", "Completed"),
        ("us-1", "one per region", "Syncing"),
        ("ap-1", "one per region", "NotStarted"),  # a target without a record has not started
        ("eu-2", "one per region", "Failed"),
    ]
    text = tables.render_table(view, NOW)
    assert "REVISIONS" in text and "4f1c2e9b7a3d " in text
    assert re.search(
        r"eu-2\s+one per region\s+Failed\s+-\s+-\s+2026-11-29T10:01:00Z\s+Degraded after the sync", text
    )
    assert re.search(r"us-1\s+one per region\s+Syncing .*sync window: deny until 14:00", text)
    data = ops_view.render_data(view, NOW)
    assert data["clusters"][3] == {
        "name": "eu-2",
        "stage": "one per region",
        "state": "Failed",
        "reason": "Degraded after the sync",
        "note": "",
        "revisions": [],
        "startedAt": None,
        "finishedAt": "2026-11-29T10:01:00Z",
    }


def test_without_records_read_the_data_form_has_no_cluster_list() -> None:
    data = ops_view.render_data(
        ops_view.rollout_view(ps(phase="Progressing", stage_status=running_stages())), NOW
    )
    assert "clusters" not in data
    assert data["stages"][1]["counts"] == {"targets": 3, "syncing": 1, "completed": 1, "failed": 1}


def test_the_table_says_what_the_summary_left_out() -> None:
    stage = make_stage_status("one per region", phase="Progressing", targets=[f"c{i}" for i in range(30)])
    stage.syncing = [f"c{i}" for i in range(20)]
    stage.counts = StageCounts(targets=30, syncing=25)
    stage.more = MoreClusters(syncing=5)
    view = ops_view.rollout_view(ps(phase="Progressing", stage_status=[running_stages()[0], stage]))
    text = tables.render_table(view, NOW)
    assert "stage 'one per region': 5 more in flight not listed" in text
    assert "every cluster: progressive-sync status myservice -n argocd --clusters" in text
    assert ops_view.change_lines(None, view)[2] == (
        "stage 'one per region': Progressing 0/30, syncing "
        + ", ".join(f"c{i}" for i in range(20))
        + " and 5 more"
    )


# --- cancel, pause, retry ----------------------------------------------------------------------


def test_cancel_stops_a_running_workflow() -> None:
    assert ops.decide_cancel(ps(phase="Progressing"), make_workflow()) is ops.WorkflowAction.STOP


@pytest.mark.parametrize(
    ("shutdown", "action"),
    [
        pytest.param(None, "terminate", id="rolling-back-is-terminated"),
        pytest.param("Stop", "terminate", id="a-stop-does-not-end-the-exit-handler-so-terminate"),
        pytest.param("Terminate", "none", id="terminated-already"),
    ],
)
def test_cancel_during_a_rollback_terminates(shutdown: str | None, action: str) -> None:
    """Issue 32: the rollback runs in the exit handler, which `argo stop` lets finish."""
    workflow = make_workflow(shutdown=shutdown) if shutdown else make_workflow()
    assert ops.decide_cancel(ps(phase="RollingBack"), workflow).value == action


def test_cancel_twice_is_a_no_op() -> None:
    workflow = make_workflow(shutdown="Stop")
    assert ops.decide_cancel(ps(phase="Progressing"), workflow) is ops.WorkflowAction.NONE


@pytest.mark.parametrize(
    ("ps_kwargs", "workflow_phase", "expected"),
    [
        pytest.param(
            {"phase": "Progressing"}, "Succeeded", "already finished (Succeeded)", id="workflow-ended"
        ),
        pytest.param(
            {"phase": "Failed", "finished_at": "2026-11-29T10:01:00Z"},
            "Running",
            "already finished (Failed at 2026-11-29T10:01:00Z)",
            id="rollout-ended",
        ),
        pytest.param(
            {"phase": "Pending", "rollout_id": None}, "Running", "has no rollout to cancel", id="no-rollout"
        ),
    ],
)
def test_cancel_refuses(ps_kwargs: dict[str, Any], workflow_phase: str, expected: str) -> None:
    with pytest.raises(ops_view.OpsRefused) as caught:
        ops.decide_cancel(ps(**ps_kwargs), make_workflow(phase=workflow_phase))
    assert expected in caught.value.message
    assert "argocd/myservice" in caught.value.message
    assert caught.value.exit_code == 1


@pytest.mark.parametrize(
    ("paused", "wanted", "change"),
    [
        pytest.param(False, True, True, id="pause"),
        pytest.param(True, True, False, id="pause-again"),
        pytest.param(True, False, True, id="resume"),
        pytest.param(False, False, False, id="resume-not-paused"),
    ],
)
def test_pause_and_resume_change_only_what_differs(paused: bool, wanted: bool, change: bool) -> None:
    assert ops.decide_pause(ps(paused=paused), paused=wanted) is change


@pytest.mark.parametrize(
    ("phase", "refusal"),
    [
        pytest.param("Failed", None, id="failed"),
        pytest.param("Cancelled", None, id="cancelled"),
        pytest.param("Succeeded", "did not fail: it succeeded", id="succeeded"),
        pytest.param("Progressing", "it is still running (Progressing)", id="running"),
        pytest.param("Paused", "it is still running (Paused)", id="paused"),
    ],
)
def test_retry_only_after_a_failure(phase: str, refusal: str | None) -> None:
    target = ps(phase=phase)
    if refusal is None:
        assert ops.decide_retry(target).id == "7f3c2a1"
        return
    with pytest.raises(ops_view.OpsRefused, match="nothing to retry") as caught:
        ops.decide_retry(target)
    assert refusal in caught.value.message


def test_retry_tokens_are_fresh_and_valid_annotation_values() -> None:
    first = ops.new_retry_token(NOW)
    assert first.startswith("20261129T100205Z-")
    assert first != ops.new_retry_token(NOW)
    assert ops.new_retry_token(NOW, "abc") == "20261129T100205Z-abc"


# --- approval gates ----------------------------------------------------------------------------


def test_gates_ignore_bakes_and_opened_gates() -> None:
    workflow = make_workflow(
        nodes=[
            make_gate_node(WF, "canary", phase="Succeeded"),
            make_bake_node(WF, "canary"),
            make_gate_node(WF, "everything else"),
        ]
    )
    assert list(ops_view.waiting_gates(workflow, ps())) == ["everything else"]


def test_gate_stage_comes_from_the_node_name_without_inputs() -> None:
    workflow = make_workflow(nodes=[make_gate_node(WF, "everything else", with_input=False)])
    assert list(ops_view.waiting_gates(workflow, ps())) == ["everything else"]


@pytest.mark.parametrize(
    ("stage", "gates", "expected"),
    [
        pytest.param("everything else", ["everything else"], "everything else", id="named-stage"),
        pytest.param(None, ["everything else"], "everything else", id="the-only-gate"),
    ],
)
def test_approve_picks_the_gate(stage: str | None, gates: list[str], expected: str) -> None:
    workflow = make_workflow(nodes=[make_gate_node(WF, name) for name in gates])
    assert ops.decide_approve(ps(phase="Progressing"), workflow, stage).stage == expected


@pytest.mark.parametrize(
    ("stage", "nodes", "workflow_phase", "expected", "code"),
    [
        pytest.param(None, [], "Running", "nothing to approve: no approval gate", 1, id="no-gate-waits"),
        pytest.param(
            "everything else", [], "Running", "no approval gate of stage 'everything else'", 1, id="not-yet"
        ),
        pytest.param("canary", [], "Running", "has no manual approval gate", 1, id="automatic-stage"),
        pytest.param("nope", [], "Running", "has no stage 'nope'", 2, id="unknown-stage"),
        pytest.param(None, ["everything else"], "Succeeded", "already finished", 1, id="finished"),
    ],
)
def test_approve_refuses(
    stage: str | None, nodes: list[str], workflow_phase: str, expected: str, code: int
) -> None:
    workflow = make_workflow(phase=workflow_phase, nodes=[make_gate_node(WF, name) for name in nodes])
    with pytest.raises(ops_view.OpsRefused) as caught:
        ops.decide_approve(ps(phase="Progressing"), workflow, stage)
    assert expected in caught.value.message
    assert caught.value.exit_code == code


def test_approving_marks_only_the_gate_succeeded() -> None:
    workflow = make_workflow(
        suspend=True, nodes=[make_gate_node(WF, "everything else"), make_bake_node(WF, "x")]
    )
    gate = ops.decide_approve(ps(phase="Progressing"), workflow, None)
    updated = ops.approve_gate(workflow, gate, NOW)
    node = updated["status"]["nodes"][gate.node_id]
    assert node["phase"] == "Succeeded"
    assert node["finishedAt"] == "2026-11-29T10:02:05Z"
    assert updated["status"]["nodes"][f"{WF}-bake-x"]["phase"] == "Running"
    assert updated["spec"]["suspend"] is True  # a pause is the watcher's business
    assert workflow["status"]["nodes"][gate.node_id]["phase"] == "Running"  # input untouched


def test_approving_compressed_nodes_writes_them_back_compressed() -> None:
    workflow = make_workflow(nodes=[make_gate_node(WF, "everything else")])
    nodes = workflow["status"].pop("nodes")
    workflow["status"]["compressedNodes"] = base64.b64encode(
        gzip.compress(json.dumps(nodes).encode())
    ).decode()
    gate = ops.decide_approve(ps(phase="Progressing"), workflow, "everything else")
    updated = ops.approve_gate(workflow, gate, NOW)
    assert "nodes" not in updated["status"]
    stored = json.loads(gzip.decompress(base64.b64decode(updated["status"]["compressedNodes"])))
    assert stored[gate.node_id]["phase"] == "Succeeded"


def test_outcome_data_has_stable_keys() -> None:
    outcome = ops.Outcome("pause", "argocd", "x", changed=True, message="paused", details={"paused": True})
    assert outcome.to_data() == {
        "action": "pause",
        "namespace": "argocd",
        "name": "x",
        "changed": True,
        "message": "paused",
        "paused": True,
    }


def test_unknown_phase_in_status_is_refused_clearly() -> None:
    obj = make_ps(phase="Exploded")
    with pytest.raises(ops_view.OpsRefused, match="does not match this progressive-sync version's API"):
        ops_view.parse_progressive_sync(obj)


def test_long_stage_messages_are_cut_in_the_table_only() -> None:
    stages = running_stages()
    stages[1].message = "did not finish: " + "x" * 200
    view = ops_view.rollout_view(ps(phase="Failed", stage_status=stages))
    row = next(
        line for line in tables.render_table(view, NOW).splitlines() if line.startswith("one per region")
    )
    assert row.endswith("...")
    assert len(row.split("did not finish: ")[1]) == ops_view.MESSAGE_COLUMN_WIDTH - len("did not finish: ")
    assert ops_view.render_data(view, NOW)["stages"][1]["message"].endswith("x" * 200)


# --- the live display ---------------------------------------------------------------------------


def test_live_display_off_a_terminal_prints_only_plain_changed_lines() -> None:
    written: list[str] = []
    view = ops_view.rollout_view(ps(phase="Progressing", stage_status=running_stages()))
    with LiveDisplay(written.append, ManualClock(NOW), tty=False) as display:
        display.show(view)
        display.show(view)
    assert written[0] == "10:02:05 argocd/myservice: rollout 7f3c2a1 Progressing\n"
    assert len(written) == len(ops_view.change_lines(None, view)), "an unchanged view prints nothing"
    assert not any("\x1b" in text for text in written)


def test_live_display_on_a_terminal_redraws_in_place_and_gives_the_cursor_back() -> None:
    written: list[str] = []
    view = ops_view.rollout_view(ps(phase="Progressing", stage_status=running_stages()))
    with LiveDisplay(written.append, ManualClock(NOW), tty=True) as display:
        display.show(view)
        display.show(view)
    screen = "".join(written)
    assert screen.count("one per region") >= 2 and "2/3" in screen
    assert "\x1b[?25l" in screen, "the cursor is hidden while redrawing"
    assert screen.rstrip().endswith("\x1b[?25h"), "and shown again when the display closes"


def test_approve_opens_the_gate_of_an_inconclusive_analysis() -> None:
    """A stage without a manual gate whose analysis waits on Inconclusive (onInconclusive: Approve):
    its `approve-analysis` node is the `approval` template with the stage's input."""
    analysis = {"templates": [{"name": "error-rate"}], "onInconclusive": "Approve"}
    stages = [{**OPERATOR_STAGES[0], "analysis": analysis}, *OPERATOR_STAGES[1:]]
    gated = ops_view.parse_progressive_sync(make_ps(stages=stages, phase="Progressing"))
    workflow = make_workflow(nodes=[make_gate_node(WF, "canary")])
    assert ops.decide_approve(gated, workflow, "canary").stage == "canary"


def test_table_shows_each_stage_analysis_gate() -> None:
    stages = running_stages()
    stages[0].analysis = StageAnalysisStatus(
        run="myservice-7f3c2a1-canary-0a1b2c3d4e",
        phase="Failed",
        message="analysis failed: metric error-rate = [0.42] (successCondition result[0] < 0.05)",
    )
    text = tables.render_table(ops_view.rollout_view(ps(phase="Progressing", stage_status=stages)), NOW)
    assert (
        "analysis of 'canary': myservice-7f3c2a1-canary-0a1b2c3d4e Failed: analysis failed: metric "
        "error-rate = [0.42]" in text.replace("\n", " ")
    )


def test_the_rollback_has_its_own_line_and_json() -> None:
    """Issue 32: what the rollback did is read with `status`, as a line and in -o json."""
    rollback = {
        "trigger": "StageFailed",
        "scope": "Reached",
        "stages": ["one per region", "canary"],
        "targets": 3,
        "rolledBack": 2,
        "failed": 1,
        "notRestored": [{"name": "eu-2", "reason": "sync operation Failed"}],
        "startedAt": "2026-11-29T10:01:00Z",
        "finishedAt": "2026-11-29T10:02:00Z",
    }
    view = ops_view.rollout_view(
        ps(phase="Failed", stage_status=running_stages(), status_extra={"rollback": rollback})
    )
    rows = dict(ops_view.header_rows(view, NOW))
    assert rows["rollback:"] == (
        "StageFailed, scope Reached (one per region, canary): 2 restored, 0 left alone, 1 not restored: "
        "eu-2 (sync operation Failed)"
    )
    assert ops_view.render_data(view, NOW)["rollback"]["notRestored"] == rollback["notRestored"]
