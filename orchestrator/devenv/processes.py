"""Background processes of the dev stack: started in their own group, dying with their parent.

`Supervisor` starts each program with its output in `<workdir>/<name>.log`, in its own process
group (stopped as a whole), with `PR_SET_PDEATHSIG` so a killed parent leaves no orphans, and
stops them in reverse order. `restart(name)` kills one program's group (SIGKILL by default: a crash,
nothing flushed) and starts it again with the same command line, environment and log (appended), as
a pod's container restart would. `exited()` names each program that exited since it started
(how, and its log's fatal lines: `health`). `wait_until` polls a readiness check with a deadline
and fails early, with the log's tail, when the program exits while starting.

The kernel sends the death signal when the *thread* that started the child exits: start
processes from a long-lived thread (the CLI's and the tests' main thread).

Callers: `orchestrator.devenv.argocd` (redis and the three Argo CD components), `prometheus`,
`argorollouts`; `DevStack.health` gathers their `exited()`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.devenv.controlplane import die_with_parent
from orchestrator.devenv.health import DeadProgram, exited_programs


class ProcessError(RuntimeError):
    """A program of the stack did not start, or exited while starting; the message has its log."""


@dataclass
class Supervisor:
    """The programs one stack started; `stop()` ends them all (last started, first stopped)."""

    workdir: Path
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    # How each program was started (argv, env, executable), so `restart` starts it the same way.
    _commands: dict[str, tuple[list[str], dict[str, str] | None, str | None]] = field(
        default_factory=dict, repr=False
    )

    def log_path(self, name: str) -> Path:
        """Where `name`'s stdout and stderr go."""
        return self.workdir / f"{name}.log"

    def spawn(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        executable: str | os.PathLike[str] | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start `argv` (argv[0] as given, run from `executable` when set) in its own group."""
        if name in self.processes:
            raise ProcessError(f"{name} is already running")
        with self.log_path(name).open("ab") as log_file:
            process = subprocess.Popen(
                list(argv),
                executable=str(executable) if executable else None,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=dict(env) if env is not None else None,
                cwd=self.workdir,
                start_new_session=True,  # its own process group, stopped as a whole
                preexec_fn=die_with_parent,  # noqa: PLW1509 - see die_with_parent
                close_fds=True,
            )
        self.processes[name] = process
        self._commands[name] = (
            list(argv),
            dict(env) if env is not None else None,
            str(executable) if executable else None,
        )
        return process

    def restart(
        self,
        name: str,
        *,
        kill_signal: signal.Signals = signal.SIGKILL,
        grace_seconds: float = 10.0,
        env: Mapping[str, str] | None = None,
    ) -> subprocess.Popen[bytes]:
        """Send `kill_signal` to `name`'s group, wait until it is gone (SIGKILL after `grace_seconds`),
        then start it again as it was started (with `env` instead of its environment when given);
        the new process."""
        process = self.processes.get(name)
        if process is None:
            raise ProcessError(f"{name} is not running here: nothing to restart")
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, kill_signal)
        _stop_group(process, grace_seconds)
        del self.processes[name]
        argv, started_env, executable = self._commands[name]
        return self.spawn(name, argv, env=started_env if env is None else env, executable=executable)

    @property
    def pids(self) -> dict[str, int]:
        """Name -> process id (each the leader of its own group)."""
        return {name: process.pid for name, process in self.processes.items()}

    def check_alive(self) -> None:
        """ProcessError naming the first program that exited, with the tail of its log."""
        for name, process in self.processes.items():
            if process.poll() is not None:
                raise ProcessError(
                    f"{name} exited with code {process.returncode}; its log ({self.log_path(name)}) ends:\n"
                    f"{self.log_tail(name)}"
                )

    def exited(self) -> list[DeadProgram]:
        """Each program that exited since it started (with its log's telling lines)."""
        return exited_programs(
            (name, process, self.log_path(name)) for name, process in self.processes.items()
        )

    def log_tail(self, name: str, lines: int = 30) -> str:
        """The last lines of `name`'s log."""
        path = self.log_path(name)
        if not path.exists():
            return "(no log)"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def wait_until(self, name: str, ready: Callable[[], bool], *, timeout: float, what: str) -> None:
        """Poll `ready` until it is true; ProcessError after `timeout` or when a program exits."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_alive()
            if ready():
                return
            time.sleep(0.1)
        raise ProcessError(
            f"{name} not ready after {timeout:.0f}s ({what}); its log ends:\n{self.log_tail(name)}"
        )

    def stop_some(self, names: Sequence[str], grace_seconds: float = 10.0) -> None:
        """Stop the programs among `names` that run (last named first), as `stop` does."""
        for name in reversed(list(names)):
            if name in self.processes:
                _stop_group(self.processes.pop(name), grace_seconds)

    def stop(self, grace_seconds: float = 10.0) -> None:
        """SIGTERM each group (last started first), SIGKILL after `grace_seconds`."""
        for name in reversed(list(self.processes)):
            _stop_group(self.processes.pop(name), grace_seconds)


def _stop_group(process: subprocess.Popen[bytes], grace_seconds: float) -> None:
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=grace_seconds)
            return
        except subprocess.TimeoutExpired:
            pass
    # Also reap anything the leader left behind in its group (git children of the repo-server).
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=grace_seconds)


def http_ok(url: str, timeout: float = 2.0) -> bool:
    """True when GET `url` answers 200."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return int(response.status) == 200
    except OSError:
        return False


def redis_pings(port: int, timeout: float = 2.0) -> bool:
    """True when a redis server on 127.0.0.1:`port` answers PING with PONG."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False
