"""The local executor's decisions on the rollback branch: the exit handler DAG as Argo v3.7.18 runs it.

Pure: tests/support/engine_driver plays the executor (pods finish after a number of passes, a fake
clock jumps to the next wake-up) on Workflows built with a rollback (contracts made by hand,
tests/support/rollback_contracts.py). Each behaviour is Argo's, read in v3.7.18's
workflow/controller: the exit handler runs after a failure, after `argo stop` and past the
deadline (operator.go, exec_control.go), not after `argo terminate`; `{{workflow.status}}` and
`{{workflow.name}}` inside it; `tasks.X.outputs.parameters.Y` and `tasks.X.status` in a task; a
false `when` and an empty list are Skipped and let the tasks after them run (dag.go); continueOn;
a missing output file with a default (executor.go SaveParameters); no retry once stopped or past
the deadline (operator.go processNodeRetries). The same on real processes and a real API server:
tests/integration/test_local_executor_rollback.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from orchestrator.engine.interface import PodLaunch, PodResult
from tests.support.builders import make_ps_model, make_release, make_stage
from tests.support.engine_driver import Drive, arg, argv_step
from tests.support.rollback_contracts import rollback_workflow
from workflow_templates.builder import StageSize
from workflow_templates.settings import WorkflowSettings

SETTINGS = WorkflowSettings(retry_limit=2, retry_backoff="10s", retry_factor=2, retry_backoff_cap="15s")
STAGES = (
    make_stage("canary", max_targets=1, max_parallel=1),
    make_stage("wave one", max_parallel=2),
    make_stage("rest", max_parallel=3),
)
TARGETS = {"canary": ["c1"], "wave one": ["c2", "c3", "c4"], "rest": ["c5", "c6"]}
EXIT = "svc-r1.onExit"


def rollout(parallel: Mapping[str, int] | None = None, *, deadline: int | None = None) -> dict[str, Any]:
    """The rollback Workflow of STAGES (as the API server would hold it)."""
    ps = make_ps_model("svc", namespace="ns", uid="u1", stages=STAGES)
    sizes = {"canary": StageSize(1, 1), "wave one": StageSize(3, 2), "rest": StageSize(2, 2)}
    obj: dict[str, Any] = rollback_workflow(
        ps,
        release=make_release("r1", revisions=(("abc",),)),
        sizes=sizes,
        settings=SETTINGS,
        parallel=parallel,
    ).to_dict()
    obj["metadata"]["uid"] = "wf-uid"
    if deadline is not None:
        obj["spec"]["activeDeadlineSeconds"] = deadline
    return obj


def steps(
    calls: list[tuple[str, ...]],
    *,
    fail: frozenset[str] = frozenset(),
    plan: Mapping[str, list[str]] | None = None,
    batches: Mapping[str, list[str]] | None = None,
    plan_exits: list[int] | None = None,
    plan_error: bool = False,
    rollback_exits: Mapping[str, int] | None = None,
) -> Callable[[PodLaunch], PodResult]:
    """The steps as far as the branch needs them: select gives TARGETS; `cluster` fails for the
    clusters in `fail`, and `record` then fails its stage; rollback-plan writes `plan` (stage name
    -> clusters) as its `rollback-<index>` files and `batches` (stage name -> batch indexes) as its
    `rollback-batches-<index>` files, leaving out the stages it has nothing for, and
    exits with the next of `plan_exits` (or loses its pod: `plan_error`); `rollback` exits
    `rollback_exits[cluster]`. Every call is logged in `calls`."""
    failed: set[str] = set()
    index_of = {stage["name"]: index for index, stage in enumerate(STAGES)}

    def run(launch: PodLaunch) -> PodResult:
        step = argv_step(launch)
        if step == "select":
            calls.append(("select", arg(launch, "--stage")))
            return PodResult(0, outputs={"targets": json.dumps(TARGETS[arg(launch, "--stage")])})
        if step == "cluster":
            cluster, stage = arg(launch, "--cluster"), arg(launch, "--stage")
            calls.append(("sync", stage, cluster))
            if cluster in fail:
                failed.add(stage)
                return PodResult(1, summary="Degraded")
            return PodResult(0)
        if step in ("record", "record-and-select"):
            stage = arg(launch, "--stage")
            calls.append(("record", stage))
            if stage in failed:
                return PodResult(1, summary="stage failed")
            if step == "record-and-select":
                following = arg(launch, "--next-stage")
                return PodResult(0, outputs={"targets": json.dumps(TARGETS[following])})
            return PodResult(0)
        if step == "rollback-plan":
            calls.append(("rollback-plan", arg(launch, "--workflow-name"), arg(launch, "--workflow-status")))
            if plan_error:
                return PodResult(137, error="pod deleted")
            code = plan_exits.pop(0) if plan_exits else 0
            files = {
                f"rollback-{index_of[stage]}": json.dumps(clusters)
                for stage, clusters in (plan or {}).items()
            }
            files |= {
                f"rollback-batches-{index_of[stage]}": json.dumps(indexes)
                for stage, indexes in (batches or {}).items()
            }
            missing = tuple(name for name, _ in launch.outputs if name not in files) if code == 0 else ()
            return PodResult(code, outputs=files, missing_outputs=missing)
        if step == "rollback":
            cluster = arg(launch, "--cluster")
            calls.append(("rollback", arg(launch, "--stage"), cluster))
            return PodResult((rollback_exits or {}).get(cluster, 0))
        if step == "rollback-batch":
            calls.append(("rollback-batch", arg(launch, "--stage"), arg(launch, "--batch")))
            return PodResult(0)
        if step == "finalize":
            calls.append(("finalize", arg(launch, "--workflow-name"), arg(launch, "--workflow-status")))
        return PodResult(0)

    return run


def node(drive: Drive, name: str) -> dict[str, Any]:
    [found] = drive.nodes(name=name)
    return found


def after(calls: list[tuple[str, ...]], first: str) -> list[tuple[str, ...]]:
    """The calls from the first `first` on."""
    return calls[[c[0] for c in calls].index(first) :]


def test_a_failed_rollout_rolls_back_each_stage_last_first_then_finalizes() -> None:
    calls: list[tuple[str, ...]] = []
    seen: dict[str, int] = {}

    def most_at_once(drive: Drive) -> None:
        for fanout in drive.nodes(type="DAG"):
            running = [
                n
                for n in drive.nodes(type="Pod", phase="Running")
                if n["boundaryID"] == fanout["id"] and n["templateName"] in ("rollback", "rollback-batch")
            ]
            seen[fanout["displayName"]] = max(seen.get(fanout["displayName"], 0), len(running))

    # Three clusters of "wave one" at 2 at a time are two batch pods (orchestrator.planning.rollback
    # .fanout_items); the canary's one cluster is one pod of its own.
    drive = Drive(rollout({"wave one": 2})).step(
        steps(calls, fail=frozenset({"c3"}), plan={"canary": ["c1"]}, batches={"wave one": ["0", "1"]}),
        ticks=2,
        on_pass=most_at_once,
    )
    assert drive.status["phase"] == "Failed"
    # {{workflow.name}} and {{workflow.status}} inside the exit DAG.
    assert after(calls, "rollback-plan")[0] == ("rollback-plan", "svc-r1", "Failed")
    assert [c for c in after(calls, "rollback-plan")[1:]] == [
        ("rollback-batch", "wave one", "0"),
        ("rollback-batch", "wave one", "1"),
        ("rollback", "canary", "c1"),
        ("finalize", "svc-r1", "Failed"),
    ]
    assert seen["rollback-wave-one"] == 2 and seen["rollback-canary"] == 1
    exit_node = node(drive, EXIT)
    assert (exit_node["type"], exit_node["templateName"], exit_node["phase"]) == ("DAG", "exit", "Succeeded")
    # A stage rollback-plan wrote nothing for: its output defaulted to [], its loop is Skipped.
    plan_node = node(drive, f"{EXIT}.rollback-plan")
    assert {p["name"]: p["value"] for p in plan_node["outputs"]["parameters"]}["rollback-2"] == "[]"
    skipped = node(drive, f"{EXIT}.rollback-rest.rollback")
    assert (skipped["type"], skipped["phase"], skipped["message"]) == (
        "Skipped",
        "Skipped",
        "Skipped, empty params",
    )
    assert node(drive, f"{EXIT}.rollback-rest")["phase"] == "Succeeded"
    # One pod per cluster under a Retry node showing the cluster's name.
    retry = node(drive, f"{EXIT}.rollback-canary.rollback(0:c1)")
    assert (retry["type"], retry["displayName"]) == ("Retry", "c1")
    # The fan-out's other loop, with nothing in it, is Skipped and lets its fan-out succeed.
    assert node(drive, f"{EXIT}.rollback-canary.rollback-batch")["phase"] == "Skipped"
    assert node(drive, f"{EXIT}.finalize")["phase"] == "Succeeded"


def test_a_rollout_that_succeeded_starts_no_pod_in_its_exit_handler() -> None:
    """The last stage's record recorded the end (steps/rollout_end.py): rollback-plan and finalize
    are Skipped, and every rollback fan-out with the plan (workflow_templates/exit_handler.py)."""
    calls: list[tuple[str, ...]] = []
    drive = Drive(rollout()).step(steps(calls, plan={}))
    assert drive.status["phase"] == "Succeeded"
    assert [c for c in calls if c[0] in ("rollback-plan", "rollback", "finalize")] == []
    assert not [n for n in drive.nodes(type="Pod") if n["name"].startswith(EXIT)]
    skipped = "when 'Succeeded != Succeeded' evaluated false"
    assert node(drive, f"{EXIT}.rollback-plan")["message"] == skipped
    assert node(drive, f"{EXIT}.finalize")["message"] == skipped
    for stage in ("rest", "wave-one", "canary"):
        rolled = node(drive, f"{EXIT}.rollback-{stage}")
        assert (rolled["phase"], rolled["message"]) == (
            "Skipped",
            "when 'Skipped == Succeeded' evaluated false",
        )
    assert node(drive, EXIT)["phase"] == "Succeeded"


@pytest.mark.parametrize(
    ("exits", "error", "plan_phase", "skip_message"),
    [
        pytest.param(
            [1], False, "Failed", "when 'Failed == Succeeded' evaluated false", id="could-not-decide"
        ),
        pytest.param(
            [75, 75, 75], False, "Failed", "when 'Failed == Succeeded' evaluated false", id="retries-spent"
        ),
        # A lost pod has no outputs: the rollbacks must not name them (Argo would requeue for ever).
        pytest.param([], True, "Error", "when 'Error == Succeeded' evaluated false", id="pod-lost"),
    ],
)
def test_finalize_runs_when_rollback_plan_does_not_succeed(
    exits: list[int], error: bool, plan_phase: str, skip_message: str
) -> None:
    calls: list[tuple[str, ...]] = []
    run = steps(calls, fail=frozenset({"c1"}), plan={"canary": ["c1"]}, plan_exits=exits, plan_error=error)
    drive = Drive(rollout()).step(run)
    assert node(drive, f"{EXIT}.rollback-plan")["phase"] == plan_phase
    assert not [c for c in calls if c[0] == "rollback"]
    for stage in ("rest", "wave-one", "canary"):
        skipped = node(drive, f"{EXIT}.rollback-{stage}")
        assert (skipped["type"], skipped["phase"], skipped["message"]) == ("Skipped", "Skipped", skip_message)
    assert calls[-1] == ("finalize", "svc-r1", "Failed")
    assert drive.status["phase"] == "Failed"


def test_a_cluster_not_restored_fails_its_stage_rollback_and_the_rest_still_runs() -> None:
    calls: list[tuple[str, ...]] = []
    plan = {"wave one": ["c2", "c3"], "canary": ["c1"]}
    run = steps(calls, fail=frozenset({"c3"}), plan=plan, rollback_exits={"c2": 1})
    drive = Drive(rollout()).step(run)
    assert node(drive, f"{EXIT}.rollback-wave-one")["phase"] == "Failed"
    assert ("rollback", "wave one", "c3") in calls  # a failure does not stop the other clusters
    assert ("rollback", "canary", "c1") in calls  # continueOn failed: the next stage's rollback runs
    assert calls[-1] == ("finalize", "svc-r1", "Failed")
    # The exit DAG's phase is its last task's (finalize): Argo looks at the leaves only.
    assert node(drive, EXIT)["phase"] == "Succeeded"


@pytest.mark.parametrize(
    ("strategy", "runs"),
    [
        pytest.param("Stop", True, id="stop-rolls-back"),
        pytest.param("Terminate", False, id="terminate-does-not"),
    ],
)
def test_a_shutdown_during_the_rollout(strategy: str, runs: bool) -> None:
    calls: list[tuple[str, ...]] = []
    run = steps(calls, plan={"canary": ["c1"], "wave one": ["c2"]})
    drive = Drive(rollout())
    drive.step(run, ticks=5, until=lambda d: ("sync", "wave one", "c2") in calls)
    drive.workflow["spec"]["shutdown"] = strategy
    drive.step(run, ticks=1)
    assert drive.status["phase"] == "Failed"
    assert drive.status["message"] == f"Stopped with strategy '{strategy}'"
    exit_calls = [c for c in calls if c[0] in ("rollback-plan", "rollback", "finalize")]
    if runs:
        assert exit_calls == [
            ("rollback-plan", "svc-r1", "Failed"),
            ("rollback", "wave one", "c2"),
            ("rollback", "canary", "c1"),
            ("finalize", "svc-r1", "Failed"),
        ]
    else:
        assert exit_calls == [] and not drive.nodes(name=EXIT)


def test_a_stop_during_the_exit_handler_kills_nothing_of_it_and_retries_nothing() -> None:
    """Argo: exit-handler pods survive a Stop and its later tasks still start, but a failed attempt
    is not retried once the Workflow is stopped (the Retry node ends 'Stopped with strategy')."""
    calls: list[tuple[str, ...]] = []
    run = steps(calls, fail=frozenset({"c1"}), plan={"canary": ["c1"]}, rollback_exits={"c1": 75})
    drive = Drive(rollout())
    drive.step(
        run, ticks=3, until=lambda d: bool(d.nodes(templateName="rollback", type="Pod", phase="Running"))
    )
    drive.workflow["spec"]["shutdown"] = "Stop"
    drive.step(run, ticks=3)
    assert not drive.killed
    rolled_back = node(drive, f"{EXIT}.rollback-canary.rollback(0:c1)")
    assert (rolled_back["phase"], rolled_back["message"]) == ("Failed", "Stopped with strategy 'Stop'")
    assert len(rolled_back["children"]) == 1  # exit 75, and no second attempt
    assert calls[-1] == ("finalize", "svc-r1", "Failed")
    assert drive.status["message"] == "Stopped with strategy 'Stop'"


def test_past_the_deadline_the_exit_handler_still_runs_its_pods_to_their_end() -> None:
    """Argo exempts exit-handler pods from the Workflow's deadline (workflowpod.go: no
    activeDeadlineSeconds for onExit pods; exec_control.go kills only the others); a failed
    attempt is not retried past it ('retry exceeded workflow deadline')."""
    calls: list[tuple[str, ...]] = []
    run = steps(calls, fail=frozenset({"c1"}), plan={"canary": ["c1"]}, rollback_exits={"c1": 75})
    drive = Drive(rollout(deadline=30))
    drive.step(run, ticks=60)  # every pod takes a minute: the entrypoint's first one outlives the deadline
    assert drive.status["phase"] == "Failed" and "deadline" in drive.status["message"]
    exit_pods = [n for n in drive.nodes(type="Pod") if n["name"].startswith(EXIT)]
    assert len(exit_pods) == 3 and not set(drive.killed) & {n["id"] for n in exit_pods}
    plan, rollback_pod, finalize = sorted(exit_pods, key=lambda n: n["startedAt"])
    assert (plan["phase"], rollback_pod["phase"], finalize["phase"]) == ("Succeeded", "Failed", "Succeeded")
    retry = node(drive, f"{EXIT}.rollback-canary.rollback(0:c1)")
    assert retry["message"] == "retry exceeded workflow deadline 2026-01-01 00:00:30 +0000 UTC"
    assert [c[0] for c in after(calls, "rollback-plan")] == ["rollback-plan", "rollback", "finalize"]


def test_an_output_file_with_a_default_may_be_missing_even_from_a_failed_pod() -> None:
    """Argo's wait container reads outputs whatever the exit code, and takes a missing file's
    default instead of failing the pod."""
    calls: list[tuple[str, ...]] = []
    drive = Drive(rollout()).step(steps(calls, fail=frozenset({"c1"}), plan={}, plan_exits=[1]))
    [attempt] = [n for n in drive.nodes(type="Pod") if n["name"].startswith(f"{EXIT}.rollback-plan(")]
    assert attempt["phase"] == "Failed"
    assert {p["name"]: p["value"] for p in attempt["outputs"]["parameters"]} == {
        name: "[]" for index in range(3) for name in (f"rollback-{index}", f"rollback-batches-{index}")
    }


def test_a_suspended_workflow_holds_its_rollback_until_resumed() -> None:
    """Argo's `operate` returns before anything runs while `spec.suspend` is true, exit handler
    included (`argo suspend`, or the watcher's for `spec.paused`): the rollback waits; running pods
    finish."""
    calls: list[tuple[str, ...]] = []
    run = steps(calls, fail=frozenset({"c1"}), plan={"canary": ["c1"]})
    drive = Drive(rollout())
    drive.step(run, ticks=3, until=lambda d: any(c[0] == "rollback-plan" for c in calls))
    drive.workflow["spec"]["suspend"] = True
    drive.step(run, ticks=3, until=lambda d: False)  # returns when nothing can happen any more
    assert [c[0] for c in after(calls, "rollback-plan")] == ["rollback-plan"]
    assert node(drive, f"{EXIT}.rollback-plan")["phase"] == "Succeeded"  # it finished meanwhile
    assert drive.status["phase"] == "Running"
    del drive.workflow["spec"]["suspend"]
    drive.step(run, ticks=3)
    assert [c[0] for c in after(calls, "rollback-plan")] == ["rollback-plan", "rollback", "finalize"]
    assert drive.status["phase"] == "Failed"
