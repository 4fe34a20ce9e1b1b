"""`orchestrator.devenv.health`: which log lines say why a program died, how an exit reads, and
`exited()` (a Supervisor's, Argo's, the control plane's through `DevStack.health()`) naming a real
child process that died with a fatal line (no node, no cluster: programs started the way the stack
starts its own)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from orchestrator.devenv.argoworkflows import ArgoWorkflows
from orchestrator.devenv.controlplane import DevCluster, spawn_logged
from orchestrator.devenv.health import (
    LINE_CHARS,
    DeadProgram,
    exit_description,
    exited_program,
    read_tail,
    telling_lines,
)
from orchestrator.devenv.processes import Supervisor
from orchestrator.devenv.stack import DevStack, StackOptions
from tests.support.wait import wait_for

ARGO_FATAL = 'time="2026-12-04T23:10:01Z" level=fatal msg="Timed out waiting for caches to sync"'
ROUTINE = 'time="2026-12-04T23:10:00Z" level=info msg="Processing workflow" namespace=t-1 workflow=w'


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        pytest.param(
            [ROUTINE, ARGO_FATAL, "", "exit status 1"], (ARGO_FATAL,), id="argo-level-fatal-over-what-follows"
        ),
        pytest.param(
            [ROUTINE, "panic: runtime error: nil map", "", "goroutine 1 [running]:", "main.main()"],
            ("panic: runtime error: nil map",),
            id="go-panic-over-its-stack",
        ),
        pytest.param(
            [
                "I1205 10:00:00.000000  1 server.go:1] serving",
                "F1205 10:00:01.000000  1 server.go:2] etcd gone",
            ],
            ("F1205 10:00:01.000000  1 server.go:2] etcd gone",),
            id="klog-fatal",
        ),
        pytest.param(
            ['{"level":"info","msg":"ok"}', '{"level":"fatal","msg":"disk full"}'],
            ('{"level":"fatal","msg":"disk full"}',),
            id="json-fatal",
        ),
        pytest.param(
            ["fatal error: concurrent map writes", "", "goroutine 7 [running]:"],
            ("fatal error: concurrent map writes",),
            id="go-runtime-fatal-error",
        ),
        pytest.param(
            [f"level=fatal msg=first {n}" for n in range(5)],
            tuple(f"level=fatal msg=first {n}" for n in (2, 3, 4)),
            id="the-last-three-fatal-lines",
        ),
        pytest.param(
            ["one", "", "two", "three", "four", "  "],
            ("two", "three", "four"),
            id="no-fatal-line-the-last-three",
        ),
        pytest.param(
            ['level=info msg="a fatal-sounding word: panic averted"'],
            ('level=info msg="a fatal-sounding word: panic averted"',),
            id="panic-mid-line-is-not-a-panic",
        ),
        pytest.param([], (), id="empty-log"),
    ],
)
def test_the_telling_lines_are_the_fatal_ones_else_the_last(
    lines: list[str], expected: tuple[str, ...]
) -> None:
    assert telling_lines(lines) == expected


def test_a_telling_line_is_cut_to_a_readable_length() -> None:
    (line,) = telling_lines(["level=fatal msg=" + "x" * 5000])
    assert len(line) == LINE_CHARS
    assert line.startswith("level=fatal msg=x") and line.endswith("...")


@pytest.mark.parametrize(
    ("returncode", "expected"),
    [
        pytest.param(1, "exited (code 1)", id="fatal-exit"),
        pytest.param(0, "exited (code 0)", id="clean-exit-is-still-an-exit"),
        pytest.param(-9, "exited (killed by SIGKILL)", id="sigkill"),
        pytest.param(-250, "exited (killed by signal 250)", id="unknown-signal"),
    ],
)
def test_how_an_exit_reads(returncode: int, expected: str) -> None:
    assert exit_description(returncode) == expected


def test_a_dead_program_reads_as_one_line_and_in_full() -> None:
    dead = DeadProgram(
        "workflow-controller", "exited (code 1)", Path("/logs/wc.log"), (ROUTINE, ARGO_FATAL), key="pid 7"
    )
    assert dead.summary() == f"workflow-controller exited (code 1): {ARGO_FATAL}"
    assert dead.details().splitlines() == [
        f"workflow-controller exited (code 1): {ARGO_FATAL}",
        "    its log (/logs/wc.log) ends:",
        f"    | {ROUTINE}",
        f"    | {ARGO_FATAL}",
    ]
    assert DeadProgram("argo-server", "does not answer").details() == "argo-server does not answer"


def test_only_the_end_of_a_long_log_is_read(tmp_path: Path) -> None:
    log = tmp_path / "big.log"
    log.write_text("".join(f"line {n}\n" for n in range(100_000)))
    lines = read_tail(log, max_bytes=1000)
    assert lines[-1] == "line 99999"
    assert all(line.startswith("line ") for line in lines), "the first, cut, line is dropped"
    assert len(lines) < 100
    assert read_tail(tmp_path / "missing.log") == []


# A program that logs routine, then dies the way Argo's controller did in CI.
DIES_FATAL = f"echo '{ROUTINE}'; echo '{ARGO_FATAL}'; exit 1"


def test_a_process_that_died_with_a_fatal_line_is_named_with_its_code_and_that_line(tmp_path: Path) -> None:
    process = spawn_logged("workflow-controller", ["sh", "-c", DIES_FATAL], tmp_path)
    process.wait(timeout=10)
    dead = exited_program("workflow-controller", process, tmp_path / "workflow-controller.log")
    assert dead is not None
    assert dead.summary() == f"workflow-controller exited (code 1): {ARGO_FATAL}"
    assert dead.key == f"pid {process.pid}"


def test_a_running_process_is_not_dead(tmp_path: Path) -> None:
    process = spawn_logged("sleeper", ["sleep", "30"], tmp_path)
    try:
        assert exited_program("sleeper", process, tmp_path / "sleeper.log") is None
    finally:
        process.kill()
        process.wait(timeout=10)


def test_the_supervisor_names_the_program_that_exited_and_not_the_one_running(tmp_path: Path) -> None:
    supervisor = Supervisor(tmp_path)
    try:
        supervisor.spawn("prometheus", ["sleep", "300"])
        dying = supervisor.spawn("rollouts-controller", ["sh", "-c", DIES_FATAL])
        wait_for(lambda: dying.poll() is not None, timeout=10, interval=0.05, what="the controller to exit")
        assert [dead.summary() for dead in supervisor.exited()] == [
            f"rollouts-controller exited (code 1): {ARGO_FATAL}"
        ]
        supervisor.processes["prometheus"].send_signal(signal.SIGKILL)
        supervisor.processes["prometheus"].wait(timeout=10)
        assert [dead.how for dead in supervisor.exited()] == ["exited (killed by SIGKILL)", "exited (code 1)"]
    finally:
        supervisor.stop(grace_seconds=2)


def test_a_process_that_said_nothing_is_named_with_its_code_alone(tmp_path: Path) -> None:
    process = spawn_logged("etcd", ["sh", "-c", "exit 3"], tmp_path)
    process.wait(timeout=10)
    dead = exited_program("etcd", process, tmp_path / "etcd.log")
    assert dead is not None
    assert dead.summary() == "etcd exited (code 3)"


def test_argo_names_its_dead_controller_and_server_by_role(tmp_path: Path) -> None:
    # Only the processes and the folder matter to `exited()`: the rest is never read.
    argo = ArgoWorkflows(cluster=None, node=None, tools=None, executor_image=None, folder=tmp_path)  # type: ignore[arg-type]
    controller = spawn_logged("workflow-controller", ["sh", "-c", DIES_FATAL], tmp_path)
    server = spawn_logged("argo-server", ["sleep", "300"], tmp_path)
    argo._processes += [controller, server]
    argo._controller = controller
    try:
        controller.wait(timeout=10)
        assert [dead.summary() for dead in argo.exited()] == [
            f"workflow-controller exited (code 1): {ARGO_FATAL}"
        ]
    finally:
        server.kill()
        server.wait(timeout=10)
    assert [dead.name for dead in argo.exited()] == ["workflow-controller", "argo-server"]


def _program(folder: Path, name: str, script: str) -> str:
    """An executable named like a stack's binary (its log is named after it)."""
    path = folder / "bin" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(f"#!/bin/sh\n{script}\n")
    path.chmod(0o755)
    return str(path)


def test_the_stack_gathers_its_parts_dead_programs_and_an_attached_view_sees_none(tmp_path: Path) -> None:
    etcd = spawn_logged(
        "etcd",
        [_program(tmp_path, "etcd", "echo 'F1205 10:00:00.000000 1 x.go:1] disk gone'; exit 2")],
        tmp_path,
    )
    apiserver = spawn_logged(
        "kube-apiserver", [_program(tmp_path, "kube-apiserver", "exec sleep 300")], tmp_path
    )
    cluster = DevCluster(
        workdir=tmp_path, tools_dir=tmp_path, api_url="", etcd_url="", kubeconfig=tmp_path / "k"
    )
    cluster._processes += [etcd, apiserver]
    try:
        etcd.wait(timeout=10)
        stack = DevStack(options=StackOptions(), tools_dir=tmp_path, cluster=cluster)
        assert [dead.summary() for dead in stack.health()] == [
            "etcd exited (code 2): F1205 10:00:00.000000 1 x.go:1] disk gone"
        ]
        attached = DevStack(options=StackOptions(), tools_dir=tmp_path, cluster=cluster, attached=True)
        assert attached.health() == []
    finally:
        apiserver.kill()
        apiserver.wait(timeout=10)
