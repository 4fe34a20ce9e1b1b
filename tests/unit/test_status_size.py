"""The ProgressiveSync status is bound whatever the fleet; a stage's records are bound per object
(issues 15 and 30).

The status holds each stage's summary (counts, the first clusters in flight, failed and noted,
its records' names), never every cluster: its size grows with stages, not clusters. Each cluster's
record is in the stage's ProgressiveSyncStage objects, at most `RECORD_MAX_CLUSTERS` per object.
Pure: the status is built with the steps' own functions (`orchestrator.api.rollout_status`,
`stage_records.summarize`) and serialized the way the writers send it (`to_api`). The records'
size as the API server stores them (managedFields included) is measured against the real API
server in tests/integration/test_stage_records_size.py.
"""

from __future__ import annotations

import json
import random
import string
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.api.models import (
    MAX_STAGES,
    REASON_MAX_CHARS,
    STAGE_NAME_MAX_LENGTH,
    STATUS_LIST_CAP,
    STATUS_MAX_BYTES,
    ProgressiveSyncStatus,
    StageCounts,
    StagePhase,
    status_wire_bytes,
)
from orchestrator.api.rollout_status import apply_summary, close_stage, start_rollout, start_stage
from orchestrator.api.stage_records import (
    RECORD_MAX_CLUSTERS,
    RECORD_TEXT_MAX_CHARS,
    ClusterRecord,
    ClusterState,
    StageOutcomes,
    StageRecordStatus,
    new_records,
    summarize,
)

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
BUDGET = 256 * 1024
DNS_CHARS = string.ascii_lowercase + string.digits


def fleet_name(index: int) -> str:
    """Names like a real fleet's (and bench/scale_fleet.py's): ~22 characters."""
    return f"cell-{index:05d}-region-{index % 20:02d}{'abc'[index % 3]}"


def longest_name(index: int, rng: random.Random) -> str:
    """A valid Kubernetes name of the most characters allowed (253), random but for a counter."""
    return f"{index:05d}." + "".join(rng.choice(DNS_CHARS) for _ in range(247))


def outcomes_of_stage(stage: str, names: list[str], reason: str, note: str) -> StageOutcomes:
    """A third failed (long reason), a third done, a third in flight with a long note."""
    clusters = {}
    for index, name in enumerate(names):
        if index % 3 == 0:
            finished = NOW + timedelta(seconds=index)
            clusters[name] = ClusterRecord(state=ClusterState.FAILED, reason=reason, finished_at=finished)
        elif index % 3 == 1:
            clusters[name] = ClusterRecord(state=ClusterState.COMPLETED, started_at=NOW, finished_at=NOW)
        else:
            clusters[name] = ClusterRecord(state=ClusterState.SYNCING, note=note, started_at=NOW)
    records = tuple(
        r.metadata.name for r in new_records("ps", "r1", stage, stage_index=0, targets=names, namespace="n")
    )
    return StageOutcomes(stage=stage, targets=tuple(names), clusters=clusters, records=records)


def test_a_10000_cluster_rollout_at_its_largest_stays_under_256_kib() -> None:
    # The worst moment for size: every stage selected, a third of the clusters in flight with a
    # long note, a third failed with a long reason, a third done.
    names = [fleet_name(index) for index in range(10_000)]
    stages = ("canary", "one per region", "ten percent", "the rest")
    sizes = (1, 19, 1_000, 8_980)
    status = start_rollout(ProgressiveSyncStatus(), rollout_id="602c4d4c1d", stage_names=stages, now=NOW)
    position = 0
    for stage, size in zip(stages, sizes, strict=True):
        outcomes = outcomes_of_stage(stage, names[position : position + size], "x" * 512, "held " * 100)
        position += size
        status = start_stage(status, stage=stage, summary=summarize(outcomes), message="selected", now=NOW)
    wire = status.to_api()
    size = len(json.dumps(wire, separators=(",", ":")).encode())
    assert size < BUDGET, f"{size:,} bytes"
    failed = sum(len(range(0, n, 3)) for n in sizes)
    completed = sum(len(range(1, n, 3)) for n in sizes)
    syncing = 10_000 - failed - completed
    assert wire["counts"] == {"targets": 10_000, "syncing": syncing, "completed": completed, "failed": failed}
    rest = wire["stages"][3]
    assert len(rest["failed"]) == len(rest["syncing"]) == len(rest["notes"]) == STATUS_LIST_CAP
    assert all(len(failure["reason"]) <= REASON_MAX_CHARS for failure in rest["failed"])
    assert rest["more"]["failed"] == len(range(0, 8_980, 3)) - STATUS_LIST_CAP
    assert len(rest["records"]) == -(-8_980 // RECORD_MAX_CLUSTERS)


def test_the_worst_case_parent_status_stays_under_its_bound() -> None:
    """50 stages of 63-character names, each with full lists of 253-character clusters, reasons and
    notes of 512 characters and 20 records: under 240 KiB as the API server writes it."""
    rng = random.Random(30)
    stage_names = [f"{index:02d}" + "s" * (STAGE_NAME_MAX_LENGTH - 2) for index in range(MAX_STAGES)]
    status = start_rollout(ProgressiveSyncStatus(), rollout_id="602c4d4c1d", stage_names=stage_names, now=NOW)
    for number, stage in enumerate(stage_names):
        names = [longest_name(number * 100 + index, rng) for index in range(3 * STATUS_LIST_CAP + 3)]
        outcomes = outcomes_of_stage(stage, names, "r" * RECORD_TEXT_MAX_CHARS, "n" * RECORD_TEXT_MAX_CHARS)
        outcomes = StageOutcomes(
            stage=stage,
            targets=outcomes.targets,
            clusters=outcomes.clusters,
            records=tuple(f"{'p' * 200}-{part}" for part in range(20)),
        )
        status = start_stage(status, stage=stage, summary=summarize(outcomes), message="m" * 2_000, now=NOW)
    wire = status.to_api()
    assert status_wire_bytes(wire) <= STATUS_MAX_BYTES
    assert all(len(stage["records"]) == 20 for stage in wire["stages"])  # never cut: steps read them
    assert all(stage["counts"]["targets"] == 3 * STATUS_LIST_CAP + 3 for stage in wire["stages"])


@settings(max_examples=12, deadline=None)
@given(
    count=st.integers(min_value=0, max_value=10_000),
    name_length=st.integers(min_value=1, max_value=253),
    stages=st.integers(min_value=1, max_value=MAX_STAGES),
    finished=st.integers(min_value=0, max_value=MAX_STAGES),
    reason=st.text(max_size=RECORD_TEXT_MAX_CHARS),
    seed=st.integers(min_value=0, max_value=2**32),
)
def test_the_status_never_passes_its_bound_and_keeps_every_count(
    *, count: int, name_length: int, stages: int, finished: int, reason: str, seed: int
) -> None:
    rng = random.Random(seed)
    names = list(
        dict.fromkeys(
            f"{index}-{''.join(rng.choice(DNS_CHARS) for _ in range(name_length))}"[:253]
            for index in range(count)
        )
    )
    stage_names = [f"stage-{n}" for n in range(stages)]
    status = start_rollout(ProgressiveSyncStatus(), rollout_id="602c4d4c1d", stage_names=stage_names, now=NOW)
    per_stage = -(-len(names) // stages) if names else 0
    expected: list[StageCounts] = []
    for number, stage in enumerate(stage_names):
        outcomes = outcomes_of_stage(
            stage, names[number * per_stage : (number + 1) * per_stage], reason, reason
        )
        status = start_stage(status, stage=stage, summary=summarize(outcomes), message=reason, now=NOW)
        expected.append(outcomes.counts())
    for stage in stage_names[:finished]:
        status = close_stage(status, stage=stage, phase=StagePhase.SUCCEEDED, message=reason * 10, now=NOW)
    wire = status.to_api()
    assert status_wire_bytes(wire) <= STATUS_MAX_BYTES
    assert len(json.dumps(wire, separators=(",", ":"), ensure_ascii=False).encode()) < BUDGET
    for stage_wire, counts in zip(wire["stages"], expected, strict=True):
        if counts.targets:
            assert stage_wire["counts"] == counts.model_dump(by_alias=True, exclude_none=True)
    # Read back and written again (the status writer's round): still within the bound, the same
    # counts, nothing else changes.
    again = ProgressiveSyncStatus.model_validate(json.loads(json.dumps(wire)))
    assert again.to_api() == ProgressiveSyncStatus.model_validate(again.to_api()).to_api()
    assert again.to_api().get("counts") == wire.get("counts")


def test_a_summary_applied_again_writes_nothing() -> None:
    names = [fleet_name(index) for index in range(1_000)]
    summary = summarize(outcomes_of_stage("all", names, "Degraded", ""))
    status = start_rollout(ProgressiveSyncStatus(), rollout_id="r1", stage_names=["all"], now=NOW)
    once = apply_summary(status, "all", summary).to_api()
    twice = apply_summary(ProgressiveSyncStatus.model_validate(once), "all", summary).to_api()
    assert once == twice


def test_a_full_part_of_the_longest_names_fits_one_object_many_times_over() -> None:
    """A record of `RECORD_MAX_CLUSTERS` clusters of 253-character names, every field at its
    longest, as the model serializes it (the API server adds managedFields: measured for real in
    tests/integration/test_stage_records_size.py)."""
    rng = random.Random(30)
    names = [longest_name(index, rng) for index in range(RECORD_MAX_CLUSTERS)]
    (record,) = new_records("ps", "r1", "all", stage_index=0, targets=names, namespace="n")
    full = ClusterRecord(
        state=ClusterState.FAILED,
        reason="r" * RECORD_TEXT_MAX_CHARS,  # a failure's reason replaces its note
        revisions=["a" * 40, "b" * 40],
        started_at=NOW,
        finished_at=NOW,
    )
    record.status = StageRecordStatus(clusters=dict.fromkeys(names, full))
    body = json.dumps(record.to_api(), separators=(",", ":")).encode()
    # The API server's bound is 1.5 MiB per object; managedFields add each cluster's key again
    # with its fields' names (~320 bytes a cluster here, 160 kB).
    assert len(body) + RECORD_MAX_CLUSTERS * 320 < 1_024 * 1_024, f"{len(body):,} bytes"
