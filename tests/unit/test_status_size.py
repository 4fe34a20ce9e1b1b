"""The ProgressiveSync status stays small at 10,000 clusters; its compact form loses no cluster (issue 15).

Pure: the status is built with the steps' own mutations (`orchestrator.api.rollout_status`) and
serialized the way the status writer sends it (`to_api`). Nothing real is needed; nothing is faked.
"""

from __future__ import annotations

import base64
import json
import random
import string
import zlib
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.api.ledger import CODEC, ClusterState, Ledger, LedgerError, name_digest, pack_names
from orchestrator.api.models import (
    REASON_MAX_CHARS,
    STATUS_LIST_CAP,
    STATUS_MAX_BYTES,
    ClusterFailure,
    ClusterNote,
    ProgressiveSyncStatus,
    StagePhase,
    status_wire_bytes,
)
from orchestrator.api.rollout_status import (
    close_stage,
    expanded,
    mark_completed,
    mark_failed,
    mark_syncing,
    set_note,
    start_rollout,
    start_stage,
)
from steps.select_stage import ledger_left_out

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
BUDGET = 256 * 1024
STAGES = ("canary", "one per region", "ten percent", "the rest")


def fleet_name(index: int) -> str:
    """Names like a real fleet's (and bench/scale_fleet.py's): ~22 characters."""
    return f"cell-{index:05d}-region-{index % 20:02d}{'abc'[index % 3]}"


def wire_bytes(status: ProgressiveSyncStatus) -> int:
    return len(json.dumps(status.to_api(), separators=(",", ":")).encode())


DNS_CHARS = string.ascii_lowercase + string.digits


def random_suffix_name(index: int, rng: random.Random, length: int = 16) -> str:
    """A fleet name with a random suffix, as generated names are (`cell-00001-region-01b-k3x9...`)."""
    return f"{fleet_name(index)}-{''.join(rng.choice(DNS_CHARS) for _ in range(length))}"


def longest_name(index: int, rng: random.Random) -> str:
    """A valid Kubernetes name of the most characters allowed (253), random but for a counter."""
    return f"{index:05d}." + "".join(rng.choice(DNS_CHARS) for _ in range(247))


def rollout_of(names: list[str], sizes: tuple[int, ...]) -> ProgressiveSyncStatus:
    status = start_rollout(
        ProgressiveSyncStatus(), rollout_id="602c4d4c1d", stage_names=STAGES, now=NOW, revision="4f1c2e9" * 6
    )
    position = 0
    for stage, size in zip(STAGES, sizes, strict=True):
        targets = names[position : position + size]
        position += size
        status = start_stage(status, stage=stage, targets=targets, message="selected", now=NOW)
    return status


def test_a_10000_cluster_rollout_at_its_largest_stays_under_256_kib() -> None:
    # The worst moment for size: every stage selected, a third of the clusters in flight with a
    # long note, a third failed with a long reason, a third done.
    names = [fleet_name(index) for index in range(10_000)]
    status = rollout_of(names, (1, 19, 1_000, 8_980))
    for stage in status.stages or []:
        for index, cluster in enumerate(list(stage.targets)):
            if index % 3 == 0:
                status = mark_failed(status, stage=stage.name, cluster=cluster, reason="x" * 5_000)
            elif index % 3 == 1:
                status = mark_completed(status, stage=stage.name, cluster=cluster)
            else:
                status = mark_syncing(status, stage=stage.name, cluster=cluster)
                status = set_note(status, stage=stage.name, cluster=cluster, note="held " * 1_000)
    size = wire_bytes(status)
    assert size < BUDGET, f"{size:,} bytes"
    wire = status.to_api()
    sizes = (1, 19, 1_000, 8_980)
    failed = sum(len(range(0, n, 3)) for n in sizes)
    completed = sum(len(range(1, n, 3)) for n in sizes)
    syncing = 10_000 - failed - completed
    assert wire["counts"] == {"targets": 10_000, "syncing": syncing, "completed": completed, "failed": failed}
    rest = wire["stages"][3]
    assert len(rest["failed"]) == len(rest["syncing"]) == len(rest["notes"]) == STATUS_LIST_CAP
    assert all(len(failure["reason"]) <= REASON_MAX_CHARS for failure in rest["failed"])
    # Every cluster's state survives the round trip through the compact form.
    back = ProgressiveSyncStatus.model_validate(wire)
    assert expanded(back)["stages"][3]["targets"] == names[1_020:]
    assert [len(s.failed) for s in back.stages or []] == [len(s.failed) for s in status.stages or []]


cluster_names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-.", min_size=1, max_size=40)


@settings(max_examples=60, deadline=None)
@given(
    names=st.lists(cluster_names, min_size=0, max_size=80, unique=True),
    outcomes=st.lists(
        st.sampled_from(["pending", "syncing", "completed", "failed"]), min_size=80, max_size=80
    ),
    reason=st.text(max_size=2_000),
)
def test_the_compact_status_keeps_every_cluster_and_its_state(
    names: list[str], outcomes: list[str], reason: str
) -> None:
    status = rollout_of(names, (len(names), 0, 0, 0))
    for cluster, outcome in zip(names, outcomes, strict=False):
        if outcome == "syncing":
            status = mark_syncing(status, stage="canary", cluster=cluster)
        elif outcome == "completed":
            status = mark_completed(status, stage="canary", cluster=cluster)
        elif outcome == "failed":
            status = mark_failed(status, stage="canary", cluster=cluster, reason=reason)
    wire = status.to_api()
    back = ProgressiveSyncStatus.model_validate(json.loads(json.dumps(wire)))
    before, after = (status.stages or [])[0], (back.stages or [])[0]
    assert (after.targets, after.syncing, after.completed) == (
        before.targets,
        before.syncing,
        before.completed,
    )
    assert [f.name for f in after.failed] == [f.name for f in before.failed]
    # The first few failures keep their reason (cut to the cap); the counts add up.
    for kept, original in zip(after.failed[:STATUS_LIST_CAP], before.failed, strict=False):
        assert kept.reason == original.reason[:REASON_MAX_CHARS] or kept.reason.endswith("\u2026")
    counts = wire["stages"][0].get("counts", {"targets": 0, "syncing": 0, "completed": 0, "failed": 0})
    assert counts["targets"] == len(names)
    assert counts["syncing"] + counts["completed"] + counts["failed"] <= len(names)
    assert back.to_api() == wire  # reading and writing again changes nothing: no needless write


def test_a_status_written_in_the_old_shape_is_read_and_written_back_compact() -> None:
    old = {
        "phase": "Progressing",
        "progress": "1/3",
        "stages": [
            {
                "name": "canary",
                "phase": "Progressing",
                "message": "",
                "targets": ["a", "b", "c"],
                "syncing": ["b"],
                "completed": ["a"],
                "failed": [{"name": "c", "reason": "Degraded"}],
                "notes": [{"name": "b", "note": "Suspended"}],
                "startedAt": "2026-11-30T12:00:00Z",
            }
        ],
    }
    status = ProgressiveSyncStatus.model_validate(old)
    stage = (status.stages or [])[0]
    assert (stage.targets, stage.syncing, stage.completed) == (["a", "b", "c"], ["b"], ["a"])
    assert [(f.name, f.reason) for f in stage.failed] == [("c", "Degraded")]
    wire = status.to_api()["stages"][0]
    assert "targets" not in wire and "completed" not in wire
    assert wire["counts"] == {"targets": 3, "syncing": 1, "completed": 1, "failed": 1}
    assert wire["clusters"]["states"] == "csf"


@pytest.mark.parametrize(
    "ledger",
    [
        pytest.param({"names": "not base64!", "states": "", "targets": 0}, id="names-not-base64"),
        pytest.param(Ledger(("a", "b"), (), 2).encode() | {"states": "c"}, id="fewer-states-than-names"),
        pytest.param(
            Ledger(("a",), (), 1).encode() | {"states": "c", "targets": 5}, id="more-targets-than-names"
        ),
        pytest.param(Ledger(("a", "b"), (), 2).encode() | {"states": "cx"}, id="unknown-state-character"),
        pytest.param(
            {"codec": CODEC, "names": pack_names(("a", 1)), "states": "cc", "targets": 2},  # type: ignore[arg-type]
            id="a-name-that-is-not-a-string",
        ),
    ],
)
def test_a_broken_ledger_is_refused_naming_the_field(ledger: dict[str, object]) -> None:
    with pytest.raises((LedgerError, ValueError), match=r"stages\[\]\.clusters"):
        ProgressiveSyncStatus.model_validate({"stages": [{"name": "canary", "clusters": ledger}]})


@pytest.mark.parametrize(
    "taken",
    [
        pytest.param({"codec": "b2b64-85", "digests": "0000"}, id="not-a-whole-digest"),
        pytest.param({"codec": "sha1", "digests": ""}, id="unknown-codec"),
    ],
)
def test_a_broken_taken_set_is_refused_naming_the_field(taken: dict[str, object]) -> None:
    stage = {"name": "canary", "phase": "Succeeded", "clustersOmitted": "did not fit", "clustersTaken": taken}
    with pytest.raises(ValueError, match=r"stages\[\]\.clustersTaken"):
        ProgressiveSyncStatus.model_validate({"stages": [stage]})


def test_a_stage_read_again_decodes_the_same_ledger_with_its_new_states() -> None:
    # The names are unpacked once per process (cached on the packed text); the states never are.
    names = tuple(f"cell-{n:05d}" for n in range(1000))
    first = Ledger(names, (ClusterState.PENDING,) * 1000, 1000).encode()
    later = first | {"states": "c" * 500 + "." * 500}
    assert Ledger.decode(first).states == (ClusterState.PENDING,) * 1000
    again = Ledger.decode(later)
    assert again.names == names
    assert again.states == (ClusterState.COMPLETED,) * 500 + (ClusterState.PENDING,) * 500
    assert Ledger.decode(first).states == (ClusterState.PENDING,) * 1000


def play(status: ProgressiveSyncStatus, outcomes: list[str], reason: str) -> ProgressiveSyncStatus:
    """Each stage's clusters by `outcomes` (cycled: pending, syncing, completed, failed), set as the
    steps' mutations leave them (`mark_*` one by one is quadratic at 10,000: the tests above use them)."""
    for stage in status.stages or []:
        chosen = {name: outcomes[index % len(outcomes)] for index, name in enumerate(stage.targets)}
        stage.syncing = [name for name, outcome in chosen.items() if outcome == "syncing"]
        stage.completed = [name for name, outcome in chosen.items() if outcome == "completed"]
        stage.failed = [
            ClusterFailure(name=name, reason=reason)
            for name, outcome in chosen.items()
            if outcome == "failed"
        ]
        stage.notes = [ClusterNote(name=name, note=reason) for name in stage.syncing]
    return status


@pytest.mark.parametrize(
    ("make_name", "ledgers_kept"),
    [
        pytest.param(lambda i, rng: fleet_name(i), True, id="typical-names-keep-every-ledger"),
        pytest.param(random_suffix_name, True, id="random-16-char-suffix-keeps-every-ledger"),
        pytest.param(longest_name, False, id="253-char-random-names-leave-ledgers-out-and-say-so"),
    ],
)
def test_10000_clusters_stay_under_256_kib_whatever_the_names(make_name, ledgers_kept: bool) -> None:  # type: ignore[no-untyped-def]
    rng = random.Random(15)
    names = [make_name(index, rng) for index in range(10_000)]
    sizes = (1, 19, 1_000, 8_980)
    status = play(rollout_of(names, sizes), ["completed", "syncing", "failed"], "Degraded " * 100)
    wire = status.to_api()
    assert status_wire_bytes(wire) <= STATUS_MAX_BYTES < BUDGET
    assert wire["counts"]["targets"] == 10_000
    assert [s["counts"]["targets"] for s in wire["stages"]] == list(sizes)
    kept = [("clusters" in s, bool(s.get("clustersOmitted"))) for s in wire["stages"]]
    if ledgers_kept:
        assert kept == [(True, False)] * 4
        back = ProgressiveSyncStatus.model_validate(json.loads(json.dumps(wire)))
        assert [t for s in back.stages or [] for t in s.targets] == names
    else:
        # Every stage is unfinished here, so the largest ledgers go first; each one left out says so.
        assert (True, True) not in kept and (False, False) not in kept
        assert (False, True) in kept
        omitted = next(s for s in wire["stages"] if s.get("clustersOmitted"))
        assert "on its Applications" in omitted["clustersOmitted"]
        # Which clusters each such stage took is kept (issue 29 point 8), and reads back.
        back = ProgressiveSyncStatus.model_validate(json.loads(json.dumps(wire)))
        for stage_wire, stage, size, start in zip(
            wire["stages"], back.stages or [], sizes, (0, 1, 20, 1_020), strict=True
        ):
            if stage_wire.get("clustersOmitted"):
                assert stage.taken_digests() == {name_digest(n) for n in names[start : start + size]}


@settings(max_examples=12, deadline=None)
@given(
    count=st.integers(min_value=0, max_value=10_000),
    name_length=st.integers(min_value=1, max_value=253),
    stages=st.integers(min_value=1, max_value=50),
    finished=st.integers(min_value=0, max_value=50),
    outcomes=st.lists(st.sampled_from(["pending", "syncing", "completed", "failed"]), min_size=1, max_size=7),
    reason=st.text(max_size=600),
    seed=st.integers(min_value=0, max_value=2**32),
)
def test_the_status_never_passes_its_bound_and_keeps_every_count(
    *, count: int, name_length: int, stages: int, finished: int, outcomes: list[str], reason: str, seed: int
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
    for number, stage in enumerate(stage_names):
        targets = names[number * per_stage : (number + 1) * per_stage]
        status = start_stage(status, stage=stage, targets=targets, message=reason, now=NOW)
    status = play(status, outcomes, reason)
    for stage in stage_names[:finished]:
        status = close_stage(status, stage=stage, phase=StagePhase.SUCCEEDED, message=reason * 10, now=NOW)
    wire = status.to_api()
    assert status_wire_bytes(wire) <= STATUS_MAX_BYTES
    assert len(json.dumps(wire, separators=(",", ":"), ensure_ascii=False).encode()) < BUDGET
    expected = [s.tally() for s in status.stages or []]
    for stage_wire, tally in zip(wire["stages"], expected, strict=True):
        assert stage_wire.get("counts", {"targets": 0, "syncing": 0, "completed": 0, "failed": 0}) == (
            tally.model_dump(by_alias=True)
        )
        assert ("clusters" in stage_wire) != bool(stage_wire.get("clustersOmitted")) or not tally.targets
        # A stage without its ledger keeps which clusters it took (issue 29 point 8).
        assert ("clustersTaken" in stage_wire) == bool(stage_wire.get("clustersOmitted") and tally.targets)
    # Read back and written again (the status writer's round): still within the bound, the same
    # counts, and a stage left without its ledger stays so (its stored counts are kept).
    again = ProgressiveSyncStatus.model_validate(json.loads(json.dumps(wire))).to_api()
    assert status_wire_bytes(again) <= STATUS_MAX_BYTES
    assert again.get("counts") == wire.get("counts")
    for before, after in zip(wire["stages"], again["stages"], strict=True):
        assert before.get("counts") == after.get("counts")
        assert not before.get("clustersOmitted") or after.get("clustersOmitted")
        assert before.get("clustersTaken") == after.get("clustersTaken")


def test_a_stage_whose_ledger_cannot_fit_is_refused_by_select_with_the_fix() -> None:
    rng = random.Random(7)
    names = [longest_name(index, rng) for index in range(2_000)]
    status = start_stage(
        rollout_of([], (0, 0, 0, 0)), stage="the rest", targets=names, message="selected", now=NOW
    )
    why = ledger_left_out(status, "the rest")
    assert "its 2000 clusters' names do not fit" in why and "split the stage" in why
    small = start_stage(
        rollout_of([], (0, 0, 0, 0)), stage="canary", targets=names[:100], message="", now=NOW
    )
    assert ledger_left_out(small, "canary") == ""


def test_a_ledger_written_with_the_first_codec_is_still_read() -> None:
    names = ["a", "b", "c"]
    first = {
        "names": base64.b64encode(zlib.compress(json.dumps(names).encode(), 9)).decode(),
        "states": "cs.",
        "targets": 3,
    }
    status = ProgressiveSyncStatus.model_validate({"stages": [{"name": "canary", "clusters": first}]})
    stage = (status.stages or [])[0]
    assert (stage.targets, stage.completed, stage.syncing) == (names, ["a"], ["b"])
    assert status.to_api()["stages"][0]["clusters"]["codec"] == "xz85"
