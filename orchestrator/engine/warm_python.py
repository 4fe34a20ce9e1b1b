"""A warm Python launcher (a "zygote"): imports modules once, then forks a process per request.

`python -m orchestrator.engine.warm_python MODULE...` imports each MODULE (a package with all its direct
submodules except `__main__`, so `steps` brings `steps.cli` and everything that imports: the
Kubernetes client, pydantic, click), answers `{"ready": true, "pid": ...}` and serves requests,
one JSON object per line on stdin, answers one per line on stdout:

- `{"id", "module", "args", "env", "cwd", "stdout_path", "stderr_path"}` -> `{"id", "pid"}` at once,
  then `{"id", "exit": code}` when the process ends (a signal gives minus its number, like
  `subprocess`); a bad request -> `{"id", "error"}`.
- End of stdin: the zygote exits; processes it started keep running, as subprocesses would.

Caller: the local executor, through `WarmLauncher` at the end of this module (its client side: it
starts one zygote, restarts a broken one a bounded number of times, and sends it the steps whose
container command is `python -m <a preloaded module> ...`; `step_process` asks it first). A step
paid ~1.2 s of imports per process; a fork of this process pays none. The launcher and its client
live together so the protocol's two ends are read, and changed, side by side.

Why running a step this way is the same as `python -m MODULE ARGS` with that env and cwd: the child
starts its own session (process group = pid, so the executor's killpg works), has stdin on
/dev/null and stdout/stderr on the given files, closes every other descriptor it inherited (the
zygote's pipes included), gets exactly the requested environment (cleared, not merged) and
`sys.argv`, runs the module as `__main__` with `runpy`, and exits with the code the interpreter
would give (`SystemExit` None/int/other, an uncaught exception prints its traceback and gives 1),
after atexit handlers and non-daemon threads, as the interpreter does. What is shared is only what
the imports did, so a module must not read its environment at import time for anything that
differs between steps (the executor starts the zygote with the environment common to all steps);
`PYTHON*` start-up variables and the hash seed are the zygote's. The zygote is single-threaded, so
forking it is safe.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import importlib
import json
import logging
import os
import pkgutil
import runpy
import select
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

from orchestrator.engine.executor_settings import ExecutorSettings

log = logging.getLogger(__name__)

MAX_REQUEST_BYTES = 1024 * 1024
POLL_SECONDS = 0.5  # a backstop: SIGCHLD wakes the loop at once through the wake-up pipe
MAX_OPEN_FDS = 1 << 20


# --- the launcher process -----------------------------------------------------------------------


class BadRequest(ValueError):
    """A request the zygote refuses; answered as {id, error}."""


def preload(modules: Sequence[str]) -> list[str]:
    """Import each module, and each direct submodule of a package (never its `__main__`)."""
    loaded: list[str] = []
    for name in modules:
        module = importlib.import_module(name)
        loaded.append(name)
        for info in pkgutil.iter_modules(getattr(module, "__path__", None) or []):
            if info.name != "__main__":
                importlib.import_module(f"{name}.{info.name}")
    return loaded


def decode_request(line: bytes) -> dict[str, Any]:
    """One request line as an object; raises BadRequest."""
    try:
        request = json.loads(line)
    except ValueError as exc:
        raise BadRequest(f"not JSON: {exc}") from exc
    if not isinstance(request, dict):
        raise BadRequest("a request is a JSON object")
    return request


def check_request(request: dict[str, Any]) -> dict[str, Any]:
    """Check a request's fields; raises BadRequest with a message saying what is wrong."""
    strings = ("module", "cwd", "stdout_path", "stderr_path")
    for key in strings:
        if not isinstance(request.get(key), str) or not request[key]:
            raise BadRequest(f"{key!r} must be a non-empty string")
    args = request.get("args")
    if not isinstance(args, list) or not all(isinstance(arg, str) for arg in args):
        raise BadRequest("'args' must be a list of strings")
    env = request.get("env")
    if not isinstance(env, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in env.items()
    ):
        raise BadRequest("'env' must be an object of strings")
    return request


def exit_code_of(exc: SystemExit) -> int:
    """The exit status the interpreter gives for an uncaught SystemExit (a message goes to stderr)."""
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def status_to_code(status: int) -> int:
    """A waitpid status as subprocess reports it: the exit code, or minus the signal number."""
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def run_child(request: Mapping[str, Any]) -> NoReturn:
    """In the forked child: become `python -m module args` with exactly the request's env and files."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.setsid()
        os.chdir(request["cwd"])
        null = os.open(os.devnull, os.O_RDONLY)
        out = os.open(request["stdout_path"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        err = os.open(request["stderr_path"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        for fd, target in ((null, 0), (out, 1), (err, 2)):
            os.dup2(fd, target)
        os.closerange(3, MAX_OPEN_FDS)  # the zygote's pipes and anything else it held
        os.environ.clear()
        os.environ.update(request["env"])
        # `python -m` puts the working directory first on sys.path.
        if sys.path:
            sys.path[0] = os.getcwd()
        sys.argv = [request["module"], *request["args"]]
        # `python -m` runs a plain module only as __main__, never under its own name: drop the
        # preloaded copy (what it imported stays warm). A package runs its __main__, never loaded.
        if not hasattr(sys.modules.get(request["module"]), "__path__"):
            sys.modules.pop(request["module"], None)
        try:
            runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exc:
            code = exit_code_of(exc)
        except BaseException:  # the interpreter's own top level: report it and exit 1
            traceback.print_exc()
            code = 1
        _finish_like_the_interpreter()
    except BaseException:  # never return into the zygote's loop from a child
        with contextlib.suppress(BaseException):  # stderr itself failed: only the exit code is left
            traceback.print_exc()
    finally:
        _flush_standard_streams()
        os._exit(code)


def _finish_like_the_interpreter() -> None:
    main = threading.main_thread()
    for thread in threading.enumerate():
        if thread is not main and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()


def _flush_standard_streams() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass


class Zygote:
    """The serving loop: read requests, fork, answer, reap."""

    def __init__(self, stdin_fd: int, stdout_fd: int) -> None:
        self.stdin_fd = stdin_fd
        self.stdout_fd = stdout_fd
        self.children: dict[int, str] = {}  # pid -> request id
        self.buffer = b""
        self.discarding = False  # inside a request line that was too long

    def answer(self, message: Mapping[str, Any]) -> None:
        """Write one answer line, whole (stdout is a pipe: no Python buffer in between)."""
        data = (json.dumps(message) + "\n").encode()
        while data:
            try:
                written = os.write(self.stdout_fd, data)
            except InterruptedError:
                continue
            data = data[written:]

    def serve(self) -> None:
        """Serve until stdin ends; SIGCHLD wakes the loop through a wake-up pipe."""
        wake_read, wake_write = os.pipe()
        os.set_blocking(wake_read, False)
        os.set_blocking(wake_write, False)
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)
        signal.set_wakeup_fd(wake_write, warn_on_full_buffer=False)
        try:
            while True:
                try:
                    readable, _, _ = select.select([self.stdin_fd, wake_read], [], [], POLL_SECONDS)
                except InterruptedError:
                    readable = []
                if wake_read in readable:
                    _drain(wake_read)
                self.reap()
                if self.stdin_fd in readable and not self.read_requests():
                    return
        finally:
            signal.set_wakeup_fd(-1)
            os.close(wake_read)
            os.close(wake_write)

    def read_requests(self) -> bool:
        """Read what stdin has and serve every complete line; False at end of input."""
        chunk = os.read(self.stdin_fd, 65536)
        if not chunk:
            return False
        self.buffer += chunk
        while True:
            line, newline, rest = self.buffer.partition(b"\n")
            if not newline:
                if len(self.buffer) > MAX_REQUEST_BYTES:
                    self.buffer = b""
                    if not self.discarding:
                        self.discarding = True
                        self.answer({"id": None, "error": f"request longer than {MAX_REQUEST_BYTES} bytes"})
                return True
            self.buffer = rest
            if self.discarding:
                self.discarding = False  # the end of the line that was too long
                continue
            if line.strip():
                self.handle(line)

    def handle(self, line: bytes) -> None:
        """Check one request, fork its process, answer its pid (or an error)."""
        request_id: Any = None
        try:
            if len(line) > MAX_REQUEST_BYTES:
                raise BadRequest(f"request longer than {MAX_REQUEST_BYTES} bytes")
            request = decode_request(line)
            request_id = request.get("id")
            check_request(request)
        except BadRequest as exc:
            self.answer({"id": request_id, "error": str(exc)})
            return
        _flush_standard_streams()
        try:
            pid = os.fork()
        except OSError as exc:
            self.answer({"id": request_id, "error": f"fork failed: {exc}"})
            return
        if pid == 0:
            run_child(request)
        self.children[pid] = request_id
        self.answer({"id": request_id, "pid": pid})

    def reap(self) -> None:
        """Answer the exit code of every child that ended."""
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            except InterruptedError:
                continue
            if pid == 0:
                return
            request_id = self.children.pop(pid, None)
            self.answer({"id": request_id, "exit": status_to_code(status)})


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 4096):
            pass
    except OSError as exc:
        if exc.errno not in (errno.EAGAIN, errno.EWOULDBLOCK):
            raise


def main(argv: Sequence[str]) -> int:
    """Preload the modules named in argv, announce readiness, serve until stdin ends."""
    modules = preload(argv)
    zygote = Zygote(sys.stdin.fileno(), sys.stdout.fileno())
    _flush_standard_streams()
    zygote.answer({"ready": True, "pid": os.getpid(), "modules": modules})
    zygote.serve()
    return 0


# --- the executor's side: starting steps through the launcher ------------------------------------


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


class _LauncherProcess:
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
        self._zygote: _LauncherProcess | None = None
        self._retired: list[_LauncherProcess] = []
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
            self._zygote = _LauncherProcess(argv, self._env, self._cwd)
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

    def _current(self) -> _LauncherProcess | None:
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

    def _retire_locked(self, zygote: _LauncherProcess) -> None:
        if self._zygote is zygote:
            self._zygote = None
        self._retired.append(zygote)

    def _broken(self, zygote: _LauncherProcess, reason: str) -> None:
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


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
