"""The `progressivesync.io/v1alpha1` ProgressiveSync API as pydantic models.

These models are the single source of truth for the API: the CRD in
`charts/progressive-sync/crds/` is generated from them (`orchestrator.api.crdgen`), offline validation
(`progressive-sync validate`, `orchestrator.api.validation`) runs them, and every other module reads
ProgressiveSyncs through them. They are plain data with pure helpers (selector matching, size
resolution); nothing here talks to the API server or reads the clock.

Every rule the models enforce has a twin the API server enforces, so a manifest is accepted or
rejected the same way offline and on apply:

- ranges, patterns, enums and required fields go into the JSON schema that pydantic derives and
  `crdgen` turns into the CRD's OpenAPI schema;
- rules a schema cannot say (unique stage names, maxParallel <= maxTargets, values that fit the
  selector operator) are pydantic validators here, with their CEL twin declared right next to them
  through `cel(...)` (like kubebuilder's XValidation markers on Go types). The parity test in
  `tests/integration/test_api_parity.py` runs a corpus of invalid manifests through both.

Field names are the camelCase of the wire format; Python code uses the snake_case attribute names.
Field docstrings become the CRD's descriptions (`kubectl explain progressivesync.spec`).
"""

from __future__ import annotations

import json
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    StrictBool,
    StrictInt,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic.alias_generators import to_camel

from orchestrator.api.analysis import SPEC_RULES as ANALYSIS_RULES
from orchestrator.api.analysis import AnalysisSpec, analysis_problems
from orchestrator.api.base import (
    CONDITION_REASON_PATTERN,
    DEPENDENCY_STAGE_MAX_LENGTH,
    DEPENDENCY_STAGE_PATTERN,
    INT_OR_PERCENT_HINT,  # noqa: F401 (re-exported)
    MAX_APPROVAL_WINDOW_SECONDS,
    MAX_BAKE_SECONDS,
    MAX_DEADLINE_SECONDS,
    MAX_STAGES,
    MIN_APPROVAL_WINDOW_SECONDS,
    NAMESPACE_MAX_LENGTH,
    NAMESPACE_PATTERN,
    OBJECT_NAME_MAX_LENGTH,
    OBJECT_NAME_PATTERN,
    PATTERN_HINTS,  # noqa: F401 (re-exported: validation and crdgen read it here)
    PERCENT_PATTERN,  # noqa: F401 (re-exported: the sizing rules read it here)
    STAGE_NAME_MAX_LENGTH,
    STAGE_NAME_PATTERN,
    SYNC_OPTION_PATTERN,
    IntOrPercent,
    _Model,
    _validations,
    cel,
)
from orchestrator.api.phases import RolloutPhase, StagePhase
from orchestrator.api.rollback import SPEC_RULE as ROLLBACK_RULE
from orchestrator.api.rollback import RollbackSpec, rollback_problems
from orchestrator.api.selectors import (  # re-exported: the API's names stay importable from here
    ApplicationTargets,  # noqa: F401
    ClusterTargets,  # noqa: F401
    LabelKey,
    LabelSelector,
    LabelSelectorRequirement,  # noqa: F401
    SelectorOperator,  # noqa: F401
    StageTargets,
)
from orchestrator.api.windows import RolloutWindows
from orchestrator.core.clock import format_micro_time, format_time

GROUP = "progressivesync.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "ProgressiveSync"
PLURAL = "progressivesyncs"
SINGULAR = "progressivesync"
SHORT_NAME = "psync"


# --- spec ------------------------------------------------------------------------------------


class ApprovalMode(StrEnum):
    """Whether a stage starts on its own or waits for a person (`argo resume` / `approve`)."""

    AUTOMATIC = "Automatic"
    MANUAL = "Manual"


class AppSetRef(_Model):
    """The ApplicationSet whose Applications this ProgressiveSync rolls out."""

    name: Annotated[str, Field(min_length=1, max_length=OBJECT_NAME_MAX_LENGTH, pattern=OBJECT_NAME_PATTERN)]
    """Name of the ApplicationSet."""
    namespace: (
        Annotated[str, Field(min_length=1, max_length=NAMESPACE_MAX_LENGTH, pattern=NAMESPACE_PATTERN)] | None
    ) = None
    """Namespace of the ApplicationSet; default: the ProgressiveSync's (others must allow it)."""


class Stage(_Model):
    """One step of a rollout: which clusters, how many, how many at once."""

    model_config = ConfigDict(
        json_schema_extra=_validations(
            cel(
                "!has(self.maxTargets) || !has(self.maxParallel) || type(self.maxTargets) != int"
                " || type(self.maxParallel) != int"
                # A maxTargets below 1 has its own error; comparing against it would only add noise.
                " || self.maxTargets < 1 || self.maxParallel <= self.maxTargets",
                "maxParallel is above maxTargets"
                " (lower maxParallel to at most maxTargets, or raise maxTargets)",
                message_expression=(
                    "'maxParallel ' + string(self.maxParallel) + ' is above maxTargets '"
                    " + string(self.maxTargets) + ' (lower maxParallel to at most '"
                    " + string(self.maxTargets) + ', or raise maxTargets)'"
                ),
                field_path=".maxParallel",
                reason="FieldValueInvalid",
            ),
            cel(
                "!has(self.approvalWindowSeconds) || (has(self.approval) && self.approval == 'Manual')",
                "approvalWindowSeconds is only used by a manual gate"
                " (set approval: Manual, or remove approvalWindowSeconds)",
                field_path=".approvalWindowSeconds",
                reason="FieldValueForbidden",
            ),
        )
    )

    name: Annotated[str, Field(min_length=1, max_length=STAGE_NAME_MAX_LENGTH, pattern=STAGE_NAME_PATTERN)]
    """Unique within the ProgressiveSync; shown in the Argo UI and in status."""
    targets: StageTargets
    """Which clusters the stage may take (those an earlier stage took are skipped)."""
    max_targets: IntOrPercent = "100%"
    """How many clusters the stage takes: a count, or "N%" of the clusters it matches."""
    max_parallel: IntOrPercent = 1
    """How many clusters sync at once: a count, or "N%" of the stage's targets."""
    spread_by: LabelKey | None = None
    """Interleave targets across the values of this cluster label (e.g. region)."""
    approval: ApprovalMode = ApprovalMode.AUTOMATIC
    """Manual: the stage waits for `progressive-sync approve` (or `argo resume`) before it starts."""
    approval_window_seconds: (
        Annotated[StrictInt, Field(ge=MIN_APPROVAL_WINDOW_SECONDS, le=MAX_APPROVAL_WINDOW_SECONDS)] | None
    ) = None
    """With approval: Manual, seconds the gate waits for a person (default: the watcher's, 7 days)."""
    # The rollout's deadline budgets this much for the gate in place of the watcher's setting
    # (PROGRESSIVE_SYNC_WORKFLOW_APPROVAL_WINDOW_SECONDS); a rollout still waiting at its deadline
    # fails. `status` says when the gate closes while it waits (docs/status.md).
    bake_seconds: Annotated[StrictInt, Field(ge=0, le=MAX_BAKE_SECONDS)] | None = None
    """Seconds to wait after the stage succeeded before the next stage starts."""
    analysis: AnalysisSpec | None = None
    """Argo Rollouts analysis for this stage: its fields override spec.analysis (args by name)."""

    @field_validator("approval_window_seconds")
    @classmethod
    def _window_needs_a_gate(cls, window: int | None, info: ValidationInfo) -> int | None:
        # Without a valid `approval` that field has its own error; this one would only add noise.
        if window is not None and info.data.get("approval", ApprovalMode.MANUAL) is not ApprovalMode.MANUAL:
            raise ValueError(
                "approvalWindowSeconds is only used by a manual gate "
                "(set approval: Manual, or remove approvalWindowSeconds)"
            )
        return window

    @field_validator("max_parallel")
    @classmethod
    def _parallel_fits_targets(cls, max_parallel: int | str, info: ValidationInfo) -> int | str:
        max_targets = info.data.get("max_targets")
        if isinstance(max_targets, int) and isinstance(max_parallel, int) and max_parallel > max_targets:
            raise ValueError(
                f"maxParallel {max_parallel} is above maxTargets {max_targets} "
                f"(lower maxParallel to at most {max_targets}, or raise maxTargets)"
            )
        return max_parallel


class FailurePolicy(_Model):
    """How many failed clusters a stage tolerates before the rollout stops."""

    max_failed_clusters: Annotated[StrictInt, Field(ge=0)] = 0
    """Failed clusters tolerated per stage; one more halts the rollout."""


class SyncOptions(_Model):
    """Passed into every sync operation the rollout writes.

    Each operation also carries the Application's own `spec.syncPolicy.syncOptions` (first; ours win
    for the same key) and its `retry` (`orchestrator.argocd.appsync.merge_sync_options`,
    `operation_retry`), as every Argo CD trigger does.
    """

    prune: StrictBool = False
    """Delete resources that are no longer in Git while syncing."""
    options: list[Annotated[str, Field(min_length=1, pattern=SYNC_OPTION_PATTERN)]] | None = None
    """Argo CD sync options such as "ServerSideApply=true" (`operation.sync.syncOptions`)."""


def _stage_names_unique(stages: list[Stage]) -> list[Stage]:
    first_index: dict[str, int] = {}
    for index, stage in enumerate(stages):
        if stage.name in first_index:
            raise ValueError(
                f"stage name {stage.name!r} is used by stages[{first_index[stage.name]}] and "
                f"stages[{index}] (give every stage its own name)"
            )
        first_index[stage.name] = index
    return stages


# The one wording of the refusal of `skip: {applications|clusters: {selector: {}}}`, offline and on apply.
EMPTY_SKIP_SELECTOR = (
    "an empty skip selector would leave every cluster out of the rollout"
    " (give matchLabels or matchExpressions, or remove this entry)"
)


class SkipSelector(_Model):
    """Objects to leave out of every rollout, by their labels; an empty selector is refused."""

    model_config = ConfigDict(
        json_schema_extra=_validations(
            cel(
                "(has(self.selector.matchLabels) && size(self.selector.matchLabels) > 0)"
                " || (has(self.selector.matchExpressions) && size(self.selector.matchExpressions) > 0)",
                EMPTY_SKIP_SELECTOR,
                field_path=".selector",
                reason="FieldValueInvalid",
            )
        )
    )

    selector: LabelSelector
    """Matches labels; at least one matchLabels pair or matchExpressions entry."""

    @field_validator("selector")
    @classmethod
    def _not_empty(cls, selector: LabelSelector) -> LabelSelector:
        if not selector.match_labels and not selector.match_expressions:
            raise ValueError(EMPTY_SKIP_SELECTOR)
        return selector


class SkipSpec(_Model):
    """Clusters left out of every rollout until the selector stops matching (docs/skip.md)."""

    applications: SkipSelector | None = None
    """Applications by their labels: the cluster of a matching Application is skipped."""
    clusters: SkipSelector | None = None
    """Argo CD cluster Secrets by their labels: a matching cluster is skipped."""


# The one wording of each refusal of `groupBy` / `maxParallelGroups`, offline and on apply (docs/groups.md).
MAX_PARALLEL_GROUPS_WITHOUT_GROUP_BY = (
    "maxParallelGroups is only used with groupBy"
    " (set groupBy to a cluster label, or remove maxParallelGroups)"
)
# The group of the clusters without the groupBy label (docs/groups.md): no label value has parentheses.
NO_GROUP_VALUE = "(none)"


# dependsOn (docs/depends-on.md): how many entries, and how long one waits unless it says otherwise.
MAX_DEPENDENCIES = 16
DEFAULT_DEPENDENCY_TIMEOUT_SECONDS = 3600
# The one wording of a dependsOn[].beforeStage that names no stage, offline and on apply.
UNKNOWN_BEFORE_STAGE = (
    "beforeStage must name one of this ProgressiveSync's stages"
    " (use a name from spec.stages, or remove beforeStage to wait before the first stage)"
)


class Dependency(_Model):
    """Another ProgressiveSync (same namespace) this rollout waits for before a stage (docs/depends-on.md)."""

    name: Annotated[str, Field(min_length=1, max_length=OBJECT_NAME_MAX_LENGTH, pattern=OBJECT_NAME_PATTERN)]
    """The ProgressiveSync waited for, in this ProgressiveSync's namespace; never this one."""
    stage: (
        Annotated[
            str, Field(min_length=1, max_length=DEPENDENCY_STAGE_MAX_LENGTH, pattern=DEPENDENCY_STAGE_PATTERN)
        ]
        | None
    ) = None
    """Its stage that must have Succeeded in its newest rollout (or `<group>/<stage>`); absent: all of it."""
    before_stage: (
        Annotated[str, Field(min_length=1, max_length=STAGE_NAME_MAX_LENGTH, pattern=STAGE_NAME_PATTERN)]
        | None
    ) = None
    """The stage of this rollout that waits (one of spec.stages); absent: the first, so all of it waits."""
    timeout_seconds: Annotated[StrictInt, Field(ge=1, le=MAX_DEADLINE_SECONDS)] = (
        DEFAULT_DEPENDENCY_TIMEOUT_SECONDS
    )
    """Seconds the stage waits (from the rollout's start, or the stage before's end) before it fails."""


def _dependencies_unique(dependencies: list[Dependency] | None) -> list[Dependency] | None:
    first_index: dict[str, int] = {}
    for index, dependency in enumerate(dependencies or []):
        if dependency.name in first_index:
            raise ValueError(
                f"dependsOn[{index}].name {dependency.name!r} is already "
                f"dependsOn[{first_index[dependency.name]}]"
                " (list each ProgressiveSync once: the stage it must pass is its entry's `stage`)"
            )
        first_index[dependency.name] = index
    return dependencies


DEPENDS_ON_RULE = cel(
    "!has(self.dependsOn) || self.dependsOn.all(d, !has(d.beforeStage)"
    " || self.stages.exists(s, s.name == d.beforeStage))",
    UNKNOWN_BEFORE_STAGE,
    field_path=".dependsOn",
    reason="FieldValueInvalid",
)


class ProgressiveSyncSpec(_Model):
    """What to roll out, to whom, in which order."""

    model_config = ConfigDict(
        json_schema_extra=_validations(
            *ANALYSIS_RULES,
            ROLLBACK_RULE,
            DEPENDS_ON_RULE,
            cel(
                "!has(self.maxParallelGroups) || has(self.groupBy)",
                MAX_PARALLEL_GROUPS_WITHOUT_GROUP_BY,
                field_path=".maxParallelGroups",
                reason="FieldValueForbidden",
            ),
        )
    )

    app_set_ref: AppSetRef
    """The ApplicationSet whose Applications are rolled out."""
    stages: Annotated[
        list[Stage],
        Field(
            min_length=1,
            max_length=MAX_STAGES,
            json_schema_extra=_validations(
                cel(
                    "self.all(s, self.exists_one(t, t.name == s.name))",
                    # No reason: the API server prints FieldValueDuplicate without the message.
                    "stage names must be unique (give every stage its own name)",
                )
            ),
        ),
    ]
    """The stages, run in order; at least one, names unique."""
    progress_deadline_seconds: Annotated[StrictInt, Field(ge=1, le=MAX_DEADLINE_SECONDS)] = 600
    """Per cluster: seconds from sync until Synced and Healthy before the cluster counts as failed."""
    degraded_grace_seconds: Annotated[StrictInt, Field(ge=0, le=MAX_DEADLINE_SECONDS)] = 120
    """Per cluster: seconds health may read Degraded after the sync before the cluster fails; 0: at once."""
    failure_policy: FailurePolicy = Field(default_factory=FailurePolicy, json_schema_extra={"default": {}})
    """When a stage counts as failed."""
    sync_options: SyncOptions = Field(default_factory=SyncOptions, json_schema_extra={"default": {}})
    """Options passed into every sync operation."""
    allow_partial_rollout: StrictBool = False
    """false: clusters with Applications that no stage covers are an error."""
    paused: StrictBool = False
    """true: no new step starts until set back to false; running syncs finish."""
    analysis: AnalysisSpec | None = None
    """Argo Rollouts analysis for every stage (a stage's own analysis overrides it field by field)."""
    rollback: RollbackSpec | None = None
    """Undo the rollout on the clusters it synced when it ends as `on` lists; absent: never."""
    skip: SkipSpec | None = None
    """Clusters to leave out of rollouts (besides Applications annotated progressivesync.io/skip)."""
    group_by: LabelKey | None = None
    """Run the stages once per value of this cluster label (e.g. team), each group on its own."""
    max_parallel_groups: Annotated[StrictInt, Field(ge=1)] | None = None
    """With groupBy: how many groups roll out at once (default: all of them)."""
    depends_on: (
        Annotated[
            list[Dependency],
            Field(
                min_length=1,
                max_length=MAX_DEPENDENCIES,
                json_schema_extra=_validations(
                    cel(
                        "self.all(d, self.exists_one(e, e.name == d.name))",
                        # No reason: the API server prints FieldValueDuplicate without the message.
                        "dependsOn names must be unique (list each ProgressiveSync once)",
                    )
                ),
            ),
        ]
        | None
    ) = None
    """Other ProgressiveSyncs whose rollout must pass a stage before a stage of this one starts."""
    windows: RolloutWindows | None = None
    """When syncs may be written: allow and deny windows (docs/windows.md); absent: any time."""

    @field_validator("stages")
    @classmethod
    def _stages_unique(cls, stages: list[Stage]) -> list[Stage]:
        return _stage_names_unique(stages)

    @field_validator("rollback")
    @classmethod
    def _rollback_can_fire(cls, rollback: RollbackSpec | None, info: ValidationInfo) -> RollbackSpec | None:
        stages = info.data.get("stages")
        if stages is None:  # the stages are invalid; that error is reported on its own
            return rollback
        problems = rollback_problems(
            rollback,
            spec_analysis=info.data.get("analysis"),
            stage_analyses=[stage.analysis for stage in stages],
        )
        if problems:
            raise ValueError("; ".join(problems))
        return rollback

    @field_validator("max_parallel_groups")
    @classmethod
    def _parallel_groups_need_groups(cls, parallel: int | None, info: ValidationInfo) -> int | None:
        # An invalid groupBy has its own error; this one would only add noise.
        if parallel is not None and "group_by" in info.data and info.data["group_by"] is None:
            raise ValueError(MAX_PARALLEL_GROUPS_WITHOUT_GROUP_BY)
        return parallel

    @field_validator("depends_on")
    @classmethod
    def _depends_on_fits(
        cls, dependencies: list[Dependency] | None, info: ValidationInfo
    ) -> list[Dependency] | None:
        _dependencies_unique(dependencies)
        stages = info.data.get("stages")
        if stages is None:  # the stages are invalid; that error is reported on its own
            return dependencies
        names = [stage.name for stage in stages]
        for index, dependency in enumerate(dependencies or []):
            if dependency.before_stage is not None and dependency.before_stage not in names:
                raise ValueError(
                    f"dependsOn[{index}].beforeStage {dependency.before_stage!r}: {UNKNOWN_BEFORE_STAGE}"
                    f" (stages: {', '.join(names)})"
                )
        return dependencies

    def waiting_stage(self, dependency: Dependency) -> str:
        """The stage of this spec that waits for `dependency`: its beforeStage, else the first."""
        return dependency.before_stage or self.stages[0].name

    @model_validator(mode="after")
    def _analysis_fits_stages(self) -> ProgressiveSyncSpec:
        problems = [
            f"stages[{index}] ({stage.name!r}): {problem}"
            for index, stage in enumerate(self.stages)
            for problem in analysis_problems(self.analysis, stage.analysis, bake_seconds=stage.bake_seconds)
        ]
        if problems:
            raise ValueError("; ".join(problems))
        return self


# --- status ----------------------------------------------------------------------------------


Timestamp = Annotated[datetime, PlainSerializer(format_time, return_type=str, when_used="json")]
# Microseconds, where the order of close events matters (a stage's failures, first to fail first).
MicroTimestamp = Annotated[datetime, PlainSerializer(format_micro_time, return_type=str, when_used="json")]


class ConditionStatus(StrEnum):
    """metav1.ConditionStatus."""

    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(_Model):
    """A metav1.Condition (Ready, Progressing, Paused, Valid)."""

    type: Annotated[str, Field(min_length=1, max_length=316)]
    """Ready, Progressing, Paused or Valid."""
    status: ConditionStatus
    """True, False or Unknown."""
    reason: Annotated[str, Field(min_length=1, max_length=1024, pattern=CONDITION_REASON_PATTERN)]
    """A CamelCase word for programs."""
    message: Annotated[str, Field(max_length=32768)] = ""
    """A sentence for people."""
    last_transition_time: Timestamp
    """When status last changed."""
    observed_generation: Annotated[StrictInt, Field(ge=0)] | None = None
    """The spec generation the condition was computed from."""


class RolloutStatus(_Model):
    """The rollout the status describes: one pass of the stages for one release."""

    id: Annotated[str, Field(min_length=1, max_length=16)]
    """Short stable hash of the release (spec generation and target revisions)."""
    revision: str = ""
    """The Git revision the rollout brings the Applications to."""
    workflow: str = ""
    """Name of the Workflow that runs the rollout."""
    attempt: Annotated[StrictInt, Field(ge=1)] = 1
    """1 for the first run; counts up with each `progressive-sync retry`."""
    started_at: Timestamp | None = None
    """When the rollout started."""
    finished_at: Timestamp | None = None
    """When the rollout finished (unset while it runs)."""
    generation: Annotated[StrictInt, Field(ge=0)] | None = None
    """The spec generation the release id was made from (set by the watcher)."""
    spec_hash: Annotated[str, Field(max_length=64)] | None = None
    """Hash of the spec without `paused`: a pause is not a new spec (set by the watcher)."""
    retry_token: Annotated[str, Field(max_length=253)] | None = None
    """The `progressivesync.io/retry` token already acted on when this attempt began (set by the watcher)."""


class ClusterFailure(_Model):
    """A cluster that failed in a stage, and why."""

    name: str
    """The cluster's name."""
    reason: str = ""
    """Why it failed, for people."""


class SkippedCluster(_Model):
    """A cluster a stage left out (progressivesync.io/skip or spec.skip: docs/skip.md), and why."""

    name: str
    """The cluster's name."""
    reason: str = ""
    """What holds it back: the annotated Application and its reason, or the spec.skip selector."""


class ClusterNote(_Model):
    """Something a person should hear about one cluster of a stage while it lasts, or once it is done."""

    name: str
    """The cluster's name."""
    note: str = ""
    """What holds it (a sync window, Suspended, Missing, Unknown, a retry) or what a done one left."""


class RollbackGroup(_Model):
    """One group of a grouped rollout (spec.groupBy) in its rollback: rolled back, or left as it is."""

    name: str
    """The group: a value of the groupBy label, or (none)."""
    trigger: str = ""
    """Its own outcome as a trigger (StageFailed, Cancelled, ...); empty when it had none (it succeeded)."""
    rolled_back: bool = False
    """True when the rollback restores some of its clusters; false when the group is left as it is."""
    targets: Annotated[StrictInt, Field(ge=0)] = 0
    """How many of its clusters the rollback looks at."""
    reason: str = ""
    """Why it is rolled back or left, for people."""


class RollbackStatus(_Model):
    """The rollback of the current rollout (`spec.rollback`), once its exit handler started one."""

    trigger: str
    """Why it rolls back: StageFailed, AnalysisFailed, DeadlineExceeded, Cancelled, or Manual (by hand)."""
    scope: str
    """FailedStage (the clusters of the stage that failed) or Reached (every cluster synced)."""
    stages: list[str] = Field(default_factory=list, json_schema_extra={"default": []})
    """The stages it rolls back, in the order it rolls them back (later stages first)."""
    targets: Annotated[StrictInt, Field(ge=0)] = 0
    """How many clusters it looks at: those of the stages above this rollout took."""
    rolled_back: Annotated[StrictInt, Field(ge=0)] = 0
    """Clusters back at the revisions they ran before, and Healthy."""
    left_alone: Annotated[StrictInt, Field(ge=0)] = 0
    """Clusters with nothing of this rollout to undo, or that someone else synced since."""
    failed: Annotated[StrictInt, Field(ge=0)] = 0
    """Clusters not restored."""
    not_restored: list[ClusterFailure] = Field(default_factory=list, json_schema_extra={"default": []})
    """The first clusters not restored, with why (every cluster's in its ProgressiveSyncStage record)."""
    groups: list[RollbackGroup] | None = None
    """With spec.groupBy: every group, rolled back or left as it is, with why (docs/groups.md)."""
    started_at: Timestamp | None = None
    """When the rollback started."""
    finished_at: Timestamp | None = None
    """When it ended."""


# How many clusters the status names in each of a stage's lists for people (in flight, failed with
# their reasons, notes); the counts cover every cluster, and every cluster's own record is in the
# stage's ProgressiveSyncStage objects (`records`, orchestrator/api/stage_records.py).
STATUS_LIST_CAP = 20
# The most the status may take as the API server writes it (`status_wire_bytes`), whatever the
# names and reasons: past it, `ProgressiveSyncStatus` keeps fewer clusters per list and shorter
# messages (`bound_status`). 16 KiB under the 256 KiB bar.
STATUS_MAX_BYTES = 240 * 1024
# A failure's reason or a note is cut to this many characters in the status (the records keep 512).
REASON_MAX_CHARS = 256


def cut_reason(text: str) -> str:
    """`text` cut to `REASON_MAX_CHARS` characters for the status (an ellipsis says it was cut)."""
    return text if len(text) <= REASON_MAX_CHARS else text[: REASON_MAX_CHARS - 1] + "\u2026"


class StageCounts(_Model):
    """How many of the stage's clusters are in each state (from its records)."""

    targets: Annotated[StrictInt, Field(ge=0)] = 0
    """Clusters the stage took."""
    syncing: Annotated[StrictInt, Field(ge=0)] = 0
    """Clusters whose sync is in flight."""
    completed: Annotated[StrictInt, Field(ge=0)] = 0
    """Clusters updated, Synced and Healthy."""
    failed: Annotated[StrictInt, Field(ge=0)] = 0
    """Clusters that failed."""
    skipped: Annotated[StrictInt, Field(ge=0)] | None = None
    """Targets the sync step found marked to skip (docs/skip.md), neither failed nor pending."""


class MoreClusters(_Model):
    """How many clusters each of a stage's lists left out (the counts and the records have them all)."""

    syncing: Annotated[StrictInt, Field(ge=0)] = 0
    """Clusters in flight not in `syncing`."""
    failed: Annotated[StrictInt, Field(ge=0)] = 0
    """Failed clusters not in `failed`."""
    notes: Annotated[StrictInt, Field(ge=0)] = 0
    """Noted clusters not in `notes`."""
    skipped: Annotated[StrictInt, Field(ge=0)] | None = None
    """Skipped clusters not in `skipped` (absent when none)."""


class StageAnalysisStatus(_Model):
    """The stage's AnalysisRun (one per stage; per-cluster runs are in each cluster's record)."""

    run: str
    """The AnalysisRun's name (same namespace): `kubectl get analysisrun NAME -o yaml`."""
    phase: str = "Pending"
    """Pending, Running, Successful, Failed, Error or Inconclusive, as the Argo Rollouts controller says."""
    message: str = ""
    """What the run says: each metric's phase and last value, or the metric that failed and why."""


class StageStatus(_Model):
    """Where one stage stands: counts, the first clusters in flight, failed and noted, its records."""

    name: str
    """The stage's name from the spec."""
    phase: StagePhase = StagePhase.PENDING
    """Pending, Progressing, Succeeded, Failed, Skipped or Cancelled."""
    message: str = ""
    """What happened, for people (e.g. "1 of 1 clusters updated")."""
    counts: StageCounts | None = None
    """How many clusters the stage took, and how many are in flight, completed and failed (absent: none)."""
    syncing: list[str] = Field(default_factory=list, json_schema_extra={"default": []})
    """Clusters whose sync is in flight: the first 20, in rollout order (`counts.syncing` has how many)."""
    failed: list[ClusterFailure] = Field(default_factory=list, json_schema_extra={"default": []})
    """Clusters that failed, with reasons: the first 20 to fail (`counts.failed` has how many)."""
    notes: list[ClusterNote] = Field(default_factory=list, json_schema_extra={"default": []})
    """Clusters held by something other than a plain wait, done clusters with a remark: the first 20."""
    skipped: list[SkippedCluster] = Field(default_factory=list, json_schema_extra={"default": []})
    """Clusters left out by progressivesync.io/skip or spec.skip, with why: the first 20."""
    more: MoreClusters | None = None
    """How many clusters each list above left out (absent when none)."""
    records: list[str] = Field(default_factory=list, json_schema_extra={"default": []})
    """The stage's ProgressiveSyncStage objects (same namespace): every cluster's record."""
    analysis: StageAnalysisStatus | None = None
    """The stage's analysis gate, when it runs one AnalysisRun for the whole stage."""
    started_at: Timestamp | None = None
    """When the stage started."""
    finished_at: Timestamp | None = None
    """When the stage finished."""

    def tally(self) -> StageCounts:
        """The stage's counts (all zero before it took a cluster)."""
        return self.counts if self.counts is not None else StageCounts()


def status_wire_bytes(data: Any) -> int:
    """The bytes the status takes as the API server writes it, at most: compact JSON with every
    non-ASCII character as a \\u escape, and `<`, `>`, `&` as Go's encoder writes them (6 bytes)."""
    text = json.dumps(data, separators=(",", ":"))
    return len(text) + 5 * (text.count("<") + text.count(">") + text.count("&"))


def bound_status(data: dict[str, Any]) -> None:
    """Keep the status `data` (its wire form) within `STATUS_MAX_BYTES`.

    In this order until it fits: keep fewer clusters in flight, failed and noted per stage (5, 1,
    none; `more` still counts what is left out only as written), then cut every message to 200
    characters. Names of stages, phases, times, counts and records always stay: the per-cluster
    truth is in the records, never here, so nothing a step needs is ever left out.
    """
    if status_wire_bytes(data) <= STATUS_MAX_BYTES:
        return
    wires: list[dict[str, Any]] = data.get("stages") or []
    for cap in (5, 1, 0):
        for wire in wires:
            for key in ("syncing", "failed", "notes", "skipped"):
                if key in wire:
                    wire[key] = wire[key][:cap]
        if status_wire_bytes(data) <= STATUS_MAX_BYTES:
            return
    for holder in [data, *wires, *(data.get("conditions") or [])]:
        if isinstance(holder.get("message"), str) and len(holder["message"]) > 200:
            holder["message"] = holder["message"][:199] + "\u2026"


def _condition_types_unique(conditions: list[Condition] | None) -> list[Condition] | None:
    seen: set[str] = set()
    for condition in conditions or []:
        if condition.type in seen:
            raise ValueError(f"condition type {condition.type!r} appears twice (keep one condition per type)")
        seen.add(condition.type)
    return conditions


class ProgressiveSyncStatus(_Model):
    """Observed state, written by the watcher and the Workflow's steps."""

    observed_generation: Annotated[StrictInt, Field(ge=0)] | None = None
    """The spec generation this status describes."""
    phase: RolloutPhase | None = None
    """Pending, Progressing, Paused, Succeeded, Failed, Cancelled, RollingBack or RolledBack."""
    message: str | None = None
    """What is going on, for people."""
    progress: str | None = None
    """Clusters of the rollout done so far, as "completed/targets" (e.g. 7/12), for `kubectl get`."""
    rollout: RolloutStatus | None = None
    """The current (or last) rollout."""
    rollback: RollbackStatus | None = None
    """The current rollout's rollback, once one started (`spec.rollback`)."""
    current_stage: str | None = None
    """Name of the stage in progress."""
    conditions: (
        Annotated[
            list[Condition],
            Field(
                json_schema_extra={
                    "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["type"],
                }
            ),
        ]
        | None
    ) = None
    """Ready, Progressing, Paused and Valid; one per type."""
    stages: list[StageStatus] | None = None
    """One entry per stage of the current rollout, in order."""
    counts: StageCounts | None = None
    """The stages' counts added up: clusters taken, in flight, completed and failed in this rollout."""

    @model_serializer(mode="wrap")
    def _to_wire(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        bound_status(data)
        return data

    @field_validator("conditions")
    @classmethod
    def _conditions_unique(cls, conditions: list[Condition] | None) -> list[Condition] | None:
        return _condition_types_unique(conditions)


# --- the object ------------------------------------------------------------------------------


class ObjectMeta(BaseModel):
    """The metadata fields we read; everything else the API server returns is kept as-is."""

    model_config = ConfigDict(extra="allow", populate_by_name=True, alias_generator=to_camel)

    name: Annotated[str, Field(min_length=1, max_length=OBJECT_NAME_MAX_LENGTH, pattern=OBJECT_NAME_PATTERN)]
    namespace: str | None = None
    uid: str | None = None
    generation: int | None = None
    resource_version: str | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    finalizers: list[str] | None = None
    deletion_timestamp: str | None = None


class ProgressiveSync(_Model):
    """A whole ProgressiveSync object as `kubectl get -o yaml` shows it."""

    api_version: Literal["progressivesync.io/v1alpha1"] = "progressivesync.io/v1alpha1"
    kind: Literal["ProgressiveSync"] = "ProgressiveSync"
    metadata: ObjectMeta
    spec: ProgressiveSyncSpec
    status: ProgressiveSyncStatus | None = None
