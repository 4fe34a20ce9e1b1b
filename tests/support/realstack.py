"""The real stack in tests: a real node, the real Argo Workflows controller and Argo Server.

What is real: etcd + kube-apiserver, a node (containerd, kubelet, kube-scheduler,
kube-controller-manager) running pods from images built here (the step image, argoexec, pause),
Argo's own CRDs, workflow-controller and `argo server` of the pinned Argo Workflows, the `argo`
CLI, and the steps' service account and RBAC as the chart renders them (`helm template`). Argo CD
is still the fleet simulator, unless a test brings the real one.

One stack serves the whole session (`real_node`: the node only; `real_stack`: with Argo Workflows;
started at first use); each test gets a fresh namespace (`real_namespace`) with the chart's steps
identity in it. The node is machine-wide,
so the session first waits for its turn on the machine's node queue (`machine.queue_turn`: an
ancestor such as `flock -w 7200 /tmp/progressive-sync-realstack.lock pytest` may already hold it),
then takes the node lock (which fails at once if another node runs). A test that needs the
machine without a node (the SIGKILL clean-up test) calls `RealStackSession.stop()`; the next test
that asks for the stack starts it again.

Helpers: `RealStack.watcher(...)` runs `progressive-sync watch --engine argo` as a child process with
the stack's exports; `RealStack.argo(...)` runs the real argo CLI (through Kubernetes, or through
the Argo Server); `RealStack.workflow_settings()` is what an in-process watcher needs.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from orchestrator.devenv import machine, tools
from orchestrator.devenv.controlplane import ControlPlaneError
from orchestrator.devenv.stack import DevStack, StackOptions
from orchestrator.kube.client import Kube
from tests.support.watcher_harness import WatcherProcess
from workflow_templates.settings import WorkflowSettings

# Tests want the controller to look at Workflows again soon (Argo's default is 10 s; Argo advises
# no less than 1 s). PROGRESSIVE_SYNC_TEST_REQUEUE_TIME changes it, to measure what it costs.
TEST_REQUEUE_TIME = os.environ.get("PROGRESSIVE_SYNC_TEST_REQUEUE_TIME", "1s")


@dataclass
class RealStack:
    """The running stack as tests use it."""

    stack: DevStack
    kube: Kube
    workdir: Path

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig."""
        assert self.stack.cluster is not None
        return self.stack.cluster.kubeconfig

    @property
    def step_image(self) -> str:
        """The locally built step image's reference."""
        assert self.stack.steps_image is not None
        return self.stack.steps_image.reference

    @property
    def argo_server_url(self) -> str:
        """The Argo Server's URL (plain HTTP on loopback)."""
        assert self.stack.argo is not None and self.stack.argo.server_url is not None
        return self.stack.argo.server_url

    def environment(self) -> dict[str, str]:
        """This process's environment with the stack's exports (what `dev-cluster up` prints)."""
        return self.stack.environment(dict(os.environ))

    def workflow_settings(self, **changes: Any) -> WorkflowSettings:
        """Workflow settings for a watcher in this process: our step image, never pulled."""
        return WorkflowSettings(image=self.step_image, image_pull_policy="Never", **changes)

    @contextlib.contextmanager
    def namespace(self, prefix: str = "t") -> Iterator[str]:
        """A fresh namespace with the chart's steps identity and RBAC; deleted after."""
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        self.stack.prepare_namespace(name)
        try:
            yield name
        finally:
            self.stack.forget_namespace(name)

    def watcher(
        self, namespace: str, log_path: Path, *, argo_server: bool = False, extra_args: Sequence[str] = ()
    ) -> WatcherProcess:
        """`progressive-sync watch --engine argo` for `namespace` (not started), with the stack's exports."""
        env = self.environment()
        if not argo_server:
            env.pop("PROGRESSIVE_SYNC_ARGO_SERVER", None)
        return WatcherProcess(self.kubeconfig, namespace, log_path, extra_args=extra_args, env=env)

    def argo(
        self, *args: str, namespace: str, via_server: bool = False, timeout: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        """The real argo CLI: straight to Kubernetes, or through the Argo Server (`via_server`)."""
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig)}
        for name in ("ARGO_SERVER", "ARGO_SECURE", "ARGO_HTTP1", "ARGO_TOKEN"):
            env.pop(name, None)
        if via_server:
            assert self.stack.argo is not None
            env.update(self.stack.argo.argo_environment())
        return subprocess.run(
            [str(tools.binary("argo")), *args, "-n", namespace],
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
            check=False,
        )


@dataclass
class RealStackSession:
    """Starts the stack on first use, keeps it for the session; `stop()` frees the machine.

    The node starts for the first test that needs it; Argo Workflows joins it for the first test
    that needs the controller (tests of the node alone do not wait for it). `warm_up` does that
    before the test's own protocol (and its timeout) begins: waiting for the machine's node queue
    and starting the stack take minutes on a busy machine, which is not the test's time. An error
    then is kept and reported by the test that asks for the stack.
    """

    workdir: Path
    _stack: RealStack | None = None
    _error: str | None = None
    _queue: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)

    def warm_up(self, *, argo: bool) -> None:
        """Start what a coming test needs, keeping any error for it (see the class doc)."""
        try:
            self._start(argo=argo)
        except Exception as exc:
            self._error = f"{type(exc).__name__}: {exc}"

    def get(self, *, argo: bool) -> RealStack:
        """The running stack (started now when it is not running), with Argo when `argo`."""
        if self._error is not None:
            error, self._error = self._error, None
            self._fail(error)
        try:
            return self._start(argo=argo)
        except (ControlPlaneError, tools.ToolsMissing, machine.MachineError) as exc:
            self._fail(str(exc))
        raise AssertionError("unreachable")

    def _start(self, *, argo: bool) -> RealStack:
        if self._stack is None:
            self._queue.enter_context(machine.queue_turn(say=lambda text: sys.stderr.write(f"\n{text}\n")))
            stack = DevStack.start(StackOptions(node=True, namespaces=()))
            assert stack.cluster is not None
            self._stack = RealStack(stack, Kube.from_kubeconfig(str(stack.cluster.kubeconfig)), self.workdir)
        if argo:
            self._stack.stack.add_argo_workflows(requeue_time=TEST_REQUEUE_TIME)
        return self._stack

    @staticmethod
    def _fail(error: str) -> None:
        pytest.fail(
            f"the real stack could not start: {error}\n"
            "(it needs root, the Debian packages containerd runc containernetworking-plugins "
            "mmdebstrap iptables, and `make tools`; deselect these tests with -m 'not realstack')",
            pytrace=False,
        )

    def stop(self) -> None:
        """Stop the stack (the queue lock stays held until the session ends)."""
        if self._stack is not None:
            self._stack.kube.close()
            self._stack.stack.stop()
            self._stack = None

    def close(self) -> None:
        """Stop the stack and give the queue lock back."""
        try:
            self.stop()
        finally:
            self._queue.close()


# One per test session: made by `session_for` (the warm-up hook may come before the fixture).
_session: dict[str, RealStackSession] = {}


def session_for(config: pytest.Config) -> RealStackSession:
    """This test session's stack holder."""
    if "current" not in _session:
        workdir = Path(tempfile.mkdtemp(prefix="progressive-sync-realstack-"))
        _session["current"] = RealStackSession(workdir)
        config.add_cleanup(close_session)
    return _session["current"]


def close_session() -> None:
    """Stop the stack, give the queue back, remove the work folder (at the session's end)."""
    session = _session.pop("current", None)
    if session is not None:
        try:
            session.close()
        finally:
            shutil.rmtree(session.workdir, ignore_errors=True)


def warm_up(item: pytest.Item) -> None:
    """Before a realstack test's protocol: start what it will ask for (see `RealStackSession`)."""
    if item.get_closest_marker("stops_the_real_stack") is not None:
        return
    names = getattr(item, "fixturenames", ())
    node_only = "real_node" in names and "real_stack" not in names
    session_for(item.config).warm_up(argo=not node_only)


# --- fixtures (tests/conftest.py imports them) ------------------------------------------------------


@pytest.fixture(scope="session")
def real_stack_session(pytestconfig: pytest.Config) -> Iterator[RealStackSession]:
    """The session's stack holder (starts nothing by itself); closed at the end, and right after
    the last realstack test (they run last, together: tests/conftest.py)."""
    yield session_for(pytestconfig)
    close_session()


@pytest.fixture
def real_node(real_stack_session: RealStackSession) -> RealStack:
    """The real stack with its node (pods run), without waiting for Argo Workflows."""
    return real_stack_session.get(argo=False)


@pytest.fixture
def real_stack(real_stack_session: RealStackSession) -> RealStack:
    """The real stack: node + Argo Workflows controller + Argo Server, started at first use."""
    return real_stack_session.get(argo=True)


@pytest.fixture
def real_namespace(real_node: RealStack) -> Iterator[str]:
    """A fresh namespace ready for pods, with the chart's steps service account and RBAC."""
    with real_node.namespace() as name:
        yield name
