"""Independent groups (`spec.groupBy`, docs/groups.md): the stages a rollout runs, by name.

Without groupBy a rollout runs the spec's stages under their own names. With it, the planner
(`orchestrator.planning.planner.plan_rollout`) plans the spec's stages once per group, and each
group's stage is named "<group>/<stage>" (`orchestrator.api.groups.group_stage_name`) in the plan,
the rollout contract, the Workflow's `stage` parameters, the status and the stage records. The
groups are the fleet's when the rollout is built, so the rollout contract's stage list is the one
list of the stages the rollout runs: the builder and the steps (`steps.common.run_view`) put it in
place of the spec's (`with_run_stages`), and a "<group>/<stage>" name finds its settings in the
spec's stage of that name (`spec_stage`).

Pure: no client, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable

from orchestrator.api.groups import spec_stage
from orchestrator.api.models import ProgressiveSync, ProgressiveSyncSpec, Stage

__all__ = ["run_stages", "spec_stage", "with_run_stages"]


def run_stages(spec: ProgressiveSyncSpec, names: Iterable[str]) -> list[Stage]:
    """The rollout's stages in order: each spec stage under its rollout name (a copy named
    "<group>/<stage>" with groupBy). KeyError with the name that is no stage of the spec."""
    stages = []
    for name in names:
        stage = spec_stage(spec, name)
        if stage is None:
            raise KeyError(name)
        stages.append(stage if stage.name == name else stage.model_copy(update={"name": name}))
    return stages


def with_run_stages(ps: ProgressiveSync, names: Iterable[str]) -> ProgressiveSync:
    """`ps` whose spec lists the rollout's stages (`run_stages`) instead of its own: what the
    Workflow builder builds from. The same object without groupBy."""
    if ps.spec.group_by is None:
        return ps
    spec = ps.spec.model_copy(update={"stages": run_stages(ps.spec, names)})
    return ps.model_copy(update={"spec": spec})
