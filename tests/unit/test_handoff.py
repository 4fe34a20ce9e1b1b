"""The chained hand-off's decision (orchestrator.planning.handoff) and its invariant: in a model of
Argo's fan-out (items started in list order under `parallelism`), of Argo CD finishing syncs, of
`select`'s first wave, of the `cluster` pods (their own sync, their record, their hand-off's read,
conditional claim and sync write, each a separate step) and of the rollout follower (steps/follow.py:
a done cluster recorded and the next claimed in one conditional write, before its pod runs) and,
with pods at once (steps/turn.py), of pods that all start together and wait for their turn, no
interleaving puts more than maxParallel clusters in flight, claims a cluster twice, writes a
cluster's sync twice, or loses a cluster."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.api.analysis import AnalysisTemplateRef, StageAnalysis
from orchestrator.api.stage_records import ClusterState
from orchestrator.planning.contract import StageContract
from orchestrator.planning.handoff import boundary_refusal, in_flight, next_claim, own_turn
from steps.chain import chained

S, C, F, K = ClusterState.SYNCING, ClusterState.COMPLETED, ClusterState.FAILED, ClusterState.SKIPPED
TARGETS = ("a", "b", "c", "d", "e")


@pytest.mark.parametrize(
    ("states", "finished", "max_parallel", "expected"),
    [
        pytest.param({"a": C, "b": S}, "a", 2, "c", id="the-first-target-without-a-record"),
        pytest.param({"a": S, "b": C}, "b", 2, "c", id="after-a-cluster-still-in-flight"),
        pytest.param({"a": C, "b": S, "c": S}, "a", 2, "", id="in-flight-fill-maxparallel"),
        pytest.param({"a": C, "b": S, "d": S}, "a", 3, "c", id="a-gap-is-taken-first"),
        pytest.param({"a": C, "b": F, "c": K}, "a", 1, "d", id="failed-and-skipped-are-not-in-flight"),
        pytest.param({"a": C, "b": C, "c": C, "d": C, "e": S}, "d", 2, "", id="every-target-started"),
        pytest.param({"a": S, "b": S}, "a", 2, "", id="finished-not-recorded-completed"),
        pytest.param({"a": C}, "z", 2, "", id="finished-not-a-target"),
        pytest.param({"b": C}, "b", 1, "a", id="an-earlier-target-without-record-first"),
    ],
)
def test_next_claim(states: dict[str, ClusterState], finished: str, max_parallel: int, expected: str) -> None:
    claim = next_claim(TARGETS, states, finished=finished, max_parallel=max_parallel)
    assert claim.cluster == expected
    assert claim.claimed == bool(expected)
    assert claim.reason


@pytest.mark.parametrize(
    ("states", "cluster", "max_parallel", "go", "claim"),
    [
        pytest.param({}, "a", 1, True, True, id="the-first-target-takes-a-free-slot"),
        pytest.param({}, "b", 2, False, False, id="waits-for-the-targets-before-it"),
        pytest.param({"a": S}, "b", 2, True, True, id="its-turn-after-the-ones-started"),
        pytest.param({"a": S, "b": S}, "c", 2, False, False, id="in-flight-fill-maxparallel"),
        pytest.param({"a": C, "b": S}, "c", 2, True, True, id="a-done-cluster-frees-its-slot"),
        pytest.param({"a": S}, "a", 1, True, False, id="a-record-goes-on-without-a-claim"),
        pytest.param({"a": S, "b": C}, "b", 1, True, False, id="recorded-done-goes-on-however-full"),
        pytest.param({}, "z", 1, True, False, id="not-a-target-is-left-to-the-cluster-step"),
    ],
)
def test_own_turn(
    states: dict[str, ClusterState], cluster: str, max_parallel: int, go: bool, claim: bool
) -> None:
    turn = own_turn(TARGETS, states, cluster=cluster, max_parallel=max_parallel)
    assert (turn.go, turn.claim) == (go, claim)
    assert turn.reason


def test_in_flight_counts_syncing_targets_only() -> None:
    assert in_flight(TARGETS, {"a": S, "b": C, "c": S, "z": S}) == ["a", "c"]


# --- the model ---------------------------------------------------------------------------------
#
# Argo starts the fan-out's items in list order under `parallelism`; Argo CD finishes each sync
# written, at any time; a `cluster` pod writes its cluster's sync, then records it Syncing, waits
# for Argo CD, records the outcome and hands off (read, conditional claim, sync write: each a step
# of its own); `select`'s first wave may have started the first maxParallel clusters before any pod;
# the rollout follower (steps/follow.py), when there, reads the records and the syncs Argo CD
# finished, then, with the records' resourceVersion, records a cluster done and claims the next one
# in one write, then writes that sync. A cluster is in flight from its sync write until Argo CD
# finished it.


@dataclass
class Pod:
    cluster: str
    # (turn-read -> turn-write ->) start -> record -> waiting -> (handoff-read -> handoff-write ->
    # handoff-sync) -> exit; the turn only with pods at once
    phase: str = "start"
    snapshot: tuple[int, dict[str, ClusterState]] | None = None
    claimed: str = ""


@dataclass
class Follower:
    phase: str = "read"  # read -> write -> (sync) -> read
    snapshot: tuple[int, dict[str, ClusterState], frozenset[str]] | None = None
    claimed: str = ""


@dataclass
class World:
    targets: tuple[str, ...]
    max_parallel: int
    fails: frozenset[str]
    records: dict[str, ClusterState] = field(default_factory=dict)
    version: int = 0
    synced: dict[str, int] = field(default_factory=dict)  # sync writes per cluster
    done: set[str] = field(default_factory=set)  # syncs Argo CD finished (failed ones too)
    nodes: list[str] = field(default_factory=list)  # items Argo started, in order
    pods: list[Pod] = field(default_factory=list)  # live pods
    claims: list[str] = field(default_factory=list)
    follower: Follower | None = None
    together: bool = False  # pods at once: no Argo parallelism, each pod waits for its turn

    def record(self, cluster: str, state: ClusterState) -> None:
        # The merge rule (stage_records.merge_record): an outcome never goes back, Failed wins.
        rank = {S: 0, C: 2, F: 3}
        current = self.records.get(cluster)
        if current is None or rank[state] >= rank[current]:
            self.records[cluster] = state
        self.version += 1

    def write_sync(self, cluster: str) -> None:
        # The Application's resourceVersion: a second writer finds the sync ours and writes nothing.
        if cluster not in self.synced:
            self.synced[cluster] = 1

    def start_first_wave(self) -> None:
        for cluster in self.targets[: self.max_parallel]:
            self.write_sync(cluster)
            self.record(cluster, S)

    def actions(self, *, follower: bool = True) -> list[tuple[str, object]]:
        found: list[tuple[str, object]] = []
        if (self.together or len(self.pods) < self.max_parallel) and len(self.nodes) < len(self.targets):
            found.append(("argo-start", None))
        found += [("argocd", cluster) for cluster in self.synced if cluster not in self.done]
        found += [("pod", pod) for pod in self.pods]
        if follower and self.follower is not None:
            found.append(("follower", self.follower))
        return found

    def act(self, kind: str, what: object) -> None:
        if kind == "argo-start":
            cluster = self.targets[len(self.nodes)]  # list order: the first item without a node
            self.nodes.append(cluster)
            self.pods.append(Pod(cluster, phase="turn-read" if self.together else "start"))
        elif kind == "argocd":
            assert isinstance(what, str)
            self.done.add(what)
        elif kind == "pod":
            assert isinstance(what, Pod)
            self.step(what)
        else:
            assert isinstance(what, Follower)
            self.follow(what)

    def step(self, pod: Pod) -> None:
        cluster = pod.cluster
        if pod.phase == "turn-read":  # steps.turn: the records as the watch shows them
            pod.snapshot = (self.version, dict(self.records))
            pod.phase = "turn-write"
        elif pod.phase == "turn-write":
            assert pod.snapshot is not None
            version, states = pod.snapshot
            turn = own_turn(self.targets, states, cluster=cluster, max_parallel=self.max_parallel)
            if not turn.go or (turn.claim and version != self.version):
                pod.phase = "turn-read"  # wait for a change, or a Conflict: read again
            else:
                if turn.claim:
                    self.claims.append(cluster)
                    self.record(cluster, S)
                pod.phase = "start"
        elif pod.phase == "start":
            if self.records.get(cluster) in (C, F):
                pod.phase = "exit"  # recorded already (by the follower): reported as it is
                return
            unrecorded = cluster not in self.records
            self.write_sync(cluster)  # claimed or first wave: the sync is ours already, nothing written
            pod.phase = "record" if unrecorded else "waiting"
        elif pod.phase == "record":
            self.record(cluster, S)
            pod.phase = "waiting"
        elif pod.phase == "waiting":
            if cluster not in self.done:
                return
            if cluster in self.fails:
                self.record(cluster, F)
                pod.phase = "exit"
            else:
                self.record(cluster, C)  # even when the follower recorded it first
                pod.phase = "handoff-read"
        elif pod.phase == "handoff-read":
            pod.snapshot = (self.version, dict(self.records))
            pod.phase = "handoff-write"
        elif pod.phase == "handoff-write":
            assert pod.snapshot is not None
            version, states = pod.snapshot
            claim = next_claim(self.targets, states, finished=cluster, max_parallel=self.max_parallel)
            if not claim.claimed:
                pod.phase = "exit"
            elif version != self.version:
                pod.phase = "handoff-read"  # Conflict: read again, decide again
            else:
                self.claims.append(claim.cluster)
                self.record(claim.cluster, S)
                pod.claimed = claim.cluster
                pod.phase = "handoff-sync"
        elif pod.phase == "handoff-sync":
            self.write_sync(pod.claimed)
            pod.phase = "exit"
        elif pod.phase == "exit":
            self.pods.remove(pod)

    def follow(self, follower: Follower) -> None:
        if follower.phase == "read":
            follower.snapshot = (self.version, dict(self.records), frozenset(self.done - self.fails))
            follower.phase = "write"
        elif follower.phase == "write":
            assert follower.snapshot is not None
            version, states, finished = follower.snapshot
            ready = [t for t in self.targets if states.get(t) == S and t in finished]
            follower.phase = "read"
            if not ready or version != self.version:
                return  # nothing done, or a Conflict: read again
            after = {**states, ready[0]: C}
            claim = next_claim(self.targets, after, finished=ready[0], max_parallel=self.max_parallel)
            self.records[ready[0]] = C
            if claim.claimed:
                self.claims.append(claim.cluster)
                self.records[claim.cluster] = S
                follower.claimed = claim.cluster
                follower.phase = "sync"
            self.version += 1
        elif follower.phase == "sync":
            self.write_sync(follower.claimed)
            follower.phase = "read"

    def in_flight(self) -> int:
        return sum(1 for c in self.synced if c not in self.done)


@settings(max_examples=400, deadline=None)
@given(
    data=st.data(),
    size=st.integers(2, 7),
    parallel=st.integers(1, 4),
    first_wave=st.booleans(),
    follower=st.booleans(),
    together=st.booleans(),
)
def test_no_interleaving_exceeds_max_parallel_or_claims_twice(
    data: st.DataObject,
    size: int,
    parallel: int,
    *,
    first_wave: bool,
    follower: bool,
    together: bool,
) -> None:
    targets = tuple(f"c{i}" for i in range(size))
    max_parallel = min(parallel, size)
    fails = frozenset(data.draw(st.sets(st.sampled_from(targets), max_size=2), label="fails"))
    world = World(targets, max_parallel, fails, follower=Follower() if follower else None, together=together)
    if first_wave:
        world.start_first_wave()

    def check() -> None:
        assert world.in_flight() <= max_parallel, (world.records, world.synced, world.done)
        assert len(world.claims) == len(set(world.claims)), world.claims
        assert all(count == 1 for count in world.synced.values())

    for _ in range(30 * size):
        actions = world.actions()
        if not actions:
            break
        kind, what = data.draw(st.sampled_from(actions), label="next")
        world.act(kind, what)
        check()
    # The follower may stop at any moment (it is never needed): without it, Argo, Argo CD and the
    # pods alone bring every cluster to its sync, none lost.
    for turn in range(80 * size):
        actions = world.actions(follower=False)
        if not actions:
            break
        world.act(*actions[turn % len(actions)])  # in turn: a waiting pod never starves the others
        check()
    assert not world.actions(follower=False)
    assert set(world.synced) == set(targets)


# --- which stages hand off (steps.chain.chained, from the rollout contract alone) -----------------

GATE = StageAnalysis(templates=(AnalysisTemplateRef(name="success-rate"),))


@pytest.mark.parametrize(
    ("sized", "off"),
    [
        pytest.param(StageContract(name="s", targets=5, max_parallel=2), "", id="one-pod-per-cluster"),
        pytest.param(
            StageContract(name="s", targets=60, max_parallel=4, batches=2),
            "batches",
            id="batches-refill-themselves",
        ),
        pytest.param(
            StageContract(name="s", targets=3, max_parallel=3), "at once", id="every-target-at-once"
        ),
        pytest.param(
            StageContract(
                name="s", targets=5, max_parallel=2, analysis=GATE.model_copy(update={"per_cluster": True})
            ),
            "analyzed",
            id="per-cluster-analysis-frees-the-slot-later",
        ),
        pytest.param(
            StageContract(name="s", targets=5, max_parallel=2, analysis=GATE), "", id="a-stage-gate-hands-off"
        ),
    ],
)
def test_chained(sized: StageContract, off: str) -> None:
    reason = chained(sized)
    assert (off in reason) if off else reason == ""


def _sized(**fields: object) -> StageContract:
    return StageContract.model_validate(
        {"name": "canary", "targets": 2, "max_parallel": 2, "selects_next": "rest", **fields}
    )


@pytest.mark.parametrize(
    ("sized", "states", "refusal"),
    [
        pytest.param(_sized(), {"a": C, "b": C}, "", id="every-target-done"),
        pytest.param(_sized(), {"a": C, "b": F}, "", id="a-tolerated-failure-is-an-outcome"),
        pytest.param(_sized(), {"a": C, "b": K}, "", id="a-skip-is-an-outcome"),
        pytest.param(
            _sized(), {"a": C, "b": S}, "1 cluster(s) of the stage have no outcome yet", id="one-in-flight"
        ),
        pytest.param(
            _sized(), {"a": C}, "1 cluster(s) of the stage have no outcome yet", id="one-not-started"
        ),
        pytest.param(
            _sized(selects_next=None), {"a": C, "b": C}, "own closing step runs next", id="next-opens-itself"
        ),
        pytest.param(
            _sized(selects_next=None, ends_rollout=True),
            {"a": C, "b": C},
            "",
            id="the-last-stage-ends-the-rollout",
        ),
        pytest.param(
            _sized(selects_next=None, ends_rollout=True),
            {"a": C, "b": S},
            "1 cluster(s) of the stage have no outcome yet",
            id="the-last-stage-with-one-in-flight",
        ),
        pytest.param(_sized(batches=1), {"a": C, "b": C}, "runs in batches", id="batches"),
        pytest.param(
            _sized(analysis=GATE),
            {"a": C, "b": C},
            "analysis runs before it closes",
            id="analysis-after-the-clusters",
        ),
    ],
)
def test_boundary_refusal(sized: StageContract, states: dict[str, ClusterState], refusal: str) -> None:
    got = boundary_refusal(sized, ("a", "b"), states)
    assert (got == "") if not refusal else (refusal in got)
