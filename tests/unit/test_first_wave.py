"""The first wave's pure rules (steps/first_wave.py, steps/common.py), issue 29 points 5 and 6.

- `first_wave_refusal`: the first wave starts only on a read of the ProgressiveSync (and of the
  stage's records) made right before its writes that shows the rollout still ours, not paused, and
  its stage not failed;
- `written_by_rollout`: which of a cluster's Applications carry a sync this rollout wrote, from the
  Applications themselves (what a cluster step of a failed stage ends instead of reporting it
  "not started").

The steps themselves run against the real API server in tests/integration/test_steps_first_wave.py.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from steps.common import written_by_rollout
from steps.first_wave import FirstWave, first_wave_refusal
from tests.support.builders import (
    ROLLOUT,
    ROLLOUT_ID,
    STARTED,
    history_entry,
    make_application,
    make_ps_model,
    make_stage_outcomes,
    make_stage_status,
    our_operation,
)

# The rollout of `make_ps_model` started at STARTED; a sync of ours in history counts from then on.
_START = datetime.fromisoformat(STARTED)
_AFTER_START = _START + timedelta(seconds=5)
_BEFORE_START = _START - timedelta(seconds=5)


def _stage(failed: dict[str, str] | None = None) -> Any:
    return make_stage_status("all", phase="Progressing", targets=["c1", "c2", "c3"], failed=failed or {})


@pytest.mark.parametrize(
    ("ps_kwargs", "refused_with"),
    [
        pytest.param({"phase": "Progressing", "stage_status": [_stage()]}, "", id="ours-running-may-start"),
        pytest.param(
            {"phase": "Progressing", "stage_status": [_stage()], "paused": True},
            "the ProgressiveSync is paused",
            id="paused-since-select-read-it",
        ),
        pytest.param(
            {"phase": "Progressing", "stage_status": [_stage()], "rollout_id": "newer"},
            f"rollout {ROLLOUT_ID} was superseded by newer",
            id="superseded-since-select-read-it",
        ),
        pytest.param(
            {"phase": "Progressing", "stage_status": [], "rollout_id": None},
            f"rollout {ROLLOUT_ID} was superseded by no rollout",
            id="status-reset-since-select-read-it",
        ),
        pytest.param(
            {
                "phase": "Progressing",
                "stage_status": [_stage({"c1": "Degraded"})],
                "failed": {"c1": "Degraded"},
            },
            "stage 'all' has failed already",
            id="stage-failed-since-select-read-it",
        ),
    ],
)
def test_the_first_wave_starts_only_on_a_fresh_read_that_allows_it(
    ps_kwargs: dict[str, Any], refused_with: str
) -> None:
    failed = ps_kwargs.pop("failed", {})
    outcomes = make_stage_outcomes("all", targets=["c1", "c2", "c3"], failed=failed)
    reason = first_wave_refusal(make_ps_model(**ps_kwargs), ROLLOUT_ID, "all", outcomes)
    if refused_with:
        assert reason.startswith(refused_with), reason
    else:
        assert reason == ""


def test_a_refused_first_wave_says_why_in_the_summary() -> None:
    wave = FirstWave(left=("c1", "c2"), reason="the ProgressiveSync is paused")
    assert (
        wave.summary == "started no sync (the ProgressiveSync is paused), left 2 cluster(s) to their own step"
    )


@pytest.mark.parametrize(
    ("app", "ours"),
    [
        pytest.param(make_application(operation=our_operation()), True, id="requested-not-taken-up"),
        pytest.param(make_application(phase="Running", state_operation=our_operation()), True, id="running"),
        pytest.param(
            make_application(phase="Succeeded", state_operation=our_operation(), sync="Synced"),
            True,
            id="finished",
        ),
        pytest.param(
            make_application(history=[history_entry(started_at=_AFTER_START)]),
            True,
            id="in-history-since-the-rollout-started",
        ),
        pytest.param(
            make_application(history=[history_entry(started_at=_BEFORE_START)]),
            False,
            id="in-history-before-the-rollout-started",
        ),
        pytest.param(
            make_application(operation=our_operation(rollout_id="other")), False, id="another-rollouts"
        ),
        pytest.param(make_application(), False, id="nothing-written"),
    ],
)
def test_what_this_rollout_wrote_is_read_from_the_applications(app: dict[str, Any], ours: bool) -> None:
    ps = make_ps_model(phase="Progressing", rollout_id=ROLLOUT, stage_status=[_stage()])
    assert written_by_rollout([app], ps, ROLLOUT) == ([app["metadata"]["name"]] if ours else [])
