"""The watcher following a rollout through pause, spec change, deletion and outside interference.

Real: the control plane, the watcher (in this process, as its own user), the local executor running
the real steps (as another user), the fleet simulator. Each test seeds its own namespace. Writes
are counted from the API server's audit log, by user.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.argocd import appsync
from orchestrator.devenv import controlplane as devcluster
from orchestrator.kube.client import APPLICATIONS, EVENTS, PROGRESSIVE_SYNCS, WORKFLOWS, Kube, NotFound
from orchestrator.simulator.seed import publish_refs, seed_fleet
from orchestrator.watcher.loop import Watcher
from tests.support.builders import canary_then_rest, make_stage
from tests.support.wait import wait_for
from tests.support.watcher_harness import (
    FAST_FLEET,
    REVISION_1,
    REVISION_2,
    create_ps,
    in_process_watcher,
    patch_spec,
    phase_of,
    release,
    running_actors,
    seed,
    stage_of,
    status_of,
    sync_starts,
    watcher_idle,
    workflows_of,
)

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

WATCHER_USER = "progressive-sync-watcher"
STEPS_USER = "progressive-sync-steps"
ROLLOUT_TIMEOUT = 240.0
# Every sync the simulator picks up stays Running until someone terminates it (a sync window that
# holds it until it opens behaves the same for us).
HANGING_FLEET = "defaults: {syncSeconds: 0.3, healthSeconds: 0.3, hang: true}"


@pytest.fixture(scope="module")
def users(control_plane: devcluster.DevCluster) -> dict[str, Path]:
    return {user: control_plane.mint_user(user, ["system:masters"]) for user in (WATCHER_USER, STEPS_USER)}


@pytest.fixture(scope="module")
def watcher_kube(users: dict[str, Path]) -> Iterator[Kube]:
    """The adapter as the watcher's own user."""
    client = Kube.from_kubeconfig(str(users[WATCHER_USER]))
    yield client
    client.close()


@pytest.fixture
def events_log(tmp_path: Path) -> Path:
    return tmp_path / "simulator.jsonl"


def condition(status: dict[str, Any], type_: str) -> tuple[str, str]:
    for item in status.get("conditions") or []:
        if item["type"] == type_:
            return item["status"], item["reason"]
    return "", ""


def the_workflow(kube: Kube, namespace: str, ps: str) -> dict[str, Any]:
    workflows = workflows_of(kube, namespace, ps)
    assert len(workflows) == 1, [w["metadata"]["name"] for w in workflows]
    return workflows[0]


def test_pause_suspends_and_resume_continues_the_rollout(
    kube: Kube, watcher_kube: Kube, namespace: str, users: dict[str, Path], events_log: Path
) -> None:
    fleet = seed(kube, namespace, clusters=3)
    with (
        running_actors(kube, namespace, users[STEPS_USER], events_log),
        in_process_watcher(watcher_kube, namespace),
    ):
        create_ps(kube, namespace, "web", fleet.app_set)
        wait_for(
            lambda: stage_of(status_of(kube, namespace, "web"), "canary").get("targets"),
            timeout=120,
            what="canary selected",
        )
        patch_spec(kube, namespace, "web", {"paused": True})
        wait_for(
            lambda: the_workflow(kube, namespace, "web")["spec"].get("suspend") is True,
            what="Workflow suspended",
        )
        wait_for(lambda: phase_of(kube, namespace, "web") == "Paused", what="status Paused")
        status = status_of(kube, namespace, "web")
        assert condition(status, "Paused") == ("True", "SpecPaused")
        assert status["observedGeneration"] == 2

        patch_spec(kube, namespace, "web", {"paused": False})
        wait_for(
            lambda: "suspend" not in the_workflow(kube, namespace, "web")["spec"], what="Workflow resumed"
        )
        wait_for(
            lambda: phase_of(kube, namespace, "web") == "Succeeded", timeout=ROLLOUT_TIMEOUT, what="Succeeded"
        )

    status = status_of(kube, namespace, "web")
    assert condition(status, "Paused") == ("False", "NotPaused")
    assert status["progress"] == "3/3"
    assert len(workflows_of(kube, namespace, "web")) == 1, "pausing is not a new release"
    assert sync_starts(events_log) == dict.fromkeys(fleet.apps, 1)


def test_a_spec_change_stops_the_rollout_and_starts_one_for_the_new_spec(
    kube: Kube, watcher_kube: Kube, namespace: str, users: dict[str, Path], events_log: Path
) -> None:
    fleet = seed(kube, namespace, clusters=3)
    with (
        running_actors(kube, namespace, users[STEPS_USER], events_log),
        in_process_watcher(watcher_kube, namespace),
    ):
        create_ps(kube, namespace, "web", fleet.app_set)
        first = wait_for(lambda: workflows_of(kube, namespace, "web"), what="the first Workflow")[0][
            "metadata"
        ]["name"]
        wait_for(
            lambda: stage_of(status_of(kube, namespace, "web"), "canary").get("targets"),
            timeout=120,
            what="canary selected",
        )
        patch_spec(kube, namespace, "web", {"stages": canary_then_rest(rest_parallel=2)})
        wait_for(
            lambda: kube.get(WORKFLOWS, namespace, first)["spec"].get("shutdown") == "Stop",
            what="the old Workflow stopped",
        )
        wait_for(
            lambda: len(workflows_of(kube, namespace, "web")) == 2,
            timeout=120,
            what="a Workflow for the new spec",
        )
        wait_for(
            lambda: (
                phase_of(kube, namespace, "web") == "Succeeded"
                and (status_of(kube, namespace, "web").get("rollout") or {}).get("workflow") != first
            ),
            timeout=ROLLOUT_TIMEOUT,
            what="the new rollout to succeed",
        )

    status = status_of(kube, namespace, "web")
    assert status["rollout"]["generation"] == 2
    assert status["observedGeneration"] == 2
    old = kube.get(WORKFLOWS, namespace, first)
    assert old["status"]["phase"] in ("Failed", "Error", "Succeeded")
    starts = sync_starts(events_log)
    assert set(starts) == set(fleet.apps)
    assert all(count <= 2 for count in starts.values()), starts


def test_deleting_mid_rollout_stops_the_workflow_then_lets_the_object_go(
    kube: Kube, watcher_kube: Kube, namespace: str, users: dict[str, Path], events_log: Path
) -> None:
    fleet = seed(kube, namespace, clusters=2)
    with (
        running_actors(kube, namespace, users[STEPS_USER], events_log),
        in_process_watcher(watcher_kube, namespace),
    ):
        create_ps(kube, namespace, "web", fleet.app_set)
        wait_for(
            lambda: stage_of(status_of(kube, namespace, "web"), "canary").get("targets"),
            timeout=120,
            what="canary selected",
        )
        name = the_workflow(kube, namespace, "web")["metadata"]["name"]
        kube.delete(PROGRESSIVE_SYNCS, namespace, "web")
        wait_for(
            lambda: kube.get(WORKFLOWS, namespace, name)["spec"].get("shutdown") == "Stop",
            what="Workflow stopped",
        )
        wait_for(lambda: _gone(kube, namespace, "web"), timeout=60, what="the ProgressiveSync to go")


def test_deleting_while_the_watcher_is_down_is_finished_by_the_next_watcher(
    kube: Kube, watcher_kube: Kube, namespace: str, users: dict[str, Path], events_log: Path
) -> None:
    fleet = seed(kube, namespace, clusters=2)
    with running_actors(kube, namespace, users[STEPS_USER], events_log):
        with in_process_watcher(watcher_kube, namespace):
            create_ps(kube, namespace, "web", fleet.app_set)
            name = wait_for(lambda: workflows_of(kube, namespace, "web"), what="the Workflow")[0]["metadata"][
                "name"
            ]
        kube.delete(PROGRESSIVE_SYNCS, namespace, "web")
        held = kube.get(PROGRESSIVE_SYNCS, namespace, "web")
        assert held["metadata"]["deletionTimestamp"], "our finalizer holds it while nobody watches"
        with in_process_watcher(watcher_kube, namespace):
            wait_for(lambda: _gone(kube, namespace, "web"), timeout=60, what="the ProgressiveSync to go")
        workflow = kube.get(WORKFLOWS, namespace, name)
        assert workflow["spec"].get("shutdown") == "Stop" or workflow["status"]["phase"] in (
            "Succeeded",
            "Failed",
        )


def test_a_workflow_deleted_by_someone_else_is_reported_not_re_created(
    kube: Kube, watcher_kube: Kube, namespace: str, users: dict[str, Path], events_log: Path
) -> None:
    fleet = seed(kube, namespace, clusters=2)
    with (
        running_actors(kube, namespace, users[STEPS_USER], events_log),
        in_process_watcher(watcher_kube, namespace) as watcher,
    ):
        create_ps(kube, namespace, "web", fleet.app_set)
        wait_for(
            lambda: stage_of(status_of(kube, namespace, "web"), "canary").get("targets"),
            timeout=120,
            what="canary selected",
        )
        name = the_workflow(kube, namespace, "web")["metadata"]["name"]
        kube.delete(WORKFLOWS, namespace, name)
        wait_for(lambda: phase_of(kube, namespace, "web") == "Cancelled", what="the deletion reported")
        status = status_of(kube, namespace, "web")
        assert condition(status, "Ready") == ("False", "WorkflowDeleted")
        assert name in status["message"]
        before = watcher.reconciles
        watcher.queue.add((namespace, "web"))
        wait_for(lambda: watcher.reconciles > before and watcher_idle(watcher, 5), what="another reconcile")
        assert workflows_of(kube, namespace, "web") == [], "never re-created"
        events, _ = kube.list(EVENTS, namespace)
        assert any(e.get("reason") == "WorkflowDeleted" for e in events)


@pytest.mark.timeout(900)
def test_two_rollouts_at_once_an_invalid_reference_and_a_converged_reconcile_that_writes_nothing(  # noqa: PLR0917 - fixtures
    kube: Kube,
    watcher_kube: Kube,
    control_plane: devcluster.DevCluster,
    namespace: str,
    users: dict[str, Path],
    events_log: Path,
) -> None:
    first = seed(kube, namespace, clusters=2, app_set="alpha")
    second = seed(kube, namespace, clusters=2, app_set="beta")
    with running_actors(kube, namespace, users[STEPS_USER], events_log, FAST_FLEET):
        with in_process_watcher(watcher_kube, namespace) as watcher:
            create_ps(kube, namespace, "alpha", "alpha")
            create_ps(kube, namespace, "beta", "beta")
            create_ps(kube, namespace, "ghost", "no-such-appset")
            wait_for(lambda: workflows_of(kube, namespace, "alpha"), what="alpha's Workflow")
            create_ps(kube, namespace, "alpha-copy", "alpha")  # claims an ApplicationSet alpha owns
            wait_for(
                lambda: (
                    condition(status_of(kube, namespace, "ghost"), "Valid")
                    == ("False", "ApplicationSetNotFound")
                ),
                what="ghost reported",
            )
            wait_for(
                lambda: (
                    condition(status_of(kube, namespace, "alpha-copy"), "Valid")
                    == ("False", "ApplicationSetClaimed")
                ),
                what="alpha-copy reported",
            )
            for name in ("alpha", "beta"):
                wait_for(
                    lambda n=name: phase_of(kube, namespace, n) == "Succeeded",
                    timeout=ROLLOUT_TIMEOUT,
                    what=f"{name} Succeeded",
                )
            assert watcher_idle(watcher, 30)
            # The transition's Event is written after the status: wait for it, or it lands after the
            # mark below and reads as a write of the converged reconcile (a race seen in CI).
            wait_for(
                lambda: (
                    {"alpha", "beta"}
                    <= {
                        e["involvedObject"]["name"]
                        for e in kube.list(EVENTS, namespace)[0]
                        if e["reason"] == "RolloutSucceeded"
                    }
                ),
                what="the RolloutSucceeded Events of alpha and beta",
            )

            # Converged: reconciling every ProgressiveSync again writes nothing at all.
            mark = control_plane.audit_mark()
            before = watcher.reconciles
            for informer in watcher.caches.ps_informers:
                informer.resync()
            wait_for(
                lambda: watcher.reconciles >= before + 4 and watcher_idle(watcher, 5),
                what="four reconciles",
            )
            writes = [e for e in control_plane.audit_events_since(mark) if e.user == WATCHER_USER]
            assert writes == [], writes

        # A fresh watcher on the converged state writes nothing either.
        mark = control_plane.audit_mark()
        restarted = Watcher(watcher_kube, watcher.settings).start()
        try:
            wait_for(
                lambda: restarted.reconciles >= 4 and watcher_idle(restarted, 5),
                what="the first reconciles",
            )
        finally:
            restarted.stop()
        assert [e for e in control_plane.audit_events_since(mark) if e.user == WATCHER_USER] == []

    assert len(workflows_of(kube, namespace, "alpha")) == 1
    assert len(workflows_of(kube, namespace, "beta")) == 1
    assert workflows_of(kube, namespace, "ghost") == []
    assert workflows_of(kube, namespace, "alpha-copy") == []
    assert sync_starts(events_log) == dict.fromkeys(first.apps + second.apps, 1)
    assert status_of(kube, namespace, "ghost")["phase"] == "Pending"


def test_a_release_argo_cd_compares_one_by_one_gets_a_workflow_sized_for_the_whole_fleet(
    kube: Kube, watcher_kube: Kube, namespace: str, users: dict[str, Path], events_log: Path
) -> None:
    """Issue 29, point 3. Without Git webhooks Argo CD turns Applications OutOfSync one by one: here
    one cluster's Application is compared every second, the others' once an hour. The watcher must
    not size the Workflow on the first one: it asks Argo CD to compare the rest, waits, and the
    later stage's `maxParallel: 50%` is half of the 5 clusters it really has (2 at a time), not of
    the 0 or 1 it had when the first Application turned OutOfSync (1 at a time)."""
    seeded = seed_fleet(kube, namespace, clusters=6, regions=["eu", "us"], revision=REVISION_1, synced=True)
    publish_refs(kube, namespace, {"main": REVISION_1})
    first_to_see_it = seeded.clusters[-1].name
    lagging = f"""
defaults: {{syncSeconds: 0.3, healthSeconds: 0.3, refreshSeconds: 3600}}
clusters:
  {first_to_see_it}: {{refreshSeconds: 1}}
"""
    stages = [make_stage("canary", region="eu", max_targets=1), make_stage("rest", max_parallel="50%")]
    with (
        running_actors(kube, namespace, users[STEPS_USER], events_log, lagging),
        in_process_watcher(watcher_kube, namespace, fleet_compare_seconds=60.0),
    ):
        create_ps(kube, namespace, "web", "myservice", stages=stages, progressDeadlineSeconds=60)
        wait_for(
            lambda: condition(status_of(kube, namespace, "web"), "Ready") == ("True", "UpToDate"),
            what="the fleet up to date before the push",
        )
        publish_refs(kube, namespace, {"main": REVISION_2})  # the push; no webhook
        workflow = wait_for(lambda: workflows_of(kube, namespace, "web"), timeout=90, what="the Workflow")[0]
        arguments = {p["name"]: p["value"] for p in workflow["spec"]["arguments"]["parameters"]}
        sized = {s["name"]: s for s in json.loads(arguments["contract"])["stages"]}
        description = workflow["metadata"]["annotations"]["workflows.argoproj.io/description"]
        # Sized for the 5 clusters (2 at a time), not for the 1 compared when the release was seen;
        # its pods start together and take the 2 slots in turn (steps/turn.py).
        assert (sized["rest"]["targets"], sized["rest"]["maxParallel"]) == (5, 2), (sized, description)
        assert "rest (5 clusters, 2 at a time)" in description, description
        wait_for(
            lambda: phase_of(kube, namespace, "web") == "Succeeded", timeout=ROLLOUT_TIMEOUT, what="Succeeded"
        )

    status = status_of(kube, namespace, "web")
    assert condition(status, "FleetCompared") == ("True", "FleetCompared")
    assert status["progress"] == "6/6"
    events, _ = kube.list(EVENTS, namespace)
    waits = [e["message"] for e in events if e.get("reason") == "AwaitingFleetComparison"]
    assert len(waits) == 1 and "5 of 6 Application(s) not compared yet" in waits[0], waits
    assert sync_starts(events_log) == dict.fromkeys(seeded.applications, 1)


def _gone(kube: Kube, namespace: str, name: str) -> bool:
    try:
        kube.get(PROGRESSIVE_SYNCS, namespace, name)
    except NotFound:
        return True
    return False


# --- ending what we started without the exit handler (issue 29, point 7) --------------------------


def operation_states(kube: Kube, namespace: str, apps: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """`status.operationState` of each Application that has one."""
    states = {}
    for app in apps:
        state = (kube.get(APPLICATIONS, namespace, app).get("status") or {}).get("operationState")
        if state:
            states[app] = state
    return states


def our_running_sync(kube: Kube, namespace: str, apps: tuple[str, ...]) -> str:
    """The Application of a sync of ours the simulator runs (and, hanging, never ends); "" if none."""
    for app, state in operation_states(kube, namespace, apps).items():
        rollout_id = appsync.info_value(state.get("operation"), appsync.INFO_ROLLOUT_ID)
        if state.get("phase") == "Running" and rollout_id:
            return app
    return ""


def ended(kube: Kube, namespace: str, app: str) -> bool:
    """The Application's operation was terminated: Argo CD (the simulator) recorded it Failed."""
    app_obj = kube.get(APPLICATIONS, namespace, app)
    state = (app_obj.get("status") or {}).get("operationState") or {}
    return state.get("phase") == "Failed" and "terminated" in str(state.get("message", "")).lower()


def test_a_deleted_workflow_leaves_no_sync_of_ours_running(
    kube: Kube, watcher_kube: Kube, namespace: str, users: dict[str, Path], events_log: Path
) -> None:
    fleet = seed(kube, namespace, clusters=2)
    with (
        running_actors(kube, namespace, users[STEPS_USER], events_log, HANGING_FLEET),
        in_process_watcher(watcher_kube, namespace),
    ):
        create_ps(kube, namespace, "web", fleet.app_set)
        app = wait_for(
            lambda: our_running_sync(kube, namespace, fleet.apps), timeout=120, what="a sync of ours running"
        )
        kube.delete(WORKFLOWS, namespace, the_workflow(kube, namespace, "web")["metadata"]["name"])
        wait_for(lambda: ended(kube, namespace, app), timeout=60, what=f"{app}'s sync terminated")
        wait_for(lambda: phase_of(kube, namespace, "web") == "Cancelled", what="the end recorded")
        message = status_of(kube, namespace, "web")["message"]
        assert "deleted outside progressive-sync" in message and app in message, message
    assert sync_starts(events_log) == {app: 1}, "the terminated sync was not started again"


def test_argo_terminate_skips_the_exit_handler_and_the_watcher_ends_our_syncs(
    kube: Kube, watcher_kube: Kube, namespace: str, users: dict[str, Path], events_log: Path
) -> None:
    fleet = seed(kube, namespace, clusters=2)
    with (
        running_actors(kube, namespace, users[STEPS_USER], events_log, HANGING_FLEET),
        in_process_watcher(watcher_kube, namespace),
    ):
        create_ps(kube, namespace, "web", fleet.app_set)
        app = wait_for(
            lambda: our_running_sync(kube, namespace, fleet.apps), timeout=120, what="a sync of ours running"
        )
        name = the_workflow(kube, namespace, "web")["metadata"]["name"]
        kube.patch(WORKFLOWS, namespace, name, {"spec": {"shutdown": "Terminate"}})  # argo terminate
        wait_for(lambda: ended(kube, namespace, app), timeout=60, what=f"{app}'s sync terminated")
        wait_for(lambda: phase_of(kube, namespace, "web") == "Cancelled", what="the end recorded")
        message = status_of(kube, namespace, "web")["message"]
        assert "exit handler recorded nothing" in message and app in message, message


def test_deleting_with_no_exit_handler_to_run_ends_our_syncs_before_the_object_goes(
    kube: Kube, watcher_kube: Kube, namespace: str, users: dict[str, Path], events_log: Path
) -> None:
    fleet = seed(kube, namespace, clusters=2)
    with (
        running_actors(kube, namespace, users[STEPS_USER], events_log, HANGING_FLEET) as actors,
        in_process_watcher(watcher_kube, namespace),
    ):
        create_ps(kube, namespace, "web", fleet.app_set)
        app = wait_for(
            lambda: our_running_sync(kube, namespace, fleet.apps), timeout=120, what="a sync of ours running"
        )
        # Nobody runs the Workflow any more: its exit handler never runs (a garbage-collected Workflow,
        # an Argo controller that is down), so only the watcher can end the sync.
        actors.stop_executor()
        kube.delete(PROGRESSIVE_SYNCS, namespace, "web")
        wait_for(lambda: _gone(kube, namespace, "web"), timeout=60, what="the ProgressiveSync to go")
        wait_for(lambda: ended(kube, namespace, app), timeout=30, what=f"{app}'s sync terminated")


def test_an_argo_retry_of_an_old_workflow_is_stopped_not_adopted(
    kube: Kube, watcher_kube: Kube, namespace: str, users: dict[str, Path], events_log: Path
) -> None:
    fleet = seed(kube, namespace, clusters=2)
    with (
        running_actors(kube, namespace, users[STEPS_USER], events_log) as actors,
        in_process_watcher(watcher_kube, namespace),
    ):
        create_ps(kube, namespace, "web", fleet.app_set)
        wait_for(lambda: phase_of(kube, namespace, "web") == "Succeeded", timeout=ROLLOUT_TIMEOUT, what="R1")
        old = status_of(kube, namespace, "web")["rollout"]
        release(kube, fleet, REVISION_2)
        # One read per try: two could see R1's phase, then R2's id in the instant it starts.
        wait_for(
            lambda: (
                (now := status_of(kube, namespace, "web")).get("phase") == "Succeeded"
                and now["rollout"]["id"] != old["id"]
            ),
            timeout=ROLLOUT_TIMEOUT,
            what="R2, the release of the next commit",
        )
        new = status_of(kube, namespace, "web")["rollout"]
        # `argo retry` of the old Workflow: the same object, Running again (nobody runs it here: what
        # is checked is the watcher's answer, and the status the old rollout would otherwise take).
        actors.stop_executor()
        retried = {"status": {"phase": "Running", "finishedAt": None}}
        kube.patch(WORKFLOWS, namespace, old["workflow"], retried)
        wait_for(
            lambda: kube.get(WORKFLOWS, namespace, old["workflow"])["spec"].get("shutdown") == "Stop",
            what="the old Workflow stopped",
        )
        status = status_of(kube, namespace, "web")
        assert status["rollout"]["id"] == new["id"] and status["phase"] == "Succeeded", status
        events, _ = kube.list(EVENTS, namespace)
        assert any(e.get("reason") == "StaleWorkflowStopped" for e in events)
