"""Running the watcher in tests: as a subprocess (to SIGKILL it) or in-process, beside the fleet.

What is real: the control plane, the watcher (`progressive-sync watch` or `Watcher`), the local
executor running the real step programs, and the fleet simulator playing Argo CD. Each actor can
use its own user (client certificate) so the API server's audit log tells their writes apart.

Builders seed a small fleet with the simulator's `seed_fleet` and write ProgressiveSyncs; readers
return plain dicts. Waiting is always `tests.support.wait.wait_for` with a deadline.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.api.metadata import NAME_LABEL, label_value
from orchestrator.engine.executor import LocalExecutor
from orchestrator.engine.executor_settings import ExecutorSettings
from orchestrator.kube.client import APPLICATIONS, PROGRESSIVE_SYNCS, WORKFLOWS, Conflict, Kube
from orchestrator.simulator.appcontroller import FleetSimulator
from orchestrator.simulator.config import SimulatorConfig
from orchestrator.simulator.events import read_events
from orchestrator.simulator.seed import seed_fleet
from orchestrator.watcher.loop import Watcher
from orchestrator.watcher.settings import Engine, Settings
from tests.support.builders import canary_then_rest, make_ps
from tests.support.outcomes import status_with_outcomes
from tests.support.wait import wait_for

REVISION_1 = "1111111111111111111111111111111111111111"
REVISION_2 = "2222222222222222222222222222222222222222"
FAST_FLEET = "defaults: {syncSeconds: 0.3, healthSeconds: 0.3}"

# Leader election in the tests: the watcher's Lease (its default name) and short timings, so a
# takeover takes seconds; the ratios are client-go's (15/10/2).
LEASE = Settings.leader_elect_name
LEASE_SECONDS, RENEW_DEADLINE, RETRY = 6.0, 4.0, 0.5


def leader_elect_args(namespace: str, identity: str) -> tuple[str, ...]:
    """The `watch` flags of one replica that takes part in leader election with those timings."""
    return (
        "--leader-elect",
        f"--leader-elect-namespace={namespace}",
        f"--leader-elect-identity={identity}",
        f"--lease-duration={LEASE_SECONDS}",
        f"--renew-deadline={RENEW_DEADLINE}",
        f"--retry-period={RETRY}",
    )


# --- the fleet ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fleet:
    """A seeded fleet: clusters (Secrets), one ApplicationSet, one Application per cluster."""

    namespace: str
    app_set: str
    clusters: tuple[str, ...]
    apps: tuple[str, ...]


def seed(
    kube: Kube,
    namespace: str,
    *,
    clusters: int = 2,
    app_set: str = "myservice",
    revision: str = REVISION_1,
    sync_policy: dict[str, Any] | None = None,
) -> Fleet:
    """Clusters across regions eu and us, an ApplicationSet, Applications OutOfSync at `revision`
    (with `sync_policy` as their `spec.syncPolicy`)."""
    result = seed_fleet(
        kube,
        namespace,
        clusters=clusters,
        regions=["eu", "us"],
        revision=revision,
        app_set=app_set,
        sync_policy=sync_policy,
    )
    return Fleet(
        namespace=namespace,
        app_set=app_set,
        clusters=tuple(c.name for c in result.clusters),
        apps=tuple(result.applications),
    )


def create_ps(
    kube: Kube,
    namespace: str,
    name: str,
    app_set: str,
    *,
    stages: list[dict[str, Any]] | None = None,
    paused: bool = False,
    **spec: Any,
) -> dict[str, Any]:
    """Create a ProgressiveSync of `app_set` (default stages: a canary in region eu, then the rest);
    `spec`: more spec fields in wire form (`degradedGraceSeconds=2`)."""
    body = make_ps(
        name, namespace=None, app_set=app_set, stages=stages or canary_then_rest(), paused=paused, **spec
    )
    return kube.create(PROGRESSIVE_SYNCS, namespace, body)


def patch_spec(kube: Kube, namespace: str, name: str, spec: dict[str, Any]) -> None:
    """Merge-patch the spec (what `kubectl patch --type merge` does)."""
    kube.patch(PROGRESSIVE_SYNCS, namespace, name, {"spec": spec})


def status_of(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    """The ProgressiveSync's status ({} when it has none, or when it is gone)."""
    return status_with_outcomes(kube, namespace, name)


def phase_of(kube: Kube, namespace: str, name: str) -> str:
    """`status.phase` ('' when unset)."""
    return str(status_of(kube, namespace, name).get("phase") or "")


def workflows_of(kube: Kube, namespace: str, ps_name: str) -> list[dict[str, Any]]:
    """The Workflows labelled for the ProgressiveSync."""
    items, _ = kube.list(WORKFLOWS, namespace, label_selector=f"{NAME_LABEL}={label_value(ps_name)}")
    return items


def stage_of(status: dict[str, Any], stage: str) -> dict[str, Any]:
    """One stage entry of a status ({} when absent)."""
    return next((s for s in status.get("stages") or [] if s.get("name") == stage), {})


def completed_count(status: dict[str, Any]) -> int:
    """Clusters completed over all stages."""
    return sum(len(s.get("completed") or []) for s in status.get("stages") or [])


def release(kube: Kube, fleet: Fleet, revision: str) -> None:
    """A new commit: every Application becomes OutOfSync at `revision` (what Argo CD would report)."""
    for app in fleet.apps:
        for _ in range(10):
            obj = kube.get(APPLICATIONS, fleet.namespace, app)
            sync = obj.setdefault("status", {}).setdefault("sync", {})
            sync.update({"status": "OutOfSync", "revision": revision})
            try:
                kube.replace(APPLICATIONS, fleet.namespace, obj)
                break
            except Conflict:  # the simulator wrote meanwhile: read again
                continue
        else:
            raise AssertionError(f"{app}: 10 conflicts in a row; the release did not reach it")


def sync_starts(events_log: Path) -> dict[str, int]:
    """How many times the simulator picked up a sync operation, per Application."""
    counts: dict[str, int] = {}
    if not events_log.exists():
        return counts
    for event in read_events(events_log):
        if event.get("event") == "sync-start":
            counts[event["app"]] = counts.get(event["app"], 0) + 1
    return counts


# --- the actors ------------------------------------------------------------------------------------


@dataclass
class Actors:
    """The simulator and the local executor of one test, started and stopped together."""

    kube: Kube
    namespace: str
    steps_kubeconfig: Path
    events_log: Path
    simulator_config: str = FAST_FLEET
    simulator: FleetSimulator | None = None
    executor: LocalExecutor | None = None

    def start(self) -> Actors:
        """Start the simulator and the executor (both in this process)."""
        self.simulator = FleetSimulator(
            self.kube,
            self.namespace,
            SimulatorConfig.from_yaml(self.simulator_config),
            events_log=self.events_log,
        ).start()
        return self.start_executor()

    def start_executor(self) -> Actors:
        """Start the executor (again, after `stop_executor`: it takes up the Workflows as it finds them)."""
        self.executor = LocalExecutor(
            self.kube,
            ExecutorSettings(
                kubeconfig=self.steps_kubeconfig, namespace=self.namespace, watch_timeout_seconds=30
            ),
        ).start()
        return self

    def stop_executor(self) -> None:
        """Stop the executor (it kills the steps it still runs): no Workflow moves until it starts again."""
        if self.executor is not None:
            self.executor.stop(timeout=15)
            self.executor = None

    def stop(self) -> None:
        """Stop both (the executor kills the steps it still runs)."""
        self.stop_executor()
        if self.simulator is not None:
            self.simulator.stop()


@contextlib.contextmanager
def running_actors(
    kube: Kube, namespace: str, steps_kubeconfig: Path, events_log: Path, config: str = FAST_FLEET
) -> Iterator[Actors]:
    """`with running_actors(...) as actors:` the simulator and the executor for one test."""
    actors = Actors(kube, namespace, steps_kubeconfig, events_log, config).start()
    try:
        yield actors
    finally:
        actors.stop()


def watcher_settings(namespace: str, **changes: Any) -> Settings:
    """Watcher settings for tests: short graces and streams, text logs."""
    base: dict[str, Any] = {
        "namespaces": (namespace,),
        "engine": Engine.ARGO,
        "finalize_grace_seconds": 5.0,
        "deletion_grace_seconds": 10.0,
        "resync_seconds": 20.0,
        "watch_timeout_seconds": 20,
        "workers": 2,
    }
    base.update(changes)
    return Settings(**base)


@contextlib.contextmanager
def in_process_watcher(kube: Kube, namespace: str, **changes: Any) -> Iterator[Watcher]:
    """A started `Watcher` in this process; stopped (cleanly) at the end."""
    watcher = Watcher(kube, watcher_settings(namespace, **changes)).start()
    try:
        yield watcher
    finally:
        watcher.stop(timeout=15)


def watcher_idle(watcher: Watcher, timeout: float = 30.0) -> bool:
    """Wait until nothing is queued, delayed or being reconciled; False when `timeout` passes first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if watcher.queue.pending() == 0:
            return True
        time.sleep(0.05)
    return False


# --- the watcher as a process ------------------------------------------------------------------


def _die_with_parent() -> None:
    os.setsid()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


@dataclass
class WatcherProcess:
    """`progressive-sync watch` as a child process, to SIGKILL and start again."""

    kubeconfig: Path
    namespace: str
    log_path: Path
    extra_args: Sequence[str] = ()
    env: dict[str, str] | None = None  # None: this process's environment
    # The module run with `-m` and its arguments before `watch` (a wrapper such as
    # tests.support.watcher_pausepoint, which places a failpoint and runs the CLI).
    module: Sequence[str] = ("orchestrator.cli.main",)
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0
    _log_offsets: list[int] = field(default_factory=list)

    def start(self) -> WatcherProcess:
        """Start it (appending to the same log file)."""
        argv = [
            sys.executable,
            "-m",
            *self.module,
            "watch",
            f"--namespace={self.namespace}",
            f"--kubeconfig={self.kubeconfig}",
            "--engine=argo",
            "--log-level=DEBUG",
            "--log-format=json",
            "--finalize-grace=5",
            "--deletion-grace=10",
            "--resync-period=20",
            "--watch-timeout=20",
            *self.extra_args,
        ]
        self._log_offsets.append(self.log_path.stat().st_size if self.log_path.exists() else 0)
        # Its temporary folders (the local engine's executor makes one) beside its log, in the test's
        # tmp_path: a SIGKILLed watcher cannot remove them, and /tmp would keep them.
        scratch = self.log_path.with_name(f"{self.log_path.stem}.tmp")
        scratch.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                argv,
                stdout=log,
                stderr=log,
                stdin=subprocess.DEVNULL,
                env={**(self.env if self.env is not None else os.environ), "TMPDIR": str(scratch)},
                preexec_fn=_die_with_parent,  # noqa: PLW1509
            )
        self.starts += 1
        return self

    def kill(self) -> None:
        """SIGKILL: no clean-up of any kind."""
        assert self.process is not None
        self.process.kill()
        self.process.wait(timeout=30)

    def terminate(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait; returns the exit code."""
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=timeout)

    def alive(self) -> bool:
        """True while the process runs."""
        return self.process is not None and self.process.poll() is None

    def log_entries(self, *, current_run_only: bool = False) -> list[dict[str, Any]]:
        """The JSON log lines written so far (of the current run only, when asked)."""
        if not self.log_path.exists():
            return []
        offset = self._log_offsets[-1] if current_run_only and self._log_offsets else 0
        entries = []
        with self.log_path.open("rb") as handle:
            handle.seek(offset)
            for raw in handle:
                try:
                    entries.append(json.loads(raw))
                except ValueError:
                    continue  # a traceback line or a half-written line at a kill
        return entries

    def wait_logged(
        self, predicate: Callable[[dict[str, Any]], bool], *, timeout: float = 60.0, what: str = ""
    ) -> dict[str, Any]:
        """Wait until the current run logs a line matching `predicate`; returns it."""

        def found() -> dict[str, Any] | None:
            assert self.process is not None
            if self.process.poll() is not None:
                raise AssertionError(
                    f"the watcher exited with {self.process.returncode}; log: {self.log_path}"
                )
            return next((e for e in self.log_entries(current_run_only=True) if predicate(e)), None)

        return wait_for(found, timeout=timeout, interval=0.1, what=what or "a log line")

    def stop(self) -> None:
        """End it whatever its state (test teardown)."""
        if self.alive():
            self.kill()
