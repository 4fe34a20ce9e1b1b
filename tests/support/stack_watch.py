"""The real-stack tests' watchdog: before each realstack test, is every program of the stack running?

A program of the shared stack that dies (in CI the Argo workflow-controller's `level=fatal`) would
otherwise leave every later realstack test waiting out its own timeout with nothing said. So before
each one (tests/conftest.py `pytest_runtest_protocol`, through tests/support/realstack.py `watch`)
the worker checks the stack, and a test that finds a program dead fails at its setup naming the
program, how it went and the log line it died with. The first test to see a death carries the log's
telling lines; the later ones say it in a line. The owner starts a dead workflow-controller again
at that boundary (at most MAX_RESTARTS times a session), so one crash costs one test; any other dead
program stays dead, and every later test fails fast. A failing realstack test's report carries a
one-line note of what is dead (`note`), for the FAILED NOW line.

What is real: the owner's worker asks its `DevStack`'s processes (`DevStack.health`, `OwnedPrograms`).
The guest's worker cannot see them; it probes what it can, each with PROBE_SECONDS to answer
(`SharedPrograms`): the workflow-controller's health endpoint, the Argo Server's version, the node
through the API server (Ready; a failed read means kube-apiserver or etcd is gone), and reads the
telling lines from the program's log (the same machine: `Published` names the folders).

The decision (`decide`: the message, what to restart, the budget) and the note are pure; `Watchdog`
holds a session's budget and what it already told, and runs one check on a `StackPrograms`.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from orchestrator.devenv.argoworkflows import HEALTHZ_PORT
from orchestrator.devenv.health import DeadProgram, answered
from orchestrator.devenv.node import NODE_NAME, NODES, node_is_ready
from orchestrator.devenv.stack import DevStack
from orchestrator.kube.client import Kube, KubeError, KubeSettings

WORKFLOW_CONTROLLER = "workflow-controller"
# What the owner starts again when it died (ArgoWorkflows.start_controller): the programs whose
# death a restart undoes. Others (the API server, etcd, the node) hold state a restart would lose
# or need more than a restart; those fail fast.
RESTARTABLE = frozenset({WORKFLOW_CONTROLLER})
# Restarts a session may spend: a controller that keeps dying is not the tests' fault to hide.
MAX_RESTARTS = 3
# How long a restarted controller has to answer its health endpoint.
RESTART_SECONDS = 90.0
# How long each of the guest's probes may take, and how long a failed probe is asked again before
# what it probes counts as dead (SharedPrograms.dead).
PROBE_SECONDS = 3.0
CONFIRM_SECONDS = 30.0
CONFIRM_INTERVAL_SECONDS = 2.0
# The note's length in the FAILED NOW line, and the report's user property that carries it.
NOTE_CHARS = 300
REPORT_PROPERTY = "stack_health"


@dataclass(frozen=True)
class Verdict:
    """What one check found: the message the test fails with (None: all run), what to restart."""

    failure: str | None
    restart: tuple[str, ...] = ()


def decide(
    dead: Sequence[DeadProgram],
    *,
    restartable: frozenset[str],
    restarts_left: int,
    told: frozenset[tuple[str, str]] = frozenset(),
) -> Verdict:
    """The verdict on the programs found dead: a message naming each (in full the first time,
    in a line once `told` holds its (name, key)), and the restartable ones to start again while
    `restarts_left` lasts."""
    if not dead:
        return Verdict(None)
    lines = [
        "the stack's " + (program.summary() if (program.name, program.key) in told else program.details())
        for program in dead
    ]
    restart: list[str] = []
    for name in dict.fromkeys(program.name for program in dead if program.name in restartable):
        if len(restart) < restarts_left:
            restart.append(name)
            used = MAX_RESTARTS - restarts_left + len(restart)
            lines.append(f"starting the {name} again for the next tests (restart {used} of {MAX_RESTARTS})")
        else:
            lines.append(
                f"not starting the {name} again: this session's {MAX_RESTARTS} restarts are used "
                "(every later realstack test fails here)"
            )
    return Verdict("\n".join(lines), tuple(restart))


def note(dead: Sequence[DeadProgram]) -> str:
    """One line for a failed test's report: `stack: workflow-controller exited (code 1): level=fatal ...`."""
    if not dead:
        return ""
    text = "stack: " + "; ".join(program.summary() for program in dead)
    return text if len(text) <= NOTE_CHARS else text[: NOTE_CHARS - 3] + "..."


class StackPrograms(Protocol):
    """The programs of the running stack as one worker sees them."""

    restartable: frozenset[str]

    def dead(self) -> list[DeadProgram]:
        """The programs that are not running (bounded in time)."""
        ...

    def restart(self, name: str) -> None:
        """Start `name` again (one of `restartable`); raises when it does not come up."""
        ...


@dataclass
class Watchdog:
    """One worker session's checks: its restart budget and the deaths it already told in full."""

    restarts_left: int = MAX_RESTARTS
    told: frozenset[tuple[str, str]] = frozenset()

    def check(self, programs: StackPrograms) -> tuple[str | None, str]:
        """Check the stack and start a dead restartable program again (budget allowing): the failure
        message for the coming test (None when every program runs) and the note for its report."""
        dead = programs.dead()
        verdict = decide(
            dead, restartable=programs.restartable, restarts_left=self.restarts_left, told=self.told
        )
        # A program seen running again is forgotten: its next death is told in full.
        self.told = frozenset((program.name, program.key) for program in dead)
        failure = verdict.failure
        for name in verdict.restart:
            self.restarts_left -= 1
            try:
                programs.restart(name)
            except Exception as exc:  # any failure to start it is this test's message, not a crash
                failure = f"{failure}\nstarting the {name} again failed: {type(exc).__name__}: {exc}"
        return failure, note(dead)


@dataclass
class OwnedPrograms:
    """The owner's view: the processes its `DevStack` started."""

    stack: DevStack
    restartable: frozenset[str] = RESTARTABLE

    def dead(self) -> list[DeadProgram]:
        """`DevStack.health()`: a poll per process and a read of a dead one's log's end."""
        return self.stack.health()

    def restart(self, name: str) -> None:
        """Start the dead workflow-controller again (the only restartable program)."""
        if name != WORKFLOW_CONTROLLER or self.stack.argo is None:
            raise ValueError(f"{name} is not restartable here")
        self.stack.argo.start_controller(timeout=RESTART_SECONDS)


@dataclass
class SharedPrograms:
    """The guest's view: probes of what the owner started, and the logs it writes on this machine."""

    kube: Kube
    argo_server_url: str
    argo_logs: Path | None = None
    node_logs: Path | None = None
    control_plane_logs: Path | None = None
    restartable: frozenset[str] = field(default_factory=frozenset)
    confirm_seconds: float = CONFIRM_SECONDS

    def dead(self) -> list[DeadProgram]:
        """The controller's and the server's HTTP answers, the node's Ready condition. A probe that
        fails is asked again, every CONFIRM_INTERVAL_SECONDS for up to CONFIRM_SECONDS, and only
        what fails all along is dead: a busy machine's slow answer, or a node NotReady for a moment
        after a test restarted its kubelet, fails no test."""
        deadline = time.monotonic() + self.confirm_seconds
        while True:
            found = self._probe()
            if not found or time.monotonic() >= deadline:
                return found
            time.sleep(CONFIRM_INTERVAL_SECONDS)

    def _probe(self) -> list[DeadProgram]:
        probes = [
            answered(
                WORKFLOW_CONTROLLER,
                http_failure(f"http://127.0.0.1:{HEALTHZ_PORT}/healthz"),
                _log(self.argo_logs, WORKFLOW_CONTROLLER),
            ),
            answered(
                "argo-server",
                http_failure(f"{self.argo_server_url}/api/v1/version"),
                _log(self.argo_logs, "argo-server"),
            ),
            *self._node(),
        ]
        return [program for program in probes if program is not None]

    def _node(self) -> list[DeadProgram | None]:
        quick = self.kube.with_settings(
            KubeSettings(connect_timeout=PROBE_SECONDS, read_timeout=PROBE_SECONDS, retry_backoffs=())
        )
        try:
            node = quick.get(NODES, None, NODE_NAME)
        except KubeError as exc:
            failure = f"does not answer a read of node {NODE_NAME}: {type(exc).__name__}: {exc}"
            return [answered("kube-apiserver", failure, _log(self.control_plane_logs, "kube-apiserver"))]
        if node_is_ready(node):
            return []
        return [answered("kubelet", f"leaves node {NODE_NAME} not Ready", _log(self.node_logs, "kubelet"))]

    def restart(self, name: str) -> None:
        """The guest restarts nothing: the owner started the programs, and only it can."""
        raise ValueError(f"this worker shares the stack: it cannot start {name} again")


def http_failure(url: str, timeout: float = PROBE_SECONDS) -> str | None:
    """None when GET `url` answers 200, else what went wrong (`does not answer URL: ...`)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            if int(response.status) == 200:
                return None
            return f"answers {url} with HTTP {response.status}"
    except urllib.error.HTTPError as exc:
        return f"answers {url} with HTTP {exc.code}"
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        return f"does not answer {url}: {reason}"


def _log(folder: Path | None, name: str) -> Path | None:
    return folder / f"{name}.log" if folder is not None else None
