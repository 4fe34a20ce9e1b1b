"""The fault suite's process rows (issue 18): the watcher as a real process, crashed or paused at one
point of a reconcile, and the same three checks as the fault suite (tests/support/fault_rig.py).

Real: the session's control plane (its audit log tells each watcher's writes apart: every watcher
process is its own user), `progressive-sync watch` as child processes (with `--leader-elect` where
the row needs two), the local executor running the real steps and the fleet simulator, both in this
test process and never faulted. The point of each fault is placed from outside by
`tests/support/watcher_pausepoint.py` (the product has no failpoints): SIGKILL (a crash) or SIGSTOP (a
paused process: a GC stall, a frozen VM) sent to itself the first time the reconcile reaches it.

Every row checks, like the rest of the suite:

1. the rollout ends in the right phase, with one Workflow;
2. every Application synced exactly once (the simulator's exact events log);
3. the end within the row's bound of the fault being over (a deadline, never a sleep), the watcher
   that is left running alive (no watch loop given up, no crash loop).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from orchestrator.devenv import controlplane as devcluster
from orchestrator.kube.client import LEASES, NAMESPACES, Kube
from tests.support.fault_rig import CLUSTERS, FLEET, PS, ROLLOUT_SECONDS, event_reasons
from tests.support.wait import wait_for
from tests.support.watcher_harness import (
    LEASE,
    LEASE_SECONDS,
    Actors,
    WatcherProcess,
    create_ps,
    leader_elect_args,
    phase_of,
    seed,
    status_of,
    sync_starts,
    workflows_of,
)

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

NOT_SENT = "no longer holds the leader lease"


@dataclass
class ProcessRig:
    """One rollout with the watcher as processes; the test's direct client; the audit log's mark."""

    cluster: devcluster.DevCluster
    kube: Kube
    namespace: str
    tmp_path: Path
    events_log: Path
    apps: tuple[str, ...] = ()
    actors: Actors | None = None
    processes: list[WatcherProcess] = field(default_factory=list)
    users: dict[str, str] = field(default_factory=dict)  # process name -> its user in the audit log
    mark: int = 0  # where the fault began, in the audit log
    # The processes that must be running when the rollout ends (the others were the fault's).
    survivors: list[WatcherProcess] = field(default_factory=list)

    def watcher(
        self, name: str, *, point: tuple[str, str] | None = None, leader: bool = False
    ) -> WatcherProcess:
        """A `watch` process as its own user; `point`: (pause point, signal) of watcher_pausepoint."""
        user = self.users.setdefault(name, f"{name}.{uuid.uuid4().hex[:8]}")
        kubeconfig = self.cluster.mint_user(user, ["system:masters"])
        extra: tuple[str, ...] = ("--shutdown-timeout=15",)
        if leader:
            extra += leader_elect_args(self.namespace, name)
        process = WatcherProcess(kubeconfig, self.namespace, self.tmp_path / f"{name}.log", extra_args=extra)
        if point is not None:
            process.module = ("tests.support.watcher_pausepoint", *point)
        self.processes.append(process)
        return process

    def writes_by(self, name: str) -> list[devcluster.AuditEvent]:
        """Every write the API server answered for that process's user since `mark`."""
        return [e for e in self.cluster.audit_events_since(self.mark) if e.user == self.users[name]]


def _logged(text: str) -> Callable[[dict[str, Any]], bool]:
    return lambda entry: text in str(entry.get("message", ""))


def _stopped(process: WatcherProcess) -> bool:
    """True while the process is stopped by a signal (state T in /proc)."""
    assert process.process is not None
    with contextlib.suppress(OSError):
        stat = Path(f"/proc/{process.process.pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] == "T"
    return False


# --- the faults: each runs until the fault is over; then the rollout must end within the bound --------


def crash_between_status_write_and_event(rig: ProcessRig) -> None:
    """SIGKILL in the reconcile that starts the rollout, after its status write (the rollout and its
    Workflow recorded) and before its RolloutStarted Event; then the watcher started again.

    The Workflow waits for the restarted watcher: the executor (Argo's part here) is held from before
    the crash until the new process lists the ProgressiveSync, so the row checks the replay of the
    lost RolloutStarted and the live RolloutSucceeded apart (a rollout that ended while no watcher
    ran would have its RolloutSucceeded replayed too)."""
    assert rig.actors is not None
    rig.actors.stop_executor()
    crashing = rig.watcher("watcher", point=("event:RolloutStarted", "KILL")).start()
    create_ps(rig.kube, rig.namespace, PS, "myservice")
    wait_for(lambda: not crashing.alive(), timeout=60, what="the watcher to die before the Event")
    assert crashing.process is not None and crashing.process.returncode == -signal.SIGKILL
    recorded = (status_of(rig.kube, rig.namespace, PS).get("rollout") or {}).get("workflow")
    assert recorded, "the status write landed before the crash"
    assert "RolloutStarted" not in event_reasons(rig.kube, rig.namespace, PS)
    rig.mark = rig.cluster.audit_mark()
    crashing.module = WatcherProcess.module  # started again as the plain watcher, its failpoint gone
    restarted = crashing.start()
    restarted.wait_logged(_logged("watching ProgressiveSyncs"), what="the restarted watcher to list")
    rig.actors.start_executor()
    rig.survivors.append(restarted)


def _event_log(rig: ProcessRig) -> list[str]:
    """What the watchers logged about Events (recorded, or not: 'could not record event')."""
    lines: list[str] = []
    for process in rig.processes:
        with contextlib.suppress(OSError):
            lines += [line for line in process.log_path.read_text().splitlines() if "event" in line.lower()]
    return lines[-20:]


def showed_each_event_once(rig: ProcessRig) -> str:
    wait_for(
        lambda: "RolloutSucceeded" in event_reasons(rig.kube, rig.namespace, PS),
        timeout=ROLLOUT_SECONDS,
        what="the RolloutSucceeded Event",
        describe=lambda: {"events": event_reasons(rig.kube, rig.namespace, PS), "log": _event_log(rig)},
    )
    reasons = event_reasons(rig.kube, rig.namespace, PS)
    # Once each (docs/design/watcher.md, "Events"): the restarted watcher replays the RolloutStarted
    # its predecessor died before recording, under the name that one would have given it.
    assert reasons.count("RolloutStarted") == 1 and reasons.count("RolloutSucceeded") == 1, reasons
    creates = [e for e in rig.writes_by("watcher") if e.resource == "workflows" and e.verb == "create"]
    assert creates == [], "the restarted watcher adopted the recorded Workflow, created none"
    return (
        f"killed after the status write, before RolloutStarted; after the restart Events {reasons} "
        "(RolloutStarted replayed by the restarted watcher, once), no second Workflow create"
    )


def leadership_lost_mid_reconcile(rig: ProcessRig) -> None:
    """Two replicas; the leader stops (SIGSTOP) mid-reconcile: its Workflow created, the status write
    that records it about to be sent. Its lease runs out, the standby takes over and carries on; then
    the old leader resumes where it stopped, its write still pending."""
    leader = rig.watcher("watcher-a", point=("after-workflow-create", "STOP"), leader=True).start()
    leader.wait_logged(_logged("acquired the lease"), what="watcher-a to lead")
    standby = rig.watcher("watcher-b", leader=True).start()
    standby.wait_logged(_logged("standing by"), what="watcher-b to stand by")
    create_ps(rig.kube, rig.namespace, PS, "myservice")
    wait_for(lambda: _stopped(leader), timeout=60, what="watcher-a to stop mid-reconcile")
    rig.mark = rig.cluster.audit_mark()
    assert workflows_of(rig.kube, rig.namespace, PS), "watcher-a had created the Workflow"
    standby.wait_logged(
        _logged("acquired the lease"), timeout=LEASE_SECONDS + 20, what="watcher-b to take over"
    )
    lease = rig.kube.get(LEASES, rig.namespace, LEASE)["spec"]
    assert lease["holderIdentity"] == "watcher-b", lease
    assert leader.process is not None
    os.kill(leader.process.pid, signal.SIGCONT)
    # It goes on with the reconcile it was in: the pending status write is refused before it is sent.
    leader.wait_logged(_logged(NOT_SENT), timeout=30, what="watcher-a's pending write refused")
    leader.wait_logged(_logged("standing by"), timeout=30, what="watcher-a to stand by again")
    rig.survivors += [leader, standby]


def showed_no_write_after_the_loss(rig: ProcessRig) -> str:
    # Until it holds the lease again, watcher-a writes nothing: not its pending status write, not
    # anything else. Taking the lease back is election, not a leak: under load watcher-b can miss
    # its renewals for a lease's length and watcher-a then takes it over, legitimately (seen in CI:
    # one lease update, 200); what follows that is a leader's work.
    # Nor is a renewal the elector had read before the pause and sends after it: the API server
    # refuses it (409, the Lease's resourceVersion moved on), which is what the resourceVersion is for.
    # The SIGSTOP lands on every thread at once, the elector's between its GET and its PUT now and then
    # (the likely cause of a failure of this row once in 11 local runs at 1ac367b, whose audit log was
    # gone before it could be read; its watchers' logs showed nothing else out of place).
    writes = rig.writes_by("watcher-a")
    retaken = next((i for i, e in enumerate(writes) if e.resource == "leases" and e.code < 300), len(writes))
    refused_renewals = [e for e in writes[:retaken] if e.resource == "leases" and e.code == 409]
    late = [e for e in writes[:retaken] if e not in refused_renewals]
    assert late == [], f"watcher-a wrote after it stopped holding the lease: {late}"
    taken = [e for e in rig.writes_by("watcher-b") if e.resource != "leases"]
    assert taken, "watcher-b did the rest"
    return (
        f"watcher-a paused before its status write; watcher-b took the lease over and wrote {len(taken)} "
        f"times; watcher-a resumed: its write refused before sending ('{NOT_SENT}'), 0 writes by it "
        "after the pause (audit log), it stands by"
    )


@dataclass(frozen=True)
class ProcessFault:
    inject: Callable[[ProcessRig], None]
    # Seconds from the fault being over to the rollout's final phase.
    bound: float
    showed: Callable[[ProcessRig], str]
    phase: str = "Succeeded"


PROCESS_FAULTS = [
    pytest.param(
        ProcessFault(crash_between_status_write_and_event, ROLLOUT_SECONDS, showed_each_event_once),
        id="process-crash-between-status-write-and-event",
    ),
    pytest.param(
        ProcessFault(leadership_lost_mid_reconcile, ROLLOUT_SECONDS, showed_no_write_after_the_loss),
        id="process-leadership-lost-mid-reconcile",
    ),
]


@contextlib.contextmanager
def process_rig(
    cluster: devcluster.DevCluster, kube: Kube, namespace: str, tmp_path: Path
) -> Iterator[ProcessRig]:
    kube.create(NAMESPACES, None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    rig = ProcessRig(cluster, kube, namespace, tmp_path, tmp_path / "simulator.jsonl")
    rig.apps = seed(kube, namespace, clusters=CLUSTERS).apps
    steps = cluster.mint_user(f"steps.{uuid.uuid4().hex[:8]}", ["system:masters"])
    try:
        rig.actors = Actors(kube, namespace, steps, rig.events_log, FLEET).start()
        yield rig
    finally:
        for process in rig.processes:
            process.stop()
        if rig.actors is not None:
            rig.actors.stop()


@pytest.mark.timeout(600)
@pytest.mark.parametrize("fault", PROCESS_FAULTS)
def test_a_rollout_survives_a_process_fault(
    fault: ProcessFault,
    control_plane: devcluster.DevCluster,
    kube: Kube,
    request: pytest.FixtureRequest,
    tmp_path: Path,
) -> None:
    namespace = f"fault-{request.node.callspec.id}"[:63]
    with process_rig(control_plane, kube, namespace, tmp_path) as rig:
        fault.inject(rig)
        since = time.monotonic()
        wait_for(
            lambda: phase_of(kube, namespace, PS) in ("Succeeded", "Failed"),
            timeout=fault.bound,
            what=f"the rollout to end within {fault.bound}s of the fault",
        )
        took = time.monotonic() - since
        assert rig.actors is not None and rig.actors.simulator is not None
        assert rig.actors.simulator.error is None, rig.actors.simulator.error
        assert all(p.alive() for p in rig.survivors), "the watchers left running are alive"
        phase = phase_of(kube, namespace, PS)
        starts = sync_starts(rig.events_log)
        workflows = workflows_of(kube, namespace, PS)
        print(f"\nFAULT {request.node.callspec.id}: {fault.showed(rig)}; ended {took:.1f}s after")

    assert phase == fault.phase
    assert len(workflows) == 1, [w["metadata"]["name"] for w in workflows]
    assert starts == dict.fromkeys(rig.apps, 1), "every Application synced exactly once"
