"""The local executor's decisions (orchestrator.engine.operator) on rendered rollout Workflows.

Pure: tests/support/engine_driver plays the executor in memory (pods finish after a number of
passes, a fake clock jumps to the next wake-up), so DAG order, parallelism, Omitted nodes, retries,
suspend, approval, bake, stop/terminate, deadlines and restarts are checked in milliseconds.
The same behaviours on the real API server with real processes are in
tests/integration/test_local_executor.py.
"""

from __future__ import annotations

import base64
import gzip
import json
from collections.abc import Callable
from typing import Any

import pytest

from orchestrator.core.clock import parse_time
from orchestrator.engine.expressions import parse_duration, retry_expression_holds
from orchestrator.engine.interface import PodLaunch, PodResult
from orchestrator.engine.nodes import node_id
from orchestrator.engine.operator import operate
from tests.support.builders import make_ps_model, make_release, make_stage
from tests.support.engine_driver import Drive, arg, argv_step
from workflow_templates.builder import StageSize, build_workflow
from workflow_templates.settings import WorkflowSettings

# The engine's own parallelism is what these tests check: every fan-out keeps it (no pods at once,
# whose stages the steps bound themselves: steps/turn.py).
SETTINGS = WorkflowSettings(
    retry_limit=2, retry_backoff="10s", retry_factor=2, retry_backoff_cap="15s", pods_at_once_limit=0
)


def rollout(
    *stages: dict[str, Any], tolerate: int = 0, sizes: dict[str, StageSize] | None = None
) -> dict[str, Any]:
    """A rendered rollout Workflow (with a namespace and uid, as the API server would add)."""
    ps = make_ps_model(
        "svc", namespace="ns", uid="u1", stages=stages, failurePolicy={"maxFailedClusters": tolerate}
    )
    plan = sizes or {
        s.name: StageSize(4, s.max_parallel if isinstance(s.max_parallel, int) else 1) for s in ps.spec.stages
    }
    obj: dict[str, Any] = build_workflow(
        ps, release=make_release("r1", revisions=(("abc",),)), plan=plan, settings=SETTINGS
    ).to_dict()
    obj["metadata"]["uid"] = "wf-uid"
    return obj


def fleet_step(
    targets: dict[str, list[str]],
    *,
    fail: dict[str, int] | None = None,
    calls: list[tuple[str, ...]] | None = None,
    tolerate: int = 0,
) -> Callable[[PodLaunch], PodResult]:
    """A step runner that plays the steps' rules (steps/cluster.py, steps/record.py).

    select returns `targets[stage]`; `cluster` exits `fail[cluster]` (recorded as a failure of its
    stage), or, once its stage has more than `tolerate` failures, exits 1 without syncing ("skip");
    record exits 1 when its stage has more than `tolerate` failures; record-and-select is record,
    then (unless that failed) select of `--next-stage`, logged as the two. A cluster's outcome is
    known when its pod starts (the drive decides results at launch).
    """
    failures: dict[str, list[str]] = {}

    def run(launch: PodLaunch) -> PodResult:
        step = argv_step(launch)
        stage = arg(launch, "--stage") if "--stage" in launch.argv else ""
        record: tuple[str, ...] = (step, stage) if stage else (step,)
        result = PodResult(0)
        if step == "select":
            result = PodResult(0, outputs={"targets": json.dumps(targets[stage])})
        elif step == "cluster":
            cluster = arg(launch, "--cluster")
            if len(failures.get(stage, [])) > tolerate:
                record, result = ("skip", stage, cluster), PodResult(1, summary="stage failed already")
            else:
                record = ("sync", stage, cluster)
                code = (fail or {}).get(cluster, 0)
                if code:
                    failures.setdefault(stage, []).append(cluster)
                    result = PodResult(code, summary="cluster Degraded")
        elif step == "record" and len(failures.get(stage, [])) > tolerate:
            result = PodResult(1, summary="stage failed")
        elif step == "record-and-select":
            record = ("record", stage)
            if len(failures.get(stage, [])) > tolerate:
                result = PodResult(1, summary="stage failed", outputs={"targets": "[]"})
            else:
                following = arg(launch, "--next-stage")
                if calls is not None:
                    calls.append(record)
                record = ("select", following)
                result = PodResult(0, outputs={"targets": json.dumps(targets[following])})
        elif step == "finalize":
            record = (step, arg(launch, "--workflow-status"))
        if calls is not None:
            calls.append(record)
        return result

    return run


THREE_STAGES = (
    make_stage("canary", max_targets=1, max_parallel=1),
    make_stage("wave one", max_parallel=2),
    make_stage("rest", max_parallel=3),
)
TARGETS = {"canary": ["c1"], "wave one": ["c2", "c3", "c4", "c5"], "rest": [f"c{i}" for i in range(6, 13)]}


def in_flight_per_fanout(drive: Drive, seen: dict[str, int]) -> None:
    """Record the most cluster pods running at once under each fan-out node."""
    for fanout in drive.nodes(type="DAG"):
        if not str(fanout.get("templateName", "")).startswith("fanout-"):
            continue
        running = [
            n
            for n in drive.nodes(type="Pod", templateName="cluster", phase="Running")
            if n.get("boundaryID") == fanout["id"]
        ]
        seen[fanout["templateName"]] = max(seen.get(fanout["templateName"], 0), len(running))


def test_three_stages_run_in_order_within_max_parallel_and_end_succeeded() -> None:
    calls: list[tuple[str, ...]] = []
    seen: dict[str, int] = {}
    drive = Drive(rollout(*THREE_STAGES)).step(
        fleet_step(TARGETS, calls=calls), ticks=3, on_pass=lambda d: in_flight_per_fanout(d, seen)
    )
    assert drive.status["phase"] == "Succeeded"
    syncs = [c[2] for c in calls if c[0] == "sync"]
    assert sorted(syncs) == sorted(f"c{i}" for i in range(1, 13))  # every cluster exactly once
    stages_in_call_order = [c[1] for c in calls if c[0] in ("select", "record")]
    assert stages_in_call_order == ["canary", "canary", "wave one", "wave one", "rest", "rest"]
    assert seen == {"fanout-canary": 1, "fanout-wave-one": 2, "fanout-rest": 3}
    # The last record records the end; the exit handler skips finalize on a Workflow that Succeeded
    # (workflow_templates/exit_handler.py).
    assert calls[-1] == ("record", "rest")
    [finalize] = drive.nodes(name="svc-r1.onExit.finalize")
    assert (finalize["type"], finalize["phase"]) == ("Skipped", "Skipped")
    # One step closes each stage and selects the next: 1 select, 12 clusters, 2 record-and-select,
    # 1 record; and the rollout follower beside the stages.
    steps = [n["templateName"] for n in drive.nodes(type="Pod")]
    assert {name: steps.count(name) for name in set(steps)} == {
        "select": 1,
        "cluster": 12,
        "record-and-select": 2,
        "record": 1,
        "follow": 1,
    }
    assert drive.status["progress"] == "17/17"  # Argo's count of pods: no finalize pod
    # Each stage DAG hands the next stage's targets on as its output, which the next stage takes in.
    for stage, following in (("canary", "wave-one"), ("wave-one", "rest")):
        [handed] = drive.nodes(name=f"svc-r1.{stage}")[0]["outputs"]["parameters"]
        [taken] = [
            p
            for p in drive.nodes(name=f"svc-r1.{following}")[0]["inputs"]["parameters"]
            if p["name"] == "targets"
        ]
        assert handed["name"] == "targets" and json.loads(handed["value"]) == json.loads(taken["value"])
    assert json.loads(handed["value"]) == TARGETS["rest"]


def test_node_shape_follows_argo() -> None:
    drive = Drive(rollout(make_stage("canary in eu", max_parallel=1))).step(
        fleet_step({"canary in eu": ["c1"]}), ticks=1
    )
    root = drive.nodes(name="svc-r1")[0]
    assert (root["id"], root["type"], root["templateName"]) == ("svc-r1", "DAG", "rollout")
    stage = drive.nodes(name="svc-r1.canary-in-eu")[0]
    assert stage["boundaryID"] == "svc-r1" and stage["id"] in root["children"]
    assert stage["inputs"] == {"parameters": [{"name": "stage", "value": "canary in eu"}]}
    fanout = drive.nodes(name="svc-r1.canary-in-eu.clusters")[0]
    group = drive.nodes(name="svc-r1.canary-in-eu.clusters.cluster")[0]
    assert (group["type"], group["boundaryID"]) == ("TaskGroup", fanout["id"])
    retry = drive.nodes(name="svc-r1.canary-in-eu.clusters.cluster(0:c1)")[0]
    # The cluster step's display name is the cluster (names.display_name_of_input); its attempts keep
    # Argo's default name.
    assert (retry["type"], retry["displayName"], retry["boundaryID"]) == ("Retry", "c1", fanout["id"])
    pod = drive.nodes(name="svc-r1.canary-in-eu.clusters.cluster(0:c1)(0)")[0]
    assert pod["type"] == "Pod" and pod["id"] in retry["children"] and pod["outputs"]["exitCode"] == "0"
    assert pod["displayName"] == "cluster(0:c1)(0)"
    assert pod["boundaryID"] == fanout["id"]
    # Two nodes per cluster: its Retry node and one pod per attempt.
    assert len([n for n in drive.nodes() if "cluster(0:c1)" in n["name"]]) == 2
    select = drive.nodes(name="svc-r1.canary-in-eu.select")[0]
    assert select["outputs"]["parameters"][0]["value"] == '["c1"]'
    exit_node = drive.nodes(name="svc-r1.onExit")[0]
    assert (exit_node["type"], exit_node["templateName"], exit_node["phase"]) == ("DAG", "exit", "Succeeded")
    [finalize] = drive.nodes(name="svc-r1.onExit.finalize")
    assert finalize["phase"] == "Skipped" and finalize["id"] in exit_node["children"]
    assert finalize["message"] == "when 'Succeeded != Succeeded' evaluated false"
    for node in drive.nodes():
        assert node["id"] == node_id("svc-r1", node["name"])
        assert node["startedAt"] and node["finishedAt"]


def test_node_id_is_fnv32a_of_the_name() -> None:
    assert node_id("wf", "wf") == "wf"
    assert node_id("wf", "hello") == "wf-1335831723"


def test_failing_cluster_fails_its_stage_record_closes_it_and_later_stages_are_omitted() -> None:
    calls: list[tuple[str, ...]] = []
    drive = Drive(rollout(*THREE_STAGES)).step(fleet_step(TARGETS, fail={"c3": 1}, calls=calls), ticks=2)
    assert drive.status["phase"] == "Failed"
    assert "message" not in drive.status  # Argo writes no message on a failed DAG
    synced = [c[2] for c in calls if c[0] == "sync"]
    assert synced == ["c1", "c2", "c3"]  # c4 and c5 started after the failure and did not sync
    assert [c[2] for c in calls if c[0] == "skip"] == ["c4", "c5"]
    # The failed cluster is red; its fan-out is not (the loop task's continueOn: failed, as Argo's
    # assessDAGPhase): the stage's failure shows on its closing step and the stage node.
    [failed] = [n for n in drive.nodes() if n["type"] == "Retry" and n["displayName"] == "c3"]
    assert failed["phase"] == "Failed"
    fanout = drive.nodes(name="svc-r1.wave-one.clusters")[0]
    assert fanout["phase"] == "Succeeded" and "message" not in fanout
    assert ("record", "wave one") in calls  # the fan-out continues on failure: record closes the stage
    wave_one = drive.nodes(name="svc-r1.wave-one")[0]
    # Its record-and-select failed (exit 1): a failed DAG hands nothing on (Argo sets no outputs).
    assert (wave_one["phase"], wave_one.get("outputs")) == ("Failed", None)
    rest = drive.nodes(name="svc-r1.rest")[0]
    assert (rest["type"], rest["phase"], rest["message"]) == (
        "Skipped",
        "Omitted",
        "omitted: depends condition not met",
    )
    assert not any(c[1] == "rest" for c in calls if len(c) > 1 and c[0] != "finalize")
    assert calls[-1] == ("finalize", "Failed")


def test_tolerated_failures_let_the_stage_continue() -> None:
    calls: list[tuple[str, ...]] = []
    drive = Drive(rollout(*THREE_STAGES[:2], tolerate=1)).step(
        fleet_step(TARGETS, fail={"c3": 1}, calls=calls, tolerate=1), ticks=1
    )
    assert sorted(c[2] for c in calls if c[0] == "sync") == ["c1", "c2", "c3", "c4", "c5"]
    assert ("record", "wave one") in calls
    # Only c3 is drawn failed: its fan-out and its stage are not (a tolerated failure).
    [c3] = [n for n in drive.nodes() if n["type"] == "Retry" and n["displayName"] == "c3"]
    assert c3["phase"] == "Failed"
    assert drive.nodes(name="svc-r1.wave-one.clusters")[0]["phase"] == "Succeeded"
    assert drive.nodes(name="svc-r1.wave-one")[0]["phase"] == "Succeeded"
    assert drive.status["phase"] == "Succeeded"


def test_failures_beyond_the_tolerance_stop_new_clusters() -> None:
    calls: list[tuple[str, ...]] = []
    drive = Drive(rollout(*THREE_STAGES[:2], tolerate=1)).step(
        fleet_step(TARGETS, fail={"c2": 1, "c3": 1}, calls=calls, tolerate=1), ticks=1
    )
    assert [c[2] for c in calls if c[0] == "sync"] == ["c1", "c2", "c3"]
    assert [c[2] for c in calls if c[0] == "skip"] == ["c4", "c5"]
    assert drive.status["phase"] == "Failed"


def attempts(drive: Drive, retry: dict[str, Any]) -> list[dict[str, Any]]:
    """The Pod attempts of a Retry node (its other children are the tasks after it)."""
    return [n for n in drive.nodes(type="Pod") if n["id"] in retry.get("children", [])]


def test_temporary_errors_are_retried_with_backoff_and_failures_are_not() -> None:
    exits = {"c1": [75, 75, 0], "c2": [1]}

    def run(launch: PodLaunch) -> PodResult:
        if argv_step(launch) == "select":
            return PodResult(0, outputs={"targets": '["c1", "c2"]'})
        if argv_step(launch) == "cluster":
            return PodResult(exits[arg(launch, "--cluster")].pop(0))
        return PodResult(0)

    workflow = rollout(make_stage("s", max_parallel=2), sizes={"s": StageSize(2, 2)})
    drive = Drive(workflow)
    start = drive.now
    drive.step(run, ticks=1)
    c1 = drive.nodes(name="svc-r1.s.clusters.cluster(0:c1)")[0]
    assert c1["phase"] == "Succeeded" and len(attempts(drive, c1)) == 3
    c2 = drive.nodes(name="svc-r1.s.clusters.cluster(1:c2)")[0]
    assert c2["phase"] == "Failed" and len(attempts(drive, c2)) == 1
    assert (drive.now - start).total_seconds() >= 10 + 15  # backoff 10s, then 20s capped at 15s
    # c2's failure is on its own node; the fan-out continues on it (continueOn: failed).
    assert drive.nodes(name="svc-r1.s.clusters")[0]["phase"] == "Succeeded"


def test_retries_stop_at_the_limit() -> None:
    def run(launch: PodLaunch) -> PodResult:
        if argv_step(launch) == "select":
            return PodResult(75)
        return PodResult(0)

    drive = Drive(rollout(make_stage("s"))).step(run, ticks=1)
    select = drive.nodes(name="svc-r1.s.select")[0]
    assert len(attempts(drive, select)) == 3  # limit 2: three attempts
    assert select["phase"] == "Failed"


def retried_select(exit_codes: list[int], *, ticks: int = 1, error: str = "") -> tuple[Drive, dict[str, Any]]:
    """Run a one-stage rollout whose select exits with `exit_codes` in turn; (drive, select's Retry node)."""

    def run(launch: PodLaunch) -> PodResult:
        if argv_step(launch) == "select":
            code = exit_codes.pop(0)
            outputs = {"targets": "[]"} if code == 0 else {}
            return PodResult(code, outputs=outputs, error=error if code else "")
        return PodResult(0)

    drive = Drive(rollout(make_stage("s"))).step(run, ticks=ticks)
    return drive, drive.nodes(name="svc-r1.s.select")[0]


def waits(drive: Drive, retry: dict[str, Any]) -> list[float]:
    """Seconds between one attempt's end and the next one's start (or the Retry node's end)."""
    times = [(parse_time(n["startedAt"]), parse_time(n["finishedAt"])) for n in attempts(drive, retry)]
    ends = [start for start, _ in times[1:]] + [parse_time(retry["finishedAt"])]
    return [(begin - end).total_seconds() for (_, end), begin in zip(times, ends, strict=True)]


def within_a_pass(got: list[float], expected: list[float]) -> bool:
    """The drive's clock moves in one-second passes: a wait ends at most one pass late."""
    return len(got) == len(expected) and all(e <= g <= e + 1 for g, e in zip(got, expected, strict=True))


@pytest.mark.parametrize(
    ("ticks", "label"),
    [
        pytest.param(1, "at once", id="exits-75-at-once"),
        pytest.param(120, "after two minutes", id="runs-two-minutes-then-exits-75"),
    ],
)
def test_exit_75_is_retried_up_to_the_limit_however_long_each_attempt_ran(ticks: int, label: str) -> None:
    drive, select = retried_select([75, 75, 75], ticks=ticks)
    assert len(attempts(drive, select)) == 3, label  # limit 2: three attempts
    assert (select["phase"], select["message"]) == ("Failed", "No more retries left")
    # Each wait is duration * factor^n, capped at backoff.cap (10s, then 20s capped at 15s); the
    # last attempt waits for nothing.
    assert within_a_pass(waits(drive, select), [10, 15, 0])


def test_a_final_failure_waits_out_the_backoff_first() -> None:
    drive, select = retried_select([1])
    assert (select["phase"], select["message"]) == ("Failed", "retryStrategy.expression evaluated to false")
    assert within_a_pass(waits(drive, select), [10])  # Argo checks the backoff before the expression


def test_a_lost_attempt_without_exit_code_is_retried() -> None:
    drive, select = retried_select([137, 0], error="pod deleted")
    first = attempts(drive, select)[0]
    assert first["phase"] == "Error"
    assert select["phase"] == "Succeeded" and len(attempts(drive, select)) == 2


@pytest.mark.parametrize(
    ("expression", "exit_code", "status", "expected"),
    [
        pytest.param(
            'lastRetry.status == "Error" || asInt(lastRetry.exitCode) == 75', 75, "Failed", True, id="75"
        ),
        pytest.param(
            'lastRetry.status == "Error" || asInt(lastRetry.exitCode) == 75', 1, "Failed", False, id="1"
        ),
        pytest.param(
            'lastRetry.status == "Error" || asInt(lastRetry.exitCode) == 75', 0, "Error", True, id="error"
        ),
        pytest.param("asInt(lastRetry.exitCode) == -1", -1, "Error", True, id="no-exit-code"),
        pytest.param(
            "asInt(lastRetry.exitCode) > 1 && asInt(lastRetry.exitCode) != 75", 3, "Failed", True, id="and"
        ),
    ],
)
def test_retry_expression(expression: str, exit_code: int, status: str, expected: bool) -> None:
    assert retry_expression_holds(expression, exit_code=exit_code, status=status) is expected


def test_manual_approval_waits_until_its_node_is_resumed() -> None:
    calls: list[tuple[str, ...]] = []
    workflow = rollout(make_stage("canary"), {**make_stage("rest"), "approval": "Manual"})
    drive = Drive(workflow)
    step = fleet_step({"canary": ["c1"], "rest": ["c2"]}, calls=calls)
    drive.step(
        step, until=lambda d: bool(d.nodes(templateName="approval", phase="Running")) and not d.finishing
    )
    for _ in range(5):
        drive.step(step, max_passes=1, until=lambda d: True)
    gate = drive.nodes(templateName="approval")[0]
    assert gate["phase"] == "Running" and gate["type"] == "Suspend"
    assert ("select", "rest") not in calls
    gate["phase"] = "Succeeded"  # what `argo resume` / `progressive-sync approve` write
    drive.step(step)
    assert ("select", "rest") in calls
    assert drive.status["phase"] == "Succeeded"


def test_bake_waits_its_duration() -> None:
    workflow = rollout({**make_stage("canary"), "bakeSeconds": 600}, make_stage("rest"))
    drive = Drive(workflow)
    start = drive.now
    drive.step(fleet_step({"canary": ["c1"], "rest": ["c2"]}))
    bake = drive.nodes(templateName="bake-600s")[0]
    assert bake["type"] == "Suspend" and bake["phase"] == "Succeeded"
    assert (drive.now - start).total_seconds() >= 600
    rest = drive.nodes(name="svc-r1.rest")[0]
    assert rest["startedAt"] >= bake["finishedAt"]


def test_spec_suspend_starts_nothing_new_and_resume_continues() -> None:
    calls: list[tuple[str, ...]] = []
    workflow = rollout(*THREE_STAGES)
    del workflow["spec"]["activeDeadlineSeconds"]  # the drive would jump the clock to it
    drive = Drive(workflow)
    step = fleet_step(TARGETS, calls=calls)
    drive.step(step, ticks=2, until=lambda d: ("record", "canary") in calls)
    drive.workflow["spec"]["suspend"] = True
    before = len(calls)
    drive.step(step, ticks=2, until=lambda d: False)  # returns when nothing can happen any more
    assert len(calls) == before  # the running record finished; nothing new started
    assert drive.status["phase"] == "Running"
    del drive.workflow["spec"]["suspend"]
    drive.step(step, ticks=2)
    assert drive.status["phase"] == "Succeeded"
    assert sorted(c[2] for c in calls if c[0] == "sync") == sorted(f"c{i}" for i in range(1, 13))


@pytest.mark.parametrize(
    ("strategy", "exit_handler_runs"),
    [
        pytest.param("Stop", True, id="stop-runs-exit-handler"),
        pytest.param("Terminate", False, id="terminate"),
    ],
)
def test_shutdown(strategy: str, exit_handler_runs: bool) -> None:
    calls: list[tuple[str, ...]] = []
    drive = Drive(rollout(*THREE_STAGES))
    step = fleet_step(TARGETS, calls=calls)
    drive.step(step, ticks=5, until=lambda d: any(c[0] == "sync" and c[1] == "wave one" for c in calls))
    drive.workflow["spec"]["shutdown"] = strategy
    drive.step(step, ticks=1)
    assert drive.status["phase"] == "Failed"
    assert drive.status["message"] == f"Stopped with strategy '{strategy}'"
    assert drive.killed  # the running syncs were killed
    assert (("finalize", "Failed") in calls) is exit_handler_runs
    assert not any(c[0] == "select" and c[1] == "rest" for c in calls)


def test_active_deadline_fails_the_workflow_and_runs_the_exit_handler() -> None:
    calls: list[tuple[str, ...]] = []
    workflow = rollout(make_stage("s"))
    workflow["spec"]["activeDeadlineSeconds"] = 30
    drive = Drive(workflow).step(fleet_step({"s": ["c1"]}, calls=calls), ticks=100)
    assert drive.status["phase"] == "Failed"
    assert "deadline" in drive.status["message"]
    assert calls[-1] == ("finalize", "Failed")


def test_restart_reruns_only_the_nodes_that_were_running() -> None:
    calls: list[tuple[str, ...]] = []
    drive = Drive(rollout(*THREE_STAGES))
    step = fleet_step(TARGETS, calls=calls)
    drive.step(
        step, ticks=3, until=lambda d: len([c for c in calls if c[0] == "sync" and c[1] == "wave one"]) == 2
    )
    drive.step(step, ticks=3, max_passes=1, until=lambda d: True)  # one more pass: the pods are Running
    running = {n["name"] for n in drive.nodes(type="Pod", phase="Running")}
    assert len(running) == 2
    # A new executor: it knows no process.
    drive.pods.clear()
    drive.finishing.clear()
    before = len(drive.launched)
    drive.step(step, ticks=1)
    relaunched = {launch.node_name for launch in drive.launched[before:]}
    assert running <= relaunched
    assert drive.status["phase"] == "Succeeded"
    pods_per_node = [
        len([launch for launch in drive.launched if launch.node_name == name]) for name in relaunched
    ]
    assert max(pods_per_node) <= 2
    finished_before = {launch.node_name for launch in drive.launched[:before]} - running
    assert not finished_before & relaunched


def test_empty_target_list_skips_the_fanout_and_the_stage_succeeds() -> None:
    drive = Drive(rollout(make_stage("s"))).step(fleet_step({"s": []}))
    skipped = drive.nodes(name="svc-r1.s.clusters.cluster")[0]
    assert (skipped["type"], skipped["phase"], skipped["message"]) == (
        "Skipped",
        "Skipped",
        "Skipped, empty params",
    )
    assert drive.status["phase"] == "Succeeded"


def test_waits_pending_without_the_mutex() -> None:
    op = operate(rollout(make_stage("s")), now=Drive({}).now, pods={}, lock_held=False)
    assert op.status["phase"] == "Pending"
    assert op.needs_lock == "ns/Mutex/progressivesync-svc"
    assert not op.launches


def test_terminate_while_pending_on_the_mutex_succeeds_at_once_without_running_anything() -> None:
    workflow = rollout(make_stage("s"))
    workflow["spec"]["shutdown"] = "Terminate"
    op = operate(workflow, now=Drive({}).now, pods={}, lock_held=False)
    # What Argo v3.7 does (releaseLocksForPendingShuttingdownWfs, seen on the real controller):
    # Succeeded at once, the entry node Failed, no container run, no exit handler.
    assert op.status["phase"] == "Succeeded" and op.finished
    assert [(n["name"], n["phase"]) for n in op.status["nodes"].values()] == [("svc-r1", "Failed")]
    assert "message" not in op.status
    assert op.status["startedAt"] and op.status["finishedAt"]
    assert not op.launches and op.needs_lock is None


def test_stop_while_pending_on_the_mutex_waits_for_it_then_runs_only_the_exit_handler() -> None:
    calls: list[tuple[str, ...]] = []
    workflow = rollout(make_stage("s"))
    workflow["spec"]["shutdown"] = "Stop"
    op = operate(workflow, now=Drive({}).now, pods={}, lock_held=False)
    assert op.status["phase"] == "Pending" and op.needs_lock
    drive = Drive(workflow).step(fleet_step({"s": ["c1"]}, calls=calls))
    assert drive.status["phase"] == "Failed"
    assert calls == [("finalize", "Failed")]


def test_missing_output_file_is_an_error() -> None:
    def run(launch: PodLaunch) -> PodResult:
        return PodResult(0, missing_outputs=("targets",) if argv_step(launch) == "select" else ())

    drive = Drive(rollout(make_stage("s"))).step(run)
    assert drive.status["phase"] == "Error"
    missing = drive.nodes(type="Pod", templateName="select")
    assert missing and all("targets" in node["message"] for node in missing)


def test_compressed_nodes_are_read() -> None:
    workflow = rollout(make_stage("s"))
    drive = Drive(workflow).step(
        fleet_step({"s": ["c1"]}), until=lambda d: bool(d.nodes(type="Pod", phase="Succeeded"))
    )
    nodes = drive.status.pop("nodes")
    drive.status["compressedNodes"] = base64.b64encode(gzip.compress(json.dumps(nodes).encode())).decode()
    drive.step(fleet_step({"s": ["c1"]}))
    assert drive.status["phase"] == "Succeeded"
    assert "compressedNodes" not in drive.status


def _template(workflow: dict[str, Any], name: str) -> dict[str, Any]:
    return next(t for t in workflow["spec"]["templates"] if t["name"] == name)


@pytest.mark.parametrize(
    ("change", "feature"),
    [
        pytest.param(
            lambda w: _template(w, "record").update(script={"source": "x"}), "templates[record]", id="script"
        ),
        pytest.param(
            lambda w: _template(w, "stage-s")["dag"]["tasks"][1].update(withItems=["a"]),
            "withItems",
            id="with-items",
        ),
        pytest.param(
            lambda w: _template(w, "stage-s")["dag"]["tasks"][1].update(depends="x"), "depends", id="depends"
        ),
        pytest.param(lambda w: _template(w, "fanout-s").update(failFast=True), "failFast", id="fail-fast"),
        pytest.param(
            lambda w: _template(w, w["spec"]["onExit"]).update(parallelism=2),
            "parallelism in the exit handler",
            id="parallelism-in-the-exit-handler-crashes-argo",
        ),
        pytest.param(lambda w: w["spec"].update(hooks={}), "spec.hooks", id="hooks"),
        pytest.param(
            lambda w: _template(w, "cluster")["container"]["args"].append("{{=1+1}}"),
            "expression",
            id="expression-tag",
        ),
        pytest.param(
            lambda w: _template(w, "cluster")["retryStrategy"].update(expression="lastRetry.duration > 1"),
            "retryStrategy.expression",
            id="retry-expression",
        ),
        pytest.param(
            lambda w: _template(w, "cluster")["retryStrategy"]["backoff"].update(maxDuration="1m"),
            "backoff.maxDuration",
            id="max-duration",
        ),
        pytest.param(
            lambda w: _template(w, "cluster")["retryStrategy"].pop("limit"),
            "without limit",
            id="unlimited-retries",
        ),
        pytest.param(
            lambda w: _template(w, "cluster")["volumes"].append({"name": "host", "hostPath": {"path": "/"}}),
            "volumes[host].hostPath",
            id="a-volume-other-than-empty-dir",
        ),
        pytest.param(
            lambda w: _template(w, "cluster")["container"]["volumeMounts"].append(
                {"name": "x", "mountPath": "/x"}
            ),
            "volumeMounts[x] of no emptyDir volume",
            id="a-mount-of-no-volume",
        ),
    ],
)
def test_unsupported_features_make_the_workflow_error_and_name_the_feature(
    change: Callable[[dict[str, Any]], None], feature: str
) -> None:
    workflow = rollout(make_stage("s"))
    change(workflow)
    drive = Drive(workflow).step(fleet_step({"s": ["c1"]}))
    assert drive.status["phase"] == "Error"
    assert "unsupported by the local executor" in drive.status["message"]
    assert feature in drive.status["message"]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        pytest.param("600", 600, id="plain"),
        pytest.param("1m30s", 90, id="go"),
        pytest.param("500ms", 0.5, id="ms"),
        pytest.param(5, 5, id="int"),
    ],
)
def test_parse_duration(text: Any, seconds: float) -> None:
    assert parse_duration(text) == seconds
