"""The AnalysisRun of one stage (or one cluster of it), built from its templates, as Argo Rollouts
and Kargo build one.

`build_analysis_run` takes the stage's effective analysis (`orchestrator.api.analysis.StageAnalysis`,
from the rollout contract), the AnalysisTemplate / ClusterAnalysisTemplate objects the step fetched
(`FetchedTemplate`, in the order the analysis lists them, nested `spec.templates` included) and
the values the step knows (`ArgContext`: the stage, the release revision and, per cluster, the
cluster's name, labels and server and its Applications), and returns the AnalysisRun manifest:

- `spec.metrics`: every template's metrics, in order; a metric name twice is refused
  (`AnalysisMetricDuplicate`), as the Argo Rollouts controller refuses it;
- `spec.args`: the templates' declared arguments (the same name in two templates must agree on
  its default), each given our value where the analysis has one (`value`, or a `valueFrom` we
  resolve here; a `secretKeyRef` is passed on for the controller to read). Our arguments no
  template declares are dropped (as `kubectl argo rollouts create analysisrun` does); a declared
  argument left without a value is `AnalysisArgMissing`, naming it;
- `spec.dryRun`, `spec.measurementRetention`: the templates' merged (one entry per metric name);
- `spec.ttlStrategy.secondsAfterCompletion`: the run is cleaned up after it ended;
- `metadata.name`: `analysis_run_name`, deterministic from the ProgressiveSync, the rollout id,
  the stage, the cluster and whether it is the stage's `duringBake` run, at most 63 characters,
  so a retried step or a restarted watcher finds the run it made instead of making a second;
- labels `progressivesync.io/name`, `rollout-id`, `stage`, `cluster` (label-safe; the exact stage
  and cluster names are annotations), Argo Rollouts' `instance-id` when one is configured, and an
  ownerReference to the ProgressiveSync (garbage collected with it).

Pure; errors are `AnalysisBuildError` with their catalog reason. Caller: steps/analyze.py.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.api.analysis import AnalysisArg, StageAnalysis
from orchestrator.api.metadata import NAME_LABEL, ROLLOUT_ID_LABEL, label_value
from orchestrator.api.models import API_VERSION, KIND
from orchestrator.api.reasons import Reason
from orchestrator.core.durations import duration_seconds as core_duration_seconds

ROLLOUTS_GROUP = "argoproj.io"
ROLLOUTS_VERSION = "v1alpha1"
ANALYSIS_RUN_KIND = "AnalysisRun"
STAGE_LABEL = "progressivesync.io/stage"
CLUSTER_LABEL = "progressivesync.io/cluster"
STAGE_ANNOTATION = "progressivesync.io/stage"
CLUSTER_ANNOTATION = "progressivesync.io/cluster"
# The Argo Rollouts controller's own label (v1alpha1.LabelKeyControllerInstanceID): a controller
# started with --instance-id reconciles only runs carrying it; one without, only runs without it.
INSTANCE_ID_LABEL = "argo-rollouts.argoproj.io/controller-instance-id"
RUN_NAME_MAX = 63
_HASH_LENGTH = 10
DEFAULT_TTL_SECONDS = 7 * 24 * 3600


class AnalysisBuildError(ValueError):
    """The AnalysisRun cannot be built: `reason` is the catalog's, the message names what and why."""

    def __init__(self, reason: Reason, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class FetchedTemplate:
    """A template as the step read it: its name, whether cluster-scoped, and the object."""

    name: str
    cluster_scope: bool
    obj: Mapping[str, Any]

    @property
    def kind(self) -> str:
        """AnalysisTemplate or ClusterAnalysisTemplate."""
        return "ClusterAnalysisTemplate" if self.cluster_scope else "AnalysisTemplate"

    @property
    def spec(self) -> Mapping[str, Any]:
        """The template's spec ({} when it has none)."""
        return self.obj.get("spec") or {}


@dataclass(frozen=True)
class AppRef:
    """One Application of the cluster, as an argument's value may name it."""

    name: str
    namespace: str
    destination_server: str = ""
    destination_name: str = ""
    destination_namespace: str = ""


@dataclass(frozen=True)
class ArgContext:
    """What an argument's `valueFrom` may take: the stage and release, and per cluster its facts."""

    stage: str
    release_revision: str = ""  # "" when the release has several revisions (see `why_no_revision`)
    cluster: str = ""  # "" for a run of the whole stage
    cluster_labels: Mapping[str, str] = field(default_factory=dict)
    cluster_server: str = ""
    applications: tuple[AppRef, ...] = ()
    why_no_revision: str = "the release has several revisions"


# --- the name --------------------------------------------------------------------------------


def _dns_part(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def analysis_run_name(
    ps_name: str, rollout_id: str, stage: str, cluster: str = "", *, bake: bool = False
) -> str:
    """`<ps>-<rollout>-<stage>[-bake][-<cluster>]-<hash>`, lowercase, at most 63 characters.

    The readable part is cut to make room for a hash of the exact (ProgressiveSync, rollout, stage,
    cluster, bake): two stages or clusters whose names read alike (`eu 1`, `eu-1`) get two names,
    and the same five always give the same name. `bake`: the stage's `duringBake` run, which a
    stage with `when: [afterHealthy, duringBake]` runs after its gate's run of the same cluster
    (one name for both would make the bake adopt the gate's ended run and pass unmeasured)."""
    exact = "\x00".join((ps_name, rollout_id, stage, cluster) + (("duringBake",) if bake else ()))
    digest = hashlib.sha256(exact.encode()).hexdigest()[:_HASH_LENGTH]
    parts = (ps_name, rollout_id, stage, "bake" if bake else "", cluster)
    readable = "-".join(part for part in map(_dns_part, parts) if part)
    readable = readable[: RUN_NAME_MAX - _HASH_LENGTH - 1].rstrip("-")
    return f"{readable}-{digest}" if readable else f"analysis-{digest}"


def safe_label(text: str) -> str:
    """A label value for a stage or a cluster name: the name when it is one, else readable + hash."""
    if re.fullmatch(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?", text) and len(text) <= 63:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    readable = re.sub(r"[^A-Za-z0-9_.-]+", "-", text)[: 63 - 9].strip("-_.")
    return f"{readable}-{digest}" if readable else digest


def run_labels(ps_name: str, rollout_id: str, stage: str, cluster: str = "") -> dict[str, str]:
    """The labels of a stage's (or cluster's) AnalysisRun."""
    labels = {NAME_LABEL: label_value(ps_name), ROLLOUT_ID_LABEL: rollout_id, STAGE_LABEL: safe_label(stage)}
    if cluster:
        labels[CLUSTER_LABEL] = safe_label(cluster)
    return labels


# --- the templates, flattened ----------------------------------------------------------------


@dataclass(frozen=True)
class Flattened:
    """The templates' metrics, declared arguments, dryRun and measurementRetention, merged."""

    metrics: tuple[Mapping[str, Any], ...]
    args: tuple[dict[str, Any], ...]
    dry_run: tuple[Mapping[str, Any], ...]
    measurement_retention: tuple[Mapping[str, Any], ...]


def flatten_templates(templates: Sequence[FetchedTemplate]) -> Flattened:
    """One spec from many templates (see the module); AnalysisBuildError on a metric name twice or
    an argument two templates default differently."""
    metrics: list[Mapping[str, Any]] = []
    owner: dict[str, str] = {}
    args: dict[str, dict[str, Any]] = {}
    arg_owner: dict[str, str] = {}
    dry_run: dict[str, Mapping[str, Any]] = {}
    retention: dict[str, Mapping[str, Any]] = {}
    for template in templates:
        where = f"{template.kind} {template.name}"
        for metric in template.spec.get("metrics") or []:
            name = str(metric.get("name", ""))
            if name in owner:
                raise AnalysisBuildError(
                    Reason.ANALYSIS_METRIC_DUPLICATE,
                    f"metric {name!r} is defined by {owner[name]} and by {where} "
                    "(rename one, or run one of the templates only)",
                )
            owner[name] = where
            metrics.append(metric)
        for arg in template.spec.get("args") or []:
            name = str(arg.get("name", ""))
            known = args.get(name)
            if known is None:
                args[name] = dict(arg)
                arg_owner[name] = where
                continue
            if _has_value(known) and _has_value(arg) and _value_of(known) != _value_of(arg):
                raise AnalysisBuildError(
                    Reason.ANALYSIS_ARG_MISSING,
                    Reason.ANALYSIS_ARG_MISSING.say(
                        name=name,
                        why=f"{arg_owner[name]} and {where} give it different defaults "
                        "(give it a value in the analysis' args)",
                    ),
                )
            if not _has_value(known) and _has_value(arg):
                args[name] = dict(arg)
        for entry in template.spec.get("dryRun") or []:
            dry_run.setdefault(str(entry.get("metricName", "")), entry)
        for entry in template.spec.get("measurementRetention") or []:
            retention.setdefault(str(entry.get("metricName", "")), entry)
    return Flattened(
        metrics=tuple(metrics),
        args=tuple(args.values()),
        dry_run=tuple(dry_run.values()),
        measurement_retention=tuple(retention.values()),
    )


def _has_value(arg: Mapping[str, Any]) -> bool:
    return arg.get("value") is not None or bool(arg.get("valueFrom"))


def _value_of(arg: Mapping[str, Any]) -> Any:
    return arg.get("value") if arg.get("value") is not None else arg.get("valueFrom")


# --- our arguments ---------------------------------------------------------------------------


def _one_application(ctx: ArgContext, arg: str) -> AppRef:
    if len(ctx.applications) == 1:
        return ctx.applications[0]
    names = ", ".join(app.name for app in ctx.applications) or "none"
    raise AnalysisBuildError(
        Reason.ANALYSIS_ARG_MISSING,
        Reason.ANALYSIS_ARG_MISSING.say(
            name=arg,
            why=f"cluster {ctx.cluster} has {len(ctx.applications)} Applications of the ApplicationSet "
            f"({names}), so which one's is ambiguous",
        ),
    )


def resolve_arg(arg: AnalysisArg, ctx: ArgContext) -> dict[str, Any]:
    """Our argument as the AnalysisRun takes it: `{name, value}`, or `{name, valueFrom: {secretKeyRef}}`."""
    if arg.value is not None:
        return {"name": arg.name, "value": arg.value}
    source = arg.value_from
    assert source is not None  # the model wants exactly one of the two

    def missing(why: str) -> AnalysisBuildError:
        return AnalysisBuildError(
            Reason.ANALYSIS_ARG_MISSING, Reason.ANALYSIS_ARG_MISSING.say(name=arg.name, why=why)
        )

    if source.secret_key_ref is not None:
        ref = source.secret_key_ref
        return {"name": arg.name, "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}}}
    if source.stage_name:
        return {"name": arg.name, "value": ctx.stage}
    if source.release_revision:
        if not ctx.release_revision:
            raise missing(f"no single release revision: {ctx.why_no_revision}")
        return {"name": arg.name, "value": ctx.release_revision}
    if not ctx.cluster:
        raise missing(f"valueFrom {source.source} needs one run per cluster (set analysis.perCluster: true)")
    if source.cluster_name:
        return {"name": arg.name, "value": ctx.cluster}
    if source.cluster_label is not None:
        value = ctx.cluster_labels.get(source.cluster_label)
        if value is None:
            raise missing(
                f"cluster {ctx.cluster} has no label {source.cluster_label!r} on its Secret "
                "(label it, or give the argument a value)"
            )
        return {"name": arg.name, "value": value}
    app = _one_application(ctx, arg.name)
    values = {
        "applicationName": app.name,
        "applicationNamespace": app.namespace,
        "destinationServer": app.destination_server or ctx.cluster_server,
        "destinationName": app.destination_name or ctx.cluster,
        "destinationNamespace": app.destination_namespace,
    }
    value = values[source.source]
    if not value:
        raise missing(f"Application {app.namespace}/{app.name} has no {source.source}")
    return {"name": arg.name, "value": value}


def merge_args(
    declared: Sequence[Mapping[str, Any]], ours: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """The templates' declared arguments with our values over their defaults; AnalysisBuildError
    naming the first declared argument that has no value at all."""
    given = {str(arg["name"]): arg for arg in ours}
    merged = []
    for arg in declared:
        name = str(arg.get("name", ""))
        entry = {"name": name}
        source = given.get(name, arg)
        if source.get("value") is not None:
            entry["value"] = str(source["value"])
        elif source.get("valueFrom"):
            entry["valueFrom"] = source["valueFrom"]
        else:
            raise AnalysisBuildError(
                Reason.ANALYSIS_ARG_MISSING,
                Reason.ANALYSIS_ARG_MISSING.say(
                    name=name,
                    why="a template declares it without a default and the analysis gives no value "
                    "(add it to analysis.args)",
                ),
            )
        merged.append(entry)
    return merged


# --- the AnalysisRun -------------------------------------------------------------------------


def build_analysis_run(
    *,
    ps_name: str,
    ps_uid: str,
    namespace: str,
    rollout_id: str,
    analysis: StageAnalysis,
    templates: Sequence[FetchedTemplate],
    context: ArgContext,
    ttl_seconds: int = DEFAULT_TTL_SECONDS,
    instance_id: str = "",
    bake: bool = False,
) -> dict[str, Any]:
    """The AnalysisRun manifest of the stage (or of `context.cluster`; `bake`: its `duringBake`
    run); see the module."""
    flat = flatten_templates(templates)
    if not flat.metrics:
        raise AnalysisBuildError(
            Reason.ANALYSIS_TEMPLATE_NOT_FOUND,
            f"templates {analysis.label} define no metric (an AnalysisRun needs at least one)",
        )
    ours = [resolve_arg(arg, context) for arg in analysis.args]
    args = merge_args(flat.args, ours)
    labels = run_labels(ps_name, rollout_id, context.stage, context.cluster)
    if instance_id:
        labels[INSTANCE_ID_LABEL] = instance_id
    annotations = {STAGE_ANNOTATION: context.stage}
    if context.cluster:
        annotations[CLUSTER_ANNOTATION] = context.cluster
    metadata: dict[str, Any] = {
        "name": analysis_run_name(ps_name, rollout_id, context.stage, context.cluster, bake=bake),
        "namespace": namespace,
        "labels": labels,
        "annotations": annotations,
    }
    if ps_uid:
        metadata["ownerReferences"] = [
            {
                "apiVersion": API_VERSION,
                "kind": KIND,
                "name": ps_name,
                "uid": ps_uid,
                "blockOwnerDeletion": False,
            }
        ]
    spec: dict[str, Any] = {
        "metrics": [dict(metric) for metric in flat.metrics],
        "ttlStrategy": {"secondsAfterCompletion": ttl_seconds},
    }
    if args:
        spec["args"] = args
    if flat.dry_run:
        spec["dryRun"] = [dict(entry) for entry in flat.dry_run]
    if flat.measurement_retention:
        spec["measurementRetention"] = [dict(entry) for entry in flat.measurement_retention]
    return {
        "apiVersion": f"{ROLLOUTS_GROUP}/{ROLLOUTS_VERSION}",
        "kind": ANALYSIS_RUN_KIND,
        "metadata": metadata,
        "spec": spec,
    }


def nested_template_refs(template: FetchedTemplate) -> list[tuple[str, bool]]:
    """The templates a template includes (`spec.templates[]: {templateName, clusterScope}`)."""
    return [
        (str(ref.get("templateName", "")), bool(ref.get("clusterScope", False)))
        for ref in template.spec.get("templates") or []
    ]


# --- how long a run may take ------------------------------------------------------------------

# A run whose metrics measure for ever (an interval without a count) ends only when terminated:
# without timeoutSeconds it is given this long.
OPEN_ENDED_SECONDS = 3600
# Room for the controller to pick the run up and to take the last measurement.
DEADLINE_SLACK_SECONDS = 60


def duration_seconds(text: str | int | None) -> float:
    """An Argo duration ("30s", "5m", "1h30m", "500ms"; a bare number is seconds) in seconds."""
    if text is None or text == "":
        return 0.0
    return core_duration_seconds(text)


def run_deadline_seconds(analysis: StageAnalysis, metrics: Sequence[Mapping[str, Any]]) -> int:
    """How long the run may take: the analysis' timeoutSeconds, else the longest metric's
    initialDelay + interval x count plus `DEADLINE_SLACK_SECONDS` (`OPEN_ENDED_SECONDS` when a metric
    measures without a count)."""
    if analysis.timeout_seconds:
        return analysis.timeout_seconds
    longest = 0.0
    for metric in metrics:
        count = metric.get("count")
        try:
            delay = duration_seconds(metric.get("initialDelay"))
            interval = duration_seconds(metric.get("interval"))
        except ValueError:  # a duration from an argument ("{{args.interval}}"): not known here
            return OPEN_ENDED_SECONDS
        if count is not None and not str(count).isdigit():  # a count from an argument
            return OPEN_ENDED_SECONDS
        if interval and count is None:
            return OPEN_ENDED_SECONDS
        runs = int(count) if count is not None else 1
        longest = max(longest, delay + interval * runs)
    return int(longest) + DEADLINE_SLACK_SECONDS
