"""The warm launcher (orchestrator/engine/warm_python.py) as a real process, serving a tiny test module.

Real: the zygote process, its fork per request, files, process groups and signals. The module it
runs is tests/support/warm_child.py. Every wait has a deadline.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.wait import wait_for

REPO = Path(__file__).resolve().parents[2]
CHILD = "tests.support.warm_child"
DEADLINE = 20.0


class Zygote:
    """A zygote process and its answers, read by a thread into a queue."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.popen = subprocess.Popen(
            [sys.executable, "-m", "orchestrator.engine.warm_python", CHILD],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            start_new_session=True,
        )
        self.answers: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.eof = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()
        self.ready = self.next_answer()
        self._ids = 0

    def _read(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            self.answers.put(json.loads(line))
        self.eof.set()
        self.answers.put(None)

    def next_answer(self) -> dict[str, Any]:
        answer = self.answers.get(timeout=DEADLINE)
        assert answer is not None, "the zygote ended its output"
        return answer

    def send_line(self, line: bytes) -> None:
        assert self.popen.stdin is not None
        self.popen.stdin.write(line + b"\n")
        self.popen.stdin.flush()

    def start(self, *args: str, env: dict[str, str] | None = None, name: str = "step") -> dict[str, Any]:
        self._ids += 1
        request = {
            "id": self._ids,
            "module": CHILD,
            "args": list(args),
            "env": env if env is not None else {"PATH": os.environ.get("PATH", "")},
            "cwd": str(self.workdir),
            "stdout_path": str(self.workdir / f"{name}.out"),
            "stderr_path": str(self.workdir / f"{name}.err"),
        }
        self.send_line(json.dumps(request).encode())
        answer = self.next_answer()
        assert answer == {"id": self._ids, "pid": answer.get("pid")}, answer
        return answer

    def run(self, *args: str, env: dict[str, str] | None = None, name: str = "step") -> int:
        started = self.start(*args, env=env, name=name)
        ended = self.next_answer()
        assert ended["id"] == started["id"], ended
        return int(ended["exit"])

    def output(self, name: str = "step") -> tuple[str, str]:
        """The step's stdout and stderr so far ("" before the child opened them)."""
        out, err = self.workdir / f"{name}.out", self.workdir / f"{name}.err"
        return (out.read_text() if out.exists() else "", err.read_text() if err.exists() else "")

    def close(self) -> None:
        if self.popen.stdin is not None and not self.popen.stdin.closed:
            self.popen.stdin.close()
        try:
            self.popen.wait(timeout=DEADLINE)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()


@pytest.fixture
def zygote(tmp_path: Path) -> Iterator[Zygote]:
    running = Zygote(tmp_path)
    yield running
    running.close()


def test_it_announces_the_modules_it_preloaded(zygote: Zygote) -> None:
    assert zygote.ready == {"ready": True, "pid": zygote.popen.pid, "modules": [CHILD]}


@pytest.mark.parametrize(
    ("args", "code", "stderr_has"),
    [
        pytest.param(("exit", "0"), 0, "to stderr 0", id="exit-0"),
        pytest.param(("exit", "1"), 1, "to stderr 1", id="exit-1"),
        pytest.param(("exit", "75"), 75, "to stderr 75", id="exit-75-temporary"),
        pytest.param(("exit", "2"), 2, "to stderr 2", id="exit-2-usage"),
        pytest.param(("exit-none",), 0, "", id="sys-exit-none-is-0"),
        pytest.param(("exit-str", "bad option --x"), 1, "bad option --x\n", id="sys-exit-str-printed-and-1"),
        pytest.param(("raise", "boom"), 1, "RuntimeError: boom", id="uncaught-exception-traceback-and-1"),
    ],
)
def test_exit_codes_are_the_interpreters(
    zygote: Zygote, args: tuple[str, ...], code: int, stderr_has: str
) -> None:
    assert zygote.run(*args) == code
    _, stderr = zygote.output()
    assert stderr_has in stderr
    if args[0] == "raise":
        assert stderr.startswith("Traceback (most recent call last):")


def test_stdout_and_stderr_go_to_the_files(zygote: Zygote) -> None:
    assert zygote.run("exit", "75", name="files") == 75
    assert zygote.output("files") == ("exiting 75\n", "to stderr 75\n")


def test_env_is_replaced_not_merged_and_cwd_argv_and_descriptors_are_the_requests(
    zygote: Zygote, tmp_path: Path
) -> None:
    assert zygote.run("report", "x y", env={"ONLY": "this"}) == 0
    report = json.loads(zygote.output()[0])
    assert report["env"] == {"ONLY": "this"}
    assert report["cwd"] == str(tmp_path)
    assert report["argv"] == ["report", "x y"]
    assert report["fds"] == [], "the child inherited descriptors of the zygote"


def test_killing_the_process_group_gives_a_negative_code(zygote: Zygote) -> None:
    pid = zygote.start("sleep", "60", name="slow")["pid"]
    wait_for(lambda: zygote.output("slow")[0] == "sleeping\n", timeout=DEADLINE, what="the child runs")
    assert os.getpgid(pid) == pid  # its own session: the executor kills it by process group
    os.killpg(pid, signal.SIGTERM)
    ended = zygote.next_answer()
    assert ended == {"id": 1, "exit": -signal.SIGTERM}


def test_bad_requests_are_answered_with_errors_and_it_keeps_serving(zygote: Zygote) -> None:
    zygote.send_line(b"not json")
    assert "not JSON" in zygote.next_answer()["error"]
    zygote.send_line(json.dumps({"id": 7, "module": CHILD, "args": "exit 0"}).encode())
    assert zygote.next_answer()["id"] == 7
    zygote.send_line(b"x" * (2 * 1024 * 1024))
    assert "longer than" in zygote.next_answer()["error"]
    assert zygote.run("exit", "0") == 0


def test_end_of_input_stops_it_and_running_children_keep_running_without_its_pipes(zygote: Zygote) -> None:
    pid = zygote.start("sleep", "60", name="orphan")["pid"]
    wait_for(lambda: zygote.output("orphan")[0] == "sleeping\n", timeout=DEADLINE, what="the child runs")
    try:
        assert zygote.popen.stdin is not None
        zygote.popen.stdin.close()
        assert zygote.popen.wait(timeout=DEADLINE) == 0
        # Its stdout ends although the child still runs: the child did not keep the pipe open.
        assert zygote.eof.wait(DEADLINE)
        os.killpg(pid, 0)  # still there
    finally:
        os.killpg(pid, signal.SIGKILL)


def test_a_child_cannot_write_to_the_zygotes_output(zygote: Zygote) -> None:
    # The zygote's stdout pipe is not among the child's descriptors, whatever number it had.
    assert zygote.run("report", name="fds") == 0
    assert json.loads(zygote.output("fds")[0])["fds"] == []
    started = time.monotonic()
    assert zygote.run("exit", "0") == 0
    assert time.monotonic() - started < DEADLINE
