"""Shared fixtures for the whole suite.

What is real: the control plane (etcd + kube-apiserver built from the Kubernetes sources by
`make tools`), our CRD and the peers' CRDs, schema/CEL validation, RBAC, watches, resourceVersion
conflicts, and `kubectl`. What is not: there is no kubelet, scheduler or controller-manager (Pods
never run, garbage collection and namespace finalization never happen), no Argo CD (the fleet
simulator plays its application controller) and no Argo Workflows controller (the local executor
runs our Workflows). Nothing fakes the Kubernetes API.

One control plane serves the whole session; each test that needs objects gets a fresh namespace.

The real-stack tier (`real_node`, `real_stack`, `real_namespace`, from tests/support/realstack.py; marked
`realstack`) adds a real node, the real Argo Workflows controller and Argo Server: see there.
Before each realstack test its worker checks that every program of that stack still runs
(tests/support/stack_watch.py): a dead one fails the test at its setup, by name.
The analysis fixtures (`analysis_stack`, `analysis_env`, from tests/support/analysis.py; marked
`analysis`) add the real Argo Rollouts analysis controller, a real Prometheus and a metrics endpoint
on the session's control plane: see there.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Generator, Iterator
from pathlib import Path

import pluggy
import pytest

from orchestrator.devenv import controlplane as devcluster
from orchestrator.devenv import tools
from orchestrator.kube.client import NAMESPACES, Kube, NotFound
from orchestrator.kube.crds import all_crd_documents, apply_crds
from tests.support import realstack as realstack_plugin
from tests.support import timeline
from tests.support.analysis import analysis_clusters, analysis_env, analysis_stack  # noqa: F401 - fixtures
from tests.support.apiserver_memory import TEST_APISERVER_MEMORY_LIMIT
from tests.support.kubectl import Kubectl
from tests.support.realstack import (  # noqa: F401 - fixtures
    real_namespace,
    real_node,
    real_stack,
    real_stack_session,
)
from tests.support.stack_watch import REPORT_PROPERTY


@pytest.fixture(scope="session")
def control_plane() -> Iterator[devcluster.DevCluster]:
    """A real etcd + kube-apiserver with every CRD installed, for the whole test session (its memory
    limit: tests/support/apiserver_memory.py)."""
    try:
        binaries = devcluster.find_tools_dir()
        crds = all_crd_documents(tools.peer_crd_dirs())
    except (devcluster.ControlPlaneError, tools.ToolsMissing) as exc:
        pytest.fail(f"{exc}\n(`make test` builds the tools and points the tests at them for you.)")
    cluster = devcluster.DevCluster.start(binaries, apiserver_memory_limit=TEST_APISERVER_MEMORY_LIMIT)
    try:
        kube = Kube.from_kubeconfig(str(cluster.kubeconfig))
        apply_crds(kube, crds)
        kube.close()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def argo() -> Path:
    """The argo CLI of the pinned Argo Workflows, as `make tools` builds it."""
    try:
        return tools.binary("argo")
    except tools.ToolsMissing as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="session")
def kube(control_plane: devcluster.DevCluster) -> Iterator[Kube]:
    """The adapter, as cluster admin."""
    client = Kube.from_kubeconfig(str(control_plane.kubeconfig))
    yield client
    client.close()


@pytest.fixture(scope="session")
def kubectl(control_plane: devcluster.DevCluster) -> Kubectl:
    """The real kubectl, as cluster admin."""
    return Kubectl(control_plane.tools_dir / "kubectl", control_plane.kubeconfig)


@pytest.fixture
def namespace(kube: Kube, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace for one test (deleted after; without a controller-manager it stays Terminating)."""
    slug = "".join(ch if ch.isalnum() else "-" for ch in request.node.name.lower())[:40].strip("-")
    name = f"t-{slug}-{uuid.uuid4().hex[:6]}"
    kube.create(NAMESPACES, None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name
    with contextlib.suppress(NotFound):
        kube.delete(NAMESPACES, None, name)


def pytest_report_header() -> list[str]:
    """Say which tools the integration tests use."""
    folder = os.environ.get(tools.TOOLS_DIR_VARIABLE, "(unset: the cache's current build)")
    return [
        f"KUBEBUILDER_ASSETS: {os.environ.get('KUBEBUILDER_ASSETS', '(unset)')}",
        f"{tools.TOOLS_DIR_VARIABLE}: {folder}",
    ]


# Tests that share one machine-wide or expensive stack run on one pytest-xdist worker each (`make
# test` runs the suite with `--dist loadgroup`): the real Argo CD stack (~20 s to start, one per
# package), and the real node with Argo Workflows (one per machine), whose tests two workers share
# (tests/support/realstack.py `assign_groups`: an owner that starts it, guests that attach).
# Every other test runs on any worker.
SHARED_STACK_GROUPS = {"argocd": "argocd"}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test that uses the real stack is marked `realstack`, every test that uses the analysis
    components `analysis` (before -m selects by markers), the
    tests of each shared stack are put in their xdist group (before xdist reads the groups), and
    the real-stack tests are ordered last (`_run_order`).

    Batch mode on the real controller (`argo-batch`) runs only the scenarios marked
    `batch_on_real_argo`: real pods cost seconds each, and batches change only how clusters share
    pods, which those scenarios exercise; `local-batch` runs every scenario.
    """
    kept, dropped = [], []
    for item in items:
        if "real_stack_session" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.realstack)
        if "analysis_stack" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.analysis)
        engine = getattr(getattr(item, "callspec", None), "params", {}).get("engine")
        if engine == "argo-batch" and item.get_closest_marker("batch_on_real_argo") is None:
            dropped.append(item)
        else:
            kept.append(item)
    # The split between the real stack's workers weighs only the tests that run: counting the
    # dropped argo-batch ones (1321 s expected, 873 of them on the owner's side) left the owner's
    # side 425 s lighter, and its stack-stopping tests waited that long for the guest.
    realstack_groups = realstack_plugin.assign_groups(config, sorted(kept, key=_run_order))
    for item in kept:
        if item in realstack_groups:
            item.add_marker(pytest.mark.xdist_group(realstack_groups[item]))
        for marker, group in SHARED_STACK_GROUPS.items():
            if item.get_closest_marker(marker) is not None:
                item.add_marker(pytest.mark.xdist_group(group))
                break
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    items[:] = sorted(kept, key=_run_order)


# Tests outside the shared stacks that took 40 s or more in a timeline of `make test` (the 06:38 run
# of 2026-12-01, tests/support/timeline.py; both CPUs busy throughout), by node id prefix: a whole
# module where its tests share a module-scoped fixture. Seconds as measured, or as expected after a
# cut (marked). They only order the run, longest first: a long test sent last holds the run open
# while the other workers are idle (in that run test_watcher_memory, 270 s, then the test queued
# behind it on its worker, 138 s, ended it 125 s after the others). Stale figures cost time, never a
# result.
LONG_TESTS: tuple[tuple[str, float], ...] = (
    ("tests/integration/test_watcher_gone.py", 147.0),
    ("tests/e2e/test_ops_rollouts.py::test_retry_runs_a_failed_rollout_again", 121.0),
    ("tests/e2e/test_demo.py::test_demo_succeeds_in_stage_order", 116.0),
    (
        "tests/integration/test_fault_suite_objects.py::test_a_rollout_survives[schema-workflow-crd-missing-at-start]",
        104.0,
    ),
    ("tests/unit/test_status_size.py::test_a_10000_cluster_rollout_at_its_largest", 93.0),
    ("tests/integration/test_fleet_simulator.py::test_an_empty_revision_resolves", 83.0),
    ("tests/integration/test_watcher_restarts.py::test_with_the_local_engine_in_the_same_process", 74.0),
    ("tests/e2e/test_demo.py::test_fail_cluster_stops_the_rollout_at_the_canary", 70.0),  # 235 before its cut
    ("tests/e2e/test_argocd_scenarios.py::test_a_sync_we_started_is_terminated_when_we_stop", 69.0),
    ("tests/e2e/test_rollout_scenarios.py::test_exit_75_is_retried_limit_times_with_capped_waits", 69.0),
    ("tests/integration/test_control_plane.py", 62.0),
    ("tests/analysis_real/test_dev_cluster_analysis.py", 50.0),  # measured at load average 11
    ("tests/unit/test_suite_groups.py", 62.0),
    ("tests/integration/test_fault_suite_objects.py::test_a_rollout_survives[apiserver-409-storm]", 59.0),
    ("tests/integration/test_fault_suite_network.py::test_a_rollout_survives[network-half-open-stall]", 55.0),
    (
        "tests/integration/test_fault_suite_network.py::test_a_rollout_survives[apiserver-restart-same-etcd]",
        51.0,
    ),
    ("tests/integration/test_access_matrix.py", 50.0),
    ("tests/integration/test_watcher_memory.py", 50.0),  # 270 before its cut
    ("tests/e2e/test_demo.py::test_bad_metrics_stops_the_rollout_at_the_healthy_but_bad_canary", 46.0),
    ("tests/integration/test_leader_election.py::test_the_leader_killed_mid_rollout", 44.0),
)


def expected_seconds(nodeid: str) -> float:
    """What a test outside the shared stacks is expected to take, for the order (`LONG_TESTS`; 0: short)."""
    return next((seconds for prefix, seconds in LONG_TESTS if nodeid.startswith(prefix)), 0.0)


def _run_order(item: pytest.Item) -> tuple[int, float]:
    """The tests outside the real stack first, the long ones among them first (`LONG_TESTS`), the
    rest in collection order. The real-stack tests run last, together: the machine's node (started
    by the first of them) is held only meanwhile and stops with the session's fixtures right after
    the last. Those that stop the session's stack (to use the machine without it) go after every
    other: no restart after. (Sorted here, not at collection finish: pytest-xdist sends the order on
    before that. Its `--dist loadgroup` sends the biggest groups first whatever the order: the two
    real-stack workers' and Argo CD's; the tests without a group follow in this order.)"""
    if item.get_closest_marker("realstack") is None:
        return 0, -expected_seconds(item.nodeid)
    if item.get_closest_marker("stops_the_real_stack") is not None:
        return 3, 0.0
    return (2 if item.get_closest_marker("realstack_exclusive") is not None else 1), 0.0


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Before a realstack test (and its timeout) begins: its turn on the stack (shared by two
    workers, or its own), then wait for the node and start the stack, then check that every
    program of the stack still runs (a dead workflow-controller started again: `realstack.watch`).
    With PROGRESSIVE_SYNC_TEST_TIMELINE set, the whole of it goes in the run's timeline."""
    realstack = item.get_closest_marker("realstack") is not None
    with contextlib.ExitStack() as around:
        recorder = _timeline.get("recorder")
        if recorder is not None:
            around.enter_context(recorder.test(item.nodeid, realstack))
        if realstack:
            around.enter_context(realstack_plugin.test_turn(item, nextitem))
            realstack_plugin.warm_up(item)
            realstack_plugin.watch(item)
        yield


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A realstack test fails at once, before its fixtures, when a program of the stack is dead
    (the check ran before its protocol: `realstack.watch`), rather than wait out its timeout."""
    if item.get_closest_marker("realstack") is not None:
        realstack_plugin.fail_if_unhealthy(item)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pluggy.Result[pytest.TestReport], None]:
    """A failed realstack test's report carries a note of the stack's dead programs, if any
    (`realstack.health_note`), in its user_properties (pytest-xdist sends them to the controller,
    whose FAILED NOW line shows it: `_say_failure_now`)."""
    outcome = yield
    report = outcome.get_result()
    if report.failed and item.get_closest_marker("realstack") is not None:
        note = realstack_plugin.health_note(item)
        if note:
            report.user_properties.append((REPORT_PROPERTY, note))


# This process's timeline recorder (tests/support/timeline.py), when PROGRESSIVE_SYNC_TEST_TIMELINE is set.
_timeline: dict[str, timeline.Recorder] = {}


def pytest_sessionstart(session: pytest.Session) -> None:
    """Start this worker's timeline (when asked for)."""
    recorder = timeline.Recorder.for_worker(os.environ.get("PYTEST_XDIST_WORKER", "main"))
    if recorder is not None:
        _timeline["recorder"] = recorder
        recorder.session("start")


def pytest_sessionfinish(session: pytest.Session) -> None:
    """End this worker's timeline."""
    recorder = _timeline.pop("recorder", None)
    if recorder is not None:
        recorder.session("end")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Keep the setup/call/teardown durations for the timeline's line of this test. In the process
    that prints the run (pytest-xdist's controller, or pytest alone), name a failure the moment it
    is reported: a run cut short (CI's limit, .ci/run's budget) still says what failed and where."""
    recorder = _timeline.get("recorder")
    if recorder is not None:
        recorder.phases[report.when] = round(report.duration, 3)
        if report.failed:
            recorder.failed.append(report.when)
    if report.failed and "PYTEST_XDIST_WORKER" not in os.environ:
        _say_failure_now(report)


def _say_failure_now(report: pytest.TestReport) -> None:
    config = _printer.get("config")
    reporter = config.pluginmanager.get_plugin("terminalreporter") if config is not None else None
    if reporter is None:
        return
    worker = getattr(getattr(getattr(report, "node", None), "gateway", None), "id", "main")
    lines = str(report.longreprtext or "").strip().splitlines()
    why = next((line[1:].strip() for line in lines if line.startswith("E ")), lines[-1] if lines else "")
    health = next((str(value) for name, value in report.user_properties if name == REPORT_PROPERTY), "")
    reporter.write_line("")
    reporter.write_line(
        f"FAILED NOW {report.nodeid} [{report.when}, {report.duration:.0f}s, {worker}] {why[:300]}"
        + (f" [{health}]" if health else "")
    )


# The run's config, whose terminal reporter names failures as they happen (_say_failure_now).
_printer: dict[str, pytest.Config] = {}


def pytest_configure(config: pytest.Config) -> None:
    """Keep the config for _say_failure_now."""
    _printer["config"] = config
