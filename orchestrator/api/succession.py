"""Which of two rollouts is the newer one: may a Workflow's rollout take over the status?

The status names one rollout (`status.rollout`). A Workflow of another rollout meets it in two
places: the watcher finds a live Workflow the status does not name (it created it and crashed
before recording it, or someone revived an old one with `argo retry`), and a `select` step finds
the status naming another rollout (the watcher had not recorded the new one yet, or the step
belongs to an old Workflow brought back to life). The first kind is the newer rollout and takes
over; the second is older and must never take over: its release is an older desired state, and
its syncs would pin the Applications back to an older commit.

Rollout ids are hashes and carry no order, so the order comes from the API server's clock:
`metadata.creationTimestamp` of the two Workflows (a retried Workflow keeps its own), else the
recorded rollout's `startedAt` when its Workflow is gone. An older rollout's Workflow was always
created before the newer one's, but timestamps have whole seconds: the watcher can stop a rollout
for a new spec and create the next one's Workflow (queued on the mutex) within the same second. So
the same second decides on what the recorded rollout did: one that ended (`finishedAt`) gives way
to a Workflow of its second (that Workflow waited for it on the mutex); one still running does not
(an old Workflow brought back is always seconds older than the rollout it would replace).

`succession(...) -> (Succession, reason)` is pure. Callers: `orchestrator.watcher.decide` (which
live Workflow it may adopt), `steps.select_stage` (whether it may start its rollout in the status).
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from orchestrator.api.models import RolloutStatus
from orchestrator.core.clock import format_time


class Succession(StrEnum):
    """How a Workflow's rollout stands to the rollout the status records."""

    NEWER = "Newer"  # it may take over the status
    OLDER = "Older"  # it was superseded: it writes nothing and is never adopted
    UNKNOWN = "Unknown"  # no creation time to compare: the caller decides on what else it knows


def succession(
    created: datetime | None,
    *,
    recorded: RolloutStatus | None,
    recorded_workflow_created: datetime | None,
) -> tuple[Succession, str]:
    """How a Workflow created at `created` stands to the `recorded` rollout (another one), and why.

    `recorded_workflow_created`: the creation time of the recorded rollout's Workflow, None when
    that Workflow is gone (or unknown).
    """
    if recorded is None:
        return Succession.NEWER, "the status records no rollout"
    if created is None:
        return Succession.UNKNOWN, "its Workflow's creation time is not known"
    ended = recorded.finished_at is not None
    if recorded_workflow_created is not None:
        if created.replace(microsecond=0) == recorded_workflow_created.replace(microsecond=0) and ended:
            return Succession.NEWER, (
                f"its Workflow was created in the same second as the Workflow of the recorded rollout "
                f"{recorded.id} ({format_time(recorded_workflow_created)}), which has ended"
            )
        if created > recorded_workflow_created:
            return Succession.NEWER, (
                f"its Workflow was created at {format_time(created)}, after the Workflow of the recorded "
                f"rollout {recorded.id} ({format_time(recorded_workflow_created)})"
            )
        return Succession.OLDER, (
            f"its Workflow was created at {format_time(created)}, not after the Workflow of the recorded "
            f"rollout {recorded.id} ({format_time(recorded_workflow_created)})"
        )
    if recorded.started_at is not None:
        # Second precision on both sides (metav1.Time): compare whole seconds.
        started = recorded.started_at.replace(microsecond=0)
        if created.replace(microsecond=0) > started or (created.replace(microsecond=0) == started and ended):
            return Succession.NEWER, (
                f"its Workflow was created at {format_time(created)}, after the recorded rollout "
                f"{recorded.id} started ({format_time(started)})"
            )
        return Succession.OLDER, (
            f"its Workflow was created at {format_time(created)}, not after the recorded rollout "
            f"{recorded.id} started ({format_time(started)})"
        )
    return Succession.UNKNOWN, f"the recorded rollout {recorded.id} has no start time and no Workflow"
