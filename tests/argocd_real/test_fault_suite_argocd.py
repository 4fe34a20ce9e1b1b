"""The fault suite's Argo CD rows (issue 18): faults of Argo CD itself, injected into a running rollout.

Each row rolls release 2 out over two clusters (the canary, then the other one: `CANARY_THEN_REST`)
through the real Argo CD, injects one fault while the canary is being synced or waited for, and
checks the same three things as the rest of the fault suite (tests/integration/test_fault_suite_*.py):

1. the rollout ends in the row's phase (each row says why that phase is the right one);
2. every Application is synced at most once by progressive-sync, exactly once where the rollout
   succeeds: counted per object (uid) on one watch stream (`AppRecorder`): the sync requests that
   appeared on it, and the operations Argo CD started on it (distinct `startedAt`);
3. it ends by itself within the row's bound, from the end of the fault (a deadline, not a sleep).

Rows:

- `argocd-application-controller-restarted-mid-sync`: the canary's sync Running, held in wave 0 by
  a HealthProbe gate, when the application controller is SIGKILLed and started again. The
  operation lives in the Application (`.operation`, `status.operationState`), so the new controller
  carries it on: same `startedAt`, nothing requested again. Succeeded.
- `argocd-health-flapping-settles-healthy`: after the canary's sync its workload flaps Degraded,
  Progressing, Degraded, Progressing, then Healthy, inside the ProgressiveSync's
  `degradedGraceSeconds`: a Degraded within the grace after the sync is a notice, not a failure
  (DESIGN.md §3), and the next stage starts only once the canary is Healthy. Succeeded.
- `argocd-health-flapping-past-degraded-grace`: the same flapping, still Degraded when the grace
  (8 s after the sync finished) is over: the cluster fails, the stage and the rollout fail, and the
  other cluster is never synced. Failed.
- `argocd-application-recreated-new-uid`: the canary's sync Succeeded, its health still Progressing,
  when its Application is deleted; the ApplicationSet controller creates it again (same name, new
  uid). The rollout's sync was requested on the object that is gone; the new one is a different
  object: never synced by this rollout, and the old one's result is not its result. The cluster
  fails with a reason naming the Application, the rollout fails. Failed.

Real: see conftest.py (Argo CD's controllers, destination API servers, Git). Health is driven
through HealthProbe objects (`ProbeDriver`), whose Lua health check reports `status.health`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from orchestrator.devenv import starter_app
from orchestrator.devenv.argocd import ArgoCDStack
from orchestrator.kube.client import APPLICATIONS, NotFound
from tests.support.app_recorder import AppRecorder, recording
from tests.support.argocd_harness import (
    CANARY,
    CANARY_THEN_REST,
    SMALL,
    ProbeDriver,
    Scenario,
    rollout_actors,
    scenario_of,
)
from tests.support.wait import wait_for

pytestmark = pytest.mark.argocd

OTHER = "us-1"  # the second cluster of the SMALL scenarios, on the other API server
CONTROLLER = "argocd-application-controller"
US = "progressive-sync"

Script = Sequence[tuple[str, float | None]]


@dataclass
class Run:
    """What a row's fault works with while the rollout runs, and when the fault ended."""

    stack: ArgoCDStack
    scenario: Scenario
    seen: AppRecorder
    driver: ProbeDriver
    fault_ended: float = 0.0
    facts: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Row:
    """One fault: the release, the probe's scripts, the fault, and what must come of it."""

    gated: bool  # release 2's ConfigMap waits (wave 1) behind the probe (wave 0): the sync stays Running
    scripts: Mapping[str, Script]
    inject: Callable[[Run], None]
    phase: str
    synced: Mapping[str, int]  # cluster -> syncs by progressive-sync on its first object
    bound_seconds: float  # from the fault's end to the final phase
    spec: Mapping[str, Any] = field(default_factory=dict)
    check: Callable[[Run], None] = lambda run: None
    app_set_changes: Mapping[str, Any] = field(default_factory=dict)


# --- helpers ------------------------------------------------------------------------------------


def operation_state(scenario: Scenario, cluster: str) -> dict[str, Any]:
    return dict((scenario.application(cluster).get("status") or {}).get("operationState") or {})


def our_operation(scenario: Scenario, cluster: str, *phases: str) -> dict[str, Any]:
    """Wait until our operation on `cluster`'s Application is in one of `phases`; its state."""

    def found() -> dict[str, Any]:
        try:
            state = operation_state(scenario, cluster)
        except NotFound:
            return {}
        by = ((state.get("operation") or {}).get("initiatedBy") or {}).get("username")
        return state if by == US and state.get("phase") in phases else {}

    return dict(wait_for(found, timeout=90, interval=0.2, what=f"our sync of {cluster} {'/'.join(phases)}"))


def status_text(scenario: Scenario) -> str:
    status = scenario.status()
    parts = [str(c.get("message", "")) for c in status.get("conditions") or []]
    for stage in status.get("stages") or []:
        parts += [str(stage.get("message", "")), *(str(f) for f in stage.get("failed") or [])]
    return " ".join(parts)


def diagnosis(run: Run) -> str:
    """What the Applications went through and the application controller's last words (a failure)."""
    lines = []
    for cluster in run.scenario.clusters:
        app = run.scenario.app(cluster)
        lines.append(f"{app}: " + " | ".join(str(s) for s in run.seen.history(app)[-8:]))
    lines.append(run.stack.supervisor.log_tail(CONTROLLER, 25))
    return "\n".join(lines)


# --- the faults -----------------------------------------------------------------------------------


def restart_controller_mid_sync(run: Run) -> None:
    """Our canary sync Running in wave 0 (the gate Progressing): SIGKILL the application controller,
    start it again, then let the gate turn Healthy."""
    state = our_operation(run.scenario, CANARY, "Running")
    wait_for(
        lambda: "waiting for healthy state" in str(operation_state(run.scenario, CANARY).get("message", "")),
        timeout=60,
        interval=0.2,
        what="the canary's sync to wait for its gate (wave 0)",
    )
    run.facts["started_at"] = state["startedAt"]
    old_pid = run.stack.pids[CONTROLLER]
    killed = time.monotonic()
    run.stack.restart_component(CONTROLLER)
    assert run.stack.pids[CONTROLLER] != old_pid
    run.facts["restart_seconds"] = time.monotonic() - killed
    run.fault_ended = time.monotonic()
    run.driver.release(CANARY)
    # The tier runs with Argo CD's timed comparison off. A restarted application controller (v3.6.1,
    # controller/appcontroller.go) queues an Application's operation only on an Application update
    # event, a managed resource's change (5 s later) or the operation's own requeue, never at start:
    # the gate turning Healthy before its cluster cache watched was missed, and the operation stayed
    # Running with nothing logged for 60 s (2 of 3 runs without this line). The refresh is what the
    # timer (120 s by default) or a Git webhook sends: an update event, so the operation resumes.
    run.scenario.refresh([CANARY])


def check_controller_carried_the_operation_on(run: Run) -> None:
    state = operation_state(run.scenario, CANARY)
    assert state["startedAt"] == run.facts["started_at"], (state, run.facts)
    assert state["phase"] == "Succeeded", state


def flap(run: Run) -> None:
    """The flapping is the ProbeDriver's script: the fault ends when its last step is applied."""
    steps = len(run.driver.scripts[CANARY])
    wait_for(
        lambda: len(run.driver.applied[CANARY]) >= steps,
        timeout=90,
        interval=0.1,
        what="the canary's workload to go through its flapping",
    )
    run.fault_ended = time.monotonic()


def canary_synced(run: Run) -> None:
    """The fault is the ProbeDriver's script, which goes on after this: it starts with the sync."""
    our_operation(run.scenario, CANARY, "Succeeded")


def healths_after_our_sync(run: Run) -> list[str]:
    """The canary's health as Argo CD reported it once our operation started, repeats dropped."""
    healths: list[str] = []
    for state in run.seen.history(run.scenario.app(CANARY)):
        if state.started_by == US and (not healths or healths[-1] != state.health):
            healths.append(state.health)
    return healths


def check_flapping_was_seen_by_argo_cd(run: Run) -> None:
    """Argo CD reported the flapping back and forth (Degraded, Progressing, Degraded in that order),
    so wait-healthy had it to watch."""
    healths = iter(healths_after_our_sync(run))
    assert all(h in healths for h in ("Degraded", "Progressing", "Degraded")), healths_after_our_sync(run)


def check_next_stage_after_canary_healthy(run: Run) -> None:
    """The other cluster's sync was requested only after the canary turned Healthy at the end of its
    flapping (not on a Healthy seen before it, nor in between)."""
    canary, other = run.scenario.app(CANARY), run.scenario.app(OTHER)
    check_flapping_was_seen_by_argo_cd(run)
    ours = [s for s in run.seen.seen if s.app == canary and s.state.started_by == US]
    last_unhealthy = max(s.seq for s in ours if s.state.health in ("Degraded", "Progressing"))
    healthy = min(s.seq for s in ours if s.seq > last_unhealthy and s.state.health == "Healthy")
    requested = run.seen.first_seq(other, lambda s: s.requested_by == US)
    assert requested is not None and healthy < requested, (healthy, requested)


def check_failed_on_degraded(run: Run) -> None:
    check_flapping_was_seen_by_argo_cd(run)
    text = status_text(run.scenario)
    assert "Degraded" in text and "grace" in text, text


def recreate_application(run: Run) -> None:
    """Our canary sync Succeeded, its health Progressing: delete the Application and let the
    ApplicationSet controller create it again. The ApplicationSet preserves resources on deletion
    (no resources finalizer on its Applications): the Application goes at once, the workload stays."""
    our_operation(run.scenario, CANARY, "Succeeded")
    old = run.scenario.application(CANARY)["metadata"]["uid"]
    run.facts["old_uid"] = old
    run.scenario.kube.delete(APPLICATIONS, run.scenario.namespace, run.scenario.app(CANARY))

    def recreated() -> str:
        try:
            uid = str(run.scenario.application(CANARY)["metadata"]["uid"])
        except NotFound:
            return ""
        return uid if uid != old else ""

    try:
        run.facts["new_uid"] = wait_for(
            recreated, timeout=30, interval=0.1, what="the ApplicationSet controller to create it again"
        )
    except AssertionError as exc:
        log = run.stack.supervisor.log_tail("argocd-applicationset-controller", 40)
        raise AssertionError(f"{exc}\nthe ApplicationSet controller's log ends:\n{log}") from exc
    run.fault_ended = time.monotonic()
    run.driver.release(CANARY)


def check_new_object_never_synced(run: Run) -> None:
    app = run.scenario.app(CANARY)
    old, new = run.facts["old_uid"], run.facts["new_uid"]
    assert run.seen.uids(app) == [old, new]
    assert run.seen.sync_requests(app, by=US, uid=new) == 0
    assert run.seen.sync_starts(app, by=US, uid=new) == 0
    text = status_text(run.scenario)
    assert app in text and "deleted" in text, text


FLAP_THEN_HEALTHY: Script = (
    ("Degraded", 2.0),
    ("Progressing", 2.0),
    ("Degraded", 2.0),
    ("Progressing", 2.0),
    ("Healthy", 0.0),
)
FLAP_THEN_DEGRADED: Script = (("Degraded", 2.0), ("Progressing", 2.0), ("Degraded", None))

ROWS = [
    pytest.param(
        Row(
            gated=True,
            scripts={CANARY: [("Progressing", None), ("Healthy", 0.0)], OTHER: [("Healthy", 0.0)]},
            inject=restart_controller_mid_sync,
            phase="Succeeded",
            synced={CANARY: 1, OTHER: 1},
            bound_seconds=60,
            check=check_controller_carried_the_operation_on,
        ),
        id="argocd-application-controller-restarted-mid-sync",
    ),
    pytest.param(
        Row(
            gated=False,
            scripts={CANARY: FLAP_THEN_HEALTHY, OTHER: [("Healthy", 0.0)]},
            inject=flap,
            phase="Succeeded",
            synced={CANARY: 1, OTHER: 1},
            bound_seconds=45,
            spec={"degradedGraceSeconds": 60},
            check=check_next_stage_after_canary_healthy,
        ),
        id="argocd-health-flapping-settles-healthy",
    ),
    pytest.param(
        Row(
            gated=False,
            scripts={CANARY: FLAP_THEN_DEGRADED, OTHER: [("Healthy", 0.0)]},
            inject=canary_synced,
            phase="Failed",
            synced={CANARY: 1, OTHER: 0},
            bound_seconds=8 + 30,  # the grace, then the step's next look (at most a watch window)
            spec={"degradedGraceSeconds": 8},
            check=check_failed_on_degraded,
        ),
        id="argocd-health-flapping-past-degraded-grace",
    ),
    pytest.param(
        Row(
            gated=False,
            scripts={CANARY: [("Progressing", None), ("Healthy", 0.0)], OTHER: [("Healthy", 0.0)]},
            inject=recreate_application,
            phase="Failed",
            synced={CANARY: 1, OTHER: 0},
            bound_seconds=30,
            check=check_new_object_never_synced,
            app_set_changes={"preserve_resources_on_deletion": True},
        ),
        id="argocd-application-recreated-new-uid",
    ),
]


def _release(scenario: Scenario, gated: bool) -> str:
    if not gated:
        return scenario.release({"probe.yaml": starter_app.probe_manifest("probe")})
    return scenario.release(
        {
            "configmap.yaml": starter_app.configmap_manifest(
                scenario.configmap, {"release": "2"}, annotations={"argocd.argoproj.io/sync-wave": "1"}
            ),
            "probe.yaml": starter_app.probe_manifest(
                "probe", annotations={"argocd.argoproj.io/sync-wave": "0"}
            ),
        }
    )


@pytest.mark.parametrize("row", ROWS)
def test_argocd_fault(row: Row, argocd_stack: ArgoCDStack, tmp_path: Path) -> None:
    started = time.monotonic()
    with scenario_of(argocd_stack, selector=SMALL, app_set_changes=row.app_set_changes) as scenario:
        revision = _release(scenario, row.gated)
        scenario.refresh()
        scenario.wait_out_of_sync(revision)
        with (
            recording(argocd_stack.kube, argocd_stack.namespace, keep=lambda n: n in scenario.apps) as seen,
            ProbeDriver(scenario, row.scripts) as driver,
            rollout_actors(argocd_stack, tmp_path),
        ):
            first_uids = {c: scenario.application(c)["metadata"]["uid"] for c in scenario.clusters}
            scenario.create_progressive_sync(CANARY_THEN_REST, deadline_seconds=120, **row.spec)
            run = Run(argocd_stack, scenario, seen, driver)
            row.inject(run)
            if not run.fault_ended:
                run.fault_ended = time.monotonic()
            try:
                phase = scenario.wait_phase("Succeeded", "Failed", timeout=row.bound_seconds)
            except AssertionError as exc:
                raise AssertionError(f"{exc}\n{diagnosis(run)}") from exc
            recovered = time.monotonic() - run.fault_ended
            assert phase == row.phase, scenario.explain()
            if phase == "Succeeded":
                scenario.wait_synced(revision)
            for cluster, count in row.synced.items():
                app, uid = scenario.app(cluster), first_uids[cluster]
                assert seen.sync_requests(app, by=US, uid=uid) == count, (cluster, seen.history(app))
                assert seen.sync_starts(app, by=US, uid=uid) == count, (cluster, seen.history(app))
            row.check(run)
            failed = [f for stage in scenario.status().get("stages") or [] for f in stage.get("failed") or []]
    print(
        f"ended {phase} {recovered:.1f}s after the fault (bound {row.bound_seconds:g}s); "
        f"row {time.monotonic() - started:.1f}s; {run.facts}; failed: {failed}"
    )
