"""Independent groups (`spec.groupBy`, docs/groups.md): the planner partitions the fleet by a
cluster label and plans the stage list once per group over that group's clusters only
(percentages of the group, each group's own canary), with "<group>/<stage>" names; a group's
recorded progress holds only its own clusters. Pure: the planner over builders' views.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.api.phases import StagePhase
from orchestrator.argocd.fleet import Cluster
from orchestrator.planning.plan import group_stage_name, split_stage_name
from orchestrator.planning.planner import (
    RolloutPlan,
    RolloutProgress,
    StageProgress,
    StageState,
    group_clusters,
    plan_rollout,
    planned_sizes,
)
from tests.support.builders import make_app, make_app_set, make_cluster, make_spec, make_stage
from tests.support.planner_inputs import codes


def _fleet(teams: dict[str | None, int]) -> list[Cluster]:
    """Clusters `<team>-<i>` labelled team=<team>; the None team's clusters (`other-<i>`) have no label."""
    return [
        make_cluster(f"{team or 'other'}-{i}", labels={"team": team} if team else {})
        for team, count in teams.items()
        for i in range(1, count + 1)
    ]


def _plan(
    clusters: list[Cluster],
    *stages: dict[str, Any],
    progress: RolloutProgress | None = None,
    **spec: Any,
) -> RolloutPlan:
    return plan_rollout(
        make_spec(*(stages or (make_stage("canary", max_targets=1), make_stage("rest"))), **spec),
        ps_name="myservice",
        appset=make_app_set(),
        clusters=clusters,
        apps=[make_app(cluster=c.name) for c in clusters],
        progress=progress,
    )


def _by_name(plan: RolloutPlan) -> dict[str, tuple[str, ...]]:
    return {stage.name: stage.targets for stage in plan.stages}


def test_each_group_runs_every_stage_over_its_own_clusters() -> None:
    plan = _plan(_fleet({"a": 3, "b": 2}), groupBy="team")
    assert plan.group_by == "team"
    assert dict(plan.groups) == {"a": ("a-1", "a-2", "a-3"), "b": ("b-1", "b-2")}
    assert [s.name for s in plan.stages] == ["a/canary", "a/rest", "b/canary", "b/rest"]
    for stage in plan.stages:
        assert stage.group is not None
        assert all(target.startswith(f"{stage.group}-") for target in stage.targets)
        assert stage.state is StageState.PLANNED
    targets = _by_name(plan)
    assert len(targets["a/canary"]) == 1 and len(targets["b/canary"]) == 1
    assert set(targets["a/canary"] + targets["a/rest"]) == {"a-1", "a-2", "a-3"}
    assert set(targets["b/canary"] + targets["b/rest"]) == {"b-1", "b-2"}
    assert not plan.errors and not plan.uncovered


@pytest.mark.parametrize(
    ("teams", "stages", "expected"),
    [
        pytest.param(
            {"a": 10, "b": 4},
            (make_stage("canary", max_targets="10%"), make_stage("rest")),
            {"a/canary": 1, "a/rest": 9, "b/canary": 1, "b/rest": 3},
            id="percent-of-each-group-rounds-down-min-1",
        ),
        pytest.param(
            {"a": 10, "b": 4},
            (make_stage("half", max_targets="50%", max_parallel="50%"), make_stage("rest")),
            {"a/half": 5, "a/rest": 5, "b/half": 2, "b/rest": 2},
            id="percent-of-the-group-not-of-the-fleet",
        ),
        pytest.param(
            {"a": 2, "b": 2},
            (make_stage("eu", labels={"region": "eu"}), make_stage("rest")),
            {"a/eu": 0, "a/rest": 2, "b/eu": 0, "b/rest": 2},
            id="a-stage-matching-nothing-in-a-group-is-skipped-there",
        ),
    ],
)
def test_sizes_are_per_group(
    teams: dict[str | None, int], stages: tuple[dict[str, Any], ...], expected: dict[str, int]
) -> None:
    plan = _plan(_fleet(teams), *stages, groupBy="team")
    assert {name: len(targets) for name, targets in _by_name(plan).items()} == expected


def test_max_parallel_percent_and_sizes_use_the_groups_stage() -> None:
    spec = make_spec(
        make_stage("canary", max_targets=1), make_stage("rest", max_parallel="50%"), groupBy="team"
    )
    clusters = _fleet({"a": 5, "b": 3})
    plan = plan_rollout(
        spec,
        ps_name="myservice",
        appset=make_app_set(),
        clusters=clusters,
        apps=[make_app(cluster=c.name) for c in clusters],
    )
    sizes = planned_sizes(spec, plan)
    assert {name: (size.targets, size.max_parallel) for name, size in sizes.items()} == {
        "a/canary": (1, 1),
        "a/rest": (4, 2),
        "b/canary": (1, 1),
        "b/rest": (2, 1),
    }


def test_a_stage_skipped_in_one_group_says_which_group() -> None:
    clusters = [
        make_cluster("a-1", labels={"team": "a", "region": "eu"}),
        make_cluster("b-1", labels={"team": "b", "region": "us"}),
    ]
    plan = _plan(clusters, make_stage("eu", region="eu"), make_stage("rest"), groupBy="team")
    skipped = plan.stage("b/eu")
    assert skipped.state is StageState.SKIPPED
    assert skipped.reason == "its selector matches none of the 1 clusters of group team=b"
    assert plan.stage("a/eu").targets == ("a-1",)
    assert plan.stage("b/rest").targets == ("b-1",)


def test_clusters_without_the_label_form_the_none_group_last_with_a_warning() -> None:
    plan = _plan(_fleet({"b": 1, None: 2, "a": 1}), groupBy="team")
    assert list(plan.groups) == ["a", "b", "(none)"]
    assert plan.groups["(none)"] == ("other-1", "other-2")
    assert "GroupLabelMissing" in codes(plan.warnings)
    warning = next(w for w in plan.warnings if w.code.value == "GroupLabelMissing")
    assert warning.subjects == ("other-1", "other-2")
    assert set(plan.stage("(none)/canary").targets + plan.stage("(none)/rest").targets) == {
        "other-1",
        "other-2",
    }


def test_without_group_by_the_plan_and_its_json_are_as_before() -> None:
    plan = _plan(_fleet({"a": 2, "b": 2}))
    assert plan.group_by is None and not plan.groups
    assert [s.name for s in plan.stages] == ["canary", "rest"]
    data = plan.to_dict(generation=1)
    assert "groups" not in data and "groupBy" not in data
    assert all("group" not in stage for stage in data["stages"])


def test_json_has_a_section_per_group() -> None:
    plan = _plan(_fleet({"a": 2, "b": 1}), groupBy="team", maxParallelGroups=1)
    data = plan.to_dict(generation=1)
    assert data["groupBy"] == "team"
    assert data["maxParallelGroups"] == 1
    assert data["groups"] == [
        {"name": "a", "clusters": ["a-1", "a-2"], "stages": ["a/canary", "a/rest"]},
        {"name": "b", "clusters": ["b-1"], "stages": ["b/canary", "b/rest"]},
    ]
    assert data["stages"][0]["group"] == "a" and data["stages"][0]["stage"] == "canary"


def test_max_parallel_groups_defaults_to_every_group_in_the_json() -> None:
    data = _plan(_fleet({"a": 1, "b": 1, "c": 1}), groupBy="team").to_dict()
    assert data["maxParallelGroups"] == 3


def test_a_running_rollout_keeps_each_groups_recorded_targets() -> None:
    clusters = _fleet({"a": 3, "b": 3})
    first = _plan(clusters, groupBy="team")
    canary_a = first.stage("a/canary").targets
    progress = RolloutProgress(
        rollout_id="r1",
        stages=(
            StageProgress(name="a/canary", phase=StagePhase.FAILED, targets=canary_a),
            StageProgress(
                name="b/canary", phase=StagePhase.SUCCEEDED, targets=first.stage("b/canary").targets
            ),
        ),
    )
    again = _plan(clusters, groupBy="team", progress=progress)
    assert again.stage("a/canary").targets == canary_a and again.stage("a/canary").from_progress
    # The rest of a does not take a's canary again, whatever happened to it.
    assert canary_a[0] not in again.stage("a/rest").targets
    assert again.stage("b/rest").targets == first.stage("b/rest").targets
    assert "UnknownProgressStage" not in codes(again.warnings)


def test_a_recorded_ungrouped_stage_is_a_stranger_to_a_grouped_plan() -> None:
    clusters = _fleet({"a": 1})
    progress = RolloutProgress(
        rollout_id="r1",
        stages=(StageProgress(name="canary", phase=StagePhase.PROGRESSING, targets=("a-1",)),),
    )
    plan = _plan(clusters, groupBy="team", progress=progress)
    assert "UnknownProgressStage" in codes(plan.warnings)


def test_uncovered_is_per_group() -> None:
    # maxTargets 1 in the only stage: each group leaves its other clusters out.
    plan = _plan(_fleet({"a": 2, "b": 1}), make_stage("only", max_targets=1), groupBy="team")
    assert len(plan.uncovered) == 1 and plan.uncovered[0].startswith("a-")
    assert "UncoveredClusters" in codes(plan.errors)


@pytest.mark.parametrize(
    ("name", "split"),
    [
        pytest.param("canary", (None, "canary"), id="no-group"),
        pytest.param("team-a/canary", ("team-a", "canary"), id="group"),
        pytest.param("(none)/one per region", ("(none)", "one per region"), id="none-group-and-spaces"),
    ],
)
def test_group_stage_names_split_back(name: str, split: tuple[str | None, str]) -> None:
    assert split_stage_name(name) == split
    group, stage = split
    if group is not None:
        assert group_stage_name(group, stage) == name


@settings(max_examples=60, deadline=None)
@given(
    teams=st.dictionaries(
        st.sampled_from(["a", "b", "c", None]), st.integers(min_value=1, max_value=6), min_size=1, max_size=4
    ),
    canary=st.sampled_from([1, 2, "10%", "50%"]),
)
def test_every_cluster_is_taken_once_and_only_by_its_own_group(
    teams: dict[str | None, int], canary: int | str
) -> None:
    clusters = _fleet(teams)
    plan = _plan(clusters, make_stage("canary", max_targets=canary), make_stage("rest"), groupBy="team")
    groups = group_clusters("team", clusters)
    assert sorted(c for members in groups.values() for c in members) == sorted(c.name for c in clusters)
    taken = [target for stage in plan.stages for target in stage.targets]
    assert sorted(taken) == sorted(c.name for c in clusters)
    for stage in plan.stages:
        assert stage.group is not None
        assert set(stage.targets) <= set(groups[stage.group])
