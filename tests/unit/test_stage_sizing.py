"""One sizing rule: the planner, the Workflow built from its plan and `render` without a fleet agree.

A stage's size (how many clusters it takes) and its `maxParallel` (how many sync at once) are
resolved in three places: the planner (what `plan` shows and `select` takes), the builder from the
plan (the fan-out template's `parallelism`, the deadline, the description the watcher creates) and
`render` without a fleet (which assumes every stage has N clusters). Here each stage has N
out-of-date clusters available, so all three must give the same numbers. Pure: the real planner
over fleets built with tests/support/builders; nothing talks to a cluster.
"""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.api.models import ProgressiveSync
from orchestrator.planning.planner import plan_rollout
from tests.support.builders import (
    make_app,
    make_app_set,
    make_cluster,
    make_ps_model,
    make_release,
    make_stage,
)
from workflow_templates import names
from workflow_templates.builder import assumed_sizes, build_workflow
from workflow_templates.settings import WorkflowSettings

# Argo's `parallelism` is the stage's maxParallel when its pods do not all start at once.
SETTINGS = WorkflowSettings(pods_at_once_limit=0)


def fanout_parallelism(ps: ProgressiveSync, plan: Any) -> dict[str, int]:
    obj = build_workflow(
        ps, release=make_release("r1", revisions=(("abc",),)), plan=plan, settings=SETTINGS
    ).to_dict()
    templates = {t["name"]: t for t in obj["spec"]["templates"]}
    task_names = names.stage_task_names(stage.name for stage in ps.spec.stages)
    return {
        stage.name: templates[names.fanout_template_name(task)]["parallelism"]
        for stage, task in zip(ps.spec.stages, task_names, strict=True)
    }


def plan_over(ps: ProgressiveSync, clusters: int) -> Any:
    """The planner's plan over `clusters` clusters, every one with an out-of-date Application."""
    fleet = [make_cluster(f"c{i}") for i in range(1, clusters + 1)]
    return plan_rollout(
        ps.spec,
        ps_name="myservice",
        appset=make_app_set(),
        clusters=fleet,
        apps=[make_app(cluster=c.name) for c in fleet],
    )


@pytest.mark.parametrize(
    ("clusters", "stage"),
    [
        pytest.param(
            5, make_stage("some", max_targets="20%", max_parallel=2), id="int-max-parallel-above-the-targets"
        ),
        pytest.param(8, make_stage("all", max_parallel="25%"), id="percentage-of-the-targets"),
        pytest.param(
            10, make_stage("few", max_targets="30%", max_parallel="50%"), id="percentage-rounds-down"
        ),
        pytest.param(
            3, make_stage("five", max_targets=5, max_parallel=4), id="int-max-targets-above-the-fleet"
        ),
    ],
)
def test_a_stage_is_sized_alike_by_the_planner_the_builder_and_render_without_a_fleet(
    clusters: int, stage: dict[str, Any]
) -> None:
    ps = make_ps_model(stages=[stage])
    plan = plan_over(ps, clusters)
    planned = plan.stages[0]
    assumed = assumed_sizes(ps, clusters)[planned.name]
    assert (assumed.targets, assumed.max_parallel) == (len(planned.targets), planned.max_parallel)
    assert fanout_parallelism(ps, plan) == {planned.name: planned.max_parallel}
    assert fanout_parallelism(ps, assumed_sizes(ps, clusters)) == {planned.name: planned.max_parallel}


@pytest.mark.parametrize(
    ("max_parallel", "parallelism"),
    [
        pytest.param(3, 3, id="int-max-parallel-as-written"),
        pytest.param("50%", 1, id="percentage-of-no-target-is-one"),
    ],
)
def test_a_stage_left_without_clusters_gets_the_same_parallelism_with_or_without_a_fleet(
    max_parallel: int | str, parallelism: int
) -> None:
    ps = make_ps_model(stages=[make_stage("all"), make_stage("rest", max_parallel=max_parallel)])
    plan = plan_over(ps, 4)
    assert plan.stage("rest").targets == ()
    assert fanout_parallelism(ps, plan)["rest"] == parallelism
    assert fanout_parallelism(ps, assumed_sizes(ps, 0))["rest"] == parallelism
