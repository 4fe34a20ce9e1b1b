"""The dev stack's Argo CD starts again on new ports when a component lost its port to another process
(orchestrator.devenv.argocd.ArgoCDStack._start_processes).

CI saw it: `free_port` found a port free, another test's stack took it in the seconds before the
ApplicationSet controller bound its webhook there, and the controller exited "listen tcp
127.0.0.1:29336: bind: address already in use". Here the component is a real process that tries to
bind a port this test holds, and fails as the Go programs do; the retry stops what the attempt
started and starts again.
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.devenv.argocd import COMPONENTS, START_ATTEMPTS, ArgoCDStack
from orchestrator.devenv.processes import Supervisor

# Binds the port, as a Go listener would, and exits with Go's message when it cannot.
COMPONENT = """
import socket, sys, time
sock = socket.socket()
try:
    sock.bind(("127.0.0.1", int(sys.argv[1])))
except OSError:
    print(f"listen tcp 127.0.0.1:{sys.argv[1]}: bind: address already in use", flush=True)
    sys.exit(1)
sock.listen()
time.sleep(3600)
"""


@pytest.fixture
def held_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


class Attempts:
    """`_start_processes_once` played by real processes: the first `taken` attempts bind a held port."""

    def __init__(self, supervisor: Supervisor, held: int, taken: int, other_error: bool = False) -> None:
        self.supervisor = supervisor
        self.held = held
        self.taken = taken
        self.other_error = other_error
        self.ports: list[int] = []

    def __call__(self) -> None:
        port = self.held if len(self.ports) < self.taken else 0
        self.ports.append(port)
        name = COMPONENTS[-1]
        argv = [sys.executable, "-c", COMPONENT, str(port)]
        if self.other_error:
            argv = [sys.executable, "-c", "import sys; print('flag provided but not defined'); sys.exit(2)"]
        self.supervisor.spawn(name, argv)
        ready = port == 0 and not self.other_error  # the failing ones never are: they exit
        self.supervisor.wait_until(name, lambda: ready, timeout=30, what="its port")


def stack_with(tmp_path: Path, attempts_of: object) -> ArgoCDStack:
    stack = object.__new__(ArgoCDStack)  # only the supervisor and the start are used here
    stack.supervisor = Supervisor(tmp_path)
    attempts = attempts_of(stack.supervisor)  # type: ignore[operator]
    stack._start_processes_once = attempts  # type: ignore[method-assign]
    return stack


@pytest.mark.parametrize(
    ("taken", "starts"),
    [
        pytest.param(1, 2, id="one-port-lost-then-new-ports"),
        pytest.param(START_ATTEMPTS - 1, START_ATTEMPTS, id="lost-until-the-last-attempt"),
    ],
)
def test_a_component_that_lost_its_port_starts_again_on_new_ports(
    tmp_path: Path, held_port: int, taken: int, starts: int
) -> None:
    attempts: list[Attempts] = []

    def make(supervisor: Supervisor) -> Attempts:
        attempts.append(Attempts(supervisor, held_port, taken))
        return attempts[0]

    stack = stack_with(tmp_path, make)
    try:
        stack._start_processes()
        assert attempts[0].ports == [held_port] * taken + [0]
        assert len(attempts[0].ports) == starts
        assert list(stack.supervisor.processes) == [COMPONENTS[-1]], "only the last attempt's runs"
        assert stack.supervisor.processes[COMPONENTS[-1]].poll() is None
    finally:
        stack.supervisor.stop(grace_seconds=5)


def test_a_port_lost_at_every_attempt_is_an_error_naming_it(tmp_path: Path, held_port: int) -> None:
    stack = stack_with(tmp_path, lambda supervisor: Attempts(supervisor, held_port, taken=START_ATTEMPTS))
    try:
        with pytest.raises(Exception, match="address already in use"):
            stack._start_processes()
    finally:
        stack.supervisor.stop(grace_seconds=5)


def test_another_failure_is_not_retried(tmp_path: Path, held_port: int) -> None:
    made: list[Attempts] = []

    def make(supervisor: Supervisor) -> Attempts:
        made.append(Attempts(supervisor, held_port, taken=0, other_error=True))
        return made[0]

    stack = stack_with(tmp_path, make)
    try:
        with pytest.raises(Exception, match="flag provided but not defined"):
            stack._start_processes()
        assert len(made[0].ports) == 1
    finally:
        stack.supervisor.stop(grace_seconds=5)
