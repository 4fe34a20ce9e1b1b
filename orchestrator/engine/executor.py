"""The local executor: runs our Workflows on one machine, the way Argo Workflows would.

`LocalExecutor(kube, settings)` watches Workflow objects labelled `progressivesync.io/name`
(`orchestrator.kube.watchloop`: list, then watch, resume, re-list on 410 Gone), and runs each one
that is not finished in a worker thread: read the Workflow, decide with `workflow_engine.operate`,
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
them again (see workflow_engine). One executor per control plane: two would both run the same
nodes.

Mutexes (`spec.synchronization.mutexes`) are held here, in memory: a Workflow waits in phase
Pending while another Workflow of the same mutex runs. A Workflow already Running when the
executor starts takes its lock back first.

Every wait is bounded: watch streams time out, processes have a timeout, writes are retried a
fixed number of times, workers re-examine their Workflow at least every `resync_seconds`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from orchestrator.api.metadata import NAME_LABEL
from orchestrator.core.clock import Clock, SystemClock
from orchestrator.engine.interface import PodLaunch, PodResult, PodState
from orchestrator.engine.operator import operate
from orchestrator.engine.pods import OUTPUTS_DIR_ENV
from orchestrator.kube.client import WORKFLOWS, Conflict, Kube, KubeError, NotFound
from orchestrator.kube.watchloop import BackoffPolicy, Changed, Listed, WatchLoop, WatchLoopSettings
from orchestrator.workflows.phases import TERMINAL_WORKFLOW_PHASES

log = logging.getLogger(__name__)

SUMMARY_LIMIT = 300


def _default_executor_id() -> str:
    return f"local-executor-{socket.gethostname()}-{os.getpid()}"


@dataclass(frozen=True)
class ExecutorSettings:
    """How the local executor runs; built once by the caller and passed in."""

    # The kubeconfig every step gets (`PROGRESSIVE_SYNC_KUBECONFIG` and `KUBECONFIG`); None: none.
    kubeconfig: Path | None = None
    # Watch one namespace, or None for all.
    namespace: str | None = None
    # What `python`/`python3` at the start of a container command means here: containers run the
    # image's interpreter, locally it is this one (the virtualenv with `steps` installed).
    python: str = sys.executable
    # Where each node's directory (outputs, stdout, stderr) goes; None: a temporary directory.
    workdir: Path | None = None
    step_timeout_seconds: float = 3600.0
    kill_grace_seconds: float = 5.0
    resync_seconds: float = 5.0
    watch_timeout_seconds: int = 60
    status_write_attempts: int = 5
    relist_backoffs: tuple[float, ...] = (0.5, 1.0, 2.0, 5.0, 10.0)
    # How many of a pass's steps are started at once (each waits for its fork); 1: one after another.
    parallel_starts: int = 8
    # Host variables a step inherits (a container inherits none; these make Python work here).
    passthrough_env: tuple[str, ...] = (
        "PATH",
        "HOME",
        "LANG",
        "LC_ALL",
        "TMPDIR",
        "PYTHONPATH",
        "SYSTEMROOT",
    )
    # Extra variables for every step (after the container's own), e.g. a log level.
    extra_env: tuple[tuple[str, str], ...] = ()
    max_output_bytes: int = 256 * 1024
    executor_id: str = field(default_factory=_default_executor_id)
    # Modules a warm launcher (orchestrator/engine/warm_python.py) imports once: a step whose command is
    # `python -m <one of these> ...` is forked from it instead of paying the imports again.
    # Empty: every step is a plain subprocess.
    warm_modules: tuple[str, ...] = ("steps",)
    # How long a step waits for the launcher to finish its imports, or for it to answer a start.
    warm_ready_timeout_seconds: float = 60.0
    warm_answer_timeout_seconds: float = 10.0
    # A launcher that died or answered an error is started again at most this many times.
    warm_restarts: int = 3


# --- the warm launcher ---------------------------------------------------------------------------


class WarmProcess:
    """A step forked by the warm launcher: what `_Process` needs of a `subprocess.Popen`."""

    def __init__(self, request_id: int, pid: int, argv: list[str]) -> None:
        self.request_id = request_id
        self.pid = pid
        self.args = argv
        self.returncode: int | None = None
        # Set when the launcher died before telling how the step ended: the result is unknown.
        self.lost = ""
        self._ended = threading.Event()

    def ended(self, code: int) -> None:
        """The launcher reported the exit code."""
        self.returncode = code
        self._ended.set()

    def lose(self, reason: str) -> None:
        """The launcher is gone: nobody can report this process's exit, so end it now."""
        self.lost = reason
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        self.ended(-signal.SIGKILL)

    def poll(self) -> int | None:
        """The exit code, or None while it runs."""
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """The exit code; subprocess.TimeoutExpired after `timeout`."""
        if not self._ended.wait(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        assert self.returncode is not None
        return self.returncode


class _Request:
    """One request's waiter: the pid (or an error) arrives first, the exit code later."""

    def __init__(self, request_id: int, argv: list[str]) -> None:
        self.request_id = request_id
        self.argv = argv
        self.answered = threading.Event()
        self.error = ""
        self.process: WarmProcess | None = None


class _Zygote:
    """One running `orchestrator.engine.warm_python` process and the thread that reads its answers."""

    def __init__(self, argv: list[str], env: Mapping[str, str], cwd: Path) -> None:
        self.ready = threading.Event()
        self.dead = threading.Event()
        self._write_lock = threading.Lock()
        self._mutex = threading.Lock()
        self._requests: dict[int, _Request] = {}
        self._next_id = 0
        self.popen = subprocess.Popen(
            argv,
            env=dict(env),
            cwd=cwd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            # Ctrl-C on the executor's terminal must not reach it: the executor stops it.
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._read, name="warm-launcher-reader", daemon=True)
        self._reader.start()

    def request(self, message: dict[str, Any], argv: list[str]) -> _Request:
        with self._mutex:
            self._next_id += 1
            waiter = _Request(self._next_id, argv)
            self._requests[waiter.request_id] = waiter
        line = (json.dumps({"id": waiter.request_id, **message}) + "\n").encode()
        stdin = self.popen.stdin
        assert stdin is not None
        try:
            with self._write_lock:
                stdin.write(line)
                stdin.flush()
        except (OSError, ValueError) as exc:
            with self._mutex:
                self._requests.pop(waiter.request_id, None)
            waiter.error = f"cannot write to the warm launcher: {exc}"
            waiter.answered.set()
        return waiter

    def forget(self, waiter: _Request) -> None:
        with self._mutex:
            self._requests.pop(waiter.request_id, None)

    def _read(self) -> None:
        stdout = self.popen.stdout
        assert stdout is not None
        try:
            for line in stdout:
                try:
                    answer = json.loads(line)
                except ValueError:
                    log.warning("warm launcher: unreadable answer %r", line[:200])
                    continue
                self._dispatch(answer)
        except (OSError, ValueError) as exc:
            log.warning("warm launcher: reading its answers failed: %s", exc)
        finally:
            self.dead.set()
            self.ready.set()  # wake whoever waits for it; `dead` tells them why
            with self._mutex:
                waiters = list(self._requests.values())
                self._requests.clear()
            for waiter in waiters:
                if waiter.process is not None:
                    waiter.process.lose("the warm launcher died while the step ran; its result is unknown")
                else:
                    waiter.error = "the warm launcher died"
                    waiter.answered.set()

    def _dispatch(self, answer: Mapping[str, Any]) -> None:
        if answer.get("ready"):
            log.info("warm launcher %s ready: %s", answer.get("pid"), ", ".join(answer.get("modules", [])))
            self.ready.set()
            return
        with self._mutex:
            waiter = self._requests.get(answer.get("id", -1))
            if waiter is None:
                log.warning("warm launcher: answer for no request: %s", answer)
                return
            if "exit" in answer or "error" in answer:
                del self._requests[waiter.request_id]
        if "error" in answer:
            waiter.error = str(answer["error"])
            waiter.answered.set()
        elif "pid" in answer:
            waiter.process = WarmProcess(waiter.request_id, int(answer["pid"]), waiter.argv)
            waiter.answered.set()
        elif "exit" in answer and waiter.process is not None:
            waiter.process.ended(int(answer["exit"]))

    def stop(self, timeout: float) -> None:
        """End of input makes it exit (the steps it started keep running); kill it at the deadline."""
        with self._write_lock, contextlib.suppress(OSError, ValueError):
            if self.popen.stdin is not None:
                self.popen.stdin.close()
        try:
            self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            log.warning("warm launcher %d did not exit in %.1fs; killing it", self.popen.pid, timeout)
            self.popen.kill()
            self.popen.wait()
        self._reader.join(timeout)


class WarmLauncher:
    """Starts `python -m MODULE ...` steps by forking a process that already imported MODULE.

    Owned by the LocalExecutor: `start()` when it starts, `stop()` when it stops. `launch()`
    returns a WarmProcess, or None when the step should be started the plain way (not a preloaded
    module, or the launcher is not working; a broken launcher is started again, a bounded number of
    times).
    """

    def __init__(self, settings: ExecutorSettings, env: Mapping[str, str], cwd: Path) -> None:
        self.settings = settings
        self.modules = frozenset(settings.warm_modules)
        self._env = dict(env)
        self._cwd = cwd
        self._mutex = threading.Lock()
        self._zygote: _Zygote | None = None
        self._retired: list[_Zygote] = []
        self._starts = 0
        self._stopped = False

    def start(self) -> None:
        """Start the launcher process; its imports go on in the background."""
        with self._mutex:
            self._start_locked()

    def _start_locked(self) -> None:
        argv = [self.settings.python, "-m", "orchestrator.engine.warm_python", *sorted(self.modules)]
        self._starts += 1
        try:
            self._zygote = _Zygote(argv, self._env, self._cwd)
        except OSError as exc:
            log.warning("warm launcher: cannot start %s: %s; steps start the plain way", argv[0], exc)
            self._zygote = None

    def wait_ready(self, timeout: float) -> bool:
        """Wait (at most `timeout`) until the launcher finished its imports; False if it did not."""
        with self._mutex:
            zygote = self._zygote
        return zygote is not None and zygote.ready.wait(timeout) and not zygote.dead.is_set()

    def module_of(self, argv: list[str]) -> str | None:
        """The preloaded module `argv` (already resolved to our interpreter) runs, or None."""
        if len(argv) >= 3 and argv[0] == self.settings.python and argv[1] == "-m" and argv[2] in self.modules:
            return argv[2]
        return None

    def _current(self) -> _Zygote | None:
        """The working launcher, started again if it broke and restarts are left."""
        with self._mutex:
            zygote = self._zygote
            if self._stopped:
                return None
            if zygote is not None and not zygote.dead.is_set():
                return zygote
            if zygote is not None:
                self._retire_locked(zygote)
            if self._starts > self.settings.warm_restarts:
                return None
            log.warning(
                "warm launcher: starting it again (start %d of at most %d)",
                self._starts + 1,
                self.settings.warm_restarts + 1,
            )
            self._start_locked()
            return self._zygote

    def _retire_locked(self, zygote: _Zygote) -> None:
        if self._zygote is zygote:
            self._zygote = None
        self._retired.append(zygote)

    def _broken(self, zygote: _Zygote, reason: str) -> None:
        log.warning("warm launcher: %s; this step starts the plain way", reason)
        with self._mutex:
            if self._zygote is zygote:
                self._retire_locked(zygote)
                if self._starts <= self.settings.warm_restarts and not self._stopped:
                    log.warning(
                        "warm launcher: starting it again (start %d of at most %d)",
                        self._starts + 1,
                        self.settings.warm_restarts + 1,
                    )
                    self._start_locked()

    def launch(
        self, argv: list[str], env: Mapping[str, str], cwd: Path, stdout: Path, stderr: Path
    ) -> WarmProcess | None:
        """Fork the step from the launcher; None: start it the plain way."""
        module = self.module_of(argv)
        zygote = self._current() if module is not None else None
        if module is None or zygote is None:
            return None
        if not zygote.ready.wait(self.settings.warm_ready_timeout_seconds) or zygote.dead.is_set():
            self._broken(zygote, "not ready in time" if not zygote.dead.is_set() else "it exited")
            return None
        message = {
            "module": module,
            "args": argv[3:],
            "env": dict(env),
            "cwd": str(cwd),
            "stdout_path": str(stdout),
            "stderr_path": str(stderr),
        }
        waiter = zygote.request(message, argv)
        if not waiter.answered.wait(self.settings.warm_answer_timeout_seconds):
            zygote.forget(waiter)
            self._broken(zygote, f"no answer in {self.settings.warm_answer_timeout_seconds:.0f}s")
            return None
        if waiter.process is None:
            self._broken(zygote, waiter.error or "no process")
            return None
        return waiter.process

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the launcher process(es): close their input, wait until the deadline, then kill."""
        with self._mutex:
            self._stopped = True
            zygotes = [z for z in (self._zygote, *self._retired) if z is not None]
            self._zygote = None
            self._retired = []
        deadline = time.monotonic() + timeout
        for zygote in zygotes:
            zygote.stop(max(0.1, deadline - time.monotonic()))


# --- processes -----------------------------------------------------------------------------------


def common_environment(settings: ExecutorSettings) -> dict[str, str]:
    """What every step gets whatever its container says (the warm launcher starts with it)."""
    return step_environment(settings, (), None)


def step_environment(
    settings: ExecutorSettings, container_env: tuple[tuple[str, str], ...], outputs_dir: Path | None
) -> dict[str, str]:
    """A step's whole environment: host passthrough, the container's env, then ours on top."""
    env = {key: os.environ[key] for key in settings.passthrough_env if key in os.environ}
    env.update(dict(container_env))
    if outputs_dir is not None:
        env[OUTPUTS_DIR_ENV] = str(outputs_dir)
    if settings.kubeconfig is not None:
        env["PROGRESSIVE_SYNC_KUBECONFIG"] = str(settings.kubeconfig)
        env["KUBECONFIG"] = str(settings.kubeconfig)
    env.update(dict(settings.extra_env))
    return env


class _Process:
    """One Pod node's subprocess: started in its own process group, waited for by a thread."""

    def __init__(
        self,
        launch: PodLaunch,
        node_dir: Path,
        settings: ExecutorSettings,
        clock: Clock,
        notify: Any,
        *,
        launcher: WarmLauncher | None,
    ):
        self.launch = launch
        self.node_dir = node_dir
        self.settings = settings
        self.started_at: datetime = clock.now()
        self.result: PodResult | None = None
        self._notify = notify
        self._killed_reason = ""
        self._lock = threading.Lock()
        outputs_dir = node_dir / "outputs"
        shutil.rmtree(outputs_dir, ignore_errors=True)
        outputs_dir.mkdir(parents=True, exist_ok=True)
        self.outputs_dir = outputs_dir
        env = step_environment(settings, launch.env, outputs_dir)
        argv = list(launch.argv)
        if argv[0] in ("python", "python3"):
            argv[0] = settings.python
        self.stdout_path = node_dir / "stdout.log"
        self.stderr_path = node_dir / "stderr.log"
        self.popen: subprocess.Popen[bytes] | WarmProcess | None = None
        if launcher is not None:
            self.popen = launcher.launch(argv, env, node_dir, self.stdout_path, self.stderr_path)
        if self.popen is not None:
            threading.Thread(target=self._wait, name=f"pod-{launch.node_id}", daemon=True).start()
            return
        try:
            with self.stdout_path.open("wb") as out, self.stderr_path.open("wb") as err:
                self.popen = subprocess.Popen(
                    argv,
                    env=env,
                    cwd=node_dir,
                    stdout=out,
                    stderr=err,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
        except OSError as exc:
            self.result = PodResult(exit_code=127, error=f"could not start {argv[0]}: {exc}")
            notify()
            return
        threading.Thread(target=self._wait, name=f"pod-{launch.node_id}", daemon=True).start()

    def _wait(self) -> None:
        assert self.popen is not None
        try:
            code = self.popen.wait(timeout=self.settings.step_timeout_seconds)
        except subprocess.TimeoutExpired:
            self.kill(f"timed out after {self.settings.step_timeout_seconds:.0f}s")
            code = self.popen.wait()
        if isinstance(self.popen, WarmProcess) and self.popen.lost:
            self._killed_reason = self._killed_reason or self.popen.lost
        with self._lock:
            self.result = self._read_result(code)
        self._notify()

    def _read_result(self, code: int) -> PodResult:
        if self._killed_reason:
            return PodResult(exit_code=code, error=self._killed_reason)
        outputs: dict[str, str] = {}
        missing: list[str] = []
        for name, relative in self.launch.outputs:
            path = self.outputs_dir / relative
            try:
                data = path.read_bytes()[: self.settings.max_output_bytes]
            except OSError:
                missing.append(name)
                continue
            outputs[name] = data.decode("utf-8", errors="replace").rstrip("\n")
        return PodResult(
            exit_code=code,
            outputs=outputs,
            missing_outputs=tuple(missing) if code == 0 else (),
            summary=self._summary(),
        )

    def _summary(self) -> str:
        try:
            lines = self.stdout_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return lines[-1][:SUMMARY_LIMIT] if lines else ""

    def state(self) -> PodState:
        with self._lock:
            return PodState(started_at=self.started_at, result=self.result)

    def kill(self, reason: str = "killed by the local executor") -> None:
        """SIGTERM the process group, then SIGKILL after the grace period."""
        if self.popen is None or self.popen.poll() is not None:
            return
        self._killed_reason = self._killed_reason or reason
        try:
            os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout=self.settings.kill_grace_seconds)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


# --- one Workflow --------------------------------------------------------------------------------


class _Worker:
    """Runs one Workflow until it finishes, is deleted, or the executor stops."""

    def __init__(self, executor: LocalExecutor, namespace: str, name: str, uid: str) -> None:
        self.executor = executor
        self.namespace = namespace
        self.name = name
        self.uid = uid
        self.wakeup = threading.Event()
        self.processes: dict[str, _Process] = {}
        # The newest copy of the Workflow this worker has, from its own last write or its last read,
        # and that copy's resourceVersion: the next pass starts from it instead of reading the object
        # again, unless the watch has shown a version other than this one since (`changed_elsewhere`),
        # as Argo's controller works from its informer's copy. A read that led to no write must
        # replace it too: a pass on the copy from before (say, from before someone suspended the
        # Workflow) would start steps the object no longer allows; the write's 409 would come after
        # the start (the processes start before the write, see the module).
        self.known_rv = ""
        self.known: dict[str, Any] | None = None
        self.changed_elsewhere = True
        self.lock_key: str | None = None
        self.thread = threading.Thread(target=self._run, name=f"workflow-{namespace}/{name}", daemon=True)
        self.done = False

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    def wake(self) -> None:
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
            if self.lock_key:
                executor.release_lock(self.lock_key, self.uid)
            self.done = True
            executor.worker_done(self)

    def _reconcile(self) -> tuple[bool, datetime | None]:
        """Read, decide, start processes, write. Returns (finished, when to look again)."""
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
            # Before the write (see the module): a pass again after a conflict sees these running.
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
        is tried; the first error is raised after all of them, as a start failing alone was."""
        if len(launches) <= 1:
            for launch in launches:
                self._start(launch)
            return
        workers = max(1, min(len(launches), self.executor.settings.parallel_starts))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="start") as pool:
            started = [pool.submit(self._start, launch) for launch in launches]
        for future in started:
            future.result()

    def _start(self, launch: PodLaunch) -> None:
        existing = self.processes.get(launch.node_id)
        if existing is not None and existing.state().result is None:
            return
        node_dir = self.executor.workdir / self.namespace / self.name / launch.node_id
        node_dir.mkdir(parents=True, exist_ok=True)
        log.info(
            "workflow %s/%s: starting %s: %s",
            self.namespace,
            self.name,
            launch.node_name,
            " ".join(launch.argv),
        )
        self.processes[launch.node_id] = _Process(
            launch,
            node_dir,
            self.executor.settings,
            self.executor.clock,
            self.wake,
            launcher=self.executor.launcher,
        )


# --- the executor --------------------------------------------------------------------------------


class LocalExecutor:
    """Watches our Workflows and runs them; `start()`/`stop()`, or use it as a context manager."""

    def __init__(self, kube: Kube, settings: ExecutorSettings, *, clock: Clock | None = None) -> None:
        self.kube = kube
        self.settings = settings
        self.clock: Clock = clock or SystemClock()
        self.stopping = threading.Event()
        self._workers: dict[tuple[str, str], _Worker] = {}
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

    def worker_done(self, worker: _Worker) -> None:
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
            worker = _Worker(self, key[0], key[1], uid)
            self._workers[key] = worker
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
