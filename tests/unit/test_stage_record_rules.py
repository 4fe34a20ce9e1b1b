"""The ProgressiveSyncStage rules: names, parts, the merge rule and the summary (pure)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from orchestrator.api.models import OBJECT_NAME_MAX_LENGTH, OBJECT_NAME_PATTERN
from orchestrator.api.stage_records import (
    FAILED_LABEL,
    RECORD_MAX_APPS_PER_CLUSTER,
    RECORD_MAX_CLUSTERS,
    RECORD_TARGET_APPS_MAX_CHARS,
    ClusterRecord,
    ClusterState,
    StageOutcomes,
    StageRecordSpec,
    StageRecordStatus,
    clusters_patch,
    end_record,
    merge_record,
    merged_with,
    new_records,
    noted,
    outcomes_of,
    part_of,
    planned_apps,
    record_name,
    record_selector,
    split_parts,
    summarize,
)

T0 = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
SYNCING = ClusterRecord(state=ClusterState.SYNCING, started_at=T0, revisions=["abc"])
COMPLETED = ClusterRecord(state=ClusterState.COMPLETED, started_at=T0, finished_at=T0 + timedelta(minutes=1))
FAILED = ClusterRecord(state=ClusterState.FAILED, reason="Degraded", finished_at=T0 + timedelta(minutes=2))


@pytest.mark.parametrize(
    ("current", "proposed", "expected"),
    [
        pytest.param(None, SYNCING, SYNCING, id="first-record-is-written"),
        pytest.param(SYNCING, SYNCING, None, id="same-record-writes-nothing"),
        pytest.param(
            SYNCING,
            COMPLETED,
            COMPLETED.model_copy(update={"revisions": ["abc"]}),
            id="syncing-to-completed-keeps-revisions-and-start",
        ),
        pytest.param(COMPLETED, SYNCING, None, id="completed-never-goes-back-to-syncing"),
        pytest.param(FAILED, COMPLETED, None, id="failed-is-never-replaced-by-completed"),
        pytest.param(
            COMPLETED, FAILED, FAILED.model_copy(update={"started_at": T0}), id="failed-wins-over-completed"
        ),
        pytest.param(
            COMPLETED,
            ClusterRecord(state=ClusterState.SYNCING, note="sync window"),
            COMPLETED.model_copy(update={"note": "sync window"}),
            id="a-note-lands-on-an-end-state",
        ),
        pytest.param(
            FAILED,
            FAILED.model_copy(update={"reason": "later", "finished_at": T0 + timedelta(hours=1)}),
            None,
            id="the-first-failure-reason-and-time-stay",
        ),
    ],
)
def test_merge_record(
    current: ClusterRecord | None, proposed: ClusterRecord, expected: ClusterRecord | None
) -> None:
    assert merge_record(current, proposed) == expected


_states = st.sampled_from(list(ClusterState))
_records = st.builds(
    ClusterRecord,
    state=_states,
    reason=st.sampled_from(["", "why"]),
    note=st.sampled_from(["", "held"]),
)
_RANK = {ClusterState.SYNCING: 0, ClusterState.SKIPPED: 1, ClusterState.COMPLETED: 2, ClusterState.FAILED: 3}


@given(st.lists(_records, min_size=1, max_size=6))
def test_the_state_only_moves_forward_whatever_the_order_of_writes(writes: list[ClusterRecord]) -> None:
    current: ClusterRecord | None = None
    for proposed in writes:
        merged = merge_record(current, proposed)
        if merged is not None:
            assert current is None or _RANK[merged.state] >= _RANK[current.state]
            current = merged
    assert current is not None
    assert current.state == max((w.state for w in writes), key=_RANK.__getitem__)
    assert merge_record(current, current) is None  # applying a record again changes nothing


@given(st.from_regex(OBJECT_NAME_PATTERN, fullmatch=True).filter(lambda n: len(n) <= OBJECT_NAME_MAX_LENGTH))
def test_record_names_are_object_names(progressive_sync: str) -> None:
    name = record_name(progressive_sync, "7f3c2a1-2", 49, 19)
    assert len(name) <= OBJECT_NAME_MAX_LENGTH
    assert re.fullmatch(OBJECT_NAME_PATTERN, name), name
    assert name.endswith("-7f3c2a1-2-49-19")


@pytest.mark.parametrize(
    ("count", "parts"),
    [
        pytest.param(0, 0, id="no-targets-no-record"),
        pytest.param(1, 1, id="one-cluster-one-part"),
        pytest.param(RECORD_MAX_CLUSTERS, 1, id="a-full-part"),
        pytest.param(RECORD_MAX_CLUSTERS + 1, 2, id="one-more-starts-a-part"),
        pytest.param(10_000, 20, id="ten-thousand-clusters"),
    ],
)
def test_split_parts(count: int, parts: int) -> None:
    targets = [f"cluster-{i:05d}" for i in range(count)]
    split = split_parts(targets)
    assert len(split) == parts
    assert [name for part in split for name in part] == targets
    assert all(name in split[part_of(i)] for i, name in enumerate(targets))


def test_a_stage_read_back_from_its_parts_in_any_order_is_summarized_in_rollout_order() -> None:
    targets = [f"c{i:04d}" for i in range(RECORD_MAX_CLUSTERS + 30)]
    records = new_records("web", "7f3c2a1", "everything", stage_index=2, targets=targets, namespace="argocd")
    assert [r.metadata.name for r in records] == ["web-7f3c2a1-2-0", "web-7f3c2a1-2-1"]
    assert records[0].metadata.labels == {
        "progressivesync.io/name": "web",
        "progressivesync.io/rollout-id": "7f3c2a1",
        "progressivesync.io/stage-index": "2",
    }
    assert record_selector("web", "7f3c2a1", 2) == (
        "progressivesync.io/name=web,progressivesync.io/rollout-id=7f3c2a1,progressivesync.io/stage-index=2"
    )
    assert record_selector("web", "7f3c2a1", 2, failed=True) == (
        "progressivesync.io/name=web,progressivesync.io/rollout-id=7f3c2a1,progressivesync.io/stage-index=2,"
        "progressivesync.io/failed=true"
    )
    late_failure = FAILED.model_copy(update={"reason": "late", "finished_at": T0 + timedelta(hours=1)})
    records[0].status = StageRecordStatus(clusters={"c0000": SYNCING, "c0003": late_failure})
    records[1].status = StageRecordStatus(clusters={"c0510": FAILED, "c0500": COMPLETED})
    outcomes = outcomes_of("everything", reversed(records))
    assert outcomes.targets == tuple(targets)
    assert outcomes.failed == ("c0510", "c0003")  # the first to fail first
    assert outcomes.completed == ("c0500",)
    assert outcomes.syncing == ("c0000",)
    assert len(outcomes.not_started) == len(targets) - 4
    summary = summarize(outcomes, cap=1)
    assert (
        summary.counts.targets,
        summary.counts.syncing,
        summary.counts.completed,
        summary.counts.failed,
    ) == (
        len(targets),
        1,
        1,
        2,
    )
    assert [f.name for f in summary.failed] == ["c0510"]
    assert summary.more_failed == 1
    assert summary.records == ("web-7f3c2a1-2-0", "web-7f3c2a1-2-1")


def test_the_patch_writes_a_record_whole() -> None:
    patch = clusters_patch({"c1": COMPLETED})
    assert patch == {
        "status": {
            "clusters": {
                "c1": {
                    "state": "Completed",
                    "reason": None,
                    "note": None,
                    "revisions": None,
                    "startedAt": "2026-12-03T12:00:00.000000Z",
                    "finishedAt": "2026-12-03T12:01:00.000000Z",
                }
            }
        }
    }


@pytest.mark.parametrize(
    ("records", "labelled"),
    [
        pytest.param({"c1": COMPLETED}, False, id="no-failure-no-label"),
        pytest.param({"c1": SYNCING, "c2": FAILED}, True, id="a-failure-labels-the-object"),
        pytest.param({"c2": FAILED}, True, id="a-failure-alone"),
    ],
)
def test_the_patch_that_records_a_failure_labels_the_object(
    records: dict[str, ClusterRecord], labelled: bool
) -> None:
    """The label a stage-failure check lists by comes with the failure, in the same write."""
    patch = clusters_patch(records)
    assert set(patch["status"]["clusters"]) == set(records)
    assert patch.get("metadata") == ({"labels": {FAILED_LABEL: "true"}} if labelled else None)


@given(
    st.dictionaries(st.sampled_from(["c1", "c2", "c3"]), st.sampled_from([SYNCING, COMPLETED, FAILED])),
    st.dictionaries(st.sampled_from(["c1", "c2", "c3"]), st.sampled_from([SYNCING, COMPLETED, FAILED])),
)
def test_records_merged_in_never_take_an_outcome_back(
    first: dict[str, ClusterRecord], fresher: dict[str, ClusterRecord]
) -> None:
    """A batch's first read with what it wrote and the failures read since: a cluster failed in
    either is failed in the merge (the failure count never drops), and an outcome never goes back."""
    outcomes = outcomes_of("s", [])
    outcomes = merged_with(merged_with(outcomes, first), fresher)
    rank = {
        ClusterState.SYNCING: 0,
        ClusterState.SKIPPED: 1,
        ClusterState.COMPLETED: 2,
        ClusterState.FAILED: 3,
    }
    for name in set(first) | set(fresher):
        states = [r.state for r in (first.get(name), fresher.get(name)) if r is not None]
        assert outcomes.clusters[name].state == max(states, key=rank.__getitem__)
    assert set(outcomes.failed) == {
        n for n, r in {**first, **fresher}.items() if r.state == ClusterState.FAILED
    } | {n for n, r in first.items() if r.state == ClusterState.FAILED}


def test_syncing_then_completed_then_syncing_again_keeps_it_completed() -> None:
    """A late, repeated sync step never takes a done cluster back to Syncing."""
    record = merge_record(None, ClusterRecord(state=ClusterState.SYNCING, started_at=T0))
    record = end_record(record, COMPLETED)
    assert record is not None and record.state == ClusterState.COMPLETED
    assert merge_record(record, ClusterRecord(state=ClusterState.SYNCING, started_at=T0)) is None


def test_the_first_failure_reason_wins() -> None:
    first = end_record(None, FAILED)
    assert end_record(first, FAILED.model_copy(update={"reason": "second"})) is None


def test_a_note_lasts_while_it_is_said_and_goes_with_the_outcome() -> None:
    record = noted(None, "health Suspended")
    assert record == ClusterRecord(state=ClusterState.SYNCING, note="health Suspended")
    record = noted(record, "health Missing")
    assert record is not None and record.note == "health Missing"
    assert noted(None, "") is None  # nothing to say about a cluster not started
    assert noted(record, "") == record.model_copy(update={"note": ""})
    failed = end_record(record, FAILED)
    assert failed is not None and failed.note == ""  # the reason says it all
    done = end_record(record, COMPLETED.model_copy(update={"note": "a remark"}))
    assert done is not None and done.note == "a remark"
    assert noted(done, "held") is None  # an outcome keeps its own


def test_two_failures_in_one_second_are_listed_first_to_fail_first() -> None:
    """A failure and the stop of a sibling it caused often fall in one second: the records keep
    microseconds, so the read-back order is the order they happened in, not the rollout order."""
    first = datetime(2026, 12, 3, 12, 0, 5, 900_000, tzinfo=UTC)
    caused = datetime(2026, 12, 3, 12, 0, 5, 950_000, tzinfo=UTC)
    stopped = ClusterRecord(state=ClusterState.FAILED, reason="stopped", started_at=first, finished_at=caused)
    degraded = ClusterRecord(
        state=ClusterState.FAILED, reason="Degraded", started_at=first, finished_at=first
    )
    wire = clusters_patch({"a-sibling": stopped, "b-bad": degraded})["status"]["clusters"]
    read_back = {name: ClusterRecord.model_validate(record) for name, record in wire.items()}
    outcomes = StageOutcomes(stage="all", targets=("a-sibling", "b-bad"), clusters=read_back)
    assert outcomes.failed == ("b-bad", "a-sibling")


# --- targetApps: the Applications select planned for each target (issue 33) ------------------

LONG = "a" * OBJECT_NAME_MAX_LENGTH


@pytest.mark.parametrize(
    ("targets", "apps", "expected"),
    [
        pytest.param(["c1", "c2"], {}, None, id="no-plan-no-field"),
        pytest.param(
            ["c1", "c2"],
            {"c1": ("b", "a", "a"), "c2": ("z",)},
            {"c1": ["a", "b"], "c2": ["z"]},
            id="sorted-each-once",
        ),
        pytest.param(
            ["c1", "c2"], {"c1": (), "c2": ("z",)}, {"c2": ["z"]}, id="a-target-without-apps-left-out"
        ),
        pytest.param(["c1"], {"c1": ("a",), "other": ("b",)}, {"c1": ["a"]}, id="only-this-parts-targets"),
        pytest.param(
            ["c1", "c2"],
            {"c1": tuple(f"app-{i}" for i in range(RECORD_MAX_APPS_PER_CLUSTER + 1)), "c2": ("z",)},
            {"c2": ["z"]},
            id="a-cluster-past-the-per-cluster-bound-left-out",
        ),
        pytest.param(
            [f"c{i}" for i in range(RECORD_MAX_CLUSTERS)],
            {f"c{i}": tuple(f"{LONG[:-4]}{j:04d}" for j in range(8)) for i in range(RECORD_MAX_CLUSTERS)},
            "bounded",
            id="the-part-stops-at-the-character-bound",
        ),
        pytest.param(["c1"], {"c1": ()}, None, id="nothing-left-no-field"),
    ],
)
def test_planned_apps(targets: list[str], apps: dict[str, tuple[str, ...]], expected: object) -> None:
    planned = planned_apps(targets, apps)
    if expected != "bounded":
        assert planned == expected
        return
    assert planned is not None and 0 < len(planned) < len(targets)
    assert list(planned) == targets[: len(planned)]  # rollout order, cut at the bound
    assert sum(len(c) + sum(map(len, names)) for c, names in planned.items()) <= RECORD_TARGET_APPS_MAX_CHARS
    spec = new_records("ps", "r1", "rest", stage_index=0, targets=targets, namespace="ns", apps=apps)[0].spec
    assert spec.target_apps == planned  # valid as written


def spec_with(target_apps: object) -> dict[str, object]:
    return {
        "progressiveSync": "ps",
        "rolloutId": "r1",
        "stage": "rest",
        "stageIndex": 0,
        "targets": ["c1"],
        "targetApps": target_apps,
    }


@pytest.mark.parametrize(
    ("target_apps", "valid"),
    [
        pytest.param(None, True, id="absent-as-in-older-records"),
        pytest.param({"c1": ["a", "b"]}, True, id="names"),
        pytest.param({"c1": []}, False, id="an-empty-list"),
        pytest.param({"c1": [""]}, False, id="an-empty-name"),
        pytest.param({"c1": [LONG + "x"]}, False, id="an-application-name-too-long"),
        pytest.param({LONG + "x": ["a"]}, False, id="a-cluster-name-too-long"),
        pytest.param({"c1": ["a"] * (RECORD_MAX_APPS_PER_CLUSTER + 1)}, False, id="too-many-for-a-cluster"),
        pytest.param({f"c{i}": ["a"] for i in range(RECORD_MAX_CLUSTERS + 1)}, False, id="too-many-clusters"),
        pytest.param(
            {f"c{i}": [LONG, LONG] for i in range(RECORD_MAX_CLUSTERS)}, False, id="too-many-characters"
        ),
    ],
)
def test_target_apps_validation(target_apps: object, valid: bool) -> None:
    body = spec_with(target_apps)
    if valid:
        spec = StageRecordSpec.model_validate(body)
        assert spec.target_apps == target_apps
        assert ("targetApps" in spec.to_api()) is (target_apps is not None)
    else:
        with pytest.raises(ValidationError):
            StageRecordSpec.model_validate(body)


def test_outcomes_carry_each_parts_target_apps_and_a_merge_keeps_them() -> None:
    targets = [f"c{i}" for i in range(RECORD_MAX_CLUSTERS + 2)]
    apps = {name: (f"app-{name}",) for name in targets if name != "c1"}
    records = new_records("ps", "r1", "rest", stage_index=0, targets=targets, namespace="ns", apps=apps)
    assert len(records) == 2
    outcomes = outcomes_of("rest", reversed(records))
    assert outcomes.apps == {name: (f"app-{name}",) for name in targets if name != "c1"}
    assert merged_with(outcomes, {"c0": FAILED}).apps == outcomes.apps
    old = new_records("ps", "r1", "rest", stage_index=0, targets=["c0"], namespace="ns")
    assert old[0].spec.target_apps is None and outcomes_of("rest", old).apps == {}
