"""Deciding and building the Argo CD sync operation (`orchestrator.argocd.appsync`), without any cluster."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.argocd import appsync
from orchestrator.argocd.appsync import RevisionError, SyncAction, TerminateAction
from tests.support.builders import (
    NEW_REVISION,
    OLD_REVISION,
    ROLLOUT,
    T0,
    at,
    foreign_operation,
    history_entry,
    make_application,
    our_operation,
)


def _deleting(app: dict[str, Any]) -> dict[str, Any]:
    app["metadata"]["deletionTimestamp"] = "2030-01-01T12:00:00Z"
    return app


@pytest.mark.parametrize(
    ("app", "expected", "reason_has"),
    [
        pytest.param(make_application(), SyncAction.REQUEST, "no operation", id="idle-app-is-synced"),
        pytest.param(
            make_application(phase="Succeeded", state_operation=foreign_operation()),
            SyncAction.REQUEST,
            "no operation",
            id="finished-operation-of-another-rollout-is-replaced",
        ),
        pytest.param(
            make_application(phase="Succeeded"),
            SyncAction.ALREADY_REQUESTED,
            "already synced by rollout r1",
            id="already-synced-by-this-rollout",
        ),
        pytest.param(
            make_application(phase="Running"),
            SyncAction.ALREADY_REQUESTED,
            "already synced by rollout r1",
            id="our-running-operation-is-a-no-op",
        ),
        pytest.param(
            make_application(
                phase="Succeeded",
                state_operation=foreign_operation("alice", revision=NEW_REVISION),
                history=[history_entry(started_at=at(5)), history_entry(username="alice", started_at=at(9))],
            ),
            SyncAction.ALREADY_REQUESTED,
            "already synced by rollout r1",
            id="ours-in-history-after-someone-else-synced-again",
        ),
        pytest.param(
            make_application(
                phase="Succeeded",
                state_operation=foreign_operation("alice"),
                history=[history_entry(started_at=at(-60))],
            ),
            SyncAction.REQUEST,
            "no operation",
            id="ours-in-history-before-this-rollout-began-is-another-rollouts",
        ),
        pytest.param(
            make_application(operation=our_operation()),
            SyncAction.ALREADY_REQUESTED,
            "already synced",
            id="our-pending-operation-is-a-no-op",
        ),
        pytest.param(
            make_application(operation=foreign_operation("alice")),
            SyncAction.BUSY,
            "started by alice is in progress",
            id="someone-elses-operation-is-never-overwritten",
        ),
        pytest.param(
            make_application(phase="Running", state_operation=foreign_operation("bob")),
            SyncAction.BUSY,
            "started by bob is Running",
            id="running-operation-state-without-operation-is-busy",
        ),
        # Finding 7: someone else already synced it to the release revision (still Progressing).
        pytest.param(
            make_application(
                phase="Succeeded",
                state_operation=foreign_operation("alice", revision=NEW_REVISION),
                result_revision=NEW_REVISION,
                sync="Synced",
                health="Progressing",
            ),
            SyncAction.ADOPT,
            "already Synced at 4f1c2e9b7a3d5c8e1f0a2b4c6d8e0f1a3b5c7d9e (last operation by alice): adopted",
            id="synced-at-the-release-by-someone-else-is-adopted",
        ),
        pytest.param(
            make_application(
                phase="Succeeded",
                state_operation=foreign_operation("alice"),
                result_revision=OLD_REVISION,
                sync="Synced",
                revision=OLD_REVISION,
                health="Degraded",
            ),
            SyncAction.REQUEST,
            "no operation",
            id="synced-and-degraded-at-an-older-revision-is-synced",
        ),
        pytest.param(
            make_application(sync="Synced", revision=OLD_REVISION, health="Healthy"),
            SyncAction.CONFIRM,
            "asking Argo CD to compare it again before leaving it alone",
            id="up-to-date-outside-the-release-is-compared-again-before-it-is-left-alone",
        ),
        pytest.param(
            make_application(sync="Synced", revision=NEW_REVISION, health="Healthy"),
            SyncAction.ADOPT,
            "adopted",
            id="already-up-to-date-is-left-alone",
        ),
        pytest.param(
            _deleting(make_application()),
            SyncAction.REFUSED,
            "being deleted",
            id="being-deleted-is-refused",
        ),
    ],
)
def test_decide_sync(app: dict[str, Any], expected: SyncAction, reason_has: str) -> None:
    decision = appsync.decide_sync(app, ROLLOUT, release=[(NEW_REVISION,)], since=T0)
    assert decision.action == expected
    assert reason_has in decision.reason


@pytest.mark.parametrize(
    ("app", "compared_on_request", "expected"),
    [
        pytest.param(
            make_application(sync="Synced", revision=OLD_REVISION, health="Healthy"),
            False,
            SyncAction.CONFIRM,
            id="outside-the-release-on-a-comparison-nobody-asked-for-is-not-left-alone",
        ),
        pytest.param(
            make_application(sync="Synced", revision=OLD_REVISION, health="Healthy"),
            True,
            SyncAction.UP_TO_DATE,
            id="outside-the-release-after-a-comparison-we-asked-for-is-left-alone",
        ),
        pytest.param(
            make_application(revision=NEW_REVISION),
            False,
            SyncAction.REQUEST,
            id="out-of-sync-at-the-release-is-synced-without-asking",
        ),
        pytest.param(
            make_application(sync="Synced", revision=NEW_REVISION, health="Healthy"),
            False,
            SyncAction.ADOPT,
            id="synced-at-the-release-is-adopted-without-asking",
        ),
    ],
)
def test_an_application_outside_the_release_is_left_alone_only_on_a_comparison_we_asked_for(
    app: dict[str, Any], compared_on_request: bool, expected: SyncAction
) -> None:
    """Issue 29 point 4: an Application still compared at the old commit (refresh lag, a refresh
    that went unanswered) must not count as up to date: that cluster would count done and the
    Application never be synced once Argo CD compared it against the release."""
    decision = appsync.decide_sync(
        app, ROLLOUT, release=[(NEW_REVISION,)], since=T0, compared_on_request=compared_on_request
    )
    assert decision.action == expected, decision.reason


def test_build_sync_request_sets_operation_clears_finished_state_and_leaves_metadata() -> None:
    app = make_application(phase="Succeeded", state_operation=foreign_operation())
    app["metadata"]["resourceVersion"] = "42"
    app["metadata"]["annotations"] = {"team": "payments"}
    body = appsync.build_sync_request(
        app,
        revisions=[NEW_REVISION],
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
            "revision": NEW_REVISION,
            "prune": True,
            "syncOptions": ["ServerSideApply=true"],
            "syncStrategy": {"hook": {}},
        },
        "retry": {"limit": 5},
    }
    assert "operationState" not in body["status"]
    assert body["status"]["sync"] == app["status"]["sync"]
    # The ApplicationSet controller owns the annotations: nothing of ours goes there.
    assert body["metadata"] == app["metadata"]
    assert "operation" not in app and app["status"]["operationState"], "the input is not changed"


def test_build_sync_request_multi_source_uses_revisions() -> None:
    app = make_application(sources=2)
    body = appsync.build_sync_request(
        app, revisions=["a1", "b2"], rollout_id=ROLLOUT, stage="s", prune=False, sync_options=[], now=T0
    )
    assert body["operation"]["sync"]["revisions"] == ["a1", "b2"]
    assert "revision" not in body["operation"]["sync"]


NEW, OLD = NEW_REVISION, OLD_REVISION


@pytest.mark.parametrize(
    ("app", "release", "pins"),
    [
        pytest.param(make_application(revision=NEW), [(NEW,)], (NEW,), id="the-release-revision"),
        # Finding 4: two stale single-source Applications at NEW and OLD, each to its own revision.
        pytest.param(make_application(revision=NEW), [(NEW,), (OLD,)], (NEW,), id="mixed-release-at-new"),
        pytest.param(make_application(revision=OLD), [(NEW,), (OLD,)], (OLD,), id="mixed-release-at-old"),
        pytest.param(
            make_application(sources=2, revision="a" * 40),
            [(NEW,), ("a" * 40, "a" * 40)],
            ("a" * 40, "a" * 40),
            id="multi-source-one-per-source",
        ),
        pytest.param(
            make_application(revision=""), [(NEW,)], (NEW,), id="not-compared-yet-takes-the-only-one"
        ),
        pytest.param(
            make_application(revision="c" * 40),
            [(NEW,), ("a" * 40, "b" * 40)],
            (NEW,),
            id="a-newer-commit-takes-the-only-one-of-its-shape",
        ),
    ],
)
def test_release_pin(app: dict[str, Any], release: list[tuple[str, ...]], pins: tuple[str, ...]) -> None:
    assert appsync.release_pin(app, release) == pins


@pytest.mark.parametrize(
    ("app", "release", "error"),
    [
        pytest.param(
            make_application(revision="c" * 40),
            [(NEW,), (OLD,)],
            "refusing to guess",
            id="ambiguous-when-compared-against-neither",
        ),
        pytest.param(make_application(sources=2), [(NEW,)], "nothing to pin", id="no-revision-of-its-shape"),
        pytest.param(make_application(), [], "nothing to pin", id="an-empty-release"),
    ],
)
def test_release_pin_refuses_to_guess(
    app: dict[str, Any], release: list[tuple[str, ...]], error: str
) -> None:
    with pytest.raises(RevisionError, match=error):
        appsync.release_pin(app, release)


@given(
    release=st.lists(st.tuples(st.sampled_from([NEW, OLD, "c" * 40])), min_size=1, max_size=3, unique=True),
    compared=st.sampled_from([NEW, OLD, "c" * 40, ""]),
)
def test_a_pin_is_always_a_release_revision(release: list[tuple[str, ...]], compared: str) -> None:
    app = make_application(revision=compared)
    try:
        pins = appsync.release_pin(app, release)
    except RevisionError:
        assert (compared,) not in release and len(release) > 1
        return
    assert pins in release
    if (compared,) in release:
        assert pins == (compared,), "an Application Argo CD compared against a release revision keeps it"


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
            make_application(phase="Running", state_operation=foreign_operation()),
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


# --- finding 2: the Application's own sync policy goes into our operation -------------------------


def _with_policy(**policy: Any) -> dict[str, Any]:
    app = make_application()
    app["spec"]["syncPolicy"] = policy
    return app


@pytest.mark.parametrize(
    ("app_options", "ours", "expected"),
    [
        pytest.param(
            ["CreateNamespace=true", "ServerSideApply=true"],
            [],
            ["CreateNamespace=true", "ServerSideApply=true"],
            id="the-applications-own-options-are-kept",
        ),
        pytest.param(
            ["CreateNamespace=true"],
            ["PruneLast=true"],
            ["CreateNamespace=true", "PruneLast=true"],
            id="added",
        ),
        pytest.param(
            ["ServerSideApply=true", "CreateNamespace=true"],
            ["ServerSideApply=false"],
            ["CreateNamespace=true", "ServerSideApply=false"],
            id="the-progressivesyncs-value-wins-for-the-same-key",
        ),
        pytest.param(["Validate=false"], ["Validate=false"], ["Validate=false"], id="no-duplicates"),
        pytest.param([], [], [], id="none"),
    ],
)
def test_merge_sync_options(app_options: list[str], ours: list[str], expected: list[str]) -> None:
    assert appsync.merge_sync_options(app_options, ours) == expected


OPTION = st.builds(
    lambda key, value: f"{key}={value}",
    st.sampled_from(["CreateNamespace", "ServerSideApply", "PruneLast", "Validate", "Replace"]),
    st.sampled_from(["true", "false"]),
)


@given(app_options=st.lists(OPTION, max_size=6), ours=st.lists(OPTION, max_size=6))
def test_merged_options_keep_ours_and_the_applications_other_keys(
    app_options: list[str], ours: list[str]
) -> None:
    merged = appsync.merge_sync_options(app_options, ours)
    assert set(ours) <= set(merged)
    our_keys = {option.split("=")[0] for option in ours}
    assert {o for o in app_options if o.split("=")[0] not in our_keys} <= set(merged)
    assert all(o in ours for o in merged if o.split("=")[0] in our_keys)
    assert len(merged) == len(set(merged))


@pytest.mark.parametrize(
    ("app", "expected"),
    [
        pytest.param(make_application(), {"limit": 5}, id="argo-cds-automated-default-without-one"),
        pytest.param(
            _with_policy(
                retry={"limit": 2, "backoff": {"duration": "10s", "factor": 3, "maxDuration": "1m"}}
            ),
            {"limit": 2, "backoff": {"duration": "10s", "factor": 3, "maxDuration": "1m"}},
            id="the-applications-own-retry",
        ),
        pytest.param(
            _with_policy(retry={"limit": -1, "refresh": True}),
            {"limit": -1},
            id="refresh-dropped-it-would-unpin-the-revision",
        ),
    ],
)
def test_operation_retry(app: dict[str, Any], expected: dict[str, Any]) -> None:
    assert appsync.operation_retry(app) == expected


def test_build_sync_request_carries_the_applications_sync_policy() -> None:
    app = _with_policy(
        syncOptions=["ServerSideApply=true", "CreateNamespace=true"],
        retry={"limit": 3, "backoff": {"duration": "5s"}},
    )
    body = appsync.build_sync_request(
        app,
        revisions=[NEW_REVISION],
        rollout_id=ROLLOUT,
        stage="canary",
        prune=False,
        sync_options=["PruneLast=true"],
        now=T0,
    )
    assert body["operation"]["sync"]["syncOptions"] == [
        "ServerSideApply=true",
        "CreateNamespace=true",
        "PruneLast=true",
    ]
    assert body["operation"]["retry"] == {"limit": 3, "backoff": {"duration": "5s"}}


# --- finding 3: ending what we started -------------------------------------------------------------


@pytest.mark.parametrize(
    ("app", "action"),
    [
        pytest.param(make_application(phase="Running"), TerminateAction.TERMINATE, id="our-running-sync"),
        pytest.param(
            make_application(phase="Running", finished_at=at(5), retry_count=1),
            TerminateAction.TERMINATE,
            id="between-argo-cds-retries",
        ),
        pytest.param(
            make_application(phase="Running", message="Sync operation blocked by sync window"),
            TerminateAction.TERMINATE,
            id="held-by-a-sync-window",
        ),
        pytest.param(make_application(phase="Terminating"), TerminateAction.WAIT, id="terminating-already"),
        pytest.param(
            make_application(operation=our_operation()), TerminateAction.WITHDRAW, id="not-taken-up"
        ),
        pytest.param(
            make_application(
                phase="Running", state_operation=foreign_operation("bob"), operation=our_operation()
            ),
            TerminateAction.WITHDRAW,
            id="ours-queued-behind-someone-elses",
        ),
        pytest.param(
            make_application(phase="Succeeded", finished_at=at(5)), TerminateAction.NONE, id="ended"
        ),
        pytest.param(
            make_application(phase="Running", state_operation=foreign_operation("bob")),
            TerminateAction.NONE,
            id="someone-elses-is-never-touched",
        ),
        pytest.param(
            make_application(phase="Running", state_operation=our_operation(rollout_id="r0")),
            TerminateAction.NONE,
            id="another-rollouts-is-not-ours",
        ),
        pytest.param(make_application(), TerminateAction.NONE, id="nothing"),
    ],
)
def test_decide_terminate(app: dict[str, Any], action: TerminateAction) -> None:
    assert appsync.decide_terminate(app, ROLLOUT).action == action


def test_terminate_is_what_argocd_app_terminate_op_writes() -> None:
    app = make_application(phase="Running", operation=our_operation())
    app["metadata"]["resourceVersion"] = "7"
    body = appsync.build_terminate_request(app)
    assert body["status"]["operationState"]["phase"] == "Terminating"
    assert body["metadata"]["resourceVersion"] == "7", "one conditional update"
    assert body["operation"] == app["operation"], "Argo CD's API server keeps .operation"
    assert app["status"]["operationState"]["phase"] == "Running", "the input is not changed"


def test_a_request_not_taken_up_is_withdrawn() -> None:
    app = make_application(operation=our_operation())
    body = appsync.build_withdraw_request(app)
    assert "operation" not in body and "operation" in app


def test_each_refresh_request_is_stamped_so_asking_again_is_a_change() -> None:
    """Argo CD's own refresh stamps each request (`refresh-timestamp`); ours does too, so a request
    sent again while the first is pending is a write the application controller hears of."""
    first = appsync.refresh_patch(datetime(2030, 1, 2, 15, 4, 5, 120000, tzinfo=UTC))
    again = appsync.refresh_patch(datetime(2030, 1, 2, 15, 4, 15, 340000, tzinfo=UTC))
    assert first["metadata"]["annotations"] == {
        appsync.REFRESH_ANNOTATION: "normal",
        appsync.REFRESH_TIMESTAMP_ANNOTATION: "2030-01-02T15:04:05.120000Z",
    }
    assert first != again
    assert set(again["metadata"]["annotations"]) == set(appsync.REFRESH_ANNOTATIONS)
    assert appsync.refresh_requested(first)
