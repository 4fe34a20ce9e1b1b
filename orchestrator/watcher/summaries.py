"""The live summary: which stage summaries the watcher writes into a ProgressiveSync, and when.

While a stage runs, its steps write each cluster into the stage's ProgressiveSyncStage objects
and never into the ProgressiveSync; the watcher keeps the stage's summary in the parent current
(docs/status.md). `plan_summaries(status, records, since_last_write=..., interval=...)` says
what to write, as an ordered list of early returns, each with its reason:

1. no rollout in the status → nothing;
2. no stage of it Progressing → nothing (the steps wrote the summary of every closed stage when
   they closed it, exactly; a Pending stage has no records yet);
3. per Progressing stage: its records of this rollout (not all its parts cached yet → skip it);
   the summary `stage_records.summarize(outcomes_of(...))`, the very function every writer uses;
   skip it when it is behind the status (the informer lags: a cluster's outcome never goes back,
   so fewer targets, recorded, done or failed clusters than the status shows is an old cache) or
   when the status shows it already;
4. nothing left → nothing: a converged ProgressiveSync costs no request;
5. the last summary written less than `interval` ago → wait the rest of it (one write per
   interval per ProgressiveSync, however many clusters change);
6. else write them.

`apply_plan` is the mutation the writer applies to the status it reads (and again after a
conflict): the same summaries, for the stages still Progressing in the same rollout, and never
one behind what that status shows. It changes no stage's phase or message: the steps own those.

Pure: no client, no clock (the time since the last write is passed in). Callers:
`orchestrator.watcher.loop` (after each reconcile), `orchestrator.watcher.act` (the mutation),
tests (table-driven).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from orchestrator.api.models import ProgressiveSyncStatus, StageCounts, StagePhase, StageStatus
from orchestrator.api.rollout_status import apply_summary
from orchestrator.api.stage_records import ProgressiveSyncStage, StageSummary, outcomes_of, summarize

DEFAULT_SUMMARY_INTERVAL_SECONDS = 5.0


@dataclass(frozen=True)
class SummaryPlan:
    """What to write now (stage name → its summary), or how long to wait first, and why."""

    reason: str
    rollout_id: str = ""
    write: tuple[tuple[str, StageSummary], ...] = ()
    wait_seconds: float | None = None

    @property
    def writes(self) -> bool:
        """True when there is something to write now."""
        return bool(self.write) and self.wait_seconds is None


def plan_summaries(
    status: ProgressiveSyncStatus,
    records: Iterable[ProgressiveSyncStage],
    *,
    since_last_write: float | None,
    interval: float,
) -> SummaryPlan:
    """The summaries to write into `status` from the ProgressiveSync's `records` (see the module
    docstring for the rules, in order). `since_last_write`: seconds since this ProgressiveSync's
    last summary write (None: none yet), measured by the caller on a monotonic clock."""
    rollout = status.rollout
    if rollout is None:
        return SummaryPlan("no rollout")
    running = [entry for entry in status.stages or [] if entry.phase == StagePhase.PROGRESSING]
    if not running:
        return SummaryPlan(f"no stage of rollout {rollout.id} is Progressing", rollout.id)
    ours = [record for record in records if record.spec.rollout_id == rollout.id]
    changed: list[tuple[str, StageSummary]] = []
    for entry in running:
        summary = stage_summary(entry.name, ours)
        if summary is None or is_behind(summary.counts, entry.tally()):
            continue
        if _shows(status, entry.name, summary):
            continue
        changed.append((entry.name, summary))
    if not changed:
        return SummaryPlan(f"the summaries of rollout {rollout.id} are current", rollout.id)
    stages = ", ".join(repr(name) for name, _ in changed)
    if since_last_write is not None:
        elapsed = since_last_write
        if 0 <= elapsed < interval:
            return SummaryPlan(
                f"stage(s) {stages} changed; the last summary was written {elapsed:.1f}s ago "
                f"(at most one per {interval:g}s)",
                rollout.id,
                tuple(changed),
                wait_seconds=interval - elapsed,
            )
    return SummaryPlan(f"stage(s) {stages} changed", rollout.id, tuple(changed))


def stage_summary(stage: str, records: Sequence[ProgressiveSyncStage]) -> StageSummary | None:
    """The summary of `stage` from its records (one rollout's); None when none is cached, or not
    every part of it is (the informer has not seen them all yet)."""
    parts = [record for record in records if record.spec.stage == stage]
    if not parts:
        return None
    expected = max(record.spec.parts for record in parts)
    if len({record.spec.part for record in parts}) < expected:
        return None
    return summarize(outcomes_of(stage, parts))


def is_behind(new: StageCounts, shown: StageCounts) -> bool:
    """True when `new` is older than what the status shows: records only move forward (a target is
    taken once, an outcome never goes back, Failed is never undone), so fewer targets, recorded,
    done or failed clusters can only come from a cache that lags."""
    return (
        new.targets < shown.targets
        or new.failed < shown.failed
        or new.completed + new.failed < shown.completed + shown.failed
        or new.syncing + new.completed + new.failed < shown.syncing + shown.completed + shown.failed
    )


def _shows(status: ProgressiveSyncStatus, stage: str, summary: StageSummary) -> bool:
    """True when `status` already shows `summary` for `stage` (applying it would change nothing)."""
    after = apply_summary(status.model_copy(deep=True), stage, summary)
    return after.to_api() == status.to_api()


def apply_plan(
    status: ProgressiveSyncStatus, rollout_id: str, write: Sequence[tuple[str, StageSummary]]
) -> ProgressiveSyncStatus:
    """`status` with each summary of `write` put in, for the stages still Progressing in rollout
    `rollout_id` whose summary in `status` is not newer (re-appliable: the writer applies it to
    every status it reads)."""
    if status.rollout is None or status.rollout.id != rollout_id:
        return status
    for stage, summary in write:
        entry = _progressing(status.stages or [], stage)
        if entry is None or is_behind(summary.counts, entry.tally()):
            continue
        status = apply_summary(status, stage, summary)
    return status


def _progressing(stages: Sequence[StageStatus], name: str) -> StageStatus | None:
    return next((s for s in stages if s.name == name and s.phase == StagePhase.PROGRESSING), None)
