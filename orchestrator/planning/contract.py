"""The rollout contract: what one rollout's Workflow runs, resolved once when the Workflow is built.

A `RolloutContract` is the rollout id, the release (its revisions as data: one list per distinct
revision set, one entry per source; each Application syncs to the set Argo CD compared it against,
`orchestrator.argocd.appsync.release_pin`) and, per stage in spec order, its resolved sizing:

- `targets`: the clusters the plan gave the stage when the Workflow was built;
- `maxParallel`: how many of them sync at once (>= 1; the fan-out's `parallelism`);
- `batches`: how many batch pods run it (0: one pod per cluster; never above maxParallel);
- `startSyncs`: how many of its first targets the step that selects it starts syncing itself (the
  first wave, steps/first_wave.py);
- `deadlineWaves`: the progress deadlines its waves add to the Workflow's `activeDeadlineSeconds`;
- `analysis` (only for a stage with analysis): its effective analysis, the stage's block over the
  spec's defaults (`orchestrator.api.analysis.resolve_analysis`): the templates, the args, when,
  perCluster, onInconclusive, timeoutSeconds. The `analyze` step runs it (steps/analyze.py);
- `approvalWindowSeconds` (only for a manual gate whose stage sets it): how long the gate waits
  for a person; the Workflow's deadline budgets it in place of the watcher's default
  (`WorkflowSettings.approval_window_seconds`);
- `podsAtOnce` (only for a stage whose cluster pods all start together, `true`): the fan-out has
  no Argo `parallelism`; each pod waits for a free slot and claims it on the stage's records
  (steps/turn.py), so maxParallel is held by the claims (`orchestrator.planning.sizing.pods_at_once`
  says which stages);
- `selectsNext` (only for a stage whose closing step also selects the next stage, the Workflow's
  `record-and-select`): that next stage's name. A stage is selected by the step that closes the one
  before it unless it opens itself (`opens_itself`: the first stage, of each group with
  spec.groupBy; one behind an approval gate; one after a bake; one that waits for dependsOn). The
  builder shapes the Workflow from it, and the last cluster step of the stage may close it and
  select the next one itself (steps/chain.py, "the stage boundary");
- `endsRollout` (only for the stage whose closing `record` is the Workflow's last step before its
  exit handler, `true`: the last stage, without spec.groupBy and without a bake after it): the last
  cluster step of the stage may close it and record the rollout's end itself (steps/chain.py, "the
  rollout's end"), as the exit handler would on a Workflow that succeeded;
- `rollbackParallel` (only when the spec has `rollback`): how many of its clusters roll back at
  once (>= 1; how many pods its rollback fan-out starts at most: `rollback-plan` sizes it, as the
  exit handler has no Argo `parallelism`), `rollback.maxParallel` resolved against its targets,
  else its maxParallel (`orchestrator.planning.sizing.rollback_parallel`).

and, only when the spec has `rollback`, the rollout's `rollback`: the outcomes that start it
(`on`), which clusters it restores (`scope`) and each cluster's deadline
(`progressDeadlineSeconds`: the rollback's own, else the spec's). Without `rollback` in the spec
neither appears and the contract reads exactly as before. Likewise, only when the spec has
`windows`, the rollout's `windows` as the spec gives them (docs/windows.md): the steps write no
sync while they are closed (steps.window_gate).

Only when the spec has `dependsOn` (docs/depends-on.md), the rollout's `dependsOn`: each other
ProgressiveSync waited for (`name`), the stage of it that must pass (`stage`, absent: its whole
rollout), the stage of this rollout that waits (`beforeStage`, resolved: the spec's, else the
first) and `timeoutSeconds`; with `groupBy` one entry per group and dependency, each group's stage
waiting on its own (`beforeStage` "<group>/<stage>"). The `wait-for-dependencies` step reads it
(steps/depends.py); the Workflow builder puts that step before each stage that waits and budgets
the timeout.

The Workflow builder makes it once from the plan (`make_contract`, with the sizing rules of
`orchestrator.planning.sizing`), takes every number of the Workflow from it (the fan-out
`parallelism`, the batch loop, the deadline, the description) and passes it into the Workflow as
its one `contract` argument (JSON, `to_json`). Every step reads it (`--contract` or
`PROGRESSIVE_SYNC_CONTRACT`) and parses it once (`parse_contract`): a missing or malformed contract
is a `ContractError` naming the field, which the steps turn into a usage error (exit 2). The release
is checked here and nowhere else (`orchestrator.api.release.revisions_from_data`).

Pure values; callers: `workflow_templates.builder`, `steps.cli`, `steps.context`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.alias_generators import to_camel

from orchestrator.api.analysis import StageAnalysis, resolve_analysis
from orchestrator.api.groups import group_stage_name, split_stage_name
from orchestrator.api.models import ApprovalMode, ProgressiveSyncSpec
from orchestrator.api.release import Revisions, RevisionsError, revisions_from_data
from orchestrator.api.rollback import (
    RollbackScope,
    RollbackSpec,
    RollbackTrigger,
    rollback_deadline_seconds,
)
from orchestrator.api.windows import RolloutWindow
from orchestrator.planning.sizing import (
    StageSize,
    batch_count,
    deadline_waves,
    first_wave,
    pods_at_once,
    rollback_parallel,
)

CONTRACT_VERSION = 1


class ContractError(ValueError):
    """A rollout contract that is missing or malformed; the message names the field."""


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, frozen=True, extra="forbid", strict=False
    )


class StageContract(_Model):
    """One stage's resolved sizing (see the module docstring)."""

    name: str = Field(min_length=1)
    targets: int = Field(ge=0)
    max_parallel: int = Field(ge=1)
    batches: int = Field(default=0, ge=0)
    start_syncs: int = Field(default=0, ge=0)
    deadline_waves: int = Field(default=1, ge=1)
    analysis: StageAnalysis | None = None
    rollback_parallel: int | None = Field(default=None, ge=1)
    approval_window_seconds: int | None = Field(default=None, ge=1)
    selects_next: str | None = Field(default=None, min_length=1)
    ends_rollout: bool | None = None
    pods_at_once: bool | None = None

    @property
    def closing_step_done_early(self) -> bool:
        """Is the stage's closing step one its last cluster step may do itself: `record-and-select`
        (`selects_next`) or the last stage's `record` and the rollout's end (`ends_rollout`)?"""
        return self.selects_next is not None or bool(self.ends_rollout)

    @property
    def fanout_parallelism(self) -> int | None:
        """The fan-out's Argo `parallelism`: maxParallel, or none when the stage's pods all start
        at once (`pods_at_once`: every target's pod, however many `select` finds at run time)."""
        return None if self.pods_at_once else self.max_parallel

    @model_validator(mode="after")
    def _pods_at_once_claim_slots(self) -> StageContract:
        if self.pods_at_once and self.batches:
            raise ValueError("podsAtOnce with batches: a batch refills its own slots, it claims none")
        return self

    @model_validator(mode="after")
    def _batches_share_max_parallel(self) -> StageContract:
        if self.batches > self.max_parallel:
            raise ValueError(
                f"batches ({self.batches}) above maxParallel ({self.max_parallel}): every batch runs at "
                "least one cluster at a time, and the batches' shares add up to maxParallel"
            )
        return self


class RollbackContract(_Model):
    """The rollout's rollback (see the module docstring): when, which clusters, how long each."""

    on: tuple[RollbackTrigger, ...] = Field(min_length=1)
    scope: RollbackScope = RollbackScope.FAILED_STAGE
    progress_deadline_seconds: int = Field(ge=1)

    @field_validator("on")
    @classmethod
    def _on_unique(cls, on: tuple[RollbackTrigger, ...]) -> tuple[RollbackTrigger, ...]:
        doubled = sorted({trigger.value for trigger in on if on.count(trigger) > 1})
        if doubled:
            raise ValueError(f"trigger(s) {', '.join(doubled)} listed twice")
        return on

    def triggered_by(self, trigger: RollbackTrigger) -> bool:
        """True when `trigger` is one of `on`."""
        return trigger in self.on


class DependencyContract(_Model):
    """One dependency of the rollout (see the module docstring): who, which stage of it, which stage
    of this rollout waits, how long."""

    name: str = Field(min_length=1)
    stage: str | None = None
    before_stage: str = Field(min_length=1)
    timeout_seconds: int = Field(ge=1)


class RolloutContract(_Model):
    """What one rollout runs: its id, its release and its stages' sizing (see the module docstring)."""

    version: int = CONTRACT_VERSION
    rollout_id: str = Field(min_length=1)
    release: tuple[Revisions, ...]
    stages: tuple[StageContract, ...] = Field(min_length=1)
    rollback: RollbackContract | None = None
    depends_on: tuple[DependencyContract, ...] | None = None
    windows: tuple[RolloutWindow, ...] | None = None

    @field_validator("release", mode="before")
    @classmethod
    def _release_is_pinned(cls, value: object) -> tuple[Revisions, ...]:
        try:
            return revisions_from_data(value)
        except RevisionsError as exc:
            raise ValueError(f"{exc}: refusing to sync without a pinned revision") from exc

    @field_validator("stages")
    @classmethod
    def _stage_names_unique(cls, stages: tuple[StageContract, ...]) -> tuple[StageContract, ...]:
        names = [stage.name for stage in stages]
        doubled = sorted({name for name in names if names.count(name) > 1})
        if doubled:
            raise ValueError(f"stage(s) {', '.join(map(repr, doubled))} listed twice")
        return stages

    @model_validator(mode="after")
    def _known_version(self) -> RolloutContract:
        if self.version != CONTRACT_VERSION:
            raise ValueError(f"version {self.version} is not {CONTRACT_VERSION}, the one these steps read")
        return self

    @model_validator(mode="after")
    def _rollback_sized_everywhere(self) -> RolloutContract:
        # A rollback fans out per stage: every stage needs its bound, and none without one.
        has_parallel = [stage.name for stage in self.stages if stage.rollback_parallel is not None]
        if self.rollback is not None and len(has_parallel) < len(self.stages):
            lacking = [stage.name for stage in self.stages if stage.rollback_parallel is None]
            raise ValueError(
                f"rollback is set but stage(s) {', '.join(map(repr, lacking))} have no rollbackParallel"
            )
        if self.rollback is None and has_parallel:
            raise ValueError(
                f"stage(s) {', '.join(map(repr, has_parallel))} have rollbackParallel "
                "but there is no rollback"
            )
        return self

    def stage(self, name: str) -> StageContract | None:
        """The stage of that name, None when the contract has none."""
        return next((stage for stage in self.stages if stage.name == name), None)

    def dependencies_before(self, stage: str) -> tuple[DependencyContract, ...]:
        """The dependencies stage `stage` waits for (empty for most stages, and without dependsOn)."""
        return tuple(dependency for dependency in self.depends_on or () if dependency.before_stage == stage)

    @model_validator(mode="after")
    def _selects_the_stage_after_it(self) -> RolloutContract:
        for stage, after in zip(self.stages, (*self.stages[1:], None), strict=True):
            if stage.selects_next is not None and (after is None or after.name != stage.selects_next):
                raise ValueError(
                    f"stage {stage.name!r} selectsNext {stage.selects_next!r}, "
                    "which is not the stage after it"
                )
        return self

    @model_validator(mode="after")
    def _only_the_last_stage_ends_the_rollout(self) -> RolloutContract:
        early = [stage.name for stage in self.stages[:-1] if stage.ends_rollout]
        if early:
            raise ValueError(
                f"stage(s) {', '.join(map(repr, early))} endsRollout; only the last stage "
                f"({self.stages[-1].name!r}) may"
            )
        return self

    @model_validator(mode="after")
    def _dependencies_wait_before_a_stage(self) -> RolloutContract:
        names = {stage.name for stage in self.stages}
        unknown = sorted({d.before_stage for d in self.depends_on or () if d.before_stage not in names})
        if unknown:
            raise ValueError(
                f"dependsOn waits before stage(s) {', '.join(map(repr, unknown))}, not in stages"
            )
        return self

    def to_json(self) -> str:
        """The Workflow argument's form: compact JSON, camelCase fields, release as lists."""
        # Unset optionals (a stage without analysis, a rollout without rollback) are left out: the
        # contract of a rollout without them reads as it always did.
        return json.dumps(
            self.model_dump(mode="json", by_alias=True, exclude_none=True), separators=(",", ":")
        )


def parse_contract(text: str | None) -> RolloutContract:
    """The contract from its JSON, or from the file it names (text not starting with `{`).

    ContractError (naming the field, or saying the contract is missing) otherwise."""
    if text is None or not text.strip():
        raise ContractError(
            "no rollout contract: pass --contract (its JSON, or a file holding it) or set "
            "PROGRESSIVE_SYNC_CONTRACT; the Workflow passes {{workflow.parameters.contract}}"
        )
    body = text.strip()
    if not body.startswith("{"):
        try:
            body = Path(body).read_text()
        except OSError as exc:
            raise ContractError(f"the contract is neither JSON nor a readable file: {exc}") from exc
    try:
        data = json.loads(body)
    except json.JSONDecodeError as exc:
        raise ContractError(f"the contract is not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ContractError("the contract must be a JSON object")
    try:
        return RolloutContract.model_validate(data)
    except ValidationError as exc:
        raise ContractError(_first_problem(exc)) from exc


def _first_problem(exc: ValidationError) -> str:
    """`contract field stages[0].maxParallel: ...` for the first error pydantic found."""
    error = exc.errors()[0]
    where = ""
    for part in error["loc"]:
        where += f"[{part}]" if isinstance(part, int) else (f".{part}" if where else str(part))
    message = str(error["msg"]).removeprefix("Value error, ")
    more = f" (and {exc.error_count() - 1} more problem(s))" if exc.error_count() > 1 else ""
    return f"contract field {where or '(top)'}: {message}{more}"


def make_contract(
    spec: ProgressiveSyncSpec,
    *,
    rollout_id: str,
    release: Sequence[Revisions],
    sizes: Mapping[str, StageSize],
    batch_threshold: int,
    per_batch: int,
    pods_at_once_limit: int = 0,
) -> RolloutContract:
    """The contract of one rollout of `spec`, from each stage's planned size (see the module).

    KeyError with the stage's name when `sizes` lacks a stage; ContractError when the result is not
    a valid contract (no release, an empty rollout id)."""
    stages = []
    rollback = spec.rollback
    for stage in spec.stages:
        size = sizes[stage.name]
        batches = batch_count(size, threshold=batch_threshold, per_batch=per_batch)
        analysis = resolve_analysis(spec.analysis, stage.analysis)
        together = pods_at_once(
            size,
            batches=batches,
            per_cluster_analysis=analysis is not None and analysis.after_healthy and analysis.per_cluster,
            limit=pods_at_once_limit,
        )
        stages.append(
            StageContract(
                name=stage.name,
                targets=size.targets,
                max_parallel=size.max_parallel,
                batches=batches,
                start_syncs=first_wave(size),
                deadline_waves=deadline_waves(size),
                analysis=analysis,
                pods_at_once=True if together else None,
                rollback_parallel=rollback_parallel(rollback.max_parallel, size) if rollback else None,
                approval_window_seconds=stage.approval_window_seconds
                if stage.approval is ApprovalMode.MANUAL
                else None,
            )
        )
    depends_on = dependency_contracts(spec)
    waiting = {dependency.before_stage for dependency in depends_on or ()}
    for index in range(1, len(stages)):
        waits = spec.stages[index].name in waiting
        if not opens_itself(spec, index, waits=waits, before_has_targets=stages[index - 1].targets > 0):
            stages[index - 1] = stages[index - 1].model_copy(update={"selects_next": stages[index].name})
    if stages and ends_rollout(spec):
        stages[-1] = stages[-1].model_copy(update={"ends_rollout": True})
    try:
        return RolloutContract(
            rollout_id=rollout_id,
            release=tuple(release),
            stages=tuple(stages),
            rollback=make_rollback_contract(spec, rollback) if rollback else None,
            depends_on=depends_on,
            windows=tuple(spec.windows) if spec.windows else None,
        )
    except ValidationError as exc:
        raise ContractError(_first_problem(exc)) from exc


def opens_itself(spec: ProgressiveSyncSpec, index: int, *, waits: bool, before_has_targets: bool) -> bool:
    """Does stage `index` of `spec` (the rollout's stages: "<group>/<stage>" with spec.groupBy) run
    its own `select`? The first stage (of each group), a stage behind an approval gate (selected once
    a person approved it, after seeing the stage before recorded), a stage after a bake (`bakes`: the
    stage before it has a bake and targets to bake) and a stage that waits for other
    ProgressiveSyncs (`waits`: it selects once they passed) do; any other stage is selected by the
    step that closes the one before it (`record-and-select`, steps/hand_over.py): one step pod fewer
    per stage boundary."""
    stage = spec.stages[index]
    if index == 0 or stage.approval is ApprovalMode.MANUAL or waits:
        return True
    before = spec.stages[index - 1]
    if split_stage_name(stage.name)[0] != split_stage_name(before.name)[0]:
        return True  # the first stage of a group (spec.groupBy): the group's own first select
    return bool(before.bake_seconds and before_has_targets)


def ends_rollout(spec: ProgressiveSyncSpec) -> bool:
    """Is the closing `record` of the last stage of `spec` the Workflow's last step before its exit
    handler? Not with spec.groupBy (each group ends on its own, side by side) nor with a bake after
    the last stage (the bake runs after its record; a stage without targets has no cluster step to
    end anything). The Workflow builder places nothing else after the last stage."""
    return spec.group_by is None and bool(spec.stages) and not spec.stages[-1].bake_seconds


def dependency_contracts(spec: ProgressiveSyncSpec) -> tuple[DependencyContract, ...] | None:
    """The contract's `dependsOn` (None without spec.dependsOn): each dependency with the stage that
    waits for it resolved (`beforeStage`, else the first). With spec.groupBy, `spec` lists the
    rollout's "<group>/<stage>" stages (orchestrator.planning.groups) and each group waits on its
    own: one entry per group and dependency, group after group, before that group's stage."""
    if not spec.depends_on:
        return None
    if spec.group_by is None:
        return tuple(
            DependencyContract(
                name=dependency.name,
                stage=dependency.stage,
                before_stage=spec.waiting_stage(dependency),
                timeout_seconds=dependency.timeout_seconds,
            )
            for dependency in spec.depends_on
        )
    first: dict[str, str] = {}  # each group's first stage (a spec stage name)
    for stage in spec.stages:
        group, name = split_stage_name(stage.name)
        if group is not None:
            first.setdefault(group, name)
    return tuple(
        DependencyContract(
            name=dependency.name,
            stage=dependency.stage,
            before_stage=group_stage_name(group, dependency.before_stage or first_stage),
            timeout_seconds=dependency.timeout_seconds,
        )
        for group, first_stage in first.items()
        for dependency in spec.depends_on
    )


def make_rollback_contract(spec: ProgressiveSyncSpec, rollback: RollbackSpec) -> RollbackContract:
    """The contract's `rollback` from the spec's (its deadline: `rollback_deadline_seconds`)."""
    return RollbackContract(
        on=tuple(rollback.on),
        scope=rollback.scope,
        progress_deadline_seconds=rollback_deadline_seconds(spec),
    )


def size_of(stage: StageContract) -> StageSize:
    """The stage's size as the sizing rules take it."""
    return StageSize(targets=stage.targets, max_parallel=stage.max_parallel)
