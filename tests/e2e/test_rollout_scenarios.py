"""The rollout scenarios, each on both engines: the local executor and the real Argo Workflows controller.

Real on both: kube-apiserver + etcd, our CRDs and Argo's, the steps (subprocesses with the steps'
restricted user locally; pods with the chart's service account on the real node), the Workflow as
`build_workflow` makes it, the watcher where a scenario needs it (in this process, or as a child
process to SIGKILL), the real `argo` CLI and the `progressive-sync` CLI, the audit log. Simulated on
both: Argo CD (the fleet simulator plays its application controller and logs each sync with a time).

Each scenario asserts the same things on both engines, against the same expectations: which clusters
were synced and how often (the simulator's log, and the steps' Application writes in the audit log),
the stage phases, and the ProgressiveSync's final status. The real-engine runs are the list of issue
11 and no more: real pods cost seconds each (tests/support/engines.py says how the engines differ).
"""

from __future__ import annotations

import itertools
import json
import math
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from orchestrator.api.metadata import SKIP_ANNOTATION
from orchestrator.api.models import ProgressiveSync, RolloutPhase, StagePhase
from orchestrator.api.release import Release, spec_hash
from orchestrator.cli.main import main
from orchestrator.core.clock import parse_time
from orchestrator.kube.client import APPLICATIONS, PROGRESSIVE_SYNCS, WORKFLOWS
from orchestrator.simulator.seed import seed_fleet
from tests.support import workflow_control
from tests.support.engines import ENGINES, RolloutEngine, rollout_engine
from tests.support.rollout_rig import REGIONS, REVISION, REVISION_2, RolloutRig, rollout_rig
from tests.support.steps_harness import make_progressive_sync
from tests.support.wait import wait_for
from workflow_templates import pieces
from workflow_templates.builder import build_workflow, workflow_object

# Real pods take seconds each: a scenario on the real controller may take minutes.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

TIMEOUT = 600.0
CANARY = {
    "name": "canary in eu-west-1",
    "targets": {"clusters": {"selector": {"matchLabels": {"region": "eu-west-1"}}}},
    "maxTargets": 1,
    "maxParallel": 1,
}
PER_REGION = {
    "name": "one per other region",
    "targets": {
        "clusters": {
            "selector": {
                "matchExpressions": [{"key": "region", "operator": "NotIn", "values": ["eu-west-1"]}]
            }
        }
    },
    "maxTargets": 2,
    "maxParallel": 2,
    "spreadBy": "region",
}
REST = {"name": "everything else", "targets": {"clusters": {"selector": {}}}, "maxParallel": "25%"}
THREE_STAGES = [CANARY, PER_REGION, REST]
# For the scenarios about control rather than scale: a canary, then the rest two at a time.
TWO_STAGES = [CANARY, {**REST, "maxParallel": 2}]
SUCCEEDED, FAILED, CANCELLED, SKIPPED = (
    StagePhase.SUCCEEDED,
    StagePhase.FAILED,
    StagePhase.CANCELLED,
    StagePhase.SKIPPED,
)


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[RolloutEngine]:
    with rollout_engine(request, request.param, tmp_path) as running:
        yield running


@pytest.fixture
def rig(engine: RolloutEngine) -> Iterator[RolloutRig]:
    """Six clusters, two per region."""
    with rollout_rig(engine, clusters=6) as running:
        yield running


def cli(rig: RolloutRig, *args: str) -> Result:
    return CliRunner().invoke(main, [*args, "-n", rig.namespace, "--kubeconfig", str(rig.engine.kubeconfig)])


def once_each(clusters: list[str]) -> dict[str, int]:
    return dict.fromkeys(clusters, 1)


def exit_handler(rig: RolloutRig, workflow: str = "") -> dict[str, Any]:
    [node] = rig.nodes(workflow, name=f"{workflow or rig.workflow_name}.onExit")
    return node


# --- 1. twelve clusters succeed ---------------------------------------------------------------


@pytest.mark.batch_on_real_argo
def test_twelve_clusters_in_three_stages_succeed_in_order_within_max_parallel(engine: RolloutEngine) -> None:
    with rollout_rig(engine, clusters=12) as rig:
        # Each cluster takes 3 s to turn Healthy, longer than real pods take to start one after the
        # other, so clusters the engine runs together overlap in the simulator's log.
        rig.simulate({"*": {"healthSeconds": 3}})
        rig.run_engine()
        mark = engine.cluster.audit_mark()
        rig.start_rollout(THREE_STAGES)
        done = rig.wait_finished()

        assert done["status"]["phase"] == "Succeeded", done["status"].get("message")
        assert rig.progressive_sync().status.phase == RolloutPhase.SUCCEEDED  # type: ignore[union-attr]
        assert rig.stage_phases() == {s["name"]: SUCCEEDED for s in THREE_STAGES}
        assert rig.sync_starts() == once_each(rig.all_clusters())
        assert rig.fleet is not None
        assert rig.app_writes_by_steps(mark) == once_each(list(rig.fleet.applications))
        targets = rig.stage_targets()
        assert [len(targets[s["name"]]) for s in THREE_STAGES] == [1, 2, 9]
        windows = [rig.window(targets[s["name"]]) for s in THREE_STAGES]
        for (_, earlier_end), (later_start, _) in itertools.pairwise(windows):
            assert later_start >= earlier_end, "a stage started before the one before it finished"
        assert [rig.in_flight(targets[s["name"]]) for s in THREE_STAGES] == [1, 2, 2]  # 25% of 9 is 2
        assert exit_handler(rig)["phase"] == "Succeeded"
        # One pod (and its Retry node) per cluster.
        # Or one per batch: stages of 1, 2 and 9 clusters in batches of at most 2 and never more
        # batches than maxParallel (1, 2, 2): 1 + 1 + 2.
        assert len(rig.cluster_pods()) == (4 if rig.batched else 12)


# --- 2. a failing canary --------------------------------------------------------------------------


def test_a_failing_canary_fails_the_rollout_and_nothing_after_it_syncs(rig: RolloutRig) -> None:
    [canary] = rig.planned_targets(TWO_STAGES, CANARY["name"])
    rig.simulate({canary: {"degrade": True}})
    rig.run_engine()
    rig.start_rollout(TWO_STAGES, deadline_seconds=60)
    done = rig.wait_finished(timeout=TIMEOUT)

    assert done["status"]["phase"] == "Failed"
    assert rig.sync_starts() == {canary: 1}
    assert rig.stage_phases() == {CANARY["name"]: FAILED, "everything else": CANCELLED}
    status = rig.progressive_sync().status
    assert status is not None and status.phase == RolloutPhase.FAILED
    canary_stage = status.stages[0]  # type: ignore[index]
    assert [f.name for f in canary_stage.failed] == [canary]
    # Argo marks the tasks behind a failed stage Omitted; the exit handler recorded the end.
    [later] = rig.nodes(name=f"{rig.workflow_name}.everything-else")
    assert (later["type"], later["phase"]) == ("Skipped", "Omitted")
    assert exit_handler(rig)["phase"] == "Succeeded"


# --- 3. a cluster failing while a sibling runs ---------------------------------------------------

ONE_STAGE_OF_THREE = [{"name": "all", "targets": {"clusters": {"selector": {}}}, "maxParallel": 2}]


@pytest.mark.batch_on_real_argo
def test_a_cluster_failing_while_a_sibling_runs_ends_failed_and_the_next_release_runs(
    engine: RolloutEngine,
) -> None:
    """Issue 11 finding 1: on Argo, failFast over cluster DAGs hung here for ever (mutex held)."""
    with rollout_rig(engine, clusters=3) as rig:
        slow, bad, third = rig.planned_targets(ONE_STAGE_OF_THREE, "all")
        # Both stay Progressing until the test lets them settle, so `bad` fails while `slow` runs
        # however far apart the engine starts their steps (real pods start seconds apart on a busy
        # node, and a step that starts after its stage failed does not sync at all).
        held = {"healthSeconds": 3600}
        rig.simulate({slow: held, bad: {**held, "degrade": True}})
        rig.run_engine()
        rig.watcher()
        rig.create_ps(ONE_STAGE_OF_THREE, deadline_seconds=120)
        wait_for(
            lambda: rig.sync_starts() == {slow: 1, bad: 1},
            timeout=TIMEOUT,
            interval=0.5,
            what="both clusters syncing",
        )
        rig.set_app_behaviour(bad, **{"health-seconds": "0"})
        status = rig.wait_phase("Failed", timeout=TIMEOUT)

        first = rig.workflows()[0]
        rig.workflow_name = first["metadata"]["name"]
        done = rig.wait_finished(timeout=TIMEOUT)
        assert done["status"]["phase"] == "Failed"
        assert exit_handler(rig)["phase"] == "Succeeded"  # the exit handler ran and recorded the end
        stage = status["stages"][0]
        failed = {f["name"]: f["reason"] for f in stage["failed"]}
        assert (stage["phase"], stage["completed"], list(failed)) == ("Failed", [], [bad, slow])
        # The sibling in flight (still Progressing) stopped once the stage failed; the cluster not
        # yet started never synced.
        assert "stopped before it finished" in failed[slow] and bad in failed[slow]
        assert rig.sync_starts() == {slow: 1, bad: 1}
        [not_started] = rig.cluster_nodes("all", 2, third)
        assert not_started["phase"] == "Failed"

        # The mutex is free: the next release rolls out (the bad cluster is fixed meanwhile).
        rig.set_behaviour(bad, degrade="false")
        rig.set_app_behaviour(slow, **{"health-seconds": "0"})
        # Paused while the Applications turn OutOfSync one by one, so the watcher sees one release,
        # not the mix of old and new revisions on the way (issue 12 is about that mix). The watcher's
        # informers each go at their own pace, so the release starts once the watcher says it saw
        # the pause, and the resume comes once it says the new release alone is due: a resume seen
        # before the last Application change started a rollout of the mix (REVISION and REVISION_2,
        # seen once on [argo-batch]).
        assert cli(rig, "pause", "myservice").exit_code == 0
        wait_for(lambda: _paused_seen(rig), timeout=60, interval=0.5, what="the watcher to see the pause")
        rig.release(REVISION_2)
        wait_for(
            lambda: _due_while_paused(rig) == [REVISION_2],
            timeout=60,
            interval=0.5,
            what="the watcher to see the new release alone, paused",
        )
        assert cli(rig, "unpause", "myservice").exit_code == 0
        wait_for(lambda: len(rig.workflows()) == 2, timeout=60, interval=0.5, what="the next rollout")
        second = rig.workflows()[1]["metadata"]["name"]
        assert rig.wait_finished(second, timeout=TIMEOUT)["status"]["phase"] == "Succeeded"
        assert rig.wait_phase("Succeeded")["rollout"]["revision"] == REVISION_2
        assert rig.sync_starts() == {slow: 2, bad: 2, third: 1}


def _paused_seen(rig: RolloutRig) -> bool:
    """True once the watcher wrote the Paused condition for `spec.paused`."""
    status = rig.progressive_sync().status
    conditions = status.conditions if status is not None else []
    return any(c.type == "Paused" and c.status.value == "True" for c in conditions or [])


def _due_while_paused(rig: RolloutRig) -> list[str]:
    """The revisions of the release the watcher holds back for `spec.paused` ([] when none is due)."""
    status = rig.progressive_sync().status
    if status is None or status.phase != RolloutPhase.PAUSED or "is due" not in (status.message or ""):
        return []
    return [r for r in (REVISION, REVISION_2) if r in (status.message or "")]


# --- 4. the per-cluster deadline ---------------------------------------------------------------------


def test_a_cluster_past_its_progress_deadline_fails_its_stage(rig: RolloutRig) -> None:
    [canary] = rig.planned_targets(TWO_STAGES, CANARY["name"])
    rig.simulate({canary: {"hang": True}})
    rig.run_engine()
    started = time.monotonic()
    rig.start_rollout(TWO_STAGES, deadline_seconds=20)
    done = rig.wait_finished(timeout=TIMEOUT)

    assert done["status"]["phase"] == "Failed"
    assert time.monotonic() - started >= 20
    assert rig.sync_starts() == {canary: 1}
    assert rig.stage_phases() == {CANARY["name"]: FAILED, "everything else": CANCELLED}
    [failure] = rig.progressive_sync().status.stages[0].failed  # type: ignore[union-attr,index]
    assert failure.name == canary and "progress deadline of 20s passed" in failure.reason
    assert rig.progressive_sync().status.phase == RolloutPhase.FAILED  # type: ignore[union-attr]


# --- 5. cancel ------------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["argo-stop", "progressive-sync-cancel"])
def test_cancel_stops_the_rollout_and_it_ends_cancelled(rig: RolloutRig, how: str) -> None:
    [canary] = rig.planned_targets(TWO_STAGES, CANARY["name"])
    rig.simulate({canary: {"hang": True}})
    rig.run_engine()
    rig.watcher()
    rig.create_ps(TWO_STAGES, deadline_seconds=600)
    wait_for(
        lambda: rig.sync_starts() == {canary: 1}, timeout=TIMEOUT, interval=0.5, what="the canary syncing"
    )
    rig.workflow_name = rig.workflows()[0]["metadata"]["name"]

    if how == "argo-stop":
        rig.engine.argo("stop", rig.workflow_name)
    else:
        cancelled = cli(rig, "cancel", "myservice")
        assert cancelled.exit_code == 0, cancelled.output
    status = rig.wait_phase("Cancelled", timeout=TIMEOUT)

    done = rig.wait_finished()
    assert (done["status"]["phase"], done["status"]["message"]) == ("Failed", "Stopped with strategy 'Stop'")
    assert exit_handler(rig)["phase"] == "Succeeded"
    assert rig.sync_starts() == {canary: 1}
    assert [s["phase"] for s in status["stages"]] == ["Cancelled", "Cancelled"]


# --- 6. the approval gate ------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["argo-resume", "progressive-sync-approve"])
def test_the_approval_gate_waits_until_approved(rig: RolloutRig, how: str) -> None:
    gated = [CANARY, {**REST, "maxParallel": 3, "approval": "Manual"}]
    rig.simulate()
    rig.run_engine()
    rig.watcher()
    rig.create_ps(gated)
    wait_for(
        lambda: (
            rig.workflows()
            and rig.nodes(rig.workflows()[0]["metadata"]["name"], templateName="approval", phase="Running")
        ),
        timeout=TIMEOUT,
        interval=0.5,
        what="the gate of stage 'everything else' waiting",
    )
    rig.workflow_name = rig.workflows()[0]["metadata"]["name"]
    assert len(rig.sync_starts()) == 1  # only the canary
    assert rig.stage_phases() == {CANARY["name"]: SUCCEEDED, "everything else": StagePhase.PENDING}

    if how == "argo-resume":
        rig.engine.argo("resume", rig.workflow_name)
    else:
        approved = cli(rig, "approve", "myservice")
        assert approved.exit_code == 0, approved.output
    rig.wait_phase("Succeeded", timeout=TIMEOUT)

    assert rig.sync_starts() == once_each(rig.all_clusters())
    assert rig.stage_phases() == {CANARY["name"]: SUCCEEDED, "everything else": SUCCEEDED}
    if how == "argo-resume":
        rig.wait_finished()
        table = rig.engine.argo("get", rig.workflow_name).stdout
        assert "Succeeded" in table and "canary-in-eu-west-1" in table


# --- 7. pause and resume --------------------------------------------------------------------------


def test_pause_holds_new_clusters_and_resume_finishes_the_rollout(rig: RolloutRig) -> None:
    [canary] = rig.planned_targets(TWO_STAGES, CANARY["name"])
    # The canary stays Progressing until it is let go below: its sync starts from select (the first
    # wave), and its step must be running when the pause comes, so that the pause meets a running
    # step (which finishes) and a stage's record not yet started (which waits).
    rig.simulate({canary: {"healthSeconds": 3600}})
    rig.run_engine()
    rig.watcher()
    rig.create_ps(TWO_STAGES)
    wait_for(
        lambda: rig.sync_starts() == {canary: 1}, timeout=TIMEOUT, interval=0.5, what="the canary syncing"
    )
    rig.workflow_name = rig.workflows()[0]["metadata"]["name"]
    wait_for(
        lambda: any(pod.get("phase") == "Running" for pod in rig.cluster_pods()),
        timeout=TIMEOUT,
        interval=0.5,
        what="the canary's step running",
    )

    paused = cli(rig, "pause", "myservice")
    assert paused.exit_code == 0, paused.output
    rig.wait_phase("Paused")
    rig.set_app_behaviour(canary, **{"health-seconds": "0"})
    # The canary's step finishes; nothing new starts while paused (not even the stage's record).
    wait_for(
        lambda: (
            canary in rig.status()["stages"][0].get("completed", [])
            and not rig.nodes(type="Pod", phase="Running")
            and not rig.nodes(type="Pod", phase="Pending")
        ),
        timeout=TIMEOUT,
        interval=0.5,
        what="the running steps to end",
    )
    assert rig.sync_starts() == {canary: 1}
    assert rig.workflow()["spec"].get("suspend") is True
    assert rig.stage_phases()[CANARY["name"]] == StagePhase.PROGRESSING

    resumed = cli(rig, "unpause", "myservice")
    assert resumed.exit_code == 0, resumed.output
    rig.wait_phase("Succeeded", timeout=TIMEOUT)
    assert rig.sync_starts() == once_each(rig.all_clusters())


# --- 8. the watcher SIGKILLed mid-rollout -------------------------------------------------------------


def test_a_watcher_killed_mid_rollout_leaves_one_rollout_that_syncs_each_cluster_once(
    rig: RolloutRig,
) -> None:
    rig.simulate({"*": {"healthSeconds": 2}})
    rig.run_engine()
    watcher = rig.watcher_process().start()
    mark = rig.engine.cluster.audit_mark()
    rig.create_ps(TWO_STAGES)
    wait_for(lambda: len(rig.sync_starts()) >= 2, timeout=TIMEOUT, interval=0.5, what="the second stage")
    watcher.kill()
    watcher.start()
    rig.wait_phase("Succeeded", timeout=TIMEOUT)

    assert len(rig.workflows()) == 1
    assert rig.sync_starts() == once_each(rig.all_clusters())
    assert rig.fleet is not None
    assert rig.app_writes_by_steps(mark) == once_each(list(rig.fleet.applications))
    assert rig.stage_phases() == {CANARY["name"]: SUCCEEDED, "everything else": SUCCEEDED}


# --- 9. exit 75 retried inside the intended window ------------------------------------------------

PROBE_SETTINGS = {"retry_limit": 2, "retry_backoff": "1s", "retry_factor": 2, "retry_backoff_cap": "2s"}


def probe_workflow(engine: RolloutEngine, name: str, script: str) -> dict[str, Any]:
    """One step, with the rollout steps' retryStrategy, that runs `<the steps' python> -c script`."""
    settings = engine.workflow_settings(**PROBE_SETTINGS)
    strategy = pieces.retry_strategy(settings).build().model_dump(by_alias=True, exclude_none=True)
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"name": name, "labels": {"progressivesync.io/name": "probe"}},
        "spec": {
            "entrypoint": "probe",
            "serviceAccountName": settings.service_account,
            "templates": [
                {
                    "name": "probe",
                    "retryStrategy": strategy,
                    "container": {
                        "image": settings.image,
                        "imagePullPolicy": settings.image_pull_policy,
                        "command": [settings.command[0], "-c", script],
                    },
                }
            ],
        },
    }


@pytest.mark.parametrize(
    ("name", "script", "attempts", "message"),
    [
        pytest.param("at-once", "raise SystemExit(75)", 3, "No more retries left", id="exits-75-at-once"),
        # Longer than the whole backoff window: with backoff.maxDuration (2s here) it was never retried.
        pytest.param(
            "after-4s",
            "import time; time.sleep(4); raise SystemExit(75)",
            3,
            "No more retries left",
            id="runs-4s-then-exits-75",
        ),
        pytest.param(
            "exit-1",
            "raise SystemExit(1)",
            1,
            "retryStrategy.expression evaluated to false",
            id="exit-1-is-final",
        ),
    ],
)
def test_exit_75_is_retried_limit_times_with_capped_waits(
    engine: RolloutEngine, name: str, script: str, attempts: int, message: str
) -> None:
    with engine.running():
        engine.kube.create(WORKFLOWS, engine.namespace, probe_workflow(engine, name, script))
        wait_for(
            lambda: (
                (engine.kube.get(WORKFLOWS, engine.namespace, name).get("status") or {}).get("phase")
                in ("Succeeded", "Failed", "Error")
            ),
            timeout=TIMEOUT,
            interval=0.5,
            what=f"Workflow {name} to finish",
        )
    done = engine.kube.get(WORKFLOWS, engine.namespace, name)
    nodes = done["status"]["nodes"]
    [retry] = [n for n in nodes.values() if n["type"] == "Retry"]
    pods = sorted((n for n in nodes.values() if n["type"] == "Pod"), key=lambda n: n["name"])
    assert (done["status"]["phase"], retry["phase"], retry.get("message")) == ("Failed", "Failed", message)
    assert len(pods) == attempts  # limit 2: three attempts, however long each ran
    assert {p["outputs"]["exitCode"] for p in pods} == {"75" if attempts > 1 else "1"}
    # The waits between attempts: 1s, then 2s (1s x 2, at the cap), not the 4s factor 2 would give.
    # Argo's timestamps have whole seconds and its controller requeues: a second of slack below,
    # three above.
    waits = [
        (parse_time(later["startedAt"]) - parse_time(earlier["finishedAt"])).total_seconds()  # type: ignore[operator]
        for earlier, later in itertools.pairwise(pods)
    ]
    expected = [min(1 * 2**i, 2) for i in range(attempts - 1)]
    assert all(e - 1 <= w <= e + 3 for w, e in zip(waits, expected, strict=True)), (waits, expected)


# --- 10. maxFailedClusters tolerance -------------------------------------------------------------------


@pytest.mark.batch_on_real_argo
def test_failures_within_max_failed_clusters_let_the_rollout_succeed(rig: RolloutRig) -> None:
    stages = [CANARY, {**REST, "maxParallel": 2}]
    rest = rig.planned_targets(stages, "everything else")
    rig.simulate({rest[0]: {"degrade": True}})
    rig.run_engine()
    rig.start_rollout(stages, max_failed_clusters=1)
    done = rig.wait_finished(timeout=TIMEOUT)

    assert done["status"]["phase"] == "Succeeded"
    assert rig.sync_starts() == once_each(rig.all_clusters())
    assert rig.stage_phases() == {CANARY["name"]: SUCCEEDED, "everything else": SUCCEEDED}
    stage = rig.progressive_sync().status.stages[1]  # type: ignore[union-attr,index]
    assert [f.name for f in stage.failed] == [rest[0]]
    assert stage.message == f"{len(rest) - 1} of {len(rest)} clusters updated, 1 failed (at most 1 tolerated)"
    # The failed cluster shows failed in the Workflow; the stage and the rollout do not.
    [failed] = rig.cluster_nodes("everything-else", 0, rest[0])
    assert failed["phase"] == "Failed"


# --- 11. a second release queued on the mutex -----------------------------------------------------------


def test_a_second_rollout_waits_on_the_mutex_and_runs_after_the_first(rig: RolloutRig) -> None:
    [canary] = rig.planned_targets(TWO_STAGES, CANARY["name"])
    rig.simulate({canary: {"healthSeconds": 6}})
    rig.run_engine()
    first = rig.start_rollout(TWO_STAGES, rollout_id="first")
    wait_for(lambda: rig.phase(first) == "Running", timeout=TIMEOUT, interval=0.5, what="the first rollout")
    second = rig.start_rollout(rollout_id="second")
    third = rig.start_rollout(rollout_id="third")
    wait_for(
        lambda: rig.phase(second) == "Pending" and rig.phase(third) == "Pending",
        timeout=60,
        interval=0.5,
        what="the later rollouts queued",
    )
    assert "lock" in rig.workflow(second)["status"].get("message", "")
    # Terminated while queued: Argo marks it Succeeded at once, runs no step and no exit handler
    # (docs/design/workflow.md); its entry node is Failed.
    workflow_control.terminate(rig.kube, rig.namespace, third)
    wait_for(
        lambda: rig.phase(third) == "Succeeded",
        timeout=120,
        interval=0.5,
        what="the third to end",
        describe=lambda: {"third": rig.state(third), "first": rig.state(first), "second": rig.state(second)},
    )
    [entry] = rig.nodes(third, name=third)
    assert entry["phase"] == "Failed"
    ran = [n for n in rig.nodes(third) if (n.get("outputs") or {}).get("exitCode") is not None]
    assert ran == [] and rig.nodes(third, name=f"{third}.onExit") == []
    assert rig.phase(first) == "Running"

    assert rig.wait_finished(first, timeout=TIMEOUT)["status"]["phase"] == "Succeeded"
    done = rig.wait_finished(second, timeout=TIMEOUT)
    assert done["status"]["phase"] == "Succeeded"
    assert parse_time(done["status"]["startedAt"]) >= parse_time(rig.workflow(first)["status"]["finishedAt"])  # type: ignore[operator]
    # The first synced every cluster; the second found nothing left to do.
    assert rig.sync_starts() == once_each(rig.all_clusters())
    status = rig.progressive_sync().status
    assert status is not None and status.rollout is not None
    assert (status.rollout.id, status.phase) == ("second", RolloutPhase.SUCCEEDED)
    assert rig.stage_phases() == {CANARY["name"]: SKIPPED, "everything else": SKIPPED}


# --- 12. a skipped Application (docs/skip.md) ------------------------------------------------------------


def _mark_the_canary(rig: RolloutRig, reason: str) -> tuple[str, str]:
    """Annotate the canary cluster's Application with the skip mark; the cluster and the Application."""
    [canary] = rig.planned_targets(TWO_STAGES, CANARY["name"])
    held = f"{rig.fleet.app_set}-{canary}"  # type: ignore[union-attr]
    rig.kube.patch(
        APPLICATIONS, rig.namespace, held, {"metadata": {"annotations": {SKIP_ANNOTATION: reason}}}
    )
    return canary, held


def test_a_skipped_application_is_never_synced_and_the_rollout_succeeds(rig: RolloutRig) -> None:
    canary, held = _mark_the_canary(rig, "INC-1")
    rig.simulate()
    rig.run_engine()
    rig.start_rollout(TWO_STAGES)
    done = rig.wait_finished(timeout=TIMEOUT)

    assert done["status"]["phase"] == "Succeeded", done["status"].get("message")
    others = [c for c in rig.all_clusters() if c != canary]
    assert rig.sync_starts() == once_each(others), "the skipped cluster never receives a sync"
    assert "operation" not in rig.kube.get(APPLICATIONS, rig.namespace, held)
    assert rig.stage_phases() == {CANARY["name"]: SUCCEEDED, "everything else": SUCCEEDED}
    status = rig.progressive_sync().status
    assert status is not None and status.phase == RolloutPhase.SUCCEEDED
    first = status.stages[0]  # type: ignore[index]
    assert [(s.name, s.reason) for s in first.skipped] == [
        (canary, f"Application {held} is annotated {SKIP_ANNOTATION}: INC-1")
    ]
    assert canary not in rig.stage_targets()[CANARY["name"]]


def test_a_cluster_whose_skip_mark_is_removed_is_taken_by_the_next_retry(rig: RolloutRig) -> None:
    """docs/skip.md, Removing the mark: after the rollout it is a late cluster; `retry` takes it."""
    canary, held = _mark_the_canary(rig, "INC-2")
    rig.simulate()
    rig.run_engine()
    rig.watcher()
    rig.create_ps(TWO_STAGES)
    rig.wait_phase("Succeeded", timeout=TIMEOUT)
    others = [c for c in rig.all_clusters() if c != canary]
    assert rig.sync_starts() == once_each(others), "the marked cluster never receives a sync"
    assert "operation" not in rig.kube.get(APPLICATIONS, rig.namespace, held)
    [first] = rig.workflows()
    first_stage = rig.progressive_sync().status.stages[0]  # type: ignore[union-attr,index]
    assert [s.name for s in first_stage.skipped] == [canary]

    rig.kube.patch(APPLICATIONS, rig.namespace, held, {"metadata": {"annotations": {SKIP_ANNOTATION: None}}})
    mark = rig.engine.cluster.audit_mark()
    retried = cli(rig, "retry", "myservice")
    assert retried.exit_code == 0, retried.output
    assert "(attempt 2" in retried.output
    # The retry's Workflow starts once the first one has ended: on the real controller the rollout's
    # end is recorded by its last cluster, tens of seconds before its Workflow's last pods end (more
    # on a busy machine: CI once waited over 60 s here).
    wait_for(
        lambda: len(rig.workflows()) == 2,
        timeout=TIMEOUT,
        interval=0.5,
        what="the retried rollout",
        describe=lambda: [(w["metadata"]["name"], w.get("status", {}).get("phase")) for w in rig.workflows()],
    )
    second = rig.workflows()[1]["metadata"]["name"]
    assert second != first["metadata"]["name"]
    done = rig.wait_finished(second, timeout=TIMEOUT)

    assert done["status"]["phase"] == "Succeeded", done["status"].get("message")
    status = wait_for(
        lambda: (s := rig.status()).get("phase") == "Succeeded" and s["rollout"]["attempt"] == 2 and s,
        timeout=TIMEOUT,
        interval=0.5,
        what="attempt 2 recorded Succeeded",
        describe=rig.status,
    )
    assert rig.sync_starts() == once_each(rig.all_clusters()), "the retry syncs the unmarked cluster, once"
    assert rig.app_writes_by_steps(mark) == {held: 1}, "the retry writes that cluster's Application alone"
    assert rig.stage_targets()[CANARY["name"]] == [canary]
    assert all(not stage.get("skipped") for stage in status["stages"]), status["stages"]


# --- 13. a stage by Application labels (docs/concepts.md, "Stages by Application labels") ---------


def test_a_stage_by_application_labels_takes_the_clusters_whose_applications_carry_the_label(
    engine: RolloutEngine,
) -> None:
    # The ApplicationSet template copies each cluster's region onto its Application as `wave` (a
    # key no cluster Secret has), and the simulator's ApplicationSet controller writes it there.
    template = {"labels": {"wave": "{{metadata.labels.region}}"}}
    with rollout_rig(engine, clusters=6, template_metadata=template) as rig:
        rig.simulate({"*": {"appSetController": True}})
        assert rig.fleet is not None
        apps = list(rig.fleet.applications)

        def labelled() -> bool:
            found = {a["metadata"]["name"]: a for a in rig.kube.list(APPLICATIONS, rig.namespace)[0]}
            return all((found[name]["metadata"].get("labels") or {}).get("wave") for name in apps)

        wait_for(labelled, timeout=60, what="the ApplicationSet controller labels every Application")
        first, rest = "eu-west-1 by Application label", "everything else"
        by_label: dict[str, Any] = {
            "name": first,
            "targets": {"applications": {"selector": {"matchLabels": {"wave": "eu-west-1"}}}},
            "maxParallel": 2,
        }
        stages = [by_label, {**REST, "maxParallel": 2}]
        rig.run_engine()
        rig.start_rollout(stages)
        done = rig.wait_finished(timeout=TIMEOUT)

        assert done["status"]["phase"] == "Succeeded", done["status"].get("message")
        eu = sorted(c.name for c in rig.fleet.clusters if c.region == "eu-west-1")
        targets = rig.stage_targets()
        assert len(eu) == 2 and sorted(targets[first]) == eu
        assert sorted(targets[rest]) == sorted(set(rig.all_clusters()) - set(eu))
        assert rig.stage_phases() == {first: SUCCEEDED, rest: SUCCEEDED}
        assert rig.sync_starts() == once_each(rig.all_clusters())
        status = rig.progressive_sync().status
        assert status is not None and status.phase == RolloutPhase.SUCCEEDED


# --- 14. independent groups (docs/groups.md): one group fails, the others finish ------------------

GROUP_STAGES = [
    {"name": "canary", "targets": {"clusters": {"selector": {}}}, "maxTargets": 1, "maxParallel": 1},
    {"name": "rest", "targets": {"clusters": {"selector": {}}}, "maxParallel": 2},
]


def test_groups_run_side_by_side_and_a_failed_group_stops_only_itself(rig: RolloutRig) -> None:
    """groupBy region: each region runs canary then rest on its own; eu-west-1's canary degrades,
    so eu-west-1 stops there while the other regions finish every stage; the rollout ends Failed
    and says which group ended how."""
    group_spec = {"groupBy": "region", "maxParallelGroups": 2}
    assert rig.fleet is not None
    by_region = {
        region: sorted(c.name for c in rig.fleet.clusters if c.region == region)
        for region in ("eu-west-1", "us-east-1", "ap-south-1")
    }
    plan = rig.plan(rig.progressive_sync_model(GROUP_STAGES, **group_spec))
    [eu_canary] = plan.stage("eu-west-1/canary").targets
    rig.simulate({eu_canary: {"degrade": True}})
    rig.run_engine()
    rig.start_rollout(GROUP_STAGES, deadline_seconds=60, **group_spec)
    done = rig.wait_finished(timeout=TIMEOUT)

    assert done["status"]["phase"] == "Failed"
    others = [c for region in ("us-east-1", "ap-south-1") for c in by_region[region]]
    assert rig.sync_starts() == once_each([eu_canary, *others]), "eu-west-1 stops after its canary"
    assert rig.stage_phases() == {
        "ap-south-1/canary": SUCCEEDED,
        "ap-south-1/rest": SUCCEEDED,
        "eu-west-1/canary": FAILED,
        "eu-west-1/rest": CANCELLED,
        "us-east-1/canary": SUCCEEDED,
        "us-east-1/rest": SUCCEEDED,
    }
    targets = rig.stage_targets()
    for region in ("us-east-1", "ap-south-1"):
        assert sorted(targets[f"{region}/canary"] + targets[f"{region}/rest"]) == by_region[region]
    assert targets["eu-west-1/canary"] == [eu_canary]
    status = rig.progressive_sync().status
    assert status is not None and status.phase == RolloutPhase.FAILED
    assert status.message is not None
    assert "groups: ap-south-1 Succeeded, eu-west-1 Failed, us-east-1 Succeeded" in status.message
    # One branch per group in the Argo UI: the failed group's later stage is Omitted, the others ran.
    [eu_rest] = rig.nodes(name=f"{rig.workflow_name}.eu-west-1.eu-west-1-rest")
    assert (eu_rest["type"], eu_rest["phase"]) == ("Skipped", "Omitted")
    for region in ("us-east-1", "ap-south-1"):
        [group] = rig.nodes(name=f"{rig.workflow_name}.{region}")
        assert (group["type"], group["phase"]) == ("DAG", "Succeeded")
    assert exit_handler(rig)["phase"] == "Succeeded"


def test_each_group_waits_at_its_own_gate_and_approve_opens_one_group(rig: RolloutRig) -> None:
    """The watcher starts a grouped rollout (every group stage listed Pending); `rest` has a manual
    gate, so each region waits at its own; approving one region's gate lets that region alone go
    on; `status` says which group stands where."""
    gated = [GROUP_STAGES[0], {**GROUP_STAGES[1], "approval": "Manual"}]
    assert rig.fleet is not None
    canaries_only = len(REGIONS)
    rig.simulate()
    rig.run_engine()
    rig.watcher()
    rig.create_ps(gated, groupBy="region")

    def waiting() -> list[str]:
        shown = cli(rig, "status", "myservice", "-o", "json")
        return (
            sorted(json.loads(shown.stdout).get("waitingForApproval") or []) if shown.exit_code == 0 else []
        )

    all_gates = sorted(f"{region}/rest" for region in REGIONS)
    wait_for(
        lambda: waiting() == all_gates, timeout=TIMEOUT, interval=0.5, what="every region's gate waiting"
    )
    rig.workflow_name = rig.workflows()[0]["metadata"]["name"]
    assert len(rig.sync_starts()) == canaries_only

    approved = cli(rig, "approve", "myservice", "--stage", "eu-west-1/rest")
    assert approved.exit_code == 0, approved.output
    wait_for(
        lambda: rig.stage_phases().get("eu-west-1/rest") == SUCCEEDED,
        timeout=TIMEOUT,
        interval=0.5,
        what="eu-west-1's rest done",
    )
    eu = sorted(c.name for c in rig.fleet.clusters if c.region == "eu-west-1")
    assert all(rig.sync_starts().get(cluster) == 1 for cluster in eu)
    assert len(rig.sync_starts()) == canaries_only + 1, "the other regions still wait at their gates"
    assert waiting() == [gate for gate in all_gates if gate != "eu-west-1/rest"]
    table = cli(rig, "status", "myservice")
    assert "eu-west-1 Succeeded" in table.stdout and "us-east-1 Progressing" in table.stdout, table.stdout

    for gate in ("us-east-1/rest", "ap-south-1/rest"):
        opened = cli(rig, "approve", "myservice", "--stage", gate)
        assert opened.exit_code == 0, opened.output
    done = rig.wait_phase("Succeeded", timeout=TIMEOUT)
    assert rig.sync_starts() == once_each(rig.all_clusters())
    assert [stage["name"] for stage in done["stages"]] == [
        f"{region}/{stage}" for region in sorted(REGIONS) for stage in ("canary", "rest")
    ]


# --- 15. ordering between services (docs/depends-on.md) ---------------------------------------------


def test_a_rollout_that_depends_on_another_waits_for_its_canary(rig: RolloutRig) -> None:
    """myservice's spec.dependsOn names payments' canary: its first stage's `wait-for-dependencies`
    holds it until payments' canary Succeeded. Both roll out the same six clusters, each through its
    own ApplicationSet; payments' canary cluster takes a few seconds to turn Healthy."""
    assert rig.fleet is not None
    payments_fleet = seed_fleet(
        rig.kube, rig.namespace, clusters=6, regions=REGIONS, revision=REVISION, app_set="payments"
    )
    [canary] = rig.planned_targets(TWO_STAGES, str(CANARY["name"]))
    rig.simulate({canary: {"healthSeconds": 4}})
    rig.run_engine()
    dependency = {"name": "payments", "stage": str(CANARY["name"]), "timeoutSeconds": 300}
    first = rig.start_rollout(TWO_STAGES, dependsOn=[dependency])

    def waiting() -> bool:
        return any(n.get("phase") == "Running" for n in rig.nodes(first, displayName="wait-for-dependencies"))

    wait_for(waiting, timeout=TIMEOUT, interval=0.5, what="myservice waits for payments")
    # payments does not exist yet: myservice waits, nothing of it is synced.
    payments = make_progressive_sync(
        rig.kube, rig.namespace, name="payments", app_set="payments", stages=TWO_STAGES, deadline_seconds=60
    )
    plan = rig.plan(payments)
    workflow = build_workflow(
        payments,
        release=Release.of(generation=1, spec_hash=spec_hash(payments.spec), revisions=plan.revisions),
        plan=plan,
        settings=rig.engine.workflow_settings(retry_backoff="1s", retry_backoff_cap="2s"),
    )
    second = rig.kube.create(WORKFLOWS, rig.namespace, workflow_object(workflow))["metadata"]["name"]

    done = rig.wait_finished(first, timeout=TIMEOUT)
    assert done["status"]["phase"] == "Succeeded", done["status"].get("message")
    theirs = rig.wait_finished(second, timeout=TIMEOUT)
    assert theirs["status"]["phase"] == "Succeeded", theirs["status"].get("message")

    events = rig.events()
    ours = [e["time"] for e in events if e["event"] == "sync-start" and e["app"] in rig.fleet.applications]
    canary_app = next(a for a in payments_fleet.applications if a.endswith(f"-{canary}"))
    their_canary = [e["time"] for e in events if e["app"] == canary_app]
    assert len(ours) == 6 and their_canary, events
    # Every sync of myservice starts after payments' canary settled, and after its stage was recorded.
    assert min(ours) > max(their_canary)
    payments_status = ProgressiveSync.model_validate(
        rig.kube.get(PROGRESSIVE_SYNCS, rig.namespace, "payments")
    ).status
    assert payments_status is not None and payments_status.stages is not None
    canary_done = payments_status.stages[0].finished_at
    assert canary_done is not None and min(ours) >= canary_done.timestamp()
    assert rig.stage_phases() == {str(CANARY["name"]): SUCCEEDED, "everything else": SUCCEEDED}


def test_each_group_waits_for_the_same_group_of_a_grouped_dependency(rig: RolloutRig) -> None:
    """Both grouped by region (docs/depends-on.md "Groups and dependencies"): each group of
    myservice starts after payments' same group passed its canary. payments' canary has a manual
    gate per group; opening us-east-1's and ap-south-1's lets those groups of myservice roll out to
    the end while its eu-west-1 group still waits (its message says for what), until eu-west-1's
    gate is opened too. The watcher starts both rollouts."""
    assert rig.fleet is not None
    payments_fleet = seed_fleet(
        rig.kube, rig.namespace, clusters=6, regions=REGIONS, revision=REVISION, app_set="payments"
    )
    rig.simulate()
    rig.run_engine()
    rig.watcher()
    gated = [{**GROUP_STAGES[0], "approval": "Manual"}, GROUP_STAGES[1]]
    make_progressive_sync(
        rig.kube,
        rig.namespace,
        name="payments",
        app_set="payments",
        stages=gated,
        groupBy="region",
        degraded_grace_seconds=0,
    )
    dependency = {"name": "payments", "stage": "canary", "timeoutSeconds": 600}
    rig.create_ps(GROUP_STAGES, groupBy="region", dependsOn=[dependency])

    def messages() -> dict[str, str]:
        status = rig.progressive_sync().status
        return {stage.name: stage.message for stage in (status.stages if status and status.stages else [])}

    def says_it_waits(region: str) -> bool:
        return (
            messages()
            .get(f"{region}/canary", "")
            .startswith(f"waiting for payments to pass stage '{region}/canary'")
        )

    wait_for(
        lambda: all(says_it_waits(region) for region in REGIONS),
        timeout=TIMEOUT,
        interval=0.5,
        what="every group of myservice waiting for payments' same group",
    )
    assert not [e for e in rig.events() if e["app"] in rig.fleet.applications], "nothing of myservice synced"

    approved = []
    for region in ("us-east-1", "ap-south-1"):
        opened = cli(rig, "approve", "payments", "--stage", f"{region}/canary")
        assert opened.exit_code == 0, opened.output
        approved.append(opened.output.strip())

    def both_rollouts() -> dict[str, object]:
        """What each rollout's status and Workflow say (a run timed out here once, 7 Dec 2026,
        with nothing of ap-south-1 synced in either: this is what finds the cause next time)."""
        payments = rig.kube.get(PROGRESSIVE_SYNCS, rig.namespace, "payments").get("status") or {}
        return {
            "approved": approved,
            "payments": {s["name"]: (s.get("phase"), s.get("message")) for s in payments.get("stages") or []},
            "workflows": {w["metadata"]["name"]: rig.state(w["metadata"]["name"]) for w in rig.workflows()},
            "myservice": messages(),
        }

    wait_for(
        lambda: all(rig.stage_phases().get(f"{r}/rest") == SUCCEEDED for r in ("us-east-1", "ap-south-1")),
        timeout=TIMEOUT,
        interval=0.5,
        what="myservice's us-east-1 and ap-south-1 groups done",
        describe=both_rollouts,
    )
    # eu-west-1 still waits: its canary Pending with what it waits for, none of its clusters synced.
    assert rig.stage_phases()["eu-west-1/canary"] == StagePhase.PENDING
    assert says_it_waits("eu-west-1"), messages()
    eu = {c.name for c in rig.fleet.clusters if c.region == "eu-west-1"}
    ours = [e for e in rig.events() if e["event"] == "sync-start" and e["app"] in rig.fleet.applications]
    assert ours and not [e for e in ours if e["cluster"] in eu]

    opened = cli(rig, "approve", "payments", "--stage", "eu-west-1/canary")
    assert opened.exit_code == 0, opened.output
    done = rig.wait_phase("Succeeded", timeout=TIMEOUT)
    assert rig.sync_starts().keys() == set(rig.all_clusters())
    assert all(stage["phase"] == "Succeeded" for stage in done["stages"]), done["stages"]

    # Each group of myservice synced only after payments' canary of the same group.
    events = rig.events()
    by_cluster = {c.name: c.region for c in rig.fleet.clusters}
    theirs = [e for e in events if e["event"] == "sync-start" and e["app"] in payments_fleet.applications]
    ours = [e for e in events if e["event"] == "sync-start" and e["app"] in rig.fleet.applications]
    assert len(ours) == 6, ours
    for region in REGIONS:
        their_canary = min((e for e in theirs if by_cluster[e["cluster"]] == region), key=lambda e: e["time"])
        settled = max(e["time"] for e in events if e["app"] == their_canary["app"])
        assert min(e["time"] for e in ours if by_cluster[e["cluster"]] == region) > settled, region


# --- 16. a deny window that ends mid-rollout (docs/windows.md) --------------------------------------


def test_a_deny_window_holds_every_sync_until_it_ends_then_the_rollout_succeeds(rig: RolloutRig) -> None:
    """A deny window in force when the rollout starts and over ~20 s later: no cluster is synced
    before it ends (the simulator's clock), each once after; the wait costs no progress deadline."""
    rig.simulate()
    rig.run_engine()
    start = datetime.now(UTC)
    fired = start.replace(second=0, microsecond=0)
    seconds = math.ceil((start - fired).total_seconds()) + 20
    ends = fired + timedelta(seconds=seconds)
    deny = {"kind": "deny", "schedule": f"{fired.minute} {fired.hour} * * *", "duration": f"{seconds}s"}
    rig.start_rollout(TWO_STAGES, windows=[deny])
    done = rig.wait_finished(timeout=TIMEOUT)

    assert done["status"]["phase"] == "Succeeded", done["status"].get("message")
    assert rig.sync_starts() == once_each(rig.all_clusters())
    first_sync = min(e["time"] for e in rig.events() if e["event"] == "sync-start")
    assert first_sync >= ends.timestamp(), "a cluster was synced while the deny window was in force"
    assert rig.stage_phases() == {CANARY["name"]: SUCCEEDED, "everything else": SUCCEEDED}
