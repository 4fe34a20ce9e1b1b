"""`Supervisor.restart`: a program killed and started again the same way (what the fault suite's
Argo CD controller restart uses), with real child processes (a shell that writes its argv)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from orchestrator.devenv.processes import ProcessError, Supervisor
from tests.support.wait import wait_for

# Writes its pid and an environment variable to the log, then waits to be killed.
PROGRAM = 'echo "pid $$ color $COLOR"; exec sleep 300'


@pytest.mark.parametrize(
    "kill_signal",
    [
        pytest.param(signal.SIGKILL, id="sigkill-a-crash"),
        pytest.param(signal.SIGTERM, id="sigterm-a-clean-stop"),
    ],
)
def test_restart_kills_the_program_and_starts_it_again_with_the_same_command_and_environment(
    tmp_path: Path, kill_signal: signal.Signals
) -> None:
    supervisor = Supervisor(tmp_path)
    try:
        first = supervisor.spawn(
            "prog", ["sh", "-c", PROGRAM], env={"COLOR": "blue", "PATH": "/usr/bin:/bin"}
        )
        wait_for(lambda: "color blue" in supervisor.log_tail("prog"), timeout=10, interval=0.05, what="start")
        second = supervisor.restart("prog", kill_signal=kill_signal)
        assert first.poll() is not None, "the first process is gone"
        assert second.pid != first.pid
        assert supervisor.pids == {"prog": second.pid}
        wait_for(
            lambda: supervisor.log_tail("prog").count("color blue") == 2,
            timeout=10,
            interval=0.05,
            what="the second start, logged after the first",
        )
        supervisor.check_alive()
    finally:
        supervisor.stop(grace_seconds=2)
    assert second.poll() is not None


def test_restart_of_a_program_it_did_not_start_says_so(tmp_path: Path) -> None:
    with pytest.raises(ProcessError, match="nothing to restart"):
        Supervisor(tmp_path).restart("argocd-application-controller")
