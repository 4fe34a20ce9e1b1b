"""Deciding and building the Argo CD sync operation (`orchestrator.argocd.appsync`), without any cluster."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.argocd import appsync
from orchestrator.argocd.appsync import RevisionError, SyncAction
from tests.support.sync_builders import (
    OLD_REVISION,
    REVISION,
    ROLLOUT,
    T0,
    at,
    foreign_operation,
    make_application,
    our_operation,
)


@pytest.mark.parametrize(
    ("app", "expected", "reason_has"),
    [
        pytest.param(make_application(), SyncAction.REQUEST, "no operation", id="idle-app-is-synced"),
        pytest.param(
            make_application(phase="Succeeded", synced_by="r0", state_operation=foreign_operation()),
            SyncAction.REQUEST,
            "no operation",
            id="finished-operation-of-another-rollout-is-replaced",
        ),
        pytest.param(
            make_application(synced_by=ROLLOUT, phase="Succeeded"),
            SyncAction.ALREADY_REQUESTED,
            "already synced by rollout r1",
            id="already-synced-by-this-rollout",
        ),
        pytest.param(
            make_application(operation=our_operation()),
            SyncAction.ALREADY_REQUESTED,
            "already synced",
            id="our-pending-operation-is-a-no-op",
        ),
        pytest.param(
            make_application(synced_by="r0", operation=foreign_operation("alice")),
            SyncAction.BUSY,
            "started by alice is in progress",
            id="someone-elses-operation-is-never-overwritten",
        ),
        pytest.param(
            make_application(synced_by="r0", phase="Running", state_operation=foreign_operation("bob")),
            SyncAction.BUSY,
            "started by bob is Running",
            id="running-operation-state-without-operation-is-busy",
        ),
    ],
)
def test_decide_sync(app: dict[str, Any], expected: SyncAction, reason_has: str) -> None:
    decision = appsync.decide_sync(app, ROLLOUT)
    assert decision.action == expected
    assert reason_has in decision.reason


def test_build_sync_request_sets_operation_clears_finished_state_and_annotates() -> None:
    app = make_application(phase="Succeeded", synced_by="r0", state_operation=foreign_operation())
    app["metadata"]["resourceVersion"] = "42"
    app["metadata"]["annotations"]["team"] = "payments"
    body = appsync.build_sync_request(
        app,
        revisions=[REVISION],
        rollout_id=ROLLOUT,
        stage="canary",
        prune=True,
        sync_options=["ServerSideApply=true"],
        now=T0,
    )
    assert body["metadata"]["resourceVersion"] == "42"
    assert body["operation"] == {
        "initiatedBy": {"username": "progressive-sync", "automated": True},
        "info": [
            {"name": "rollout-id", "value": ROLLOUT},
            {"name": "stage", "value": "canary"},
            {"name": "requested-at", "value": "2030-01-01T12:00:00Z"},
        ],
        "sync": {
            "revision": REVISION,
            "prune": True,
            "syncOptions": ["ServerSideApply=true"],
            "syncStrategy": {"hook": {}},
        },
    }
    assert "operationState" not in body["status"]
    assert body["status"]["sync"] == app["status"]["sync"]
    assert body["metadata"]["annotations"] == {
        "team": "payments",
        "argocd.argoproj.io/refresh": "normal",
        "progressivesync.io/rollout-id": ROLLOUT,
        "progressivesync.io/stage": "canary",
    }
    assert "operation" not in app and app["status"]["operationState"], "the input is not changed"


def test_build_sync_request_multi_source_uses_revisions() -> None:
    app = make_application(sources=2)
    body = appsync.build_sync_request(
        app, revisions=["a1", "b2"], rollout_id=ROLLOUT, stage="s", prune=False, sync_options=[], now=T0
    )
    assert body["operation"]["sync"]["revisions"] == ["a1", "b2"]
    assert "revision" not in body["operation"]["sync"]


@pytest.mark.parametrize(
    "revision", ["", "  ", ",", f"{REVISION},"], ids=["empty", "blank", "comma", "one-empty"]
)
def test_an_empty_revision_is_never_pinned(revision: str) -> None:
    with pytest.raises(RevisionError, match="empty"):
        appsync.pinned_revisions(revision, make_application())


@pytest.mark.parametrize(
    ("revision", "sources", "expected"),
    [
        pytest.param(REVISION, 0, [REVISION], id="single-source"),
        pytest.param("a1,b2", 2, ["a1", "b2"], id="multi-source-one-per-source"),
        pytest.param(" a1 , b2 ", 2, ["a1", "b2"], id="blanks-stripped"),
    ],
)
def test_pinned_revisions(revision: str, sources: int, expected: list[str]) -> None:
    assert appsync.pinned_revisions(revision, make_application(sources=sources)) == expected


@pytest.mark.parametrize(
    ("revision", "sources"),
    [pytest.param(REVISION, 2, id="one-for-two-sources"), pytest.param("a1,b2", 0, id="two-for-one-source")],
)
def test_revision_count_must_fit_the_sources(revision: str, sources: int) -> None:
    with pytest.raises(RevisionError, match="comma-separated"):
        appsync.pinned_revisions(revision, make_application(sources=sources))


def test_build_sync_request_refuses_an_empty_revision() -> None:
    with pytest.raises(RevisionError):
        appsync.build_sync_request(
            make_application(),
            revisions=[""],
            rollout_id=ROLLOUT,
            stage="s",
            prune=False,
            sync_options=[],
            now=T0,
        )


@pytest.mark.parametrize(
    ("app", "expected"),
    [
        pytest.param(make_application(phase="Running", started_at=at(5)), at(5), id="controller-started-at"),
        pytest.param(make_application(operation=our_operation(requested_at=at(3))), at(3), id="requested-at"),
        pytest.param(make_application(), None, id="never-synced"),
        pytest.param(
            make_application(phase="Running", state_operation=foreign_operation(), synced_by="r0"),
            None,
            id="someone-elses-operation",
        ),
    ],
)
def test_sync_started_at(app: dict[str, Any], expected: Any) -> None:
    assert appsync.sync_started_at(app, ROLLOUT) == expected


def test_result_revisions() -> None:
    assert appsync.result_revisions({"syncResult": {"revision": OLD_REVISION}}) == [OLD_REVISION]
    assert appsync.result_revisions({"syncResult": {"revisions": ["a", "b"]}}) == ["a", "b"]
    assert appsync.result_revisions(None) == []
