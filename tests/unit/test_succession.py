"""Which of two rollouts is the newer one (`orchestrator.api.succession`), table by table.

Pure: no API server; times are fixed.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from orchestrator.api.models import RolloutStatus
from orchestrator.api.succession import Succession, succession

T = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)
RECORDED = RolloutStatus(id="r2", started_at=T)


@pytest.mark.parametrize(
    ("created", "recorded", "recorded_created", "expected"),
    [
        pytest.param(T, None, None, Succession.NEWER, id="nothing-recorded-any-workflow-takes-over"),
        pytest.param(None, RECORDED, T, Succession.UNKNOWN, id="own-workflow-unknown"),
        pytest.param(
            T + timedelta(minutes=5),
            RECORDED,
            T,
            Succession.NEWER,
            id="created-after-the-recorded-workflow-crash-before-record",
        ),
        pytest.param(
            T - timedelta(minutes=5),
            RECORDED,
            T,
            Succession.OLDER,
            id="created-before-the-recorded-workflow-argo-retry-of-an-old-one",
        ),
        pytest.param(T, RECORDED, T, Succession.OLDER, id="same-second-as-a-running-rollout-counts-as-older"),
        pytest.param(
            T + timedelta(microseconds=400_000),
            RolloutStatus(id="r2", started_at=T, finished_at=T + timedelta(seconds=9)),
            T,
            Succession.NEWER,
            id="same-second-as-an-ended-rollout-queued-behind-it-on-the-mutex",
        ),
        pytest.param(
            T,
            RolloutStatus(id="r2", started_at=T, finished_at=T + timedelta(seconds=9)),
            None,
            Succession.NEWER,
            id="recorded-workflow-gone-same-second-as-its-start-and-ended",
        ),
        pytest.param(
            T + timedelta(seconds=1),
            RECORDED,
            None,
            Succession.NEWER,
            id="recorded-workflow-gone-created-after-its-start",
        ),
        pytest.param(
            T - timedelta(hours=1),
            RECORDED,
            None,
            Succession.OLDER,
            id="recorded-workflow-gone-created-before-its-start",
        ),
        pytest.param(
            T.replace(microsecond=0),
            RolloutStatus(id="r2", started_at=T + timedelta(microseconds=700_000)),
            None,
            Succession.OLDER,
            id="start-time-compared-in-whole-seconds",
        ),
        pytest.param(
            T, RolloutStatus(id="r2"), None, Succession.UNKNOWN, id="recorded-without-start-or-workflow"
        ),
    ],
)
def test_succession(
    created: datetime | None,
    recorded: RolloutStatus | None,
    recorded_created: datetime | None,
    expected: Succession,
) -> None:
    verdict, reason = succession(created, recorded=recorded, recorded_workflow_created=recorded_created)
    assert verdict == expected, reason
    assert reason
