"""The watcher's `currentStage` (orchestrator/watcher/status_patch.py): it follows the Workflow's
running stage node, except for the few seconds after the last cluster step of a stage closed it and
selected the next one itself (steps/chain.py, the stage boundary), when the node still runs the
stage the status has closed: the watcher does not move the status back."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from orchestrator.api.models import ProgressiveSyncStatus, RolloutPhase, StagePhase, StageStatus
from orchestrator.watcher.decision import StatusPatch
from orchestrator.watcher.status_patch import apply_patch

NOW = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
P, S, R, F = StagePhase.PENDING, StagePhase.PROGRESSING, StagePhase.SUCCEEDED, StagePhase.FAILED


def status(current: str, canary: StagePhase, rest: StagePhase) -> ProgressiveSyncStatus:
    return ProgressiveSyncStatus(
        phase=RolloutPhase.PROGRESSING,
        current_stage=current,
        stages=[StageStatus(name="canary", phase=canary), StageStatus(name="rest", phase=rest)],
    )


@pytest.mark.parametrize(
    ("stored", "node", "expected"),
    [
        pytest.param(status("canary", S, P), "canary", "canary", id="the-same-stage"),
        pytest.param(status("canary", R, P), "rest", "rest", id="the-node-moves-on"),
        pytest.param(status("rest", R, S), "canary", "rest", id="closed-early-the-status-is-ahead"),
        pytest.param(status("rest", S, S), "canary", "canary", id="a-stage-still-running-is-followed"),
        pytest.param(status("rest", R, R), "canary", "canary", id="the-next-one-not-running-is-not-ahead"),
        pytest.param(status("", P, P), "canary", "canary", id="no-stage-yet"),
    ],
)
def test_the_watcher_follows_the_node_but_never_back_to_a_stage_the_steps_closed(
    stored: ProgressiveSyncStatus, node: str, expected: str
) -> None:
    patched = apply_patch(
        stored.model_copy(deep=True), StatusPatch(observed_generation=1, current_stage=node), NOW
    )
    assert patched.current_stage == expected
