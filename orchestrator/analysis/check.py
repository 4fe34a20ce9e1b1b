"""Is every stage's analysis runnable? Checked before a rollout starts, so nothing is synced for it.

`gather_templates(analysis, namespace, lookup)` follows a stage's templates and the ones they
include (`spec.templates`), the way the `analyze` step reads them; `lookup(name, cluster_scope)`
returns the object or None when it does not exist (the caller reads; this module does not).

`analysis_blocker(spec, namespace, lookup)` is the first thing that would stop a stage's analysis
before it measured anything: a template that does not exist (`AnalysisTemplateNotFound`), two
templates defining one metric (`AnalysisMetricDuplicate`), or a template's argument that has no
value, no default and no valueFrom (`AnalysisArgMissing`). It builds no AnalysisRun: it runs the
builder's own `flatten_templates` and `merge_args` (orchestrator.analysis.run) with our arguments
standing for their values, so the rules are the builder's. What only a cluster knows (a cluster
without the label an argument reads) stays the step's to find, per cluster.

Pure. Callers: the watcher (`orchestrator.watcher.observe`, with a lookup over its adapter; the
condition `Valid=False` in `orchestrator.watcher.decide_release`), steps/analyze.py; tests.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from orchestrator.analysis.run import (
    AnalysisBuildError,
    FetchedTemplate,
    flatten_templates,
    merge_args,
    nested_template_refs,
)
from orchestrator.api.analysis import StageAnalysis, resolve_analysis
from orchestrator.api.models import ProgressiveSyncSpec
from orchestrator.api.reasons import Reason

MAX_TEMPLATE_DEPTH = 5

Lookup = Callable[[str, bool], Mapping[str, Any] | None]


@dataclass(frozen=True)
class AnalysisBlocker:
    """Why a stage's analysis cannot run: the catalog's reason and a message naming what and the fix."""

    reason: Reason
    message: str


def template_kind(cluster_scope: bool) -> str:
    """AnalysisTemplate or ClusterAnalysisTemplate."""
    return "ClusterAnalysisTemplate" if cluster_scope else "AnalysisTemplate"


def gather_templates(analysis: StageAnalysis, namespace: str, lookup: Lookup) -> list[FetchedTemplate]:
    """The analysis' templates, each followed by those it includes (each once, at most
    `MAX_TEMPLATE_DEPTH` deep); AnalysisBuildError (AnalysisTemplateNotFound) naming the first missing."""
    found: list[FetchedTemplate] = []
    seen: set[tuple[str, bool]] = set()

    def visit(name: str, cluster_scope: bool, depth: int) -> None:
        if (name, cluster_scope) in seen or depth > MAX_TEMPLATE_DEPTH:
            return
        seen.add((name, cluster_scope))
        obj = lookup(name, cluster_scope)
        if obj is None:
            where = "" if cluster_scope else f" in namespace {namespace}"
            raise AnalysisBuildError(
                Reason.ANALYSIS_TEMPLATE_NOT_FOUND,
                f"{template_kind(cluster_scope)} {name}{where} not found "
                "(create it, or fix analysis.templates)",
            )
        template = FetchedTemplate(name=name, cluster_scope=cluster_scope, obj=obj)
        found.append(template)
        for nested, scope in nested_template_refs(template):
            visit(nested, scope, depth + 1)

    for ref in analysis.templates:
        visit(ref.name, ref.cluster_scope, 0)
    return found


def stage_analysis_blocker(analysis: StageAnalysis, namespace: str, lookup: Lookup) -> AnalysisBlocker | None:
    """What stops this analysis before it measures (see the module); None when nothing does."""
    try:
        flat = flatten_templates(gather_templates(analysis, namespace, lookup))
        # Our arguments stand for their values: a valueFrom is resolved per run, by the step.
        merge_args(flat.args, [{"name": arg.name, "value": ""} for arg in analysis.args])
    except AnalysisBuildError as exc:
        return AnalysisBlocker(exc.reason, str(exc))
    return None


def analysis_blocker(spec: ProgressiveSyncSpec, namespace: str, lookup: Lookup) -> AnalysisBlocker | None:
    """The first stage whose analysis cannot run, with the reason; None when every one can.

    Each (template, scope) is looked up once however many stages name it."""
    known: dict[tuple[str, bool], Mapping[str, Any] | None] = {}

    def once(name: str, cluster_scope: bool) -> Mapping[str, Any] | None:
        key = (name, cluster_scope)
        if key not in known:
            known[key] = lookup(name, cluster_scope)
        return known[key]

    for stage in spec.stages:
        try:
            analysis = resolve_analysis(spec.analysis, stage.analysis)
        except ValueError:  # no template anywhere: the spec's validation says so first
            continue
        if analysis is None:
            continue
        blocker = stage_analysis_blocker(analysis, namespace, once)
        if blocker is not None:
            return AnalysisBlocker(
                blocker.reason, f"stage {stage.name!r}, analysis {analysis.label}: {blocker.message}"
            )
    return None


def has_analysis(spec: ProgressiveSyncSpec) -> bool:
    """True when the spec or one of its stages has an analysis block."""
    return spec.analysis is not None or any(stage.analysis is not None for stage in spec.stages)
