"""All sizing math of a rollout: int-or-percent, stage size, batch count, slots, deadline waves.

Every number that says how big a stage is or how much of it runs at once is computed here, by pure
functions of plain values, and nowhere else. The planner calls `stage_size` (what `plan` shows and
`select` takes); the Workflow builder calls `stage_size`, `batch_count`, `deadline_waves` and
`first_wave` once per stage to make the rollout contract (`orchestrator.planning.contract`, which
adds `rollback_parallel` when the spec has a rollback), from
which the fan-out's `parallelism`, the deadline and the steps' sizing all come; the `batch` step
calls `slots_of_batch` and `clusters_of_batch` with the numbers the contract gives it. The rules
(docs/design/planner.md, rule 6; docs/design/workflow.md):

- `maxTargets` resolves against the clusters *available* to the stage (matched, not taken by an
  earlier stage): an integer as written, "N%" rounded down with a minimum of 1; 0 when nothing is
  available. The stage takes at most that many of its candidates.
- `maxParallel` resolves against the stage's *targets*: an integer as written (even above the
  targets: a `select` at run time that finds more clusters than planned still gets the bound the
  spec wrote), "N%" rounded down with a minimum of 1. So it is always >= 1, which is what Argo's
  template `parallelism` needs; the planner reports 0 for a stage without targets (nothing to size).
- A stage above the batch threshold runs in batches: at most `per_batch` clusters each, never more
  batches than maxParallel; the maxParallel slots are shared out among them (slot s to batch s mod
  n), and so are the targets (position k to the batch owning slot k mod maxParallel).
- A stage takes `deadline_waves` progress deadlines: one per wave of maxParallel clusters.
- `rollback.maxParallel` (spec.rollback, opt-in) resolves like `maxParallel`, against the stage's
  targets, never below 1; without it a stage rolls back `maxParallel` clusters at a time
  (`rollback_parallel`). A rollback starts no more pods than that (`rollback_batch_pods`).
- A stage of one pod per cluster with more targets than maxParallel and at most
  `pods_at_once_limit` starts all its cluster pods together (`pods_at_once`): each waits for a free
  slot and claims it; maxParallel is then held by the claims on the stage's records, not by Argo.

Pure; callers: `orchestrator.planning.planner`, `orchestrator.planning.contract`,
`workflow_templates.builder`, `steps.batch`, `orchestrator.cli.plan_cmd`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from orchestrator.api.models import PERCENT_PATTERN, Stage


def resolve_int_or_percent(value: int | str, total: int) -> int:
    """Resolve a size against `total`: percentages round down with a minimum of 1; ints are as-is.

    The caller caps the result to what is available (a stage never takes more clusters than it has).
    A percentage of 0 clusters still resolves to 1; the cap makes that 0.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if not isinstance(value, str) or re.fullmatch(PERCENT_PATTERN, value) is None:
        raise ValueError(f"not an int or percentage: {value!r}")
    percent = int(value[:-1])
    return max(1, total * percent // 100)


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


def batch_count(size: StageSize, *, threshold: int, per_batch: int) -> int:
    """How many batch pods a stage runs; 0 when it runs one pod per cluster (`threshold` targets or
    fewer).

    At most `per_batch` clusters per batch, and never more batches than maxParallel (each batch runs
    at least one cluster at a time, and the batches' shares add up to maxParallel).
    """
    if size.targets <= threshold:
        return 0
    return max(1, min(size.max_parallel, math.ceil(size.targets / per_batch)))


def slots_of_batch(max_parallel: int, batches: int, batch: int) -> int:
    """Batch `batch`'s share of the stage's maxParallel: the slots s with s mod `batches` == `batch`.

    The shares of all batches add up to maxParallel; `batch_count` never makes more batches than
    maxParallel (the rollout contract refuses it), so every share is at least 1.
    """
    return max_parallel // batches + (1 if batch < max_parallel % batches else 0)


def clusters_of_batch(targets: Sequence[str], batches: int, batch: int, max_parallel: int) -> list[str]:
    """The targets batch `batch` of `batches` takes, in rollout order: the one at position k when
    it owns slot k mod `max_parallel` (clusters in proportion to the batch's slots, so every batch
    ends after the same number of waves as one loop of maxParallel pods would)."""
    return [target for position, target in enumerate(targets) if position % max_parallel % batches == batch]


def rollback_batch_count(batches: int, rollback_parallel: int) -> int:
    """How many batch pods a stage's rollback runs: as many as its forward batches (0: one pod per
    cluster), never more than its rollbackParallel (each batch restores at least one cluster at a
    time; the batches' shares of rollbackParallel, `slots_of_batch`, add up to it)."""
    return min(batches, max(1, rollback_parallel)) if batches else 0


def rollback_batch_pods(batches: int, rollback_parallel: int) -> int:
    """How many `rollback-batch` pods a stage's rollback may run, each restoring its share of the
    stage (`clusters_of_batch`) `slots_of_batch` at a time: for a stage in batches, as many as
    `rollback_batch_count`; for a stage of one pod per cluster, rollbackParallel pods of one slot
    each. Such a stage uses them only when it restores more clusters than rollbackParallel: its
    exit handler has no Argo `parallelism` (docs/design/workflow.md, "No parallelism in the exit
    handler"), so no more pods may start than may run at once."""
    return rollback_batch_count(batches, rollback_parallel) or max(1, rollback_parallel)


def deadline_waves(size: StageSize) -> int:
    """How many waves of maxParallel clusters the stage's targets make (>= 1: a stage planned empty
    may still find clusters at run time); each wave gets one progress deadline in the Workflow's
    `activeDeadlineSeconds`."""
    return max(1, math.ceil(size.targets / size.max_parallel))


def rollback_parallel(max_parallel: int | str | None, size: StageSize) -> int:
    """How many of the stage's clusters roll back at once: `rollback.maxParallel` resolved like
    maxParallel against the stage's targets ("N%" rounded down, at least 1; an int as written), or
    the stage's own maxParallel when the rollback sets none. Always >= 1 (the most pods the
    stage's rollback fan-out starts: `rollback_batch_pods`)."""
    if max_parallel is None:
        return max(1, size.max_parallel)
    return max(1, resolve_int_or_percent(max_parallel, size.targets))


def first_wave(size: StageSize) -> int:
    """How many of the stage's first targets the step that selects it starts syncing itself: the
    clusters the fan-out starts first, i.e. maxParallel (steps/first_wave.py)."""
    return size.max_parallel


def pods_at_once(size: StageSize, *, batches: int, per_cluster_analysis: bool, limit: int) -> bool:
    """Do the stage's cluster pods all start together, each waiting for a free slot and claiming it
    (steps/turn.py), instead of maxParallel at a time? For a stage of one pod per cluster (no
    batches), whose slot frees when its cluster is done (no per-cluster analysis), with more targets
    than maxParallel and at most `limit` (`WorkflowSettings.pods_at_once_limit`; 0: never). Then
    a freed slot is taken by a pod that already runs, not by one Argo starts only after the pod
    before it ended (seconds on a real node)."""
    if batches or per_cluster_analysis:
        return False
    return size.max_parallel < size.targets <= limit
