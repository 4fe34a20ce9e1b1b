"""The local executor: runs our Workflows on one machine, the way Argo Workflows would.

`LocalExecutor(kube, settings)` watches Workflow objects labelled `progressivesync.io/name`
(`orchestrator.kube.watchloop`: list, then watch, resume, re-list on 410 Gone), and runs each one
that is not finished in a worker thread: read the Workflow, decide with `operator.operate`,
start the processes the decision asks for, then write the status back (PUT with the resourceVersion
it read, since the Workflow CRD has no status subresource; on a conflict read again and decide
again, a bounded number of times). Starting first is what Argo's operator does (it creates a pass's
pods during the pass and persists the Workflow at its end), and it keeps the write off the path
from one step's end to the next step's start. A pass that would start processes decides on a fresh
read (a pass that starts nothing may work from the copy the worker kept), so a suspend or stop
made before the read is always seen before a start. A node is its process's key (the node id is a
hash of its name), so the pass after a lost write finds the process running, or finished, and
never starts it twice. Each Pod node runs the container's command and args as a subprocess
with the container's environment, plus `PROGRESSIVE_SYNC_KUBECONFIG`/`KUBECONFIG` for the control
plane named in the settings and `PROGRESSIVE_SYNC_OUTPUTS_DIR` pointing at the node's own directory,
from which its output parameters are read.

Started by `progressive-sync executor` or in-process by the watcher and the tests
(`with LocalExecutor(...):` or `start()`/`stop()`). Stopping kills the processes it started
(their process groups) and leaves their nodes Running in the Workflow; the next executor runs
them again (see `operator`). One executor per control plane: two would both run the same
nodes.

Mutexes (`spec.synchronization.mutexes`) are held here, in memory: a Workflow waits in phase
Pending while another Workflow of the same mutex runs. A Workflow already Running when the
executor starts takes its lock back first.

Every wait is bounded: watch streams time out, processes have a timeout, writes are retried a
fixed number of times, workers re-examine their Workflow at least every `resync_seconds`.

This module is the watch, the workers' registry and the mutexes; its parts, one job each:
`executor_settings` (how it runs), `workflow_worker` (one Workflow's read, decide, start, write
loop), `step_process` (one step's process and result) and, in `warm_python`, `WarmLauncher` (starting
`python -m steps ...` from a launcher that imported the steps once).
"""

from __future__ import annotations

import logging
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from orchestrator.api.metadata import NAME_LABEL
from orchestrator.core.clock import Clock, SystemClock
from orchestrator.engine.executor_settings import ExecutorSettings
from orchestrator.engine.slots import StepSlots
from orchestrator.engine.step_process import common_environment
from orchestrator.engine.warm_python import WarmLauncher
from orchestrator.engine.workflow_worker import WorkflowWorker
from orchestrator.kube.client import WORKFLOWS, Kube
from orchestrator.kube.watchloop import BackoffPolicy, Changed, Listed, WatchLoop, WatchLoopSettings
from orchestrator.workflows.phases import TERMINAL_WORKFLOW_PHASES

log = logging.getLogger(__name__)


class LocalExecutor:
    """Watches our Workflows and runs them; `start()`/`stop()`, or use it as a context manager."""

    def __init__(self, kube: Kube, settings: ExecutorSettings, *, clock: Clock | None = None) -> None:
        self.kube = kube
        self.settings = settings
        self.clock: Clock = clock or SystemClock()
        self.stopping = threading.Event()
        self._workers: dict[tuple[str, str], WorkflowWorker] = {}
        self._locks: dict[str, str] = {}
        self._mutex = threading.Lock()
        self._watch_thread: threading.Thread | None = None
        self._tempdir: tempfile.TemporaryDirectory[str] | None = None
        if settings.workdir is None:
            self._tempdir = tempfile.TemporaryDirectory(prefix="progressive-sync-executor-")
            self.workdir = Path(self._tempdir.name)
        else:
            self.workdir = settings.workdir
            self.workdir.mkdir(parents=True, exist_ok=True)
        self.slots = StepSlots(settings.max_step_processes)
        self.launcher: WarmLauncher | None = None
        if settings.warm_modules:
            self.launcher = WarmLauncher(settings, common_environment(settings), self.workdir)
        self._close_watch: Any = None

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> LocalExecutor:
        """Start watching in a background thread; returns self once steps can start at full speed.

        With a warm launcher that is when it finished its imports (at most
        `warm_ready_timeout_seconds`; the watch runs meanwhile): a step launched before then waits
        for them anyway, so a rollout created the moment its watcher started paid ~1-3 s of the
        launcher's start-up in its first step (bench_scale part 4 measured 2.6 s at load ~13).
        """
        if self._watch_thread is not None:
            raise RuntimeError("the executor is already started")
        if self.launcher is not None:
            self.launcher.start()
        self._watch_thread = threading.Thread(target=self._watch_loop, name="executor-watch", daemon=True)
        self._watch_thread.start()
        if self.launcher is not None and not self.launcher.wait_ready(
            self.settings.warm_ready_timeout_seconds
        ):
            log.warning("warm launcher: not ready at start; steps wait for it or start the plain way")
        return self

    def stop(self, timeout: float = 30.0) -> None:
        """Stop watching, kill the steps it runs, wait (bounded) for the workers to end."""
        self.stopping.set()
        close_watch = self._close_watch
        if close_watch is not None:
            close_watch()  # a clean stop must not wait for the next event or the stream's timeout
        with self._mutex:
            workers = list(self._workers.values())
        for worker in workers:
            worker.wake()
        deadline = time.monotonic() + timeout
        for worker in workers:
            worker.thread.join(max(0.0, deadline - time.monotonic()))
        if self._watch_thread is not None:
            # Its stream was closed above; it is a daemon thread in any case.
            self._watch_thread.join(max(0.0, min(2.0, deadline - time.monotonic())))
        if self.launcher is not None:
            # After the workers: they killed their steps, whose exits the launcher still reports.
            self.launcher.stop(max(1.0, min(5.0, deadline - time.monotonic())))
        if self._tempdir is not None:
            self._tempdir.cleanup()
            self._tempdir = None

    def __enter__(self) -> LocalExecutor:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def run_until(self, stop: threading.Event) -> None:
        """Run in the foreground until `stop` is set (the CLI's loop)."""
        self.start()
        try:
            while not stop.wait(1.0):
                pass
        finally:
            self.stop()

    # -- locks (spec.synchronization.mutexes) ------------------------------------------------

    def acquire_lock(self, key: str, uid: str, *, running: bool) -> bool:
        """Take the mutex for a Workflow; a Workflow already Running takes it back after a restart."""
        with self._mutex:
            holder = self._locks.get(key)
            if holder is None or holder == uid:
                self._locks[key] = uid
                return True
            return running  # already running before this executor started: let it finish

    def release_lock(self, key: str, uid: str) -> None:
        """Give the mutex up and wake every worker (one of them may be waiting for it)."""
        with self._mutex:
            if self._locks.get(key) == uid:
                del self._locks[key]
            workers = list(self._workers.values())
        for worker in workers:
            worker.wake()

    # -- watching --------------------------------------------------------------------------

    def worker_done(self, worker: WorkflowWorker) -> None:
        """Forget a worker whose thread ended."""
        with self._mutex:
            if self._workers.get(worker.key) is worker:
                del self._workers[worker.key]

    def observe(self, workflow: Mapping[str, Any]) -> None:
        """A Workflow was listed or changed: wake its worker, or start one if it is not finished."""
        meta = workflow.get("metadata") or {}
        key = (str(meta.get("namespace", "")), str(meta.get("name", "")))
        uid = str(meta.get("uid", ""))
        phase = (workflow.get("status") or {}).get("phase") or ""
        with self._mutex:
            if self.stopping.is_set():
                return
            worker = self._workers.get(key)
            if worker is not None and worker.uid == uid and not worker.done:
                if str(meta.get("resourceVersion", "")) != worker.known_rv:
                    worker.wake_changed()
                return
            if phase in TERMINAL_WORKFLOW_PHASES:
                return
            worker = WorkflowWorker(self, key[0], key[1], uid)
            self._workers[key] = worker
            # Started before the lock is let go: `stop` joins every worker it finds registered, and
            # one registered but not yet started (the watch thread between the two) made its join
            # raise "cannot join thread before it is started" (CI on c83e4be). Its thread takes the
            # lock only later (`worker_done`, `release_lock`), so starting it here cannot deadlock.
            worker.thread.start()

    def forget(self, workflow: Mapping[str, Any]) -> None:
        """A Workflow was deleted: its worker finds out on its next read and stops."""
        meta = workflow.get("metadata") or {}
        with self._mutex:
            worker = self._workers.get((str(meta.get("namespace", "")), str(meta.get("name", ""))))
        if worker is not None:
            worker.wake_changed()

    def _watch_loop(self) -> None:
        settings = self.settings
        loop = WatchLoop(
            self.kube,
            WORKFLOWS,
            settings.namespace,
            settings=WatchLoopSettings(
                watch_timeout_seconds=settings.watch_timeout_seconds,
                backoff=BackoffPolicy(delays=settings.relist_backoffs),  # never gives up
            ),
            label_selector=NAME_LABEL,
            name="executor workflows",
        )
        self._close_watch = loop.close_stream  # a clean stop must not wait for the stream's end
        for step in loop.run(self.stopping):
            if isinstance(step, Listed):
                for item in step.items:
                    self.observe(item)
            elif isinstance(step, Changed) and step.event.type != "BOOKMARK":
                if step.event.type == "DELETED":
                    self.forget(step.event.object)
                else:
                    self.observe(step.event.object)
