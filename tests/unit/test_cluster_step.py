"""The `cluster` step's pure rule: a cluster of a stage that has failed already is not started.

The step itself (sync, then wait-healthy, through the entrypoint) runs against the real API server in
tests/integration/test_steps_cluster.py; here only `stage_failure`, the decision that stops a stage (on
the stage's failures as its records tell them)
(docs/design/workflow.md: no failFast, the steps decide).
"""

from __future__ import annotations

import pytest

from steps.common import stage_failure
from tests.support.builders import make_ps_model, make_stage_outcomes, make_stage_status


@pytest.mark.parametrize(
    ("tolerated", "failed", "stops"),
    [
        pytest.param(0, {}, False, id="no-failure"),
        pytest.param(0, {"c1": "Degraded"}, True, id="one-failure-none-tolerated"),
        pytest.param(1, {"c1": "Degraded"}, False, id="one-failure-one-tolerated"),
        pytest.param(1, {"c1": "Degraded", "c2": "deadline"}, True, id="two-failures-one-tolerated"),
    ],
)
def test_a_stage_stops_once_its_failures_exceed_the_tolerance(
    tolerated: int, failed: dict[str, str], stops: bool
) -> None:
    stage = make_stage_status("all", phase="Progressing", targets=["c1", "c2", "c3"], failed=failed)
    outcomes = make_stage_outcomes("all", targets=["c1", "c2", "c3"], failed=failed)
    ps = make_ps_model(
        phase="Progressing", stage_status=[stage], failurePolicy={"maxFailedClusters": tolerated}
    )
    reason = stage_failure(ps, "all", outcomes)
    assert bool(reason) is stops
    if stops:
        assert reason.startswith("stage 'all' has failed already")
        assert f"at most {tolerated} tolerated" in reason and "c1" in reason


def test_a_stage_without_records_yet_has_not_failed() -> None:
    assert stage_failure(make_ps_model(), "all", make_stage_outcomes("all")) == ""
