"""The one sizing rule of a stage: how many clusters it takes and how many of them sync at once.

`stage_size(stage, available=..., targets=...)` is the only place `maxTargets` and `maxParallel`
are resolved to numbers. The planner calls it (what `plan` shows and `select` takes), the Workflow
builder calls it for each planned stage (the fan-out template's `parallelism`, the deadline's
waves, the description), and `render` without a fleet calls it with an assumed cluster count, so
the three never disagree. The rule (docs/planner.md, rule 6):

- `maxTargets` resolves against the clusters *available* to the stage (matched, not taken by an
  earlier stage): an integer as written, "N%" rounded down with a minimum of 1; 0 when nothing is
  available. The stage takes at most that many of its candidates.
- `maxParallel` resolves against the stage's *targets*: an integer as written (even above the
  targets: a `select` at run time that finds more clusters than planned still gets the bound the
  spec wrote), "N%" rounded down with a minimum of 1. So it is always >= 1, which is what Argo's
  template `parallelism` needs; the planner reports 0 for a stage without targets (nothing to size).

Pure; callers: `orchestrator.planning.planner`, `workflow_templates.builder`.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.api.models import Stage, resolve_int_or_percent


@dataclass(frozen=True, slots=True)
class StageSize:
    """How big a stage is: the clusters it takes and how many of them at once (>= 1)."""

    targets: int
    max_parallel: int


def resolve_max_targets(stage: Stage, available: int) -> int:
    """`maxTargets` resolved against the `available` clusters (0 when there are none)."""
    return resolve_int_or_percent(stage.max_targets, available) if available else 0


def stage_size(stage: Stage, *, available: int, targets: int | None = None) -> StageSize:
    """The size of `stage` with `available` clusters to take from (see the module docstring).

    `targets` is how many clusters it actually takes, when known (fewer may be out of date, or a
    running rollout recorded them); without it the stage takes as many as `maxTargets` allows.
    """
    if targets is None:
        targets = min(resolve_max_targets(stage, available), available)
    return StageSize(targets=targets, max_parallel=resolve_int_or_percent(stage.max_parallel, targets))
