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

Before each realstack test the worker checks that every program of the stack still runs (`watch`,
tests/support/stack_watch.py: the owner asks its processes, the guest probes); a dead one fails the
test at its setup by name (`fail_if_unhealthy`), the owner starts a dead workflow-controller again
(a few times a session), and a failed test's report notes what is dead (`health_note`).

Helpers: `RealStack.watcher(...)` runs `progressive-sync watch --engine argo` as a child process with
the stack's exports; `RealStack.argo(...)` runs the real argo CLI (through Kubernetes, or through
the Argo Server); `RealStack.workflow_settings()` is what an in-process watcher needs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from orchestrator.devenv import machine, tools
from orchestrator.devenv.argorollouts import mint_identity
from orchestrator.devenv.controlplane import ControlPlaneError
from orchestrator.devenv.stack import DevStack, StackOptions
from orchestrator.kube.client import Kube
from tests.support import stack_watch
from tests.support.apiserver_memory import TEST_APISERVER_MEMORY_LIMIT
from tests.support.stack_watch import OwnedPrograms, SharedPrograms, StackPrograms, Watchdog
from tests.support.watcher_harness import WatcherProcess
from workflow_templates.settings import WorkflowSettings

# Tests want the controller to look at Workflows again soon (Argo's default is 10 s; Argo advises
# no less than 1 s). PROGRESSIVE_SYNC_TEST_REQUEUE_TIME changes it, to measure what it costs.
TEST_REQUEUE_TIME = os.environ.get("PROGRESSIVE_SYNC_TEST_REQUEUE_TIME", "1s")

# The real node's pods get the CPU first (its cgroup root's cpu.shares; the kernel's default is
# 1024). Under `make test` every other program (each session's API server, etcd, Argo CD, the
# workers) runs beside them in a scheduling group of its own with weight 1024, so at the default the
# pods, which the realstack tests wait on one after another, got a small part of two busy cores.
# Three real-engine scenarios beside three busy loops: 252 s at 1024, 201 s at 16384; a warm CI
# run 2,091 s -> 1,914 s (docs/design/dev-stack.md, "The real node's pods first").
TEST_NODE_CPU_SHARES = 16384


@dataclass
class RealStack:
    """The running stack as tests use it."""

    stack: DevStack
    kube: Kube
    workdir: Path
    # On a worker that shares another worker's stack: what that worker published (`Published`).
    published: Published | None = None

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig."""
        assert self.stack.cluster is not None
        return self.stack.cluster.kubeconfig

    @property
    def step_image(self) -> str:
        """The locally built step image's reference."""
        if self.published is not None:
            return self.published.step_image
        assert self.stack.steps_image is not None
        return self.stack.steps_image.reference

    @property
    def argo_server_url(self) -> str:
        """The Argo Server's URL (plain HTTP on loopback)."""
        if self.published is not None:
            return self.published.argo_server_url
        assert self.stack.argo is not None and self.stack.argo.server_url is not None
        return self.stack.argo.server_url

    def argo_server_environment(self) -> dict[str, str]:
        """What the argo CLI needs to talk to the Argo Server."""
        if self.published is not None:
            return dict(self.published.argo_environment)
        assert self.stack.argo is not None
        return self.stack.argo.argo_environment()

    def environment(self) -> dict[str, str]:
        """This process's environment with the stack's exports (what `dev-cluster up` prints)."""
        base = dict(os.environ)
        if self.published is None:
            return self.stack.environment(base)
        for name, value in self.published.exports:
            base[name] = value.replace("$PATH", os.environ.get("PATH", ""))
        return base

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
            env.update(self.argo_server_environment())
        return subprocess.run(
            [str(tools.binary("argo")), *args, "-n", namespace],
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
            check=False,
        )


# --- several workers, one stack ----------------------------------------------------------------------
#
# `make test` runs the real-stack tests on SHARING_WORKERS pytest-xdist workers over the machine's one
# node (they wait on pods far more than they compute): tests/conftest.py puts them in one group per
# worker. The owner's worker (group OWNER_GROUP) starts the stack as before and publishes what the
# others need in a folder of this test run (`Published`); each guest's worker (`guest_groups`)
# attaches to it with its own namespaces. Each realstack test holds the run's test lock shared; a
# test that disrupts the stack (`realstack_exclusive`: a controller killed, a kubelet restarted)
# holds it exclusive, so it has the stack alone. The owner stops the stack only once every guest
# says it is done (or at the deadline). Tests that need the owner's process (the node lock's holder,
# the stack's processes) are in its group.

OWNER_GROUP = "realstack"
# Where the owner writes the analysis controller's kubeconfig for a guest (`Published`).
GUEST_ANALYSIS_IDENTITY = "argo-rollouts-guest.kubeconfig"
# How many workers share the stack in `make test` (1: the owner alone). Two on 2 cores: three (with
# six xdist workers) made each real-stack test ~1.5x slower and the suite longer (CPU-bound).
SHARING_WORKERS = int(os.environ.get("PROGRESSIVE_SYNC_REALSTACK_WORKERS", "2"))


def guest_groups(workers: int) -> tuple[str, ...]:
    """The xdist groups of the guests when `workers` share the stack: realstack-2, realstack-3, ..."""
    return tuple(f"{OWNER_GROUP}-{number}" for number in range(2, workers + 1))


# The owner may wait for the machine's node queue (other runs) before it can publish.
GUEST_WAIT_SECONDS = 7200.0
OWNER_WAIT_SECONDS = 3600.0


@dataclass(frozen=True)
class Published:
    """What the owner's worker publishes for the guests: where the running stack is."""

    tools_dir: str
    workdir: str
    api_url: str
    kubeconfig: str
    step_image: str
    argo_server_url: str
    argo_environment: tuple[tuple[str, str], ...]
    exports: tuple[tuple[str, str], ...]
    # The analysis controller's kubeconfig, minted by the owner (the guest holds no CA): the guest
    # runs the analysis tests when the split gives them to it (`assign_groups`).
    analysis_identity: str = ""
    # Where the owner's programs write their logs: the guest's watchdog reads a dead one's last
    # lines there (tests/support/stack_watch.py `SharedPrograms`).
    argo_logs: str = ""
    node_logs: str = ""

    @classmethod
    def of(cls, stack: DevStack) -> Published:
        """The facts of a running stack with Argo Workflows and its server."""
        assert stack.cluster is not None and stack.steps_image is not None
        assert stack.argo is not None and stack.argo.server_url is not None
        return cls(
            tools_dir=str(stack.tools_dir),
            workdir=str(stack.cluster.workdir),
            api_url=stack.cluster.api_url,
            kubeconfig=str(stack.cluster.kubeconfig),
            step_image=stack.steps_image.reference,
            argo_server_url=stack.argo.server_url,
            argo_environment=tuple(sorted(stack.argo.argo_environment().items())),
            exports=tuple(stack.exports()),
            analysis_identity=str(mint_identity(stack.cluster, filename=GUEST_ANALYSIS_IDENTITY)),
            argo_logs=str(stack.argo.folder),
            node_logs=str(stack.node.root / "logs") if stack.node is not None else "",
        )

    def to_json(self) -> str:
        """The JSON the guests read."""
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Published:
        """Read what `to_json` wrote."""
        data = json.loads(text)
        data["argo_environment"] = tuple(tuple(pair) for pair in data["argo_environment"])
        data["exports"] = tuple(tuple(pair) for pair in data["exports"])
        return cls(**data)


@dataclass
class Share:
    """The folder of one test run where the owner publishes and every sharing worker takes the test
    lock; `guests`: the guest groups that have tests in this run (the owner waits for each)."""

    folder: Path
    guests: tuple[str, ...] = ()

    @property
    def published_path(self) -> Path:
        return self.folder / "stack.json"

    @property
    def error_path(self) -> Path:
        return self.folder / "owner-error.txt"

    def guest_done_path(self, guest: str) -> Path:
        return self.folder / f"guest-done-{guest}"

    def publish(self, published: Published) -> None:
        """Write the stack's facts (atomically: a guest never reads half a file)."""
        scratch = self.folder / "stack.json.tmp"
        scratch.write_text(published.to_json())
        scratch.rename(self.published_path)

    def publish_error(self, error: str) -> None:
        """The owner could not start the stack: the guests fail with this rather than waiting."""
        self.error_path.write_text(error)

    def wait_published(self, timeout: float = GUEST_WAIT_SECONDS) -> Published:
        """The owner's facts, once it published them (MachineError at the deadline or its error)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.published_path.exists():
                return Published.from_json(self.published_path.read_text())
            if self.error_path.exists():
                raise machine.MachineError(
                    f"the stack's owner could not start it: {self.error_path.read_text()}"
                )
            time.sleep(0.5)
        raise machine.MachineError(
            f"the stack's owner published nothing in {self.folder} within {timeout:g}s"
        )

    def say_guest_done(self, guest: str) -> None:
        """Guest `guest`'s tests are over: once every guest said so, the owner may stop the stack."""
        self.guest_done_path(guest).touch()

    def wait_guest_done(self, timeout: float = OWNER_WAIT_SECONDS) -> None:
        """Wait (up to `timeout`) until every guest is done with the stack."""
        deadline = time.monotonic() + timeout
        while waiting := [guest for guest in self.guests if not self.guest_done_path(guest).exists()]:
            if time.monotonic() > deadline:
                sys.stderr.write(
                    f"\nthe guest worker(s) {', '.join(waiting)} did not finish within {timeout:g}s: "
                    "stopping the stack\n"
                )
                return
            time.sleep(0.5)

    @contextlib.contextmanager
    def test_turn(self, *, exclusive: bool, timeout: float = GUEST_WAIT_SECONDS) -> Iterator[None]:
        """Hold the run's test lock (shared, or exclusive) for one test. A turnstile lets a waiting
        exclusive test in before later shared ones."""
        deadline = time.monotonic() + timeout
        with (
            (self.folder / "turnstile.lock").open("a") as turnstile,
            (self.folder / "test.lock").open("a") as lock,
        ):
            _flock(turnstile, fcntl.LOCK_EX, deadline)
            try:
                _flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH, deadline)
            finally:
                fcntl.flock(turnstile, fcntl.LOCK_UN)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)


def _flock(handle: Any, mode: int, deadline: float) -> None:
    while True:
        try:
            fcntl.flock(handle, mode | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise machine.MachineError("waited too long for the real-stack test lock") from None
            time.sleep(0.1)


def share_for(config: pytest.Config, items: Sequence[pytest.Item]) -> Share | None:
    """This run's share folder when the selected real-stack tests (`items`: the session's, after
    deselection) are split over workers, else None."""
    workerinput = getattr(config, "workerinput", None)
    in_use = {_group_of(item) for item in items if item.get_closest_marker("realstack") is not None}
    guests = tuple(group for group in guest_groups(SHARING_WORKERS) if group in in_use)
    if workerinput is None or not guests:
        return None
    folder = Path(tempfile.gettempdir()) / f"progressive-sync-realstack-{workerinput['testrunuid']}"
    folder.mkdir(exist_ok=True)
    return Share(folder, guests)


# Seconds the realstack tests took in a timeline of `make test` (tests/support/timeline.py: each test's
# setup, call and teardown, not its wait for a turn on the stack; the mean over its parameters), by
# name: CI on 2026-12-06 at 10:38 UTC (4e49852, 4 workers), warm cache. Any other test counts
# DEFAULT_TEST_SECONDS. They only balance the split between owner and guests: a stale figure costs
# minutes of wall time, never a result. Refresh them from a CI log's timeline folder when the split's
# ends drift apart (the log's "the run's timeline" lines: each realstack worker's end, and the
# stack-stopping test's wait before its protocol, which the summary's "waited" shows).
MEASURED_SECONDS: tuple[tuple[str, float], ...] = (
    ("test_each_group_waits_for_the_same_group_of_a_grouped_dependency", 147.0),
    ("test_the_argo_ui_shows_a_rollout_by_stage_and_a_canary_stopping_a_bad_release", 127.0),
    ("test_helm_install_a_rollout_under_the_charts_own_accounts_upgrade_and_uninstall", 116.0),
    ("test_the_readme_install_section_takes_a_user_to_a_succeeded_rollout", 111.0),
    ("test_a_failure_in_the_third_stage_rolls_back_every_stage_it_reached_later_stages_first", 91.0),
    ("test_a_cluster_failing_while_a_sibling_runs_ends_failed_and_the_next_release_runs", 90.0),
    ("test_a_cluster_whose_skip_mark_is_removed_is_taken_by_the_next_retry", 83.0),
    ("test_a_failed_group_rolls_back_only_its_own_clusters_the_others_finish", 83.0),
    ("test_a_second_rollout_waits_on_the_mutex_and_runs_after_the_first", 81.0),
    ("test_a_deleted_step_pod_adopts_its_analysis_run", 76.0),
    ("test_groups_run_side_by_side_and_a_failed_group_stops_only_itself", 76.0),
    ("test_twelve_clusters_in_three_stages_succeed_in_order_within_max_parallel", 74.0),
    ("test_a_rollout_that_depends_on_another_waits_for_its_canary", 72.0),
    ("test_a_watcher_killed_during_analysis_leaves_one_run_per_cluster", 72.0),
    ("test_a_node_whose_owner_was_sigkilled_is_cleaned_up_by_the_next_start", 70.0),
    ("test_a_rollback_pod_deleted_mid_wait_writes_no_second_rollback", 68.0),
    ("test_each_group_waits_at_its_own_gate_and_approve_opens_one_group", 65.0),
    ("test_a_healthy_release_passes_every_gate", 62.0),
    ("test_a_pause_lets_the_gates_run_finish_and_holds_the_next_stage", 59.0),
    ("test_a_watcher_killed_during_the_rollback_leaves_one_rollback_write_each", 59.0),
    ("test_a_deny_window_holds_every_sync_until_it_ends_then_the_rollout_succeeds", 56.0),
    ("test_a_skipped_application_is_never_synced_and_the_rollout_succeeds", 55.0),
    ("test_a_stage_by_application_labels_takes_the_clusters_whose_applications_carry_the_label", 55.0),
    ("test_cancel_during_the_rollback_stops_it_and_says_what_stays_restored", 55.0),
    ("test_inconclusive_waits_for_approval_and_goes_on", 54.0),
    ("test_per_cluster_runs_count_against_max_failed_clusters", 52.0),
    ("test_failures_within_max_failed_clusters_let_the_rollout_succeed", 51.0),
    ("test_a_failed_gate_rolls_the_canary_back", 50.0),
    ("test_a_metric_that_fails_mid_bake_fails_the_stage_before_the_bake_ends", 50.0),
    ("test_a_failed_stage_terminates_the_runs_of_its_other_clusters", 49.0),
    ("test_more_clusters_to_restore_than_the_rollback_runs_at_once_are_restored_by_batch_pods", 49.0),
    ("test_the_approval_gate_waits_until_approved", 49.0),
    ("test_the_watcher_submits_through_the_real_argo_server_and_the_rollout_runs_on_pods", 47.0),
    ("test_the_canary_gate_stops_the_rollout", 46.0),
    ("test_a_failing_canary_is_rolled_back_to_what_it_ran_with_one_write", 45.0),
    ("test_a_cluster_past_its_progress_deadline_fails_its_stage", 44.0),
    ("test_a_failing_canary_fails_the_rollout_and_nothing_after_it_syncs", 43.0),
    ("test_rollout_rides_out_the_fault", 36.0),
    ("test_pause_holds_new_clusters_and_resume_finishes_the_rollout", 33.0),
    ("test_cancel_terminates_the_running_analysis", 30.0),
    ("test_exit_75_is_retried_limit_times_with_capped_waits", 26.0),
    ("test_the_workflow_deadline_terminates_the_running_analysis", 22.0),
    ("test_cancel_stops_the_rollout_and_it_ends_cancelled", 18.0),
    ("test_a_two_step_workflow_runs_on_the_real_controller_and_the_argo_cli_reads_it", 16.0),
    ("test_a_watcher_killed_mid_rollout_leaves_one_rollout_that_syncs_each_cluster_once", 15.0),
    ("test_a_job_metric_is_measured_by_a_real_pod", 6.0),
    ("test_a_pod_of_our_step_image_runs_to_succeeded_and_reaches_the_api_server", 4.0),
    ("test_a_second_node_on_the_machine_fails_at_once_with_a_clear_message", 2.0),
)
DEFAULT_TEST_SECONDS = 25.0


def expected_seconds(name: str) -> float:
    """What a realstack test is expected to take, for balancing (`MEASURED_SECONDS`)."""
    return next(
        (seconds for prefix, seconds in MEASURED_SECONDS if name.startswith(prefix)), DEFAULT_TEST_SECONDS
    )


def assign_groups(
    config: pytest.Config, items: Sequence[pytest.Item], workers: int | None = None
) -> dict[pytest.Item, str]:
    """The xdist group of each realstack test: all in OWNER_GROUP, or split between OWNER_GROUP and
    the guests' groups by their expected seconds: over `workers` (SHARING_WORKERS by default) sides,
    at most one fewer than xdist's workers (the Argo CD tests' group needs one of its own).

    The split: tests that need the owner's process or the stack alone (`realstack_owner`,
    `realstack_exclusive`, `stops_the_real_stack`) stay with the owner; its `realstack_owner` ones
    count in its load from the start; the exclusive ones stop every side alike and the stack-stopping
    ones run only once every guest is done (after every side's work, whatever the split), so neither
    counts. The tests that
    need the process running the analysis stack (`realstack_analysis`: one per process, a
    session fixture) go together, as one unit of their summed seconds, to either side. Then every
    unit, longest first, goes to the least loaded side (ties to the first guest). Every worker collects
    the same tests, so all compute the same."""
    workerinput = getattr(config, "workerinput", None)
    # xdist's first round of work gives the biggest groups (these and Argo CD's) a worker each:
    # never two of these to one (which would wait for itself), so one side fewer than the workers.
    sides = (
        1 if workerinput is None else min(workers or SHARING_WORKERS, workerinput.get("workercount", 1) - 1)
    )
    realstack_items = [item for item in items if item.get_closest_marker("realstack") is not None]
    groups: dict[pytest.Item, str] = dict.fromkeys(realstack_items, OWNER_GROUP)
    if sides < 2:
        return groups
    owners_own = [
        item
        for item in realstack_items
        if _needs_the_owner(item)
        and item.get_closest_marker("realstack_exclusive") is None
        and item.get_closest_marker("stops_the_real_stack") is None
    ]
    analysis = [
        item
        for item in realstack_items
        if not _needs_the_owner(item) and item.get_closest_marker("realstack_analysis") is not None
    ]
    units = [[item] for item in realstack_items if not _needs_the_owner(item) and item not in analysis]
    if analysis:
        units.append(analysis)
    # The guests first: ties go to the first of them in this order, then to the owner.
    load = dict.fromkeys(guest_groups(sides), 0.0)
    load[OWNER_GROUP] = sum(expected_seconds(item.name) for item in owners_own)
    for unit in sorted(units, key=lambda unit: -_unit_seconds(unit)):  # stable: collection order
        side = min(load, key=load.__getitem__)
        groups.update(dict.fromkeys(unit, side))
        load[side] += _unit_seconds(unit)
    return groups


def _unit_seconds(unit: Sequence[pytest.Item]) -> float:
    return sum(expected_seconds(item.name) for item in unit)


def _needs_the_owner(item: pytest.Item) -> bool:
    return any(
        item.get_closest_marker(name) is not None
        for name in ("realstack_owner", "realstack_exclusive", "stops_the_real_stack")
    )


def _group_of(item: pytest.Item) -> str:
    marker = item.get_closest_marker("xdist_group")
    return str(marker.args[0]) if marker is not None and marker.args else OWNER_GROUP


@dataclass
class RealStackSession:
    """Starts the stack on first use, keeps it for the session; `stop()` frees the machine.

    The node starts for the first test that needs it; Argo Workflows joins it for the first test
    that needs the controller (tests of the node alone do not wait for it). `warm_up` does that
    before the test's own protocol (and its timeout) begins: waiting for the machine's node queue
    and starting the stack take minutes on a busy machine, which is not the test's time. An error
    then is kept and reported by the test that asks for the stack.

    With a `share` (several workers, one stack: see above), the owner starts Argo with the node and
    publishes the stack; a guest attaches to it and starts or stops nothing.
    """

    workdir: Path
    share: Share | None = None
    # This worker's guest group ("": the owner, or a stack of its own).
    guest: str = ""
    _stack: RealStack | None = None
    _error: str | None = None
    _queue: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)
    _guest_done: bool = False
    # Checks the stack's programs before each test (`watch`); its restart budget is the session's.
    watchdog: Watchdog = field(default_factory=Watchdog)

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
        if self.guest:
            return self._attach()
        if self._stack is None:
            self._queue.enter_context(machine.queue_turn(say=lambda text: sys.stderr.write(f"\n{text}\n")))
            try:
                stack = DevStack.start(
                    StackOptions(
                        node=True,
                        namespaces=(),
                        apiserver_memory_limit=TEST_APISERVER_MEMORY_LIMIT,
                        node_cpu_shares=TEST_NODE_CPU_SHARES,
                    )
                )
            except Exception as exc:
                if self.share is not None:
                    self.share.publish_error(f"{type(exc).__name__}: {exc}")
                raise
            assert stack.cluster is not None
            self._stack = RealStack(stack, Kube.from_kubeconfig(str(stack.cluster.kubeconfig)), self.workdir)
        if argo or self.share is not None:
            try:
                self._stack.stack.add_argo_workflows(requeue_time=TEST_REQUEUE_TIME)
            except Exception as exc:
                if self.share is not None:
                    self.share.publish_error(f"{type(exc).__name__}: {exc}")
                raise
            if self.share is not None and not self.share.published_path.exists():
                self.share.publish(Published.of(self._stack.stack))
        return self._stack

    def _attach(self) -> RealStack:
        if self._stack is None:
            assert self.share is not None
            published = self.share.wait_published()
            stack = DevStack.attach(
                tools_dir=Path(published.tools_dir),
                workdir=Path(published.workdir),
                api_url=published.api_url,
                kubeconfig=Path(published.kubeconfig),
            )
            kube = Kube.from_kubeconfig(published.kubeconfig)
            self._stack = RealStack(stack, kube, self.workdir, published=published)
        return self._stack

    def programs(self) -> StackPrograms | None:
        """The running stack's programs as this worker sees them (the owner's processes, or the
        guest's probes); None while no stack runs here."""
        if self._stack is None:
            return None
        published = self._stack.published
        if published is None:
            return OwnedPrograms(self._stack.stack)
        return SharedPrograms(
            self._stack.kube,
            published.argo_server_url,
            argo_logs=Path(published.argo_logs) if published.argo_logs else None,
            node_logs=Path(published.node_logs) if published.node_logs else None,
            control_plane_logs=Path(published.workdir),
        )

    @staticmethod
    def _fail(error: str) -> None:
        pytest.fail(
            f"the real stack could not start: {error}\n"
            "(it needs root, the Debian packages containerd runc containernetworking-plugins "
            "mmdebstrap iptables, and `make tools`; deselect these tests with -m 'not realstack')",
            pytrace=False,
        )

    def guest_done(self) -> None:
        """This guest's realstack tests are over: tell the owner (once)."""
        if self.guest and self.share is not None and not self._guest_done:
            self._guest_done = True
            self.share.say_guest_done(self.guest)

    def stop(self) -> None:
        """Stop the stack (the queue lock stays held until the session ends). The owner of a shared
        stack first waits for every guest to be done with it; a guest only lets go of it."""
        if self._stack is None:
            return
        if self.share is not None and not self.guest and self._stack.published is None:
            self.share.wait_guest_done()
        self._stack.kube.close()
        self._stack.stack.stop()
        self._stack = None

    def close(self) -> None:
        """Stop the stack and give the queue lock back."""
        try:
            self.guest_done()
            self.stop()
        finally:
            self._queue.close()
            if self.share is not None and not self.guest:
                shutil.rmtree(self.share.folder, ignore_errors=True)


# One per test session: made by `session_for` (the warm-up hook may come before the fixture).
_session: dict[str, RealStackSession] = {}


def session_for(config: pytest.Config, item: pytest.Item | None = None) -> RealStackSession:
    """This test session's stack holder (its role, owner or guest, from the first realstack test)."""
    if "current" not in _session:
        workdir = Path(tempfile.mkdtemp(prefix="progressive-sync-realstack-"))
        share = share_for(config, item.session.items) if item is not None else None
        group = _group_of(item) if share is not None and item is not None else OWNER_GROUP
        guest = group if share is not None and group in share.guests else ""
        _session["current"] = RealStackSession(workdir, share=share, guest=guest)
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
    session_for(item.config, item).warm_up(argo=not node_only)


# What `watch` found before a test: the message its setup fails with (None: every program ran), and
# the one-line note for its report. And the note of a check made once the test failed (`health_note`).
_BEFORE = pytest.StashKey[tuple[str | None, str]]()
_AFTER = pytest.StashKey[str]()


def watch(item: pytest.Item) -> None:
    """Before a realstack test's protocol (after `warm_up`): check that every program of the stack
    runs, starting a dead workflow-controller again (tests/support/stack_watch.py); what it found
    fails the test at its setup (`fail_if_unhealthy`)."""
    if item.get_closest_marker("stops_the_real_stack") is not None:
        return
    session = session_for(item.config, item)
    programs = session.programs()
    if programs is None:
        return
    try:
        item.stash[_BEFORE] = session.watchdog.check(programs)
    except Exception as exc:  # a broken check must not fail the test, nor end the worker's session
        sys.stderr.write(
            f"\nthe stack's health check failed before {item.nodeid}: {type(exc).__name__}: {exc}\n"
        )


def fail_if_unhealthy(item: pytest.Item) -> None:
    """At a realstack test's setup: fail it at once when `watch` found a program of the stack dead."""
    failure, _ = item.stash.get(_BEFORE, (None, ""))
    if failure is not None:
        pytest.fail(failure, pytrace=False)


def health_note(item: pytest.Item) -> str:
    """For a failed realstack test's report: one line naming the stack's dead programs ("" when all
    run): as `watch` saw them before the test, else as they are now (checked once per test)."""
    _, before = item.stash.get(_BEFORE, (None, ""))
    if before:
        return before
    if _AFTER not in item.stash:
        session = _session.get("current")
        programs = session.programs() if session is not None else None
        try:
            item.stash[_AFTER] = stack_watch.note(programs.dead()) if programs is not None else ""
        except Exception as exc:  # the note says the check broke; the report goes on
            item.stash[_AFTER] = f"stack: the health check failed: {type(exc).__name__}: {exc}"
    return item.stash[_AFTER]


@contextlib.contextmanager
def test_turn(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Around a realstack test's protocol: its turn on a shared stack (shared or exclusive), the
    guest done after its last one, and a test that stops the stack only after every guest."""
    session = session_for(item.config, item)
    if session.share is None:
        yield
        return
    stops = item.get_closest_marker("stops_the_real_stack") is not None
    if stops:
        session.share.wait_guest_done()
    exclusive = stops or item.get_closest_marker("realstack_exclusive") is not None
    try:
        with session.share.test_turn(exclusive=exclusive):
            yield
    finally:
        if nextitem is None or nextitem.get_closest_marker("realstack") is None:
            session.guest_done()


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
