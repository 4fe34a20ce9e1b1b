"""The real-stack tests' watchdog (tests/support/stack_watch.py): the message a test fails with when
a program of the stack is dead, the restart budget, the report's note, and the guest's probes.

Nothing here needs the node: the decision is pure, `Watchdog` runs on a scripted view of the stack,
and the guest's HTTP and API probes go to a local HTTP server and to a closed port.
"""

from __future__ import annotations

import contextlib
import http.server
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from orchestrator.devenv.controlplane import free_port
from orchestrator.devenv.health import DeadProgram
from orchestrator.kube.client import Kube
from tests import conftest as root_conftest
from tests.support import realstack
from tests.support.stack_watch import (
    MAX_RESTARTS,
    NOTE_CHARS,
    REPORT_PROPERTY,
    RESTARTABLE,
    SharedPrograms,
    Verdict,
    Watchdog,
    decide,
    http_failure,
    note,
)

FATAL = 'level=fatal msg="Timed out waiting for caches to sync"'


def dead(
    name: str = "workflow-controller", *, key: str = "pid 7", lines: tuple[str, ...] = (FATAL,)
) -> DeadProgram:
    return DeadProgram(name, "exited (code 1)", Path(f"/logs/{name}.log"), lines, key=key)


CONTROLLER_IN_FULL = (
    f"the stack's workflow-controller exited (code 1): {FATAL}\n"
    "    its log (/logs/workflow-controller.log) ends:\n"
    f"    | {FATAL}"
)


@pytest.mark.parametrize(
    ("programs", "restarts_left", "told", "expected"),
    [
        pytest.param([], MAX_RESTARTS, frozenset(), Verdict(None), id="all-run-nothing-to-say"),
        pytest.param(
            [dead()],
            3,
            frozenset(),
            Verdict(
                CONTROLLER_IN_FULL
                + "\nstarting the workflow-controller again for the next tests (restart 1 of 3)",
                ("workflow-controller",),
            ),
            id="first-controller-death-in-full-and-restarted",
        ),
        pytest.param(
            [dead()],
            1,
            frozenset(),
            Verdict(
                CONTROLLER_IN_FULL
                + "\nstarting the workflow-controller again for the next tests (restart 3 of 3)",
                ("workflow-controller",),
            ),
            id="the-last-restart",
        ),
        pytest.param(
            [dead()],
            0,
            frozenset({("workflow-controller", "pid 7")}),
            Verdict(
                f"the stack's workflow-controller exited (code 1): {FATAL}\n"
                "not starting the workflow-controller again: this session's 3 restarts are used "
                "(every later realstack test fails here)"
            ),
            id="budget-spent-already-told-one-line",
        ),
        pytest.param(
            [dead()],
            0,
            frozenset({("workflow-controller", "pid 6")}),
            Verdict(
                CONTROLLER_IN_FULL
                + "\nnot starting the workflow-controller again: this session's 3 restarts "
                "are used (every later realstack test fails here)"
            ),
            id="a-new-death-of-the-same-program-in-full",
        ),
        pytest.param(
            [dead("etcd", lines=())],
            3,
            frozenset(),
            Verdict("the stack's etcd exited (code 1)\n    its log (/logs/etcd.log) ends:"),
            id="etcd-dead-fails-fast-no-restart",
        ),
        pytest.param(
            [dead("kubelet", lines=("F1205 boom",)), dead()],
            3,
            frozenset({("kubelet", "pid 7")}),
            Verdict(
                "the stack's kubelet exited (code 1): F1205 boom\n"
                + CONTROLLER_IN_FULL
                + "\nstarting the workflow-controller again for the next tests (restart 1 of 3)",
                ("workflow-controller",),
            ),
            id="two-dead-each-named-only-the-controller-restarted",
        ),
    ],
)
def test_the_verdict_names_each_dead_program_and_spends_the_restart_budget(
    programs: list[DeadProgram], restarts_left: int, told: frozenset[tuple[str, str]], expected: Verdict
) -> None:
    assert decide(programs, restartable=RESTARTABLE, restarts_left=restarts_left, told=told) == expected


def test_a_guest_restarts_nothing_and_says_nothing_of_restarts() -> None:
    verdict = decide([dead()], restartable=frozenset(), restarts_left=MAX_RESTARTS)
    assert verdict == Verdict(CONTROLLER_IN_FULL)


@pytest.mark.parametrize(
    ("programs", "expected"),
    [
        pytest.param([], "", id="nothing-dead-no-note"),
        pytest.param([dead()], f"stack: workflow-controller exited (code 1): {FATAL}", id="one"),
        pytest.param(
            [dead("etcd", lines=()), DeadProgram("argo-server", "does not answer http://x: refused")],
            "stack: etcd exited (code 1); argo-server does not answer http://x: refused",
            id="two-in-one-line",
        ),
    ],
)
def test_the_note_is_one_line(programs: list[DeadProgram], expected: str) -> None:
    assert note(programs) == expected


def test_a_long_note_is_cut() -> None:
    text = note([dead(lines=("level=fatal msg=" + "x" * 1000,))])
    assert len(text) == NOTE_CHARS and text.endswith("...")


@dataclass
class ScriptedStack:
    """The stack as the owner sees it, scripted: each check's dead programs, restarts recorded."""

    checks: list[list[DeadProgram]]
    restart_fails: bool = False
    restarted: list[str] = field(default_factory=list)
    restartable: frozenset[str] = RESTARTABLE

    def dead(self) -> list[DeadProgram]:
        return self.checks.pop(0)

    def restart(self, name: str) -> None:
        self.restarted.append(name)
        if self.restart_fails:
            raise RuntimeError("workflow-controller exited with 1:\nlevel=fatal msg=again")


def test_a_controller_that_keeps_dying_is_restarted_three_times_then_every_test_fails_fast() -> None:
    # Each death is a new process (a new key); between them the restarted controller ran a while.
    stack = ScriptedStack([[dead(key=f"pid {n}")] for n in range(1, 6)])
    watchdog = Watchdog()
    failures = [watchdog.check(stack)[0] for _ in range(5)]
    assert stack.restarted == ["workflow-controller"] * MAX_RESTARTS
    assert all(
        failure is not None and failure.startswith("the stack's workflow-controller") for failure in failures
    )
    spent = (
        "not starting the workflow-controller again: this session's 3 restarts are used "
        "(every later realstack test fails here)"
    )
    assert [failure.splitlines()[-1] for failure in failures if failure] == [
        "starting the workflow-controller again for the next tests (restart 1 of 3)",
        "starting the workflow-controller again for the next tests (restart 2 of 3)",
        "starting the workflow-controller again for the next tests (restart 3 of 3)",
        spent,
        spent,
    ]
    assert watchdog.restarts_left == 0


def test_only_the_first_test_to_see_a_death_carries_its_log_and_a_healthy_check_forgets_it() -> None:
    stack = ScriptedStack([[dead("etcd")], [dead("etcd")], [], [dead("etcd", key="pid 8")]])
    watchdog = Watchdog()
    first, second, healthy, again = (watchdog.check(stack) for _ in range(4))
    assert "its log" in (first[0] or "")
    assert second == (f"the stack's etcd exited (code 1): {FATAL}", f"stack: etcd exited (code 1): {FATAL}")
    assert healthy == (None, "")
    assert "its log" in (again[0] or "")
    assert stack.restarted == []


def test_a_restart_that_fails_is_said_in_the_tests_message_and_spends_the_budget() -> None:
    stack = ScriptedStack([[dead()]], restart_fails=True)
    watchdog = Watchdog()
    failure, seen = watchdog.check(stack)
    assert failure is not None
    assert failure.endswith(
        "starting the workflow-controller again failed: RuntimeError: workflow-controller exited with 1:\n"
        "level=fatal msg=again"
    )
    assert seen == f"stack: workflow-controller exited (code 1): {FATAL}"
    assert watchdog.restarts_left == MAX_RESTARTS - 1


# --- the guest's probes -------------------------------------------------------------------------------


class _Answers(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/healthz" else 503)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def http_server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Answers)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_an_http_probe_says_what_went_wrong() -> None:
    with http_server() as url:
        assert http_failure(f"{url}/healthz") is None
        assert http_failure(f"{url}/api/v1/version") == f"answers {url}/api/v1/version with HTTP 503"
    closed = f"http://127.0.0.1:{free_port()}/healthz"
    failure = http_failure(closed, timeout=1.0)
    assert failure is not None and failure.startswith(f"does not answer {closed}: ")


def test_the_guest_names_the_api_server_and_the_argo_server_when_they_do_not_answer(tmp_path: Path) -> None:
    port = free_port()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
                "users": [{"name": "u", "user": {}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    (tmp_path / "kube-apiserver.log").write_text(
        "I1205 10:00:00.000000 1 a.go:1] serving\nF1205 10:00:01.000000 1 a.go:2] etcd gone\n"
    )
    kube = Kube.from_kubeconfig(str(kubeconfig))
    try:
        programs = SharedPrograms(
            kube, f"http://127.0.0.1:{port}", control_plane_logs=tmp_path, confirm_seconds=0.0
        ).dead()
    finally:
        kube.close()
    by_name = {program.name: program for program in programs}
    assert by_name["argo-server"].how.startswith(f"does not answer http://127.0.0.1:{port}/api/v1/version")
    assert by_name["kube-apiserver"].how.startswith("does not answer a read of node progressive-sync-node")
    assert by_name["kube-apiserver"].lines == ("F1205 10:00:01.000000 1 a.go:2] etcd gone",)


# --- the hooks' glue (tests/support/realstack.py, tests/conftest.py) --------------------------------


@dataclass
class FakeItem:
    """What the glue reads of a collected realstack test."""

    nodeid: str = "tests/realstack/test_x.py::test_x"
    config: object = None
    stash: pytest.Stash = field(default_factory=pytest.Stash)

    def get_closest_marker(self, name: str) -> object:
        return "realstack" if name == "realstack" else None


@dataclass
class FakeSession:
    stack: ScriptedStack
    watchdog: Watchdog = field(default_factory=Watchdog)

    def programs(self) -> ScriptedStack:
        return self.stack


def test_a_dead_program_found_before_a_test_fails_its_setup_and_notes_its_report(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stack = ScriptedStack([[dead()]])
    monkeypatch.setitem(realstack._session, "current", FakeSession(stack))
    item = FakeItem()
    realstack.watch(item)  # type: ignore[arg-type]
    assert stack.restarted == ["workflow-controller"]
    with pytest.raises(pytest.fail.Exception, match=r"^the stack's workflow-controller exited \(code 1\)"):
        realstack.fail_if_unhealthy(item)  # type: ignore[arg-type]
    assert realstack.health_note(item) == f"stack: workflow-controller exited (code 1): {FATAL}"  # type: ignore[arg-type]


def test_a_test_that_failed_while_the_stack_died_is_noted_after_one_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stack = ScriptedStack([[], [dead()]])  # all ran before the test; dead once it failed
    monkeypatch.setitem(realstack._session, "current", FakeSession(stack))
    item = FakeItem()
    realstack.watch(item)  # type: ignore[arg-type]
    realstack.fail_if_unhealthy(item)  # type: ignore[arg-type]
    note_of_call = realstack.health_note(item)  # type: ignore[arg-type]
    # The teardown's report asks again: no third check.
    note_of_teardown = realstack.health_note(item)  # type: ignore[arg-type]
    assert note_of_call == note_of_teardown == f"stack: workflow-controller exited (code 1): {FATAL}"
    assert stack.checks == []


@dataclass
class Reporter:
    lines: list[str] = field(default_factory=list)

    def write_line(self, line: str) -> None:
        self.lines.append(line)


def test_the_failed_now_line_carries_the_stack_note(monkeypatch: pytest.MonkeyPatch) -> None:
    reporter = Reporter()
    config = SimpleNamespace(pluginmanager=SimpleNamespace(get_plugin=lambda name: reporter))
    monkeypatch.setitem(root_conftest._printer, "config", config)
    report = SimpleNamespace(
        nodeid="tests/realstack/test_x.py::test_x",
        when="call",
        duration=300.0,
        longreprtext="E   AssertionError: timed out after 300s; last value: None",
        user_properties=[(REPORT_PROPERTY, f"stack: workflow-controller exited (code 1): {FATAL}")],
    )
    root_conftest._say_failure_now(report)  # type: ignore[arg-type]
    assert reporter.lines[-1] == (
        "FAILED NOW tests/realstack/test_x.py::test_x [call, 300s, main] "
        "AssertionError: timed out after 300s; last value: None "
        f"[stack: workflow-controller exited (code 1): {FATAL}]"
    )


@pytest.mark.parametrize(
    ("answers", "dead"),
    [
        pytest.param([False, True], False, id="a-blip-then-an-answer-is-alive"),
        pytest.param([False, False, False, False], True, id="failing-all-along-is-dead"),
    ],
)
def test_the_guest_counts_a_program_dead_only_when_its_probe_keeps_failing(
    monkeypatch: pytest.MonkeyPatch, answers: list[bool], dead: bool
) -> None:
    """A slow answer on a busy machine, or a node NotReady for a moment, fails no test: a failed
    probe is asked again within `confirm_seconds` (the pause between asks made instant here)."""
    monkeypatch.setattr("tests.support.stack_watch.CONFIRM_INTERVAL_SECONDS", 0.0)
    lost = DeadProgram("workflow-controller", "does not answer http://127.0.0.1:1/healthz: refused")
    asked: list[bool] = []

    def probe(self: SharedPrograms) -> list[DeadProgram]:
        ok = answers[min(len(asked), len(answers) - 1)]
        asked.append(ok)
        return [] if ok else [lost]

    monkeypatch.setattr(SharedPrograms, "_probe", probe)
    programs = SharedPrograms(None, "http://127.0.0.1:1", confirm_seconds=0.05)  # type: ignore[arg-type]
    assert (programs.dead() == [lost]) is dead
    assert len(asked) >= 2
