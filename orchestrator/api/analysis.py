"""Analysis gates in the API: `spec.analysis` (defaults for every stage) and `stages[].analysis`.

A stage with analysis passes only when Argo Rollouts AnalysisTemplates, run as an AnalysisRun by
the real Argo Rollouts controller, say so (DESIGN.md §3, "Analysis gates"). These models say which
templates run (`templates`), with which arguments (`args`: a literal `value`, or `valueFrom` one
of the cluster's name, one of its Secret's labels, the Application's name/namespace/destination,
the stage's name, the release revision, or Argo Rollouts' own `secretKeyRef`, which the
controller resolves itself), when (`afterHealthy`: the gate before the next stage; `duringBake`:
a background run for the stage's `bakeSeconds`), whether one run per cluster (`perCluster`), what
an Inconclusive run does (`onInconclusive`: Fail, or Approve: wait for a person) and an optional
bound (`timeoutSeconds`).

A stage's block overrides the spec's field by field (`args` merged by name, the stage's win):
`resolve_analysis` gives the stage's effective `StageAnalysis`, which the rollout contract carries
(`orchestrator.planning.contract`). Rules that need both blocks (templates given somewhere,
duringBake only with bakeSeconds, a cluster's arguments only per cluster) are checked by
`analysis_problems`, which the spec's validator runs, with their CEL twins in `SPEC_RULES`.

Pure data, like `orchestrator.api.models`, which imports this module.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import ConfigDict, Field, StrictBool, StrictInt, field_validator, model_validator

from orchestrator.api.base import (
    LABEL_KEY_MAX_LENGTH,
    LABEL_KEY_PATTERN,
    MAX_DEADLINE_SECONDS,
    OBJECT_NAME_MAX_LENGTH,
    OBJECT_NAME_PATTERN,
    _Model,
    _validations,
    cel,
)

ARG_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_.-]*$"
ARG_NAME_MAX_LENGTH = 63
ARG_VALUE_MAX_LENGTH = 4096
MAX_TEMPLATES = 16
MAX_ARGS = 16


class AnalysisWhen(StrEnum):
    """When a stage's analysis runs."""

    AFTER_HEALTHY = "afterHealthy"
    """After the stage's clusters are Synced and Healthy, before the next stage (the gate)."""
    DURING_BAKE = "duringBake"
    """During the stage's bakeSeconds, failing the stage the moment a metric fails."""


class OnInconclusive(StrEnum):
    """What an Inconclusive AnalysisRun does to the stage."""

    FAIL = "Fail"
    APPROVE = "Approve"


class AnalysisTemplateRef(_Model):
    """An Argo Rollouts AnalysisTemplate (the ProgressiveSync's namespace) or ClusterAnalysisTemplate."""

    name: Annotated[str, Field(min_length=1, max_length=OBJECT_NAME_MAX_LENGTH, pattern=OBJECT_NAME_PATTERN)]
    """The template's name."""
    cluster_scope: StrictBool = False
    """true: a ClusterAnalysisTemplate; false: an AnalysisTemplate in the ProgressiveSync's namespace."""


class SecretKeyRef(_Model):
    """A key of a Secret in the ProgressiveSync's namespace; the Argo Rollouts controller reads it."""

    name: Annotated[str, Field(min_length=1, max_length=OBJECT_NAME_MAX_LENGTH, pattern=OBJECT_NAME_PATTERN)]
    """The Secret's name."""
    key: Annotated[str, Field(min_length=1, max_length=253)]
    """The key in the Secret."""


# The sources of a valueFrom, by wire name. A boolean source is written `true` (`false` is refused:
# leave it out); the cluster's and the Application's need one run per cluster (`perCluster: true`).
BOOLEAN_SOURCES = (
    "clusterName",
    "applicationName",
    "applicationNamespace",
    "destinationServer",
    "destinationName",
    "destinationNamespace",
    "stageName",
    "releaseRevision",
)
PER_CLUSTER_SOURCES = (
    "clusterName",
    "clusterLabel",
    "applicationName",
    "applicationNamespace",
    "destinationServer",
    "destinationName",
    "destinationNamespace",
)
ALL_SOURCES = (*BOOLEAN_SOURCES, "clusterLabel", "secretKeyRef")

_ONE_SOURCE = " + ".join(f"(has(self.{name}) ? 1 : 0)" for name in ALL_SOURCES)
_SOURCES_HINT = (
    "set exactly one of "
    + ", ".join(ALL_SOURCES[:-1])
    + " or secretKeyRef, e.g. valueFrom: {clusterName: true}"
)

Source = StrictBool | None


class ArgValueFrom(_Model):
    """Where an argument's value comes from: exactly one source."""

    model_config = ConfigDict(
        json_schema_extra=_validations(
            cel(f"{_ONE_SOURCE} == 1", f"valueFrom needs exactly one source ({_SOURCES_HINT})"),
            cel(
                " && ".join(f"(!has(self.{name}) || self.{name})" for name in BOOLEAN_SOURCES),
                "a valueFrom source set to false means nothing (write true, or leave it out)",
            ),
        )
    )

    cluster_name: Source = None
    """The cluster's name (Argo CD cluster Secret `name`)."""
    cluster_label: (
        Annotated[str, Field(max_length=LABEL_KEY_MAX_LENGTH, pattern=LABEL_KEY_PATTERN)] | None
    ) = None
    """The value of this label on the cluster's Secret (e.g. region)."""
    application_name: Source = None
    """The name of the cluster's Application (of the ApplicationSet)."""
    application_namespace: Source = None
    """The namespace of the cluster's Application."""
    destination_server: Source = None
    """The Application's `spec.destination.server` (else the cluster's server)."""
    destination_name: Source = None
    """The Application's `spec.destination.name` (else the cluster's name)."""
    destination_namespace: Source = None
    """The Application's `spec.destination.namespace`."""
    stage_name: Source = None
    """The stage's name."""
    release_revision: Source = None
    """The revision the rollout brings the Applications to."""
    secret_key_ref: SecretKeyRef | None = None
    """A Secret's key, passed on as it is: the Argo Rollouts controller resolves it."""

    @model_validator(mode="after")
    def _exactly_one(self) -> ArgValueFrom:
        data = self.to_api()
        off = [name for name in BOOLEAN_SOURCES if data.get(name) is False]
        if off:
            raise ValueError(
                f"valueFrom.{off[0]} is false, which means nothing (write true, or leave it out)"
            )
        if len(self.sources()) != 1:
            raise ValueError(
                f"valueFrom needs exactly one source, has {len(self.sources())} ({_SOURCES_HINT})"
            )
        return self

    def sources(self) -> list[str]:
        """The wire names of the sources set."""
        data = self.to_api()
        return [name for name in ALL_SOURCES if data.get(name) not in (None, False)]

    @property
    def source(self) -> str:
        """The one source set (wire name)."""
        return self.sources()[0]

    @property
    def per_cluster(self) -> bool:
        """True when the value belongs to one cluster (its name, labels, Application)."""
        return self.source in PER_CLUSTER_SOURCES


class AnalysisArg(_Model):
    """One argument of the templates (`{{args.NAME}}`): a literal value or where to take it from."""

    model_config = ConfigDict(
        json_schema_extra=_validations(
            cel(
                "has(self.value) != has(self.valueFrom)",
                "an argument needs exactly one of value and valueFrom (keep one)",
            )
        )
    )

    name: Annotated[str, Field(min_length=1, max_length=ARG_NAME_MAX_LENGTH, pattern=ARG_NAME_PATTERN)]
    """The argument's name, as the templates declare it."""
    value: Annotated[str, Field(max_length=ARG_VALUE_MAX_LENGTH)] | None = None
    """A literal value."""
    value_from: ArgValueFrom | None = None
    """Where the value comes from."""

    @model_validator(mode="after")
    def _value_or_from(self) -> AnalysisArg:
        if (self.value is None) == (self.value_from is None):
            given = "both" if self.value is not None else "neither"
            raise ValueError(
                f"argument {self.name!r} has {given} of value and valueFrom (give exactly one of them)"
            )
        return self


def _unique(kind: str, keys: list[Any]) -> None:
    first: dict[Any, int] = {}
    for index, key in enumerate(keys):
        if key in first:
            raise ValueError(f"{kind} {key!r} is listed at [{first[key]}] and [{index}] (list it once)")
        first[key] = index


class AnalysisSpec(_Model):
    """An analysis block: on the spec, the defaults for every stage; on a stage, what it overrides."""

    templates: (
        Annotated[
            list[AnalysisTemplateRef],
            Field(
                min_length=1,
                max_length=MAX_TEMPLATES,
                json_schema_extra=_validations(
                    cel(
                        "self.all(t, self.exists_one(u, u.name == t.name"
                        " && (has(u.clusterScope) && u.clusterScope)"
                        " == (has(t.clusterScope) && t.clusterScope)))",
                        "templates must be unique (list each template once)",
                    )
                ),
            ),
        ]
        | None
    ) = None
    """The templates to run, flattened into one AnalysisRun (metric names must not repeat)."""
    args: (
        Annotated[
            list[AnalysisArg],
            Field(
                max_length=MAX_ARGS,
                json_schema_extra=_validations(
                    cel(
                        "self.all(a, self.exists_one(b, b.name == a.name))",
                        "argument names must be unique (give every argument its own name)",
                    )
                ),
            ),
        ]
        | None
    ) = None
    """Values for the templates' arguments (a stage's are merged by name over the spec's)."""
    when: (
        Annotated[
            list[AnalysisWhen],
            Field(
                min_length=1,
                max_length=2,
                json_schema_extra=_validations(
                    cel("self.all(w, self.exists_one(v, v == w))", "when lists a moment twice (list it once)")
                ),
            ),
        ]
        | None
    ) = None
    """afterHealthy (the gate; default) and/or duringBake (needs the stage's bakeSeconds)."""
    per_cluster: StrictBool | None = None
    """true: one AnalysisRun per cluster (args per cluster); default false: one per stage."""
    on_inconclusive: OnInconclusive | None = None
    """Fail (default) or Approve: an Inconclusive run waits for `progressive-sync approve`."""
    timeout_seconds: Annotated[StrictInt, Field(ge=1, le=MAX_DEADLINE_SECONDS)] | None = None
    """The longest an AnalysisRun may take (default: from its metrics' interval x count)."""

    @field_validator("templates")
    @classmethod
    def _templates_unique(
        cls, templates: list[AnalysisTemplateRef] | None
    ) -> list[AnalysisTemplateRef] | None:
        _unique("template", [(t.name, t.cluster_scope) for t in templates or []])
        return templates

    @field_validator("args")
    @classmethod
    def _args_unique(cls, args: list[AnalysisArg] | None) -> list[AnalysisArg] | None:
        _unique("argument", [arg.name for arg in args or []])
        return args

    @field_validator("when")
    @classmethod
    def _when_unique(cls, when: list[AnalysisWhen] | None) -> list[AnalysisWhen] | None:
        _unique("when", [moment.value for moment in when or []])
        return when


class StageAnalysis(_Model):
    """A stage's effective analysis (`resolve_analysis`): what the rollout contract carries."""

    model_config = ConfigDict(frozen=True)

    templates: tuple[AnalysisTemplateRef, ...] = Field(min_length=1)
    args: tuple[AnalysisArg, ...] = ()
    when: tuple[AnalysisWhen, ...] = (AnalysisWhen.AFTER_HEALTHY,)
    per_cluster: bool = False
    on_inconclusive: OnInconclusive = OnInconclusive.FAIL
    timeout_seconds: int | None = None

    @property
    def after_healthy(self) -> bool:
        """The gate runs after the stage's clusters are healthy."""
        return AnalysisWhen.AFTER_HEALTHY in self.when

    @property
    def during_bake(self) -> bool:
        """A background run during the stage's bake."""
        return AnalysisWhen.DURING_BAKE in self.when

    @property
    def label(self) -> str:
        """The templates' names joined by '+', for the Argo UI and messages."""
        return "+".join(ref.name for ref in self.templates)


def describe_analysis(analysis: StageAnalysis, *, bake_seconds: int | None = None) -> str:
    """Where and how a stage's analysis runs, for `plan` and people."""
    parts = []
    scope = "one AnalysisRun per cluster" if analysis.per_cluster else "one AnalysisRun for the stage"
    if analysis.after_healthy:
        parts.append(f"after its clusters are Synced and Healthy, before the next stage ({scope})")
    if analysis.during_bake:
        parts.append(f"during its {bake_seconds or 0}s bake")
    inconclusive = "waits for approval" if analysis.on_inconclusive is OnInconclusive.APPROVE else "fails"
    timeout = f", at most {analysis.timeout_seconds}s" if analysis.timeout_seconds else ""
    return f"{analysis.label}: " + "; ".join(parts) + f"; Inconclusive {inconclusive}{timeout}"


def merged_args(default: list[AnalysisArg] | None, override: list[AnalysisArg] | None) -> list[AnalysisArg]:
    """The spec's arguments with the stage's merged over them by name (the stage's win; new ones last)."""
    mine = {arg.name: arg for arg in override or []}
    merged = [mine.pop(arg.name, arg) for arg in default or []]
    return merged + [arg for arg in override or [] if arg.name in mine]


def resolve_analysis(default: AnalysisSpec | None, stage: AnalysisSpec | None) -> StageAnalysis | None:
    """The stage's effective analysis: its own fields over the spec's defaults; None without any.

    ValueError when neither names a template (`analysis_problems` reports it first)."""
    if default is None and stage is None:
        return None
    base = default or AnalysisSpec()
    own = stage or AnalysisSpec()

    def pick(name: str) -> Any:
        value = getattr(own, name)
        return value if value is not None else getattr(base, name)

    templates = pick("templates")
    if not templates:
        raise ValueError("no analysis template: list at least one in analysis.templates")
    fields: dict[str, Any] = {
        "templates": tuple(templates),
        "args": tuple(merged_args(base.args, own.args)),
    }
    for name in ("when", "per_cluster", "on_inconclusive", "timeout_seconds"):
        value = pick(name)
        if value is not None:
            fields[name] = tuple(value) if name == "when" else value
    return StageAnalysis(**fields)


def analysis_problems(
    default: AnalysisSpec | None, stage: AnalysisSpec | None, *, bake_seconds: int | None
) -> list[str]:
    """What is wrong with a stage's effective analysis, each with its fix ([] when fine)."""
    if default is None and stage is None:
        return []
    templates = (stage.templates if stage else None) or (default.templates if default else None)
    if not templates:
        return ["analysis has no templates (list at least one in spec.analysis.templates or the stage's)"]
    resolved = resolve_analysis(default, stage)
    assert resolved is not None
    problems = []
    if resolved.during_bake and not bake_seconds:
        problems.append(
            "analysis.when has duringBake but the stage has no bakeSeconds "
            "(set bakeSeconds, or use when: [afterHealthy])"
        )
    if not resolved.per_cluster:
        bound = [a.name for a in resolved.args if a.value_from is not None and a.value_from.per_cluster]
        if bound:
            problems.append(
                f"argument(s) {', '.join(map(repr, bound))} take their value from one cluster, but the "
                "analysis runs once per stage (set analysis.perCluster: true, or give a value)"
            )
    return problems


# --- the CEL twins of `analysis_problems`, on the spec -----------------------------------------


def _pick(field: str) -> str:
    """CEL: the stage's field when it sets it, else the spec's (s: the stage, self: the spec)."""
    return (
        f"(has(s.analysis) && has(s.analysis.{field}) ? s.analysis.{field} : "
        f"(has(self.analysis) && has(self.analysis.{field}) ? self.analysis.{field} : "
    )


_HAS_ANALYSIS = "(has(s.analysis) || has(self.analysis))"
_BOUND = " || ".join(f"has(a.valueFrom.{name})" for name in PER_CLUSTER_SOURCES)
SPEC_RULES = (
    cel(
        f"self.stages.all(s, !{_HAS_ANALYSIS} || (has(s.analysis) && has(s.analysis.templates))"
        " || (has(self.analysis) && has(self.analysis.templates)))",
        "every stage's analysis needs templates (list at least one in spec.analysis.templates "
        "or the stage's)",
    ),
    cel(
        f"self.stages.all(s, !{_HAS_ANALYSIS} || !({_pick('when')}[]))).exists(w, w == 'duringBake')"
        " || (has(s.bakeSeconds) && s.bakeSeconds > 0))",
        "analysis.when has duringBake but the stage has no bakeSeconds (set bakeSeconds, or use "
        "when: [afterHealthy])",
    ),
    cel(
        f"self.stages.all(s, !{_HAS_ANALYSIS} || {_pick('perCluster')}false))"
        f" || ((!has(s.analysis) || !has(s.analysis.args) || !s.analysis.args.exists(a,"
        f" has(a.valueFrom) && ({_BOUND})))"
        " && (!has(self.analysis) || !has(self.analysis.args) || !self.analysis.args.exists(a,"
        f" has(a.valueFrom) && ({_BOUND}) && !(has(s.analysis) && has(s.analysis.args)"
        " && s.analysis.args.exists(b, b.name == a.name))))))",
        "an argument takes its value from one cluster but the analysis runs once per stage (set "
        "analysis.perCluster: true, or give a value)",
    ),
)
