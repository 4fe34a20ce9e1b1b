"""The rollout planner under a running rollout (`orchestrator.planning.planner`, DESIGN §3): the
plan it started with, recorded targets kept when the fleet changed, failed and skipped stages as
recorded, progress read from the status; and the release id.
"""

from __future__ import annotations

import random
import string
from datetime import UTC, datetime
from typing import Any

import pytest

from orchestrator.api.models import ProgressiveSyncStatus, StagePhase
from orchestrator.api.rollout_status import close_stage, start_rollout
from orchestrator.planning.planner import (
    RolloutProgress,
    StageProgress,
    StageState,
    progress_from_status,
    release_id,
)
from tests.support.builders import (
    NEW_REVISION,
    make_app,
    make_cluster,
    make_stage,
    make_stage_outcomes,
    regional_fleet,
    up_to_date,
)
from tests.support.planner_inputs import (
    EU_US_AP,
    NOT_EU,
    codes,
    eu_clusters,
    plan,
    sizes,
    stale_apps,
)

T0 = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)


# --- a rollout under way ---------------------------------------------------------------------


def _three_stages() -> list[dict[str, Any]]:
    return [
        make_stage("canary", labels={"region": "eu"}, max_targets=1),
        make_stage("per region", expressions=NOT_EU, max_targets=2, spread_by="region"),
        make_stage("rest", max_parallel="50%"),
    ]


def test_running_rollout_gets_the_plan_it_started_with() -> None:
    clusters = regional_fleet(EU_US_AP)
    at_start = plan(clusters, stale_apps(clusters), *_three_stages())
    canary = at_start.stages[0].targets
    # The canary is now updated; the rollout recorded it.
    now = plan(
        clusters,
        stale_apps(clusters, fresh=canary),
        *_three_stages(),
        progress=RolloutProgress(
            "r1", (StageProgress("canary", canary, completed=canary, phase=StagePhase.SUCCEEDED),)
        ),
    )
    assert now.stages[0].state is StageState.DONE
    assert now.stages[0].from_progress
    assert [s.targets for s in now.stages] == [s.targets for s in at_start.stages]
    assert sizes(now)[1:] == sizes(at_start)[1:]
    assert not now.errors


def test_recorded_targets_are_kept_even_when_the_fleet_changed() -> None:
    clusters = regional_fleet({"eu": 4})
    recorded = ("eu-3", "eu-1")
    result = plan(
        clusters,
        stale_apps(clusters, fresh=("eu-1",)),
        make_stage("two", max_targets=2),
        make_stage("rest"),
        progress=RolloutProgress("r1", (StageProgress("two", recorded, completed=("eu-1",)),)),
    )
    assert result.stages[0].targets == recorded
    assert result.stages[0].state is StageState.PLANNED
    assert "1 of 2 clusters updated" in result.stages[0].reason
    assert set(result.stages[1].targets) == {"eu-2", "eu-4"}


def test_failed_cluster_of_a_recorded_stage_is_not_taken_again() -> None:
    clusters = regional_fleet({"eu": 3})
    result = plan(
        clusters,
        stale_apps(clusters),
        make_stage("one", max_targets=1),
        make_stage("rest"),
        progress=RolloutProgress(
            "r1", (StageProgress("one", ("eu-2",), failed=("eu-2",), phase=StagePhase.FAILED),)
        ),
    )
    assert "eu-2" not in result.stages[1].targets
    assert "1 failed (eu-2)" in result.stages[0].reason


def test_recorded_skipped_stage_stays_skipped() -> None:
    clusters = regional_fleet({"eu": 2})
    result = plan(
        clusters,
        stale_apps(clusters),
        make_stage("first"),
        progress=RolloutProgress("r1", (StageProgress("first", phase=StagePhase.SKIPPED),)),
        allow_partial=True,
    )
    assert result.stages[0].state is StageState.SKIPPED
    assert result.stages[0].reason == "skipped by rollout r1"


def test_progress_of_a_stage_the_spec_no_longer_has_is_reported() -> None:
    clusters = regional_fleet({"eu": 2})
    result = plan(
        clusters,
        stale_apps(clusters),
        make_stage("all"),
        progress=RolloutProgress("r1", (StageProgress("old stage", ("eu-1",)),)),
    )
    assert codes(result.warnings) == {"UnknownProgressStage"}
    assert len(result.stages[0].targets) == 2


def test_a_cluster_that_turned_out_of_date_after_its_stages_were_selected_is_late_not_an_error() -> None:
    """Refresh lag (issue 12 finding 5): eu-2 turned OutOfSync after the eu stage was selected; only
    that stage would take it. A warning naming it, never an error that fails the next stage."""
    clusters = regional_fleet({"eu": 2, "us": 1})
    result = plan(
        clusters,
        stale_apps(clusters, fresh=("eu-1",)),
        make_stage("eu", labels={"region": "eu"}),
        make_stage("us", labels={"region": "us"}),
        progress=RolloutProgress(
            "r1", (StageProgress("eu", ("eu-1",), completed=("eu-1",), phase=StagePhase.SUCCEEDED),)
        ),
    )
    assert not result.errors, result.errors
    (late,) = [w for w in result.warnings if w.code.value == "LateClusters"]
    assert late.subjects == ("eu-2",) and "progressive-sync retry" in late.message
    assert result.stages[1].targets == ("us-1",)


def _long_name(index: int, rng: random.Random) -> str:
    """A cluster name of 253 random characters (the most Kubernetes allows)."""
    alphabet = string.ascii_lowercase + string.digits
    return f"eu-{index:04d}-" + "".join(rng.choice(alphabet) for _ in range(245))


def test_a_stage_of_many_long_names_keeps_its_clusters_from_later_stages() -> None:
    """Issue 29 point 8, issue 30: the eu stage ended with two tolerated failures among 1,400 names
    of 253 characters (its records hold them all, in three parts). The catch-all stage after it
    must not take those two again (nor count them against its own maxFailedClusters)."""
    rng = random.Random(29)
    eu = [make_cluster(_long_name(i, rng), region="eu") for i in range(1_400)]
    us = regional_fleet({"us": 3})
    failed = [eu[0].name, eu[1].name]
    stages = [make_stage("eu", labels={"region": "eu"}), make_stage("rest")]
    status = start_rollout(ProgressiveSyncStatus(), rollout_id="r1", stage_names=["eu", "rest"], now=T0)
    status = close_stage(status, stage="eu", phase=StagePhase.SUCCEEDED, message="2 tolerated", now=T0)
    outcomes = make_stage_outcomes(
        "eu",
        targets=[c.name for c in eu],
        completed=[c.name for c in eu[2:]],
        failed=dict.fromkeys(failed, "Degraded"),
    )
    apps = [make_app(f"app-{i}", cluster=c.name) for i, c in enumerate(eu[:2])]
    apps += [up_to_date(c.name, name=f"app-{i}") for i, c in enumerate(eu[2:], start=2)]
    apps += stale_apps(us)

    result = plan(eu + us, apps, *stages, progress=progress_from_status(status, {"eu": outcomes}))

    assert set(result.stages[1].targets) == {"us-1", "us-2", "us-3"}
    assert set(result.stages[0].targets) == {c.name for c in eu}
    assert result.stages[0].state is StageState.DONE
    assert "1398 of 1400 clusters updated" in result.stages[0].reason
    assert not result.errors, result.errors


def test_progress_from_status() -> None:
    """Phases from the status, clusters from the records; a stage without records took none."""
    status = ProgressiveSyncStatus.model_validate(
        {
            "rollout": {"id": "7f3c2a1"},
            "stages": [
                {"name": "canary", "phase": "Succeeded"},
                {"name": "rest", "phase": "Progressing"},
                {"name": "later"},
            ],
        }
    )
    outcomes = {
        "canary": make_stage_outcomes("canary", targets=["a"], completed=["a"]),
        "rest": make_stage_outcomes("rest", targets=["b", "c"], failed={"c": ""}),
    }
    progress = progress_from_status(status, outcomes)
    assert progress.rollout_id == "7f3c2a1"
    assert [s.is_selected for s in progress.stages] == [True, True, False]
    assert progress.stages[0].completed == ("a",)
    assert progress.stages[1].failed == ("c",)
    assert progress.stages[1].targets == ("b", "c")


# --- release id ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        pytest.param(
            (3, [("x",), ("y",)]), (3, [("y",), ("x",)]), True, id="release-id-ignores-revision-order"
        ),
        pytest.param((3, [("x",)]), (3, [("x",), ("x",)]), True, id="release-id-ignores-duplicates"),
        pytest.param((3, [("x",)]), (4, [("x",)]), False, id="release-id-changes-with-generation"),
        pytest.param((3, [("x",)]), (3, [("y",)]), False, id="release-id-changes-with-revisions"),
        pytest.param((3, [("x", "y")]), (3, [("y", "x")]), False, id="release-id-keeps-source-order"),
    ],
)
def test_release_id(
    a: tuple[int, list[tuple[str, ...]]], b: tuple[int, list[tuple[str, ...]]], same: bool
) -> None:
    assert (release_id(*a) == release_id(*b)) is same
    assert len(release_id(*a)) == 10
    assert all(ch in "0123456789abcdef" for ch in release_id(*a))


def test_plan_release_id_uses_its_revisions() -> None:
    result = plan(eu_clusters(), stale_apps(eu_clusters()), make_stage("all"))
    assert result.revisions == ((NEW_REVISION,),)
    assert result.release_id(2) == release_id(2, [(NEW_REVISION,)])
