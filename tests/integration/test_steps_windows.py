"""Windows (docs/windows.md) on a real kube-apiserver: while `spec.windows` or the Application's
AppProject sync window is closed, the `sync` step writes no sync and notes on the cluster's record
when the windows open; once they open, it writes the sync, and the cluster's progress deadline
counts from then. `select`'s first wave leaves a closed cluster to its own step. The clock is
passed in: each sleep of the step is a moment to look at the world, then the clock moves on.

The world (seeded fleet, steps' runner) is tests/support/steps_rig.py.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from orchestrator.core.clock import format_time
from orchestrator.devenv.controlplane import api_requests
from orchestrator.kube.client import APP_PROJECTS, Kube, NotFound
from steps.sync import sync_cluster
from tests.support.clock import ManualClock
from tests.support.kubectl import Kubectl
from tests.support.outcomes import record_failed, stage_outcomes
from tests.support.steps_harness import make_progressive_sync
from tests.support.steps_rig import REST, Rig, assert_ok, first_wave_args, opened, select_canary
from tests.support.watcher_harness import patch_spec

pytestmark = pytest.mark.integration


@dataclass(frozen=True)
class Look:
    """The world as the step fell asleep."""

    at: datetime
    synced: bool
    note: str


class WatchedClock(ManualClock):
    """A manual clock that looks at the cluster's Application and record at each sleep."""

    def __init__(self, start: datetime, rig: Rig, cluster: str, stage: str = "canary") -> None:
        super().__init__(start)
        self.rig, self.cluster, self.stage = rig, cluster, stage
        self.looks: list[Look] = []

    def sleep(self, seconds: float) -> None:
        if seconds >= 1:  # the window waits, not the sub-second backoffs
            records = stage_outcomes(self.rig.kube, "myservice", self.rig.namespace)[self.stage]
            record = records.clusters.get(self.cluster)
            self.looks.append(
                Look(self.now(), "operation" in self.rig.app(self.cluster), record.note if record else "")
            )
        super().sleep(seconds)


def _deny_from(start: datetime, minutes: int) -> dict[str, Any]:
    """A deny window that started at `start`'s minute and lasts `minutes`."""
    return {"kind": "deny", "schedule": f"{start.minute} {start.hour} * * *", "duration": f"{minutes}m"}


@pytest.fixture
def project(rig: Rig) -> Iterator[Any]:
    """Writes the `default` AppProject of the rig's namespace (where the steps read Argo CD's objects)."""

    def write(sync_windows: list[dict[str, Any]]) -> None:
        body = {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "AppProject",
            "metadata": {"name": "default", "namespace": rig.namespace},
            "spec": {
                "sourceRepos": ["*"],
                "destinations": [{"server": "*", "namespace": "*"}],
                "syncWindows": sync_windows,
            },
        }
        with contextlib.suppress(NotFound):
            rig.kube.delete(APP_PROJECTS, rig.namespace, "default")
        rig.kube.create(APP_PROJECTS, rig.namespace, body)

    yield write


def _run_sync(rig: Rig, steps_config: Path, clock: WatchedClock) -> Any:
    client = Kube.from_kubeconfig(str(steps_config))
    try:
        return sync_cluster(client, opened(rig, client, "canary", clock=clock), clock.cluster)
    finally:
        client.close()


@pytest.mark.parametrize("source", ["spec.windows", "AppProject"])
def test_no_sync_is_written_while_a_window_is_closed(
    rig: Rig, steps_config: Path, project: Any, source: str
) -> None:
    start = datetime.now(UTC).replace(second=20, microsecond=0)
    deny = _deny_from(start, 10)
    opens = start.replace(second=0) + timedelta(minutes=10)
    if source == "spec.windows":
        make_progressive_sync(rig.kube, rig.namespace, windows=[deny])
    else:
        make_progressive_sync(rig.kube, rig.namespace)
        project([{**deny, "applications": ["*"]}])
    cluster = select_canary(rig.runner)  # a real clock inside the window: no first wave
    assert "operation" not in rig.app(cluster), "the first wave wrote a sync inside a closed window"

    clock = WatchedClock(start, rig, cluster)
    result = _run_sync(rig, steps_config, clock)

    assert not result.failed, result.summary
    assert result.requested == (f"myservice-{cluster}",)
    assert clock.looks, "the step never waited"
    assert not any(look.synced for look in clock.looks), "a sync was written while the window was closed"
    assert all(look.at < opens for look in clock.looks)
    note = clock.looks[0].note
    assert note.startswith(f"waiting for window: opens at {format_time(opens)}"), note
    assert ("spec.windows" if source == "spec.windows" else "AppProject default") in note
    app = rig.app(cluster)
    assert app["operation"]["info"], "the sync was written once the window opened"
    record = stage_outcomes(rig.kube, "myservice", rig.namespace)["canary"].clusters[cluster]
    assert record.note == "", "the waiting note is cleared once the sync is written"
    assert record.started_at is not None and record.started_at >= opens, "the deadline counts from the sync"


class PausingClock(WatchedClock):
    """Pauses the ProgressiveSync while the step waits for the window, and lifts the pause after
    `held` of the step's looks past the moment the window opened."""

    def __init__(self, start: datetime, rig: Rig, cluster: str, *, opens: datetime, held: int) -> None:
        super().__init__(start, rig, cluster)
        self.opens, self.held = opens, held
        self.unpaused_at: datetime | None = None

    def sleep(self, seconds: float) -> None:
        if self.now() < self.opens:
            patch_spec(self.rig.kube, self.rig.namespace, "myservice", {"paused": True})
        elif self.unpaused_at is None and sum(look.at >= self.opens for look in self.looks) >= self.held:
            patch_spec(self.rig.kube, self.rig.namespace, "myservice", {"paused": False})
            self.unpaused_at = self.now()
        super().sleep(seconds)


def test_a_pause_during_the_window_wait_holds_the_cluster_until_the_unpause(
    rig: Rig, steps_config: Path
) -> None:
    """The cluster's sync was not written when the window opened, so a pause set meanwhile holds it
    (no new cluster starts while paused, steps.pause); it is written once, after the unpause."""
    start = datetime.now(UTC).replace(second=20, microsecond=0)
    make_progressive_sync(rig.kube, rig.namespace, windows=[_deny_from(start, 10)])
    opens = start.replace(second=0) + timedelta(minutes=10)
    cluster = select_canary(rig.runner)
    clock = PausingClock(start, rig, cluster, opens=opens, held=3)
    result = _run_sync(rig, steps_config, clock)

    assert result.requested == (f"myservice-{cluster}",), result.summary
    assert clock.unpaused_at is not None, "the step never held while paused"
    held = [look for look in clock.looks if look.at >= opens]
    assert len(held) >= 3 and not any(look.synced for look in held), "a sync was written while paused"
    assert rig.app(cluster)["operation"]["info"], "the sync was written after the unpause"
    record = stage_outcomes(rig.kube, "myservice", rig.namespace)["canary"].clusters[cluster]
    assert record.started_at is not None and record.started_at >= clock.unpaused_at


def test_an_open_window_writes_at_once(rig: Rig, steps_config: Path, project: Any) -> None:
    start = datetime.now(UTC).replace(second=20, microsecond=0)
    allow = {**_deny_from(start, 10), "kind": "allow"}
    make_progressive_sync(rig.kube, rig.namespace, windows=[allow])
    project([{**_deny_from(start + timedelta(hours=2), 10), "applications": ["*"]}])  # not now
    cluster = select_canary(rig.runner)
    clock = WatchedClock(start, rig, cluster)
    result = _run_sync(rig, steps_config, clock)
    assert result.requested, result.summary
    assert clock.looks == []


@pytest.mark.parametrize("source", ["spec.windows", "AppProject"])
def test_the_first_wave_leaves_a_closed_cluster_to_its_step(rig: Rig, project: Any, source: str) -> None:
    now = datetime.now(UTC)
    deny = _deny_from(now, 30)
    if source == "spec.windows":
        make_progressive_sync(rig.kube, rig.namespace, stages=[REST], windows=[deny])
    else:
        make_progressive_sync(rig.kube, rig.namespace, stages=[REST])
        project([{**deny, "applications": ["*"]}])
    result = rig.runner.run("select", "--stage", "rest", *first_wave_args(rig, 2))
    assert_ok(result)
    assert "started the sync of 0 cluster(s), left 2 to their own step" in result.stdout, result.stdout
    assert not any("operation" in rig.app(cluster) for cluster in rig.stage("rest").targets)


class FailingSiblingClock(WatchedClock):
    """At the step's first wait, a sibling of the stage is recorded failed: the stage fails."""

    def __init__(self, start: datetime, rig: Rig, cluster: str, sibling: str) -> None:
        super().__init__(start, rig, cluster, stage="rest")
        self.sibling = sibling

    def sleep(self, seconds: float) -> None:
        if seconds >= 1 and not self.looks:
            record_failed(
                self.rig.kube,
                self.rig.namespace,
                "myservice",
                stage="rest",
                cluster=self.sibling,
                reason="Degraded",
            )
        super().sleep(seconds)


def test_a_stage_that_fails_while_a_cluster_waits_gets_no_sync(rig: Rig, steps_config: Path) -> None:
    start = datetime.now(UTC).replace(second=20, microsecond=0)
    make_progressive_sync(rig.kube, rig.namespace, stages=[REST], windows=[_deny_from(start, 10)])
    assert_ok(rig.runner.run("select", "--stage", "rest"))
    first, sibling = rig.stage("rest").targets[:2]
    clock = FailingSiblingClock(start, rig, first, sibling)
    client = Kube.from_kubeconfig(str(steps_config))
    try:
        result = sync_cluster(client, opened(rig, client, "rest", clock=clock), first)
    finally:
        client.close()
    assert result.failed and "stage" in result.failure, result.summary
    assert "operation" not in rig.app(first), "no sync is written in a failed stage"
    record = stage_outcomes(rig.kube, "myservice", rig.namespace)["rest"].clusters[first]
    assert record.state.value == "Failed", record


@pytest.mark.parametrize(
    "open_one", [0, 1, 2], ids=["first-by-name-open", "second-by-name-open", "third-by-name-open"]
)
def test_select_puts_the_clusters_a_window_holds_after_the_others(
    rig: Rig, project: Any, open_one: int
) -> None:
    """An AppProject deny window for two of the three Applications: `select` records the open
    cluster first (whatever the plan's order), so the one-cluster first wave syncs it, and the
    held ones keep their planned order behind it."""
    names = sorted(c.name for c in rig.fleet.clusters)
    opened_cluster = names[open_one]
    held = [name for name in names if name != opened_cluster]
    deny = {**_deny_from(datetime.now(UTC), 30), "applications": [f"*-{name}" for name in held]}
    make_progressive_sync(rig.kube, rig.namespace, stages=[REST])
    project([deny])

    result = rig.runner.run("select", "--stage", "rest", *first_wave_args(rig, 1))

    assert_ok(result)
    targets = rig.stage("rest").targets
    assert targets[0] == opened_cluster, targets
    assert sorted(targets[1:]) == held
    assert "operation" in rig.app(opened_cluster), "the first wave syncs the open cluster"
    assert not any("operation" in rig.app(name) for name in held)


def _appproject_gets(kubectl: Kubectl) -> float:
    """The API server's count of AppProject GETs so far (every code)."""
    return api_requests(kubectl.ok("get", "--raw", "/metrics"), resource="appprojects", verb="GET")


@pytest.mark.parametrize(
    "deny",
    [pytest.param(False, id="window-open"), pytest.param(True, id="a-window-holds-one-cluster")],
)
def test_select_reads_the_appproject_once_for_the_order_and_the_first_wave(
    rig: Rig, project: Any, kubectl: Kubectl, deny: bool
) -> None:
    """`select` reads the targets' AppProject once: the targets' order and the first wave decide on
    the same read (each at its own time). Counted by the session's API server; no other client of
    it runs meanwhile (one test at a time per worker)."""
    names = sorted(c.name for c in rig.fleet.clusters)
    windows = [{**_deny_from(datetime.now(UTC), 30), "applications": [f"*-{names[0]}"]}] if deny else []
    make_progressive_sync(rig.kube, rig.namespace, stages=[REST])
    project(windows)
    before = _appproject_gets(kubectl)

    result = rig.runner.run("select", "--stage", "rest", *first_wave_args(rig, 2))

    assert_ok(result)
    assert _appproject_gets(kubectl) - before == 1
    synced = sorted(name for name in names if "operation" in rig.app(name))
    assert synced == (names[1:3] if deny else names[:2]), synced
