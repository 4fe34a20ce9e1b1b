"""The refresh-lag rule of `select` (orchestrator.argocd.compare_request): which Applications to ask
Argo CD to compare again, on revisions, never on reconciledAt."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from orchestrator.argocd.compare_request import CompareNeed, compare_need, unanswered
from orchestrator.argocd.fleet import AppView, SyncStatus
from steps.select_stage import read_by_name

OLD, NEW, OTHER = "a" * 40, "b" * 40, "c" * 40
# The rollout started in this second; Argo CD's reconciledAt has whole seconds too.
STARTED = datetime(2026, 11, 30, 19, 47, 3, tzinfo=UTC)


def view(revisions: tuple[str, ...], reconciled_at: datetime | None = STARTED) -> AppView:
    return AppView(
        name="app", sync_status=SyncStatus.SYNCED, sync_revisions=revisions, reconciled_at=reconciled_at
    )


@pytest.mark.parametrize(
    ("app", "owned", "release", "pending", "expected"),
    [
        pytest.param(
            view((OLD,), reconciled_at=STARTED),
            True,
            {(NEW,)},
            False,
            CompareNeed.ASK,
            id="same-second-reconciledAt-at-the-old-revision-is-asked",
        ),
        pytest.param(
            view((OLD,), reconciled_at=datetime(2026, 11, 30, 20, 0, tzinfo=UTC)),
            True,
            {(NEW,)},
            False,
            CompareNeed.ASK,
            id="compared-after-the-start-but-at-the-old-revision-is-asked",
        ),
        pytest.param(
            view((OLD,), reconciled_at=None), True, {(NEW,)}, False, CompareNeed.ASK, id="never-compared"
        ),
        pytest.param(
            view((), reconciled_at=None), True, {(NEW,)}, False, CompareNeed.ASK, id="no-revision-yet"
        ),
        pytest.param(view((NEW,)), True, {(NEW,)}, False, CompareNeed.AT_RELEASE, id="at-the-release"),
        pytest.param(
            view((OTHER,)),
            True,
            {(NEW,), (OTHER,)},
            False,
            CompareNeed.AT_RELEASE,
            id="at-one-of-mixed-revisions",
        ),
        pytest.param(
            view((NEW, OLD)), True, {(NEW, NEW)}, False, CompareNeed.ASK, id="multi-source-one-source-behind"
        ),
        pytest.param(
            view((NEW,)), True, {(NEW,)}, True, CompareNeed.AT_RELEASE, id="at-release-with-a-refresh-pending"
        ),
        pytest.param(
            view((OLD,)),
            True,
            {(NEW,)},
            True,
            CompareNeed.PENDING,
            id="behind-with-a-refresh-pending-is-awaited",
        ),
        pytest.param(view((OLD,)), False, {(NEW,)}, False, CompareNeed.NOT_OWNED, id="not-owned"),
        pytest.param(view((OLD,)), True, set(), False, CompareNeed.NO_RELEASE, id="nothing-out-of-date"),
    ],
)
def test_compare_need(
    app: AppView, owned: bool, release: set[tuple[str, ...]], pending: bool, expected: CompareNeed
) -> None:
    assert compare_need(app, owned=owned, release=frozenset(release), refresh_pending=pending) == expected


@pytest.mark.parametrize(
    ("need", "awaited"),
    [
        pytest.param(need, need in (CompareNeed.ASK, CompareNeed.PENDING), id=need.name)
        for need in CompareNeed
    ],
)
def test_select_waits_for_the_answers_of_asked_and_pending_applications_only(
    need: CompareNeed, awaited: bool
) -> None:
    assert need.awaited is awaited


def test_a_refresh_is_answered_when_its_annotation_is_gone_or_the_application_is() -> None:
    items = [
        {"metadata": {"name": "a", "annotations": {"argocd.argoproj.io/refresh": "normal"}}},
        {"metadata": {"name": "b", "annotations": {}}},
        {"metadata": {"name": "c"}},
    ]
    assert unanswered(items, ["a", "b", "c", "gone"]) == ("a",)


@pytest.mark.parametrize(
    ("pending", "listed", "by_name"),
    [
        pytest.param(1, 3, True, id="one-of-three-one-get"),
        pytest.param(2, 3, False, id="two-of-three-one-list"),
        pytest.param(20, 4000, True, id="a-stage-of-20-among-4000-gets"),
        pytest.param(100, 4000, False, id="100-among-4000-one-list-of-8-pages"),
        pytest.param(1, 1, False, id="the-only-one-one-list"),
    ],
)
def test_the_compare_wait_reads_by_name_when_cheaper(pending: int, listed: int, by_name: bool) -> None:
    assert read_by_name(pending, listed) is by_name
