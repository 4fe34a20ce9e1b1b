"""Automatic rollback in the API: `spec.rollback` (opt-in; absent, a rollout never rolls back).

When a rollout ends with one of the outcomes listed in `on` (`RollbackTrigger`), the Applications
it synced are synced back to the revision(s) each ran before our sync (DESIGN.md §3, "Rollback"):
the failed stage's clusters (`scope: FailedStage`, the default) or every cluster the rollout
reached, later stages first (`scope: Reached`); `maxParallel` clusters of a stage at a time
(default: the stage's own maxParallel, resolved by `orchestrator.planning.sizing.rollback_parallel`);
each within `progressDeadlineSeconds` (default: the spec's, `rollback_deadline_seconds`).

The rule that needs the rest of the spec (AnalysisFailed only with analysis somewhere) is
`rollback_problems`, which the spec's validator runs, with its CEL twin `SPEC_RULE`.
`describe_rollback` is the one line `progressive-sync plan` and `validate` print about it.

`on` is a YAML 1.1 boolean when unquoted: kubectl, Helm and PyYAML read `on: [...]` as the key
`true`. The model says so and how to fix it (write `"on":`), instead of "on is missing".

Pure data, like `orchestrator.api.models`, which imports this module.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import ConfigDict, Field, StrictInt, field_validator, model_validator

from orchestrator.api.base import MAX_DEADLINE_SECONDS, IntOrPercent, _Model, _validations, cel

if TYPE_CHECKING:
    from orchestrator.api.analysis import AnalysisSpec
    from orchestrator.api.models import ProgressiveSyncSpec


class RollbackTrigger(StrEnum):
    """An outcome of a rollout that starts its rollback when `rollback.on` lists it."""

    STAGE_FAILED = "StageFailed"
    """A stage failed: its failed clusters exceeded failurePolicy.maxFailedClusters."""
    ANALYSIS_FAILED = "AnalysisFailed"
    """A stage failed because an analysis gate failed."""
    DEADLINE_EXCEEDED = "DeadlineExceeded"
    """The Workflow's activeDeadlineSeconds passed."""
    CANCELLED = "Cancelled"
    """The rollout was cancelled (`argo stop`, `progressive-sync cancel`)."""


class RollbackScope(StrEnum):
    """Which clusters a rollback restores."""

    FAILED_STAGE = "FailedStage"
    """The clusters of the stage that failed (or was running)."""
    REACHED = "Reached"
    """Every cluster this rollout synced, later stages first."""


_TRIGGERS = ", ".join(trigger.value for trigger in RollbackTrigger)


class RollbackSpec(_Model):
    """When and how a rollout undoes itself on the clusters it synced."""

    model_config = ConfigDict(
        json_schema_extra=_validations(
            cel(
                "self.on.all(t, self.on.exists_one(u, u == t))",
                "on lists a trigger twice (list each trigger once)",
                # No reason: the API server prints FieldValueDuplicate without the message.
                field_path=".on",
            )
        )
    )

    on: Annotated[list[RollbackTrigger], Field(min_length=1, max_length=len(RollbackTrigger))]
    """The outcomes that start a rollback: StageFailed, AnalysisFailed, DeadlineExceeded, Cancelled."""
    scope: RollbackScope = RollbackScope.FAILED_STAGE
    """FailedStage (default): the failed stage's clusters; Reached: all synced, later stages first."""
    max_parallel: IntOrPercent | None = None
    """Clusters of a stage rolled back at once: a count or "N%" of its targets; default its maxParallel."""
    progress_deadline_seconds: Annotated[StrictInt, Field(ge=1, le=MAX_DEADLINE_SECONDS)] | None = None
    """Per cluster: seconds to be Synced and Healthy at the old revision; default progressDeadlineSeconds."""

    @model_validator(mode="before")
    @classmethod
    def _on_read_as_a_boolean(cls, data: Any) -> Any:
        # YAML 1.1 (kubectl, Helm, PyYAML) reads an unquoted `on` key as the boolean true; the API
        # server then sees a field "true" and no `on`. Say that, not "on is missing".
        if isinstance(data, dict) and "on" not in data and (True in data or "true" in data):
            raise ValueError(
                "the key on was read as the boolean true, as YAML 1.1 reads an unquoted on "
                '(quote it: "on": [StageFailed])'
            )
        return data

    @field_validator("on", mode="before")
    @classmethod
    def _on_not_empty(cls, on: Any) -> Any:
        if isinstance(on, list) and not on:
            raise ValueError(f"lists no trigger (list at least one of {_TRIGGERS})")
        return on

    @field_validator("on")
    @classmethod
    def _on_unique(cls, on: list[RollbackTrigger]) -> list[RollbackTrigger]:
        first: dict[RollbackTrigger, int] = {}
        for index, trigger in enumerate(on):
            if trigger in first:
                raise ValueError(
                    f"{trigger.value} is listed at [{first[trigger]}] and [{index}] (list each trigger once)"
                )
            first[trigger] = index
        return on

    def triggered_by(self, trigger: RollbackTrigger) -> bool:
        """True when `trigger` is one of `on`."""
        return trigger in self.on


ANALYSIS_FAILED_WITHOUT_ANALYSIS = (
    "AnalysisFailed can never start a rollback: no stage has analysis (add spec.analysis or a "
    "stage's analysis, or remove AnalysisFailed from spec.rollback.on)"
)


def rollback_problems(
    rollback: RollbackSpec | None,
    *,
    spec_analysis: AnalysisSpec | None,
    stage_analyses: list[AnalysisSpec | None],
) -> list[str]:
    """What is wrong with `rollback` given the rest of the spec, each with its fix ([] when fine)."""
    if rollback is None or not rollback.triggered_by(RollbackTrigger.ANALYSIS_FAILED):
        return []
    if spec_analysis is not None or any(analysis is not None for analysis in stage_analyses):
        return []
    return [ANALYSIS_FAILED_WITHOUT_ANALYSIS]


# The CEL twin of `rollback_problems`, on the spec.
SPEC_RULE = cel(
    "!has(self.rollback) || !self.rollback.on.exists(t, t == 'AnalysisFailed')"
    " || has(self.analysis) || self.stages.exists(s, has(s.analysis))",
    ANALYSIS_FAILED_WITHOUT_ANALYSIS,
    field_path=".rollback.on",
    reason="FieldValueInvalid",
)


def rollback_deadline_seconds(spec: ProgressiveSyncSpec) -> int:
    """Seconds one cluster's rollback has to be Synced and Healthy at the old revision: the
    rollback's own progressDeadlineSeconds, else the spec's."""
    rollback = spec.rollback
    if rollback is not None and rollback.progress_deadline_seconds is not None:
        return rollback.progress_deadline_seconds
    return spec.progress_deadline_seconds


def describe_rollback(rollback: RollbackSpec, parallel: str, *, grouped: bool = False) -> str:
    """One line for people (`plan`, `validate`): the triggers, the scope and `parallel`, which says
    how many clusters of a stage roll back at once (e.g. "2 at a time per stage"); `grouped`
    (spec.groupBy) says the scope is each group's own (docs/groups.md, "Groups and rollback")."""
    scope = (
        f"scope {RollbackScope.REACHED.value} (later stages first)"
        if rollback.scope is RollbackScope.REACHED
        else f"scope {RollbackScope.FAILED_STAGE.value} (the failed stage's clusters)"
    )
    if grouped:
        scope = (
            f"scope {RollbackScope.REACHED.value} per group (each group's later stages first"
            if rollback.scope is RollbackScope.REACHED
            else f"scope {RollbackScope.FAILED_STAGE.value} per group (each group's failed stage"
        ) + "; a group that succeeded keeps the release)"
    triggers = ", ".join(trigger.value for trigger in rollback.on)
    return f"rollback: on {triggers}; {scope}; {parallel}"
