"""Independent groups (`spec.groupBy`, docs/groups.md) in the status: group stage names and each
group's phase.

With groupBy a rollout runs the spec's stages once per group, and each group's stage is named
"<group>/<stage>" wherever a stage is named (plan, contract, Workflow, status, records): neither a
label value nor a stage name has a "/". A group's phase comes from its stages' (`group_phases`):
the rollout's own phase stays the one `assess_rollout` decides (Failed when any group failed), and
this says which groups did what. Pure data helpers; the planner, the steps, `status` use them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from orchestrator.api.models import ProgressiveSyncSpec, Stage
from orchestrator.api.phases import PASSED_STAGE_PHASES, StagePhase

GROUP_SEPARATOR = "/"


class NamedPhase(Protocol):
    """A stage as the status or a view of it has it: its rollout name and its phase."""

    @property
    def name(self) -> str: ...  # noqa: D102 - a protocol's member

    @property
    def phase(self) -> StagePhase: ...  # noqa: D102


def group_stage_name(group: str, stage: str) -> str:
    """The name of stage `stage` of group `group` (e.g. "team-a/canary")."""
    return f"{group}{GROUP_SEPARATOR}{stage}"


def split_stage_name(name: str) -> tuple[str | None, str]:
    """(group, spec stage name) of a rollout stage's name; group None for a stage of no group."""
    group, separator, stage = name.rpartition(GROUP_SEPARATOR)
    return (group, stage) if separator else (None, name)


def spec_stage(spec: ProgressiveSyncSpec, name: str) -> Stage | None:
    """The spec's stage that the rollout's stage `name` runs ("<group>/<stage>" only with groupBy);
    None when there is none."""
    group, stage_name = split_stage_name(name)
    if (group is None) != (spec.group_by is None):
        return None
    return next((stage for stage in spec.stages if stage.name == stage_name), None)


def group_phases(stages: Iterable[NamedPhase]) -> dict[str, StagePhase]:
    """Each group's phase from its stages', groups in the order their stages come ({} without
    groups): Failed when a stage failed, Cancelled when one was cancelled, Succeeded when every
    stage passed (Succeeded or Skipped), Progressing once one started, else Pending."""
    phases_of: dict[str, list[StagePhase]] = {}
    for stage in stages:
        group, _ = split_stage_name(stage.name)
        if group is not None:
            phases_of.setdefault(group, []).append(stage.phase)
    return {group: _group_phase(phases) for group, phases in phases_of.items()}


def _group_phase(phases: list[StagePhase]) -> StagePhase:
    for phase in (StagePhase.FAILED, StagePhase.CANCELLED):
        if phase in phases:
            return phase
    if all(phase in PASSED_STAGE_PHASES for phase in phases):
        return StagePhase.SUCCEEDED
    if any(phase is not StagePhase.PENDING for phase in phases):
        return StagePhase.PROGRESSING
    return StagePhase.PENDING


def unfinished_groups(stages: Iterable[NamedPhase]) -> list[str]:
    """The groups still Pending or Progressing, in order: what a cancel or a pause of the rollout
    touches ([] without groups)."""
    return [
        group
        for group, phase in group_phases(stages).items()
        if phase in (StagePhase.PENDING, StagePhase.PROGRESSING)
    ]


def describe_groups(stages: Iterable[NamedPhase]) -> str:
    """'groups: alpha Failed, beta Succeeded' ("" without groups)."""
    phases = group_phases(stages)
    if not phases:
        return ""
    return "groups: " + ", ".join(f"{group} {phase.value}" for group, phase in phases.items())
