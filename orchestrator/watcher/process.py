"""The watcher as a long-running process: leader election, endpoints, a clean drain on SIGTERM.

`run_process(kube, settings, stop)` is what `progressive-sync watch` runs:

1. `/metrics`, `/healthz` and `/readyz` are served when `settings.http_port` is set;
2. without leader election a `Watcher` runs until `stop`;
3. with it (`settings.leader_election`), the Lease loop runs on its own thread and the process
   stands by until it holds the Lease; then a `Watcher` starts on `kube.gated(elector.holds)` — no
   write leaves the process once the Lease is lost — and runs until `stop`, a lost Lease (it is
   stopped and the process stands by again, ready for another term) or a watch loop that gave up;
4. on `stop` (SIGTERM): the watcher drains (no new reconcile starts, the ones in flight finish,
   so no status is left half-written; `settings.shutdown_timeout_seconds` bounds it, inside the
   pod's grace period), then the Lease loop stops and the Lease is released, so a standby takes
   over at once instead of after the lease duration.

Exit codes: 0 after a clean stop, 1 when a watch loop gave up.
Callers: `orchestrator.cli.watch_cmd`; tests.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field

from orchestrator.kube.client import Kube, KubeError
from orchestrator.watcher.endpoints import Endpoints, Probe
from orchestrator.watcher.leader import LeaderElector
from orchestrator.watcher.loop import Watcher
from orchestrator.watcher.metrics import WatcherMetrics
from orchestrator.watcher.settings import Settings

log = logging.getLogger(__name__)


@dataclass
class ProcessState:
    """What the probes read: the watcher of the current term, the elector, a fatal failure."""

    watcher: Watcher | None = None
    elector: LeaderElector | None = None
    elector_thread: threading.Thread | None = None
    fatal: list[str] = field(default_factory=list)

    def healthz(self) -> Probe:
        """Liveness: no fatal failure, no watch loop that gave up, the Lease loop alive."""
        if self.fatal:
            return Probe(False, self.fatal[0])
        watcher = self.watcher
        if watcher is not None and watcher.failed:
            return Probe(False, f"a watch loop gave up: {watcher.failed[0]}")
        if self.elector_thread is not None and not self.elector_thread.is_alive():
            return Probe(False, "the leader election loop stopped")
        return Probe(True, "running")

    def readyz(self) -> Probe:
        """Readiness: healthy, and standing by or leading with filled caches."""
        health = self.healthz()
        if not health.ok:
            return health
        if self.elector is not None and not self.elector.holds():
            return Probe(True, "standing by (another replica leads)")
        watcher = self.watcher
        if watcher is None or not watcher.running:
            return Probe(False, "starting: caches not filled yet")
        return Probe(True, "leading" if self.elector is not None else "running")


def run_process(
    kube: Kube, settings: Settings, stop: threading.Event, *, metrics: WatcherMetrics | None = None
) -> int:
    """Run until `stop`; see the module docstring. Returns the exit code."""
    metrics = metrics or WatcherMetrics()
    state = ProcessState()
    endpoints = None
    if settings.http_port is not None:
        endpoints = Endpoints(
            settings.http_address,
            settings.http_port,
            metrics=metrics.exposition,
            healthz=state.healthz,
            readyz=state.readyz,
        ).start()
    try:
        if settings.leader_election is None:
            watcher = Watcher(kube, settings, metrics=metrics)
            state.watcher = watcher
            return watcher.run(stop, shutdown_timeout=settings.shutdown_timeout_seconds)
        return _run_elected(kube, settings, stop, metrics, state)
    finally:
        if endpoints is not None:
            endpoints.close()


def _run_elected(
    kube: Kube, settings: Settings, stop: threading.Event, metrics: WatcherMetrics, state: ProcessState
) -> int:
    assert settings.leader_election is not None
    elector = LeaderElector(kube, settings.leader_election)
    metrics.attach(leader=elector.holds)
    gated = kube.gated(elector.holds)
    elector_stop = threading.Event()
    thread = threading.Thread(target=elector.run, args=(elector_stop,), name="leader-election", daemon=True)
    state.elector, state.elector_thread = elector, thread
    thread.start()
    lease = settings.leader_election
    log.info(
        "standing by for the lease %s/%s as %s (lease %.0fs)",
        lease.namespace,
        lease.name,
        lease.identity,
        lease.lease_seconds,
    )
    code = 0
    try:
        while not stop.is_set():
            if not elector.holds():
                elector.changed.wait(0.5)
                elector.changed.clear()
                continue
            watcher = Watcher(gated, settings, metrics=metrics)
            state.watcher = watcher
            try:
                watcher.start()
            except KubeError as exc:
                if elector.holds():
                    log.error("exiting: the watcher could not start: %s", exc)
                    state.fatal.append(str(exc))
                    return 1
                log.warning("lost the lease while starting (%s); standing by", exc)
                continue
            while not stop.is_set() and elector.holds() and not watcher.failed:
                stop.wait(0.2)
            lost = not stop.is_set() and not elector.holds()
            if lost:
                log.warning("lost the lease: no write leaves this process any more; stopping the watcher")
            watcher.stop(timeout=settings.shutdown_timeout_seconds)
            if watcher.failed:
                log.error("exiting: %s", watcher.failed[0])
                code = 1
                break
            state.watcher = None
    finally:
        elector_stop.set()
        thread.join(timeout=lease.renew_deadline_seconds)
        elector.release()
    return code
