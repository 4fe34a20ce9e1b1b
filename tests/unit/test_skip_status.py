"""What the status says of skipped clusters (docs/skip.md, docs/status.md): the stage's verdict
(`assess_stage`: a skipped target is neither failed nor pending), the records' merge order, the
summary and `status.stages[].skipped` (bounded by STATUS_LIST_CAP), the progress, and what
`progressive-sync status` shows of them (its table rows, its `-o json|yaml` data). Pure.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from orchestrator.api import rollout_status as rs
from orchestrator.api.models import (
    STATUS_LIST_CAP,
    MoreClusters,
    ProgressiveSyncStatus,
    SkippedCluster,
    StagePhase,
)
from orchestrator.api.stage_records import ClusterRecord, ClusterState, end_record, summarize, summary_line
from orchestrator.argocd.assess import assess_stage
from orchestrator.ops.decisions import decide_retry
from orchestrator.ops.view import (
    OpsRefused,
    cluster_rows,
    cluster_state_text,
    parse_progressive_sync,
    render_data,
    rollout_view,
)
from tests.support.builders import OPERATOR_STAGES, T0, make_ps, make_stage_outcomes, make_stage_status

MARK = "Application web-b is annotated progressivesync.io/skip: INC-1"


@pytest.mark.parametrize(
    ("outcomes", "max_failed", "expected"),
    [
        pytest.param(
            make_stage_outcomes(targets=("a", "b"), completed=("a",), skipped={"b": MARK}),
            0,
            (StagePhase.SUCCEEDED, "1 of 2 clusters updated, 1 skipped (b)"),
            id="skipped-target-lets-the-stage-succeed",
        ),
        pytest.param(
            make_stage_outcomes(targets=("b",), skipped={"b": MARK}),
            0,
            (StagePhase.SUCCEEDED, "0 of 1 clusters updated, 1 skipped (b)"),
            id="stage-of-only-skipped-targets-succeeds",
        ),
        pytest.param(
            make_stage_outcomes(
                targets=("a", "b", "c"), syncing=("a",), skipped={"b": MARK}, completed=("c",)
            ),
            0,
            (StagePhase.FAILED, "1 of 3 clusters did not finish: a; 1 updated, 0 failed"),
            id="skipped-is-not-unfinished-but-syncing-is",
        ),
        pytest.param(
            make_stage_outcomes(targets=("a", "b"), failed={"a": "Degraded"}, skipped={"b": MARK}),
            0,
            (StagePhase.FAILED, "1 of 2 clusters failed (at most 0 tolerated): a (Degraded); 0 updated"),
            id="skipped-does-not-hide-a-failure",
        ),
    ],
)
def test_a_stage_with_skipped_targets(outcomes, max_failed: int, expected) -> None:  # type: ignore[no-untyped-def]
    status = make_stage_status(phase=StagePhase.PROGRESSING)
    assert assess_stage(status, outcomes, max_failed_clusters=max_failed) == expected


@pytest.mark.parametrize(
    ("first", "then", "stays"),
    [
        pytest.param(
            ClusterState.SKIPPED,
            ClusterState.SYNCING,
            ClusterState.SKIPPED,
            id="skipped-never-back-to-syncing",
        ),
        pytest.param(
            ClusterState.SKIPPED,
            ClusterState.SKIPPED,
            ClusterState.SKIPPED,
            id="skipped-twice-writes-nothing",
        ),
        pytest.param(
            ClusterState.SKIPPED, ClusterState.FAILED, ClusterState.FAILED, id="failed-wins-over-skipped"
        ),
        pytest.param(
            ClusterState.COMPLETED,
            ClusterState.SKIPPED,
            ClusterState.COMPLETED,
            id="a-late-skip-does-not-undo-completed",
        ),
    ],
)
def test_the_record_of_a_skipped_cluster_only_moves_forward(
    first: ClusterState, then: ClusterState, stays: ClusterState
) -> None:
    current = ClusterRecord(state=first, reason=MARK if first == ClusterState.SKIPPED else "", finished_at=T0)
    merged = end_record(current, ClusterRecord(state=then, reason="x", finished_at=T0))
    assert (merged or current).state == stays
    if first == then:
        assert merged is None, "the same outcome again writes nothing"


def test_the_summary_lists_skipped_targets_with_why_and_counts_them() -> None:
    names = [f"c{i:02}" for i in range(STATUS_LIST_CAP + 5)]
    outcomes = make_stage_outcomes(targets=tuple(names), skipped={n: f"{MARK} {n}" for n in names})
    summary = summarize(outcomes)
    assert summary.counts.skipped == len(names)
    assert [s.name for s in summary.skipped] == names[:STATUS_LIST_CAP]
    assert summary.more_skipped == 5
    assert summary_line(summary) == f"{len(names)}/{len(names)}, {len(names)} skipped"

    status = rs.start_rollout(ProgressiveSyncStatus(), rollout_id="r1", stage_names=["s"], now=T0)
    status = rs.start_stage(status, stage="s", summary=summary, message="", now=T0, planned_total=len(names))
    wire = status.to_api()["stages"][0]
    assert len(wire["skipped"]) == STATUS_LIST_CAP and wire["skipped"][0] == {
        "name": "c00",
        "reason": f"{MARK} c00",
    }
    assert wire["more"]["skipped"] == 5 and wire["counts"]["skipped"] == len(names)
    assert status.progress == "0/0", "skipped targets are out of the total, not pending"


def test_select_notes_the_planned_skips_and_summaries_keep_them() -> None:
    status = rs.start_rollout(ProgressiveSyncStatus(), rollout_id="r1", stage_names=["s"], now=T0)
    outcomes = make_stage_outcomes("s", targets=("a", "b"), syncing=("a",), skipped={"b": MARK})
    status = rs.start_stage(status, stage="s", summary=summarize(outcomes), message="", now=T0)
    status = rs.note_skipped(
        status, stage="s", skipped={"z": "cluster z matches spec.skip.clusters.selector"}
    )
    again = rs.apply_summary(status.model_copy(deep=True), "s", summarize(outcomes))
    assert again == status, "applying the same records again changes nothing"
    assert [(s.name, s.reason) for s in (status.stages or [])[0].skipped] == [
        ("b", MARK),
        ("z", "cluster z matches spec.skip.clusters.selector"),
    ]
    assert (status.counts.skipped if status.counts else None) == 1
    assert status.progress == "0/1"


def test_people_read_skipped_with_why() -> None:
    assert cluster_state_text(ClusterState.SKIPPED.value, MARK) == f"skipped: {MARK}"


@pytest.mark.parametrize(
    ("skipped", "allowed"),
    [
        pytest.param(
            [{"name": "eu-2", "reason": MARK}], True, id="succeeded-with-skipped-clusters-may-retry"
        ),
        pytest.param([], False, id="succeeded-without-skipped-clusters-has-nothing-to-retry"),
    ],
)
def test_retry_after_a_success_that_left_clusters_out(skipped: list[dict[str, str]], allowed: bool) -> None:
    stage = make_stage_status("canary", phase=StagePhase.SUCCEEDED, targets=("eu-1",), completed=("eu-1",))
    stage.skipped = [SkippedCluster.model_validate(s) for s in skipped]
    target = parse_progressive_sync(make_ps(stages=OPERATOR_STAGES, phase="Succeeded", stage_status=[stage]))
    if allowed:
        assert decide_retry(target).id
        return
    with pytest.raises(OpsRefused, match="it succeeded"):
        decide_retry(target)


def test_status_lists_skipped_clusters_with_the_ones_that_matter_now() -> None:
    stage = make_stage_status("canary", phase=StagePhase.SUCCEEDED, targets=("eu-1",), completed=("eu-1",))
    stage.skipped = [SkippedCluster(name="eu-2", reason=MARK)]
    view = rollout_view(
        parse_progressive_sync(make_ps(stages=OPERATOR_STAGES, phase="Succeeded", stage_status=[stage]))
    )
    assert ("eu-2", "canary", f"skipped: {MARK}") in cluster_rows(view)


@pytest.mark.parametrize(
    "load",
    [
        pytest.param(lambda data: json.loads(json.dumps(data)), id="json"),
        pytest.param(lambda data: yaml.safe_load(yaml.safe_dump(data, sort_keys=False)), id="yaml"),
    ],
)
def test_status_data_form_lists_skipped_clusters_with_why(load: Callable[[Any], Any]) -> None:
    stage = make_stage_status("canary", phase=StagePhase.SUCCEEDED, targets=("eu-1",), completed=("eu-1",))
    stage.skipped = [SkippedCluster(name="eu-2", reason=MARK)]
    stage.more = MoreClusters(skipped=3)
    view = rollout_view(
        parse_progressive_sync(make_ps(stages=OPERATOR_STAGES, phase="Succeeded", stage_status=[stage]))
    )
    data = load(render_data(view, T0))
    canary, *later = data["stages"]
    assert canary["skipped"] == [{"name": "eu-2", "reason": MARK}]
    assert canary["more"]["skipped"] == 3
    assert [s["skipped"] for s in later] == [[] for _ in later]
