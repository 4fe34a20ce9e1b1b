"""The `progressivesync.io/v1alpha1` ProgressiveSync API as pydantic models.

These models are the single source of truth for the API: the CRD in
`charts/progressive-sync/crds/` is generated from them (`orchestrator.crdgen`), offline validation
(`progressive-sync validate`) runs them, and every other module reads ProgressiveSyncs through them.
They are plain data with pure helpers (selector matching, size resolution); nothing here talks to
the API server or reads the clock.

Field names are the camelCase of the wire format; Python code uses the snake_case attribute names.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    StrictInt,
    model_validator,
)
from pydantic.alias_generators import to_camel

GROUP = "progressivesync.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "ProgressiveSync"
PLURAL = "progressivesyncs"
SINGULAR = "progressivesync"
SHORT_NAME = "psync"

# A stage name is what people read in the Argo UI and in `status`; it becomes a DAG task name only
# after sanitizing (workflow_templates), so spaces are allowed here.
STAGE_NAME_PATTERN = r"^[A-Za-z0-9]([A-Za-z0-9 ._-]*[A-Za-z0-9])?$"
STAGE_NAME_MAX_LENGTH = 63
# Kubernetes qualified name (label key), optionally prefixed by a DNS subdomain.
LABEL_KEY_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
LABEL_KEY_MAX_LENGTH = 316  # 253 (prefix) + "/" + 63 (name)
LABEL_VALUE_PATTERN = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
LABEL_VALUE_MAX_LENGTH = 63
# Kubernetes object name (DNS subdomain) for references such as appSetRef.name.
OBJECT_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
OBJECT_NAME_MAX_LENGTH = 253
PERCENT_PATTERN = r"^([1-9][0-9]?|100)%$"
MAX_DEADLINE_SECONDS = 7 * 24 * 3600
MAX_BAKE_SECONDS = 7 * 24 * 3600


class _Model(BaseModel):
    """Base for API models: camelCase on the wire, unknown fields rejected like strict kubectl."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        validate_assignment=False,
    )

    def to_api(self) -> dict[str, Any]:
        """Serialize the way the API server stores it: camelCase, unset optionals omitted."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


# --- sizes -----------------------------------------------------------------------------------


def _check_percent(value: int | str) -> int | str:
    if isinstance(value, str) and not re.fullmatch(PERCENT_PATTERN, value):
        raise ValueError(
            f'{value!r} is not a size: use a whole number >= 1 (without quotes) or a percentage "1%".."100%"'
        )
    return value


IntOrPercent = Annotated[
    Annotated[StrictInt, Field(ge=1)] | str,
    AfterValidator(_check_percent),
]
"""A stage size: an integer >= 1, or a percentage string "N%" with 1 <= N <= 100."""


def resolve_int_or_percent(value: int | str, total: int) -> int:
    """Resolve a size against `total`: percentages round down with a minimum of 1; ints are as-is.

    The caller caps the result to what is available (a stage never takes more clusters than it has).
    """
    if isinstance(value, int):
        return value
    match = re.fullmatch(PERCENT_PATTERN, value)
    if match is None:
        raise ValueError(f"not an int or percentage: {value!r}")
    percent = int(value[:-1])
    return max(1, total * percent // 100)


# --- label selectors -------------------------------------------------------------------------

LabelKey = Annotated[str, Field(pattern=LABEL_KEY_PATTERN, max_length=LABEL_KEY_MAX_LENGTH)]
LabelValue = Annotated[str, Field(pattern=LABEL_VALUE_PATTERN, max_length=LABEL_VALUE_MAX_LENGTH)]


class SelectorOperator(StrEnum):
    """Operators of a label selector requirement, as Kubernetes defines them."""

    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"


class LabelSelectorRequirement(_Model):
    """One `matchExpressions` entry."""

    key: LabelKey
    operator: SelectorOperator
    values: list[LabelValue] | None = None

    @model_validator(mode="after")
    def _values_fit_operator(self) -> LabelSelectorRequirement:
        needs_values = self.operator in (SelectorOperator.IN, SelectorOperator.NOT_IN)
        if needs_values and not self.values:
            raise ValueError(f"operator {self.operator.value} needs a non-empty 'values' list")
        if not needs_values and self.values:
            raise ValueError(f"operator {self.operator.value} takes no 'values'; remove them")
        return self

    def matches(self, labels: dict[str, str]) -> bool:
        """Kubernetes semantics: NotIn and DoesNotExist match objects without the key."""
        present = self.key in labels
        match self.operator:
            case SelectorOperator.IN:
                return present and labels[self.key] in (self.values or [])
            case SelectorOperator.NOT_IN:
                return not present or labels[self.key] not in (self.values or [])
            case SelectorOperator.EXISTS:
                return present
            case SelectorOperator.DOES_NOT_EXIST:
                return not present


class LabelSelector(_Model):
    """A metav1.LabelSelector; the empty selector matches every cluster."""

    match_labels: dict[LabelKey, LabelValue] | None = None
    match_expressions: list[LabelSelectorRequirement] | None = None

    def matches(self, labels: dict[str, str]) -> bool:
        """True when every matchLabels pair and every matchExpressions requirement holds."""
        for key, value in (self.match_labels or {}).items():
            if labels.get(key) != value:
                return False
        return all(req.matches(labels) for req in self.match_expressions or [])


# --- spec ------------------------------------------------------------------------------------


class ApprovalMode(StrEnum):
    """Whether a stage starts on its own or waits for a person (`argo resume` / `approve`)."""

    AUTOMATIC = "Automatic"
    MANUAL = "Manual"


class AppSetRef(_Model):
    """The ApplicationSet (same namespace) whose Applications this ProgressiveSync rolls out."""

    name: Annotated[str, Field(min_length=1, max_length=OBJECT_NAME_MAX_LENGTH, pattern=OBJECT_NAME_PATTERN)]


class ClusterTargets(_Model):
    """Which Argo CD cluster Secrets a stage may take, by their labels."""

    selector: LabelSelector


class StageTargets(_Model):
    """What a stage targets; clusters are the only kind today."""

    clusters: ClusterTargets


class Stage(_Model):
    """One step of a rollout: which clusters, how many, how many at once."""

    name: Annotated[
        str, Field(min_length=1, max_length=STAGE_NAME_MAX_LENGTH, pattern=STAGE_NAME_PATTERN)
    ]
    targets: StageTargets
    max_targets: IntOrPercent = "100%"
    max_parallel: IntOrPercent = 1
    spread_by: LabelKey | None = None
    approval: ApprovalMode = ApprovalMode.AUTOMATIC
    bake_seconds: Annotated[StrictInt, Field(ge=0, le=MAX_BAKE_SECONDS)] | None = None

    @model_validator(mode="after")
    def _parallel_fits_targets(self) -> Stage:
        if (
            isinstance(self.max_targets, int)
            and isinstance(self.max_parallel, int)
            and self.max_parallel > self.max_targets
        ):
            raise ValueError(
                f"maxParallel ({self.max_parallel}) is above maxTargets ({self.max_targets}); "
                f"lower maxParallel to at most {self.max_targets}"
            )
        return self


class FailurePolicy(_Model):
    """How many failed clusters a stage tolerates before the rollout stops."""

    max_failed_clusters: Annotated[StrictInt, Field(ge=0)] = 0


class SyncOptions(_Model):
    """Passed into every sync operation the rollout writes."""

    prune: bool = False
    # Argo CD sync options such as "ServerSideApply=true" (`operation.sync.syncOptions`).
    options: list[Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z]+=[^\s]+$")]] | None = None


class ProgressiveSyncSpec(_Model):
    """What to roll out, to whom, in which order."""

    app_set_ref: AppSetRef
    stages: Annotated[list[Stage], Field(min_length=1, max_length=50)]
    progress_deadline_seconds: Annotated[StrictInt, Field(ge=1, le=MAX_DEADLINE_SECONDS)] = 600
    failure_policy: FailurePolicy = Field(default_factory=FailurePolicy)
    sync_options: SyncOptions = Field(default_factory=SyncOptions)
    allow_partial_rollout: bool = False
    paused: bool = False

    @model_validator(mode="after")
    def _stage_names_unique(self) -> ProgressiveSyncSpec:
        seen: set[str] = set()
        for stage in self.stages:
            if stage.name in seen:
                raise ValueError(f"stage name {stage.name!r} is used twice; give every stage its own name")
            seen.add(stage.name)
        return self


# --- status ----------------------------------------------------------------------------------


def format_timestamp(value: datetime) -> str:
    """RFC 3339 in UTC with second precision, as metav1.Time serializes."""
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


Timestamp = Annotated[datetime, PlainSerializer(format_timestamp, return_type=str, when_used="json")]


class RolloutPhase(StrEnum):
    """The phase of the ProgressiveSync as a whole (its current or last rollout)."""

    PENDING = "Pending"
    PROGRESSING = "Progressing"
    PAUSED = "Paused"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    CANCELLED = "Cancelled"


class StagePhase(StrEnum):
    """The phase of one stage within the current rollout."""

    PENDING = "Pending"
    PROGRESSING = "Progressing"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    SKIPPED = "Skipped"
    CANCELLED = "Cancelled"


class ConditionStatus(StrEnum):
    """metav1.ConditionStatus."""

    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(_Model):
    """A metav1.Condition (Ready, Progressing, Paused, Valid)."""

    type: Annotated[str, Field(min_length=1, max_length=316)]
    status: ConditionStatus
    reason: Annotated[str, Field(min_length=1, max_length=1024, pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")]
    message: Annotated[str, Field(max_length=32768)] = ""
    last_transition_time: Timestamp
    observed_generation: Annotated[StrictInt, Field(ge=0)] | None = None


class RolloutStatus(_Model):
    """The rollout the status describes: one pass of the stages for one release."""

    id: Annotated[str, Field(min_length=1, max_length=16)]
    revision: str = ""
    workflow: str = ""
    attempt: Annotated[StrictInt, Field(ge=1)] = 1
    started_at: Timestamp | None = None
    finished_at: Timestamp | None = None


class ClusterFailure(_Model):
    """A cluster that failed in a stage, and why."""

    name: str
    reason: str = ""


class StageStatus(_Model):
    """Where one stage stands: which clusters it took, which are in flight, done and failed."""

    name: str
    phase: StagePhase = StagePhase.PENDING
    message: str = ""
    targets: list[str] = Field(default_factory=list)
    syncing: list[str] = Field(default_factory=list)
    completed: list[str] = Field(default_factory=list)
    failed: list[ClusterFailure] = Field(default_factory=list)
    started_at: Timestamp | None = None
    finished_at: Timestamp | None = None


class ProgressiveSyncStatus(_Model):
    """Observed state, written by the watcher and the Workflow's steps."""

    observed_generation: Annotated[StrictInt, Field(ge=0)] | None = None
    phase: RolloutPhase | None = None
    message: str | None = None
    progress: str | None = None  # "completed/targets" of the rollout, for `kubectl get`
    rollout: RolloutStatus | None = None
    current_stage: str | None = None
    conditions: list[Condition] | None = None
    stages: list[StageStatus] | None = None


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

    api_version: Literal["progressivesync.io/v1alpha1"] = API_VERSION
    kind: Literal["ProgressiveSync"] = KIND
    metadata: ObjectMeta
    spec: ProgressiveSyncSpec
    status: ProgressiveSyncStatus | None = None
