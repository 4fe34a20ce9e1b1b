"""The simulated Argo CD's decisions, played on one Application without an API server.

`play` asks `next_step` for the next write, stores it (as the API server would) and jumps the clock to
the next wake-up, so each test reads the whole sequence of writes Argo CD would make and the object
it leaves. What each behaviour must reproduce is REFERENCE.md (Argo CD Applications) and Argo CD's
controller/appcontroller.go, controller/sync.go and applicationset_controller.go.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from orchestrator.argocd import appsync
from orchestrator.core.clock import format_time, parse_time
from orchestrator.simulator.appset import ClusterParams, desired_metadata, render
from orchestrator.simulator.behaviours import next_step
from orchestrator.simulator.comparison import REFRESH_ANNOTATION
from orchestrator.simulator.config import Behaviour, Health, SyncWindow
from orchestrator.simulator.decision_types import Step, Timeline, World
from orchestrator.simulator.git import GitRefs, UnresolvableRevision, refs_configmap
from orchestrator.simulator.sync_operation import MSG_BLOCKED, MSG_SUCCEEDED, MSG_TERMINATED, next_retry_at

START = datetime(2030, 1, 2, 15, 4, 5, tzinfo=UTC)
OLD = "0" * 40
NEW = "4f1c2e9b7a3d5c8e1f0a2b4c6d8e0f1a3b5c7d9e"
NEWER = "9" * 40
SOURCE = {"repoURL": "https://git.example.test/app.git", "path": "deploy", "targetRevision": "main"}


def make_app(
    *,
    name: str = "web-eu",
    sync: str = "OutOfSync",
    revision: str = NEW,
    applied: str = OLD,
    operation: dict[str, Any] | None = None,
    annotations: dict[str, str] | None = None,
    **metadata: Any,
) -> dict[str, Any]:
    """An Application as the seeded fleet has them: last synced at `applied`, compared at `revision`."""
    earlier = format_time(START - timedelta(hours=1))
    app: dict[str, Any] = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Application",
        "metadata": {
            "name": name,
            "resourceVersion": "1",
            "annotations": dict(annotations or {}),
            **metadata,
        },
        "spec": {"project": "default", "source": SOURCE, "destination": {"name": "eu", "namespace": "web"}},
        "status": {
            "sync": {"status": sync, "revision": revision},
            "health": {"status": "Healthy"},
            "reconciledAt": format_time(START - timedelta(minutes=1)),
            "history": [{"id": 0, "revision": applied, "deployedAt": earlier}],
            "operationState": {
                "operation": {"sync": {"revision": applied}},
                "phase": "Succeeded",
                "startedAt": earlier,
                "finishedAt": earlier,
                "syncResult": {"revision": applied, "source": SOURCE},
            },
        },
    }
    if operation is not None:
        app["operation"] = operation
    return app


def sync_op(
    revision: str = NEW,
    *,
    automated: bool = True,
    prune: bool = False,
    options: tuple[str, ...] = (),
    retry: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """An operation like a sync request's (ours: automated initiator)."""
    op: dict[str, Any] = {
        "initiatedBy": {"username": "progressive-sync", "automated": automated},
        "info": [{"name": "rollout-id", "value": "r1"}],
        "sync": {"revision": revision, "prune": prune, "syncStrategy": {"hook": {}}},
    }
    if options:
        op["sync"]["syncOptions"] = list(options)
    if retry is not None:
        op["retry"] = retry
    return op


@dataclass
class Played:
    """What `play` saw: each write, the object left, the clock at the end."""

    steps: list[Step] = field(default_factory=list)
    app: dict[str, Any] = field(default_factory=dict)
    now: datetime = START
    timeline: Timeline = field(default_factory=Timeline)

    @property
    def names(self) -> list[str]:
        return [step.name for step in self.steps]

    @property
    def events(self) -> list[str]:
        return [event.name for step in self.steps for event in step.events]

    def state(self) -> dict[str, Any]:
        return dict(self.app["status"]["operationState"])

    def written(self, name: str) -> dict[str, Any]:
        """The object as the (first) write called `name` stored it."""
        return next(step.app for step in self.steps if step.name == name)


def play(
    app: dict[str, Any],
    world: World,
    *,
    seconds: float = 120.0,
    played: Played | None = None,
    max_steps: int = 40,
) -> Played:
    """Run the decisions until nothing more is due (or `seconds` of simulated time pass)."""
    played = played or Played(app=app)
    played.app = app
    end = played.now + timedelta(seconds=seconds)
    while len(played.steps) < max_steps:
        decision = next_step(played.app, world, played.now, played.timeline)
        if decision.step is not None:
            step = decision.step
            assert step.landed_in(step.app), f"{step.name}: its proof does not hold on what it writes"
            assert not step.landed_in(played.app), f"{step.name}: its proof already holds before it"
            for mark in step.marks:
                played.timeline.mark(mark, played.now)
            played.steps.append(step)
            played.app = copy.deepcopy(step.app)
            played.app["metadata"]["resourceVersion"] = str(
                int(played.app["metadata"]["resourceVersion"]) + 1
            )
            continue
        if decision.wake_at is None or decision.wake_at > end:
            break
        played.now = max(played.now, decision.wake_at)
    return played


def world(**behaviour: Any) -> World:
    """A world of one cluster: syncs take 2 s, health settles 3 s after the comparison."""
    return World(behaviour=Behaviour(**{"sync_seconds": 2.0, "health_seconds": 3.0, **behaviour}))


# --- the operation ------------------------------------------------------------------------------


def test_the_happy_path_is_argo_cds_order_of_writes() -> None:
    played = play(make_app(operation=sync_op()), world())
    assert played.names == ["pick-up", "sync-running", "sync-finish", "compare", "health"]
    assert played.events == ["sync-start", "sync-finish", "compared", "progressing", "healthy"]

    picked = played.written("pick-up")
    assert picked["status"]["operationState"] == {
        "operation": sync_op(),
        "phase": "Running",
        "startedAt": format_time(START),
    }
    assert picked["operation"] == sync_op(), "the operation stays until it completes"
    assert picked["status"]["sync"]["status"] == "OutOfSync", "pick-up does not compare"

    finished = played.written("sync-finish")
    state = finished["status"]["operationState"]
    assert (state["phase"], state["message"]) == ("Succeeded", MSG_SUCCEEDED)
    assert state["syncResult"]["revision"] == NEW and state["finishedAt"] == format_time(
        START + timedelta(seconds=2)
    )
    assert "operation" not in finished
    assert finished["status"]["sync"] == {"status": "OutOfSync", "revision": NEW}, "compared only after"
    assert finished["status"]["history"][-1]["revision"] == NEW

    compared = played.written("compare")["status"]
    assert compared["sync"]["status"] == "Synced" and compared["sync"]["revision"] == NEW
    assert compared["sync"]["comparedTo"]["destination"] == {"name": "eu", "namespace": "web"}
    assert compared["health"]["status"] == "Progressing"
    assert parse_time(compared["reconciledAt"]) >= parse_time(state["finishedAt"])  # type: ignore[operator]

    final = played.app["status"]
    assert final["health"]["status"] == "Healthy"
    assert final["reconciledAt"] == compared["reconciledAt"], "a health change does not move reconciledAt"


@pytest.mark.parametrize(
    ("behaviour", "op", "names", "phase", "message"),
    [
        pytest.param(
            {"sync_seconds": 0.0},
            sync_op(),
            ["pick-up", "sync-finish", "compare", "health"],
            "Succeeded",
            MSG_SUCCEEDED,
            id="an-instant-sync-has-no-running-step",
        ),
        pytest.param(
            {"fail": True},
            sync_op(),
            ["pick-up", "sync-running", "sync-finish", "compare"],
            "Failed",
            "one or more objects failed to apply",
            id="failed",
        ),
        pytest.param(
            {"error": True},
            sync_op(),
            ["pick-up", "sync-running", "sync-finish", "compare"],
            "Error",
            "rpc error",
            id="error",
        ),
        pytest.param(
            {"fail_attempts": 1},
            sync_op(retry={"limit": 2, "backoff": {"duration": "1s", "factor": 2}}),
            ["pick-up", "sync-running", "sync-attempt-failed", "sync-retry", "sync-running", "sync-finish"],
            "Succeeded",
            MSG_SUCCEEDED,
            id="argo-cd-retries-then-succeeds",
        ),
        pytest.param(
            {"fail": True},
            sync_op(retry={"limit": 1, "backoff": {"duration": "1s"}}),
            ["pick-up", "sync-running", "sync-attempt-failed", "sync-retry", "sync-running", "sync-finish"],
            "Failed",
            "(retried 1 times).",
            id="retries-run-out",
        ),
        pytest.param(
            {"fail_attempts": 1},
            sync_op(),
            ["pick-up", "sync-running", "sync-finish"],
            "Failed",
            "failed to apply",
            id="no-retry-without-operation-retry",
        ),
        pytest.param(
            {"require_sync_options": ("CreateNamespace=true",)},
            sync_op(),
            ["pick-up", "sync-running", "sync-finish"],
            "Failed",
            'namespaces "web" not found',
            id="a-needed-sync-option-missing",
        ),
        pytest.param(
            {"require_sync_options": ("CreateNamespace=true",)},
            sync_op(options=("CreateNamespace=true", "ServerSideApply=true")),
            ["pick-up", "sync-running", "sync-finish"],
            "Succeeded",
            MSG_SUCCEEDED,
            id="the-needed-sync-option-present",
        ),
    ],
)
def test_how_an_operation_ends(
    behaviour: dict[str, Any], op: dict[str, Any], names: list[str], phase: str, message: str
) -> None:
    played = play(make_app(operation=op), world(**behaviour))
    assert played.names[: len(names)] == names
    finish = played.written("sync-finish")["status"]["operationState"]
    assert finish["phase"] == phase and message in finish["message"]
    assert "operation" not in played.app


def test_between_retries_the_operation_is_running_with_finished_at() -> None:
    op = sync_op(retry={"limit": 3, "backoff": {"duration": "2s", "factor": 2, "maxDuration": "1m"}})
    played = play(make_app(operation=op), world(fail_attempts=2))
    failed = played.written("sync-attempt-failed")["status"]["operationState"]
    assert failed["phase"] == "Running" and failed["finishedAt"] and failed["retryCount"] == 1
    assert (
        failed["message"].startswith("one or more objects failed to apply")
        and "Retrying attempt #1 at" in failed["message"]
    )
    assert played.written("sync-attempt-failed")["operation"] == op, "the operation stays while retrying"
    retry = played.written("sync-retry")["status"]["operationState"]
    assert retry["message"] == "Retrying operation. Attempt #1"
    assert "finishedAt" not in retry and "syncResult" not in retry
    state = played.state()
    assert (state["phase"], state["retryCount"]) == ("Succeeded", 2)


@pytest.mark.parametrize(
    ("retry", "count", "seconds"),
    [
        pytest.param({}, 0, 5, id="argo-cd-default-5s"),
        pytest.param({}, 1, 10, id="default-factor-2"),
        pytest.param({"backoff": {"duration": "3", "factor": 3}}, 2, 27, id="bare-number-is-seconds"),
        pytest.param({"backoff": {"duration": "1m", "maxDuration": "90s"}}, 3, 90, id="capped"),
        pytest.param({"backoff": {"duration": "500ms", "factor": 1}}, 4, 0.5, id="milliseconds"),
    ],
)
def test_next_retry_at(retry: dict[str, Any], count: int, seconds: float) -> None:
    assert next_retry_at(retry, START, count) == START + timedelta(seconds=seconds)


def test_a_hung_operation_waits_for_terminate_then_fails_terminated() -> None:
    played = play(make_app(operation=sync_op()), world(hang=True))
    assert played.names == ["pick-up", "sync-running"]
    assert played.state()["phase"] == "Running"
    played.app["status"]["operationState"]["phase"] = "Terminating"
    play(played.app, world(hang=True), played=played)
    assert played.names[2:4] == ["sync-finish", "compare"]
    state = played.state()
    assert (state["phase"], state["message"]) == ("Failed", MSG_TERMINATED)
    assert "operation" not in played.app and state["finishedAt"]


@pytest.mark.parametrize(
    ("automated", "manual_sync", "blocked"),
    [
        pytest.param(True, False, True, id="automated-sync-blocked"),
        pytest.param(True, True, True, id="manualSync-does-not-let-automated-through"),
        pytest.param(False, False, True, id="manual-sync-blocked"),
        pytest.param(False, True, False, id="manual-sync-let-through"),
    ],
)
def test_a_deny_window_holds_the_operation_running(automated: bool, manual_sync: bool, blocked: bool) -> None:
    deny = {"sync_window": SyncWindow.DENY, "sync_window_manual_sync": manual_sync}
    played = play(make_app(operation=sync_op(automated=automated)), world(**deny), seconds=30)
    if not blocked:
        assert played.state()["phase"] == "Succeeded"
        return
    assert played.names == ["pick-up", "sync-blocked"]
    state = played.state()
    assert (state["phase"], state["message"]) == ("Running", MSG_BLOCKED)
    assert state["syncResult"]["revision"] == NEW, "the requested revision, not resolved yet"
    # A terminate ends it while the window is still in force: Argo CD v3.6's SyncAppState checks
    # the window only for a phase other than Terminating (controller/sync.go).
    played.app["status"]["operationState"]["phase"] = "Terminating"
    play(played.app, world(**deny), played=played, seconds=30)
    assert (played.state()["phase"], played.state()["message"]) == ("Failed", MSG_TERMINATED)
    assert played.names[:3] == ["pick-up", "sync-blocked", "sync-finish"]


def test_a_lifted_window_lets_the_sync_run() -> None:
    played = play(make_app(operation=sync_op()), world(sync_window=SyncWindow.DENY), seconds=10)
    play(played.app, world(), played=played)
    assert played.state()["phase"] == "Succeeded"
    assert played.names[-3:] == ["sync-finish", "compare", "health"]


def test_the_controller_resumes_a_running_operation_and_ignores_a_newer_request() -> None:
    played = play(make_app(operation=sync_op()), world(hang=True))
    played.app["operation"] = sync_op(NEWER)
    play(played.app, world(hang=True), played=played)
    assert played.state()["operation"]["sync"]["revision"] == NEW
    assert played.names == ["pick-up", "sync-running"]


def test_pick_up_waits_for_the_controllers_queue() -> None:
    played = play(make_app(operation=sync_op()), world(pick_up_seconds=4))
    assert played.written("pick-up")["status"]["operationState"]["startedAt"] == format_time(
        START + timedelta(seconds=4)
    )


# --- revisions -----------------------------------------------------------------------------------

GIT = GitRefs({"main": NEW, "v1.2.0": NEW, "release": NEWER})


@pytest.mark.parametrize(
    ("pin", "resolved"),
    [
        pytest.param(NEW, NEW, id="full-sha"),
        pytest.param(NEW[:7], NEW, id="short-sha"),
        pytest.param("v1.2.0", NEW, id="tag"),
        pytest.param("release", NEWER, id="branch"),
        pytest.param("", NEW, id="empty-is-the-target-revision"),
    ],
)
def test_the_result_is_the_resolved_full_sha(pin: str, resolved: str) -> None:
    played = play(make_app(operation=sync_op(pin)), World(behaviour=Behaviour(), git=GIT))
    assert played.state()["syncResult"]["revision"] == resolved
    assert played.written("sync-running")["status"]["operationState"]["syncResult"]["revision"] == resolved
    assert played.app["status"]["sync"]["revision"] == NEW, "compared against what main resolves to"
    assert played.app["status"]["sync"]["status"] == ("Synced" if resolved == NEW else "OutOfSync")


def test_an_unknown_revision_ends_in_error() -> None:
    played = play(make_app(operation=sync_op("v9.9.9")), World(behaviour=Behaviour(), git=GIT))
    state = played.state()
    assert state["phase"] == "Error" and "unable to resolve 'v9.9.9' to a commit SHA" in state["message"]


@pytest.mark.parametrize(
    ("refs", "revision", "target", "expected"),
    [
        pytest.param({}, "v1", "main", "v1", id="no-repository-takes-it-as-written"),
        pytest.param({"main": NEW}, "", "HEAD", NEW, id="head-is-main"),
        pytest.param({"main": NEW, "x": NEWER}, "999999", "", UnresolvableRevision, id="no-such-short-sha"),
        pytest.param({"a": NEW, "b": NEW[:10] + "f" * 30}, NEW[:8], "", UnresolvableRevision, id="ambiguous"),
    ],
)
def test_git_resolution(refs: dict[str, str], revision: str, target: str, expected: Any) -> None:
    git = GitRefs(refs)
    if expected is UnresolvableRevision:
        with pytest.raises(UnresolvableRevision):
            git.resolve(revision, target_revision=target)
    else:
        assert git.resolve(revision, target_revision=target) == expected


# --- Helm charts and multi-source ----------------------------------------------------------------

CHART_REPO = "http://charts.example.test"
CHART_SOURCE = {"repoURL": CHART_REPO, "chart": "web", "targetRevision": "1.2.*"}
CHARTS = {CHART_REPO: {"web": ("1.2.3", "1.2.4")}}


def helm_app(sources: list[dict[str, Any]], *, compared: list[str], applied: list[str]) -> dict[str, Any]:
    """An Application of `sources` (one: `spec.source`), Synced and Healthy at `applied`, compared
    at `compared`."""
    app = make_app(sync="Synced", revision=compared[0], applied=applied[0])
    if len(sources) == 1:
        app["spec"]["source"] = sources[0]
        app["status"]["operationState"]["syncResult"]["source"] = sources[0]
        return app
    del app["spec"]["source"]
    app["spec"]["sources"] = sources
    app["status"]["sync"] = {"status": "Synced", "revisions": compared}
    app["status"]["operationState"]["syncResult"] = {"revisions": applied, "sources": sources}
    return app


def test_a_chart_source_is_compared_at_the_chart_version_its_constraint_resolves_to() -> None:
    app = helm_app([CHART_SOURCE], compared=["1.2.3"], applied=["1.2.3"])
    app["status"]["reconciledAt"] = format_time(START)
    git = GitRefs({}, CHARTS)
    played = play(app, World(behaviour=Behaviour(refresh_seconds=30), git=git), seconds=100, max_steps=1)
    assert played.names == ["periodic-compare"]
    assert played.app["status"]["sync"]["status"] == "OutOfSync"
    assert played.app["status"]["sync"]["revision"] == "1.2.4", "the chart version itself, not a SHA"


@pytest.mark.parametrize(
    ("pin", "phase", "applied"),
    [
        pytest.param("1.2.4", "Succeeded", "1.2.4", id="the-version-pinned"),
        pytest.param("", "Succeeded", "1.2.4", id="empty-is-the-constraint-resolved"),
        pytest.param("1.3.*", "Error", "", id="a-constraint-nothing-meets"),
    ],
)
def test_a_sync_of_a_chart_applies_the_chart_version(pin: str, phase: str, applied: str) -> None:
    app = helm_app([CHART_SOURCE], compared=["1.2.4"], applied=["1.2.3"])
    app["status"]["sync"]["status"] = "OutOfSync"
    app["operation"] = sync_op(pin)
    played = play(app, World(behaviour=Behaviour(), git=GitRefs({}, CHARTS)))
    state = played.state()
    assert state["phase"] == phase, state
    if applied:
        assert state["syncResult"]["revision"] == applied
        assert played.app["status"]["sync"] == {**played.app["status"]["sync"], "status": "Synced"}
    else:
        assert "version matching constraint not found" in state["message"]


def test_a_multi_source_application_resolves_each_source_by_its_type() -> None:
    """The chart with its values from Git: revisions are (chart version, commit SHA)."""
    values = {"repoURL": SOURCE["repoURL"], "targetRevision": "main", "ref": "values"}
    app = helm_app([CHART_SOURCE, values], compared=["1.2.3", OLD], applied=["1.2.3", OLD])
    app["operation"] = sync_op()
    app["operation"]["sync"] = {"revisions": ["1.2.4", NEW[:7]], "syncStrategy": {"hook": {}}}
    played = play(app, World(behaviour=Behaviour(), git=GitRefs({"main": NEW}, CHARTS)))
    assert played.state()["phase"] == "Succeeded"
    assert played.state()["syncResult"]["revisions"] == ["1.2.4", NEW]
    assert played.app["status"]["sync"]["status"] == "Synced"
    assert played.app["status"]["sync"]["revisions"] == ["1.2.4", NEW]


def test_the_charts_are_read_from_the_simulated_repository_configmap() -> None:
    git = GitRefs.from_configmap(
        refs_configmap({"main": NEW}, {CHART_REPO + "/": {"web": ["1.2.3", "1.2.4"]}})
    )
    assert git.resolve_source(CHART_SOURCE) == "1.2.4"
    assert git.resolve_source({"repoURL": SOURCE["repoURL"], "targetRevision": "main"}) == NEW
    with pytest.raises(UnresolvableRevision, match="chart 'api' not found"):
        git.resolve_source({**CHART_SOURCE, "chart": "api"})


# --- comparisons and health ----------------------------------------------------------------------


def test_the_stale_in_between_state() -> None:
    """Synced + Healthy at the OLD revision with reconciledAt == finishedAt, before the real comparison."""
    played = play(make_app(operation=sync_op()), world(stale_seconds=5))
    assert played.names == ["pick-up", "sync-running", "sync-finish", "stale-compare", "compare", "health"]
    stale = played.written("stale-compare")["status"]
    finished_at = stale["operationState"]["finishedAt"]
    assert stale["sync"]["status"] == "Synced" and stale["sync"]["revision"] == OLD
    assert stale["health"]["status"] == "Healthy" and stale["reconciledAt"] == finished_at
    real = played.written("compare")["status"]
    assert real["sync"]["revision"] == NEW and real["health"]["status"] == "Progressing"
    assert parse_time(real["reconciledAt"]) == parse_time(finished_at) + timedelta(seconds=5)  # type: ignore[operator]


def test_a_refresh_right_after_a_sync_is_the_comparison_after_it() -> None:
    """Asked for during the stale state, a comparison sees what the sync applied (not the old health)."""
    played = play(make_app(operation=sync_op()), world(stale_seconds=60, health=Health.DEGRADED), seconds=5)
    assert played.names[-1] == "stale-compare"
    played.app["metadata"]["annotations"].update(appsync.refresh_patch(START)["metadata"]["annotations"])
    play(played.app, world(stale_seconds=60, health=Health.DEGRADED), played=played)
    assert played.names[-2:] == ["refresh", "health"]
    refreshed = played.written("refresh")
    assert (
        refreshed["status"]["sync"]["revision"] == NEW
        and refreshed["status"]["health"]["status"] == "Progressing"
    )
    assert not set(appsync.REFRESH_ANNOTATIONS) & set(refreshed["metadata"]["annotations"]), (
        "request and stamp consumed"
    )
    assert played.app["status"]["health"]["status"] == "Degraded"
    assert "compare" not in played.names, "no second comparison after the refresh"


@pytest.mark.parametrize(
    ("behaviour", "healths", "sync"),
    [
        pytest.param({"health": Health.SUSPENDED}, ["Progressing", "Suspended"], "Synced", id="suspended"),
        pytest.param({"health": Health.UNKNOWN}, ["Progressing", "Unknown"], "Synced", id="unknown"),
        pytest.param(
            {"health": Health.MISSING}, ["Progressing", "Missing"], "OutOfSync", id="missing-is-outofsync"
        ),
        pytest.param({"degrade": True}, ["Progressing", "Degraded"], "Synced", id="degraded-old-spelling"),
        pytest.param(
            {"health": Health.DEGRADED, "recover_seconds": 4},
            ["Progressing", "Degraded", "Healthy"],
            "Synced",
            id="degraded-that-recovers",
        ),
    ],
)
def test_where_health_goes_after_a_sync(behaviour: dict[str, Any], healths: list[str], sync: str) -> None:
    played = play(make_app(operation=sync_op()), world(**behaviour))
    seen = [
        step.app["status"]["health"]["status"] for step in played.steps if step.name in ("compare", "health")
    ]
    assert seen == healths
    assert played.app["status"]["sync"]["status"] == sync
    transitions = [
        step.app["status"]["health"]["lastTransitionTime"] for step in played.steps if step.name == "health"
    ]
    assert transitions == sorted(transitions)


@pytest.mark.parametrize(
    ("prune", "sync", "requires_pruning"),
    [
        pytest.param(False, "OutOfSync", True, id="prune-off-requires-pruning"),
        pytest.param(True, "Synced", False, id="prune-on-removes-it"),
    ],
)
def test_a_removed_resource(prune: bool, sync: str, requires_pruning: bool) -> None:
    played = play(make_app(operation=sync_op(prune=prune)), world(removed_resource=True))
    status = played.app["status"]
    assert played.state()["phase"] == "Succeeded"
    assert status["sync"]["status"] == sync and status["sync"]["revision"] == NEW
    assert any(r.get("requiresPruning") for r in status["resources"]) == requires_pruning


def test_the_refresh_annotation_compares_at_once_and_is_consumed() -> None:
    app = make_app(sync="Synced", revision=OLD, annotations={REFRESH_ANNOTATION: "normal", "team": "a"})
    played = play(app, World(behaviour=Behaviour(), git=GitRefs({"main": NEW})))
    assert played.names == ["refresh"]
    assert played.events == ["compared", "refresh-consumed"]
    assert played.app["metadata"]["annotations"] == {"team": "a"}
    assert played.app["status"]["sync"] == {
        **played.app["status"]["sync"],
        "status": "OutOfSync",
        "revision": NEW,
    }
    assert played.app["status"]["reconciledAt"] == format_time(START)


def test_refresh_lag_a_new_release_is_seen_at_the_next_periodic_refresh() -> None:
    app = make_app(sync="Synced", revision=OLD)
    app["status"]["reconciledAt"] = format_time(START)
    behaviour = World(behaviour=Behaviour(refresh_seconds=30), git=GitRefs({"main": NEW}))
    played = play(app, behaviour, seconds=100, max_steps=1)
    assert played.names == ["periodic-compare"]
    seen_at = parse_time(played.app["status"]["reconciledAt"])
    assert seen_at is not None and START + timedelta(seconds=30) <= seen_at < START + timedelta(seconds=61)
    assert (
        played.app["status"]["sync"]["status"] == "OutOfSync"
        and played.app["status"]["sync"]["revision"] == NEW
    )


def test_no_comparison_without_a_reason() -> None:
    played = play(make_app(), world(), seconds=600)
    assert played.steps == []


# --- the ApplicationSet controller ---------------------------------------------------------------

APP_SET = {
    "metadata": {"name": "web"},
    "spec": {
        "preservedFields": {"annotations": ["team.example.com/owner"], "labels": ["keep"]},
        "template": {
            "metadata": {
                "name": "web-{{name}}",
                "annotations": {"region": "{{metadata.labels.region}}"},
                "labels": {"app": "web", "server": "{{server}}"},
            }
        },
    },
}
CLUSTER = ClusterParams("eu", "https://eu.example.test", {"region": "eu-west-1"})


def test_the_applicationset_controller_rewrites_annotations_and_labels() -> None:
    app = make_app(
        annotations={
            "progressivesync.io/rollout-id": "r1",
            REFRESH_ANNOTATION: "normal",
            "team.example.com/owner": "payments",
            "simulator.progressivesync.io/hang": "false",
            "region": "wrong",
        },
        labels={"keep": "yes", "drop": "me"},
        ownerReferences=[{"kind": "ApplicationSet", "name": "web", "controller": True}],
    )
    app["metadata"]["annotations"].pop(REFRESH_ANNOTATION)  # no refresh comparison in this test
    app["metadata"]["annotations"]["argocd.argoproj.io/hydrate"] = "normal"
    played = play(
        app,
        World(behaviour=Behaviour(app_set_controller=True), cluster=CLUSTER, app_set=APP_SET),
        max_steps=1,
    )
    assert played.names == ["appset-rewrite"]
    assert played.app["metadata"]["annotations"] == {
        "region": "eu-west-1",
        "team.example.com/owner": "payments",
        "simulator.progressivesync.io/hang": "false",
        "argocd.argoproj.io/hydrate": "normal",
    }
    assert played.app["metadata"]["labels"] == {
        "app": "web",
        "server": "https://eu.example.test",
        "keep": "yes",
    }
    event = played.steps[0].events[0]
    assert event.fields["removed"] == ["progressivesync.io/rollout-id", "label:drop"]
    assert event.fields["changed"] == ["region"]
    assert played.app["status"] == app["status"], "it never touches status"


def test_the_applicationset_controller_keeps_the_operation_and_global_preserved_keys() -> None:
    app = make_app(
        operation=sync_op(),
        annotations={"mine": "x", "corp/keep": "y"},
        ownerReferences=[{"kind": "ApplicationSet", "name": "web", "controller": True}],
    )
    preserved = World(
        behaviour=Behaviour(app_set_controller=True, hang=True),
        cluster=CLUSTER,
        app_set=APP_SET,
        preserved_annotations=("corp/keep",),
    )
    played = play(app, preserved)
    assert played.names == ["appset-rewrite", "pick-up", "sync-running"]
    assert played.app["metadata"]["annotations"] == {"region": "eu-west-1", "corp/keep": "y"}


@pytest.mark.parametrize(
    ("text", "go", "expected"),
    [
        pytest.param("{{name}}-{{ server }}", False, "eu-https://eu.example.test", id="fasttemplate"),
        pytest.param("{{.name}}/{{ .metadata.labels.region }}", True, "eu/eu-west-1", id="go-template"),
        pytest.param('{{ index .metadata.labels "region" }}', True, "eu-west-1", id="go-index"),
        pytest.param("{{values.x}}", False, "{{values.x}}", id="unknown-stays"),
    ],
)
def test_template_rendering(text: str, go: bool, expected: str) -> None:
    assert render(text, CLUSTER, go_template=go) == expected


def test_desired_metadata_without_template_metadata_is_only_the_preserved() -> None:
    app = make_app(annotations={"notified.notifications.argoproj.io": "{}", "x": "y"})
    annotations, labels = desired_metadata(app, {"spec": {"template": {}}}, CLUSTER)
    assert (annotations, labels) == ({"notified.notifications.argoproj.io": "{}"}, {})


# --- deletion ------------------------------------------------------------------------------------


def test_the_resources_finalizer_is_removed_after_deletion_seconds() -> None:
    app = make_app(
        deletionTimestamp=format_time(START),
        finalizers=["resources-finalizer.argocd.argoproj.io", "other/finalizer"],
        uid="u1",
    )
    played = play(app, world(deletion_seconds=7))
    assert played.names == ["finalize"] and played.events == ["finalized"]
    assert played.app["metadata"]["finalizers"] == ["other/finalizer"]
    assert played.now == START + timedelta(seconds=7)


def test_degrade_is_the_old_spelling_of_health_degraded() -> None:
    assert replace(Behaviour(), degrade=True).settled_health == Health.DEGRADED
    assert Behaviour(health=Health.SUSPENDED, degrade=True).settled_health == Health.SUSPENDED
