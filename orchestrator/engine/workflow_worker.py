"""One Workflow's worker: the thread that reads the Workflow, decides with `operate`, starts and
kills its steps' processes and writes the status back, until the Workflow finishes, is deleted, or
the executor stops (the loop the `executor` module's docstring describes).

Caller: `LocalExecutor`, which starts one worker per unfinished Workflow and wakes it when the
watch shows a change. The worker reaches back to its executor only through `OwningExecutor`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from orchestrator.core.clock import Clock
from orchestrator.engine.executor_settings import ExecutorSettings
from orchestrator.engine.interface import PodLaunch, PodState
from orchestrator.engine.operator import operate
from orchestrator.engine.slots import StepSlots
from orchestrator.engine.step_process import StepProcess
from orchestrator.engine.warm_python import WarmLauncher
from orchestrator.kube.client import WORKFLOWS, Conflict, Kube, KubeError, NotFound

log = logging.getLogger(__name__)


class OwningExecutor(Protocol):
    """What a worker needs of the executor that started it: its adapter, settings, clock, stop
    signal, work dir, launcher and step slots, the mutexes, and being told the worker ended."""

    kube: Kube
    settings: ExecutorSettings
    clock: Clock
    stopping: threading.Event
    workdir: Path
    launcher: WarmLauncher | None
    slots: StepSlots

    def acquire_lock(self, key: str, uid: str, *, running: bool) -> bool:
        """Take the Workflow's mutex (True), or not yet (False)."""
        ...

    def release_lock(self, key: str, uid: str) -> None:
        """Give the mutex up."""
        ...

    def worker_done(self, worker: WorkflowWorker) -> None:
        """Forget this worker: its thread ended."""
        ...


class WorkflowWorker:
    """Runs one Workflow until it finishes, is deleted, or the executor stops."""

    def __init__(self, executor: OwningExecutor, namespace: str, name: str, uid: str) -> None:
        self.executor = executor
        self.namespace = namespace
        self.name = name
        self.uid = uid
        self.wakeup = threading.Event()
        self.processes: dict[str, StepProcess] = {}
        # Nodes whose launch waits for a free step slot (orchestrator/engine/slots.py), with the time
        # it was first asked for: they stay Pending until a slot is theirs, and the pass after that
        # launches them again (so only the node id is kept, not the launch).
        self.queued: dict[str, datetime] = {}
        # The newest copy of the Workflow this worker has, from its own last write or its last read,
        # and that copy's resourceVersion: the next pass starts from it instead of reading the object
        # again, unless the watch has shown a version other than this one since (`changed_elsewhere`),
        # as Argo's controller works from its informer's copy. A read that led to no write must
        # replace it too: a pass on the copy from before (say, from before someone suspended the
        # Workflow) would start steps the object no longer allows; the write's 409 would come after
        # the start (the processes start before the write, see the `executor` module).
        self.known_rv = ""
        self.known: dict[str, Any] | None = None
        self.changed_elsewhere = True
        self.lock_key: str | None = None
        self.thread = threading.Thread(target=self._run, name=f"workflow-{namespace}/{name}", daemon=True)
        self.done = False

    @property
    def key(self) -> tuple[str, str]:
        """(namespace, name) of its Workflow."""
        return (self.namespace, self.name)

    def wake(self) -> None:
        """Look at the Workflow again now (a step ended, a mutex came free, the executor stops)."""
        self.wakeup.set()

    def wake_changed(self) -> None:
        """The Workflow changed (or went away) other than by this worker's write: read it afresh."""
        self.changed_elsewhere = True
        self.wakeup.set()

    def _run(self) -> None:
        executor = self.executor
        wake_at: datetime | None = None
        failures = 0
        try:
            while not executor.stopping.is_set():
                try:
                    finished, wake_at = self._reconcile()
                    failures = 0
                except NotFound:
                    log.info("workflow %s/%s is gone; stopping its steps", self.namespace, self.name)
                    return
                except KubeError as exc:
                    failures += 1
                    backoffs = executor.settings.relist_backoffs
                    delay = backoffs[min(failures, len(backoffs)) - 1]
                    log.warning(
                        "workflow %s/%s: %s; trying again in %.1fs", self.namespace, self.name, exc, delay
                    )
                    executor.stopping.wait(delay)
                    continue
                if finished:
                    return
                timeout = executor.settings.resync_seconds
                if wake_at is not None:
                    until = (wake_at - executor.clock.now()).total_seconds()
                    timeout = max(0.05, min(timeout, until + 0.05))
                self.wakeup.wait(timeout)
                self.wakeup.clear()
        finally:
            for process in self.processes.values():
                process.kill(
                    "the local executor stopped" if executor.stopping.is_set() else "workflow finished"
                )
            self.queued.clear()
            executor.slots.forget(self.key)
            if self.lock_key:
                executor.release_lock(self.lock_key, self.uid)
            self.done = True
            executor.worker_done(self)

    def _reconcile(self) -> tuple[bool, datetime | None]:
        """Read, decide, start processes, write. Returns (finished, when to look again).

        A queued launch whose slot came free is handed back to the pass (its node is Pending with no
        process), which launches it again if the Workflow still wants it, on a fresh read like any
        start; a slot the pass did not use is given back."""
        slots = self.executor.slots
        granted = [node_id for node_id in self.queued if slots.holds(self.key, node_id)]
        for node_id in granted:
            del self.queued[node_id]
        try:
            return self._decide_and_write()
        finally:
            for node_id in granted:
                if node_id not in self.processes and node_id not in self.queued:
                    slots.release(self.key, node_id)

    def _decide_and_write(self) -> tuple[bool, datetime | None]:
        executor = self.executor
        kube = executor.kube
        attempts = executor.settings.status_write_attempts
        for attempt in range(1, attempts + 1):
            kept = self.known if attempt == 1 and not self.changed_elsewhere else None
            fresh = kept is None
            if kept is not None:
                workflow = kept
            else:
                self.changed_elsewhere = False
                workflow = kube.get(WORKFLOWS, self.namespace, self.name)
                self.known_rv = str(workflow.get("metadata", {}).get("resourceVersion", ""))
                self.known = workflow
            if workflow["metadata"].get("uid") != self.uid:
                raise NotFound(f"workflow {self.namespace}/{self.name} was replaced")
            pods = {node_id: process.state() for node_id, process in self.processes.items()}
            waiting = self._waiting_message()
            for node_id, since in self.queued.items():
                pods[node_id] = PodState(started_at=since, waiting=waiting)
            phase = (workflow.get("status") or {}).get("phase") or ""
            lock_held = self.lock_key is not None
            op = operate(
                workflow,
                now=executor.clock.now(),
                pods=pods,
                lock_held=lock_held,
                executor_id=executor.settings.executor_id,
            )
            if op.needs_lock and executor.acquire_lock(op.needs_lock, self.uid, running=phase == "Running"):
                self.lock_key = op.needs_lock
                continue  # decide again, now holding the lock
            if op.launches and not fresh:
                # A start is the one thing the write's 409 cannot take back: decide it on the object as
                # it is now (a GET is cheap beside the PUT), not on the copy kept from before, which
                # the watch may not yet have shown to be behind (a suspend made a moment ago).
                self.changed_elsewhere = True
                continue
            for node_id in op.kills:
                process = self.processes.get(node_id)
                if process is not None:
                    process.kill()
                if self.queued.pop(node_id, None) is not None:
                    executor.slots.release(self.key, node_id)
            # Before the write (see the `executor` module): a pass again after a conflict sees these running.
            self._start_all(op.launches)
            if op.status != (workflow.get("status") or {}):
                body = dict(workflow)
                body["status"] = op.status
                try:
                    written = kube.replace(WORKFLOWS, self.namespace, body)
                except Conflict:
                    self.known = None
                    log.debug(
                        "workflow %s/%s: conflict on attempt %d/%d",
                        self.namespace,
                        self.name,
                        attempt,
                        attempts,
                    )
                    continue
                self.known_rv = str(written.get("metadata", {}).get("resourceVersion", ""))
                self.known = written
            if op.finished:
                log.info(
                    "workflow %s/%s %s%s",
                    self.namespace,
                    self.name,
                    op.status.get("phase"),
                    f": {op.status['message']}" if op.status.get("message") else "",
                )
            return op.finished, op.wake_at
        raise KubeError(f"workflow {self.namespace}/{self.name}: status write conflicted {attempts} times")

    def _start_all(self, launches: Sequence[PodLaunch]) -> None:
        """Start a pass's steps together, as Argo creates a pass's pods: each start waits for its
        fork (~20-25 ms through the warm launcher, which forks the requests as they come), and one
        after another the last of a stage's 18 batches started 0.45 s after the first. Every start
        is tried; the first error is raised after all of them, as a start failing alone was.

        Slots are asked for first, one launch after another in the pass's order (a stage's targets'
        order), so the steps that wait for a slot are the last of the pass (orchestrator/engine/slots.py)."""
        admitted = [launch for launch in launches if self._admit(launch)]
        if len(admitted) <= 1:
            for launch in admitted:
                self._start(launch)
            return
        workers = max(1, min(len(admitted), self.executor.settings.parallel_starts))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="start") as pool:
            started = [pool.submit(self._start, launch) for launch in admitted]
        for future in started:
            future.result()

    def _waiting_message(self) -> str:
        """What a node waiting for a slot says (the same every pass: no status write for it)."""
        limit = self.executor.settings.max_step_processes
        return (
            f"waiting for a free step process: the local executor runs at most {limit} at once "
            "(--max-step-processes)"
        )

    def _admit(self, launch: PodLaunch) -> bool:
        """Whether the launch starts now: not while its process runs; else it takes a slot, or waits
        in line for one (queued, its node Pending saying why)."""
        existing = self.processes.get(launch.node_id)
        if existing is not None and existing.state().result is None:
            return False
        if self.executor.slots.request(self.key, launch.node_id, self.wake):
            self.queued.pop(launch.node_id, None)
            return True
        if launch.node_id not in self.queued:
            log.info(
                "workflow %s/%s: %s waits for a free step process (at most %d at once)",
                self.namespace,
                self.name,
                launch.node_name,
                self.executor.settings.max_step_processes,
            )
            self.queued[launch.node_id] = self.executor.clock.now()
        return False

    def _start(self, launch: PodLaunch) -> None:
        """Start the process of an admitted launch (its slot is given back if the start raises)."""
        try:
            node_dir = self.executor.workdir / self.namespace / self.name / launch.node_id
            node_dir.mkdir(parents=True, exist_ok=True)
            log.info(
                "workflow %s/%s: starting %s: %s",
                self.namespace,
                self.name,
                launch.node_name,
                " ".join(launch.argv),
            )
            self.processes[launch.node_id] = StepProcess(
                launch,
                node_dir,
                self.executor.settings,
                self.executor.clock,
                lambda: self._ended(launch.node_id),
                launcher=self.executor.launcher,
            )
        except BaseException:
            self.executor.slots.release(self.key, launch.node_id)
            raise

    def _ended(self, node_id: str) -> None:
        """A step's process ended: its slot is free; look at the Workflow again."""
        self.executor.slots.release(self.key, node_id)
        self.wake()
