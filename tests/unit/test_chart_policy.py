"""`orchestrator.api.chart_policy`: what the chart, installed with given values, refuses of a
ProgressiveSync (prune, sync options, namespaces, analysis rights), with the field, the chart value
and the fix; Helm's way of merging values files; the module's defaults equal the chart's values.yaml;
and the sync-option rules agree with the watcher's own refusal."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.api.chart_policy import (
    CHART_DEFAULTS,
    ChartPolicy,
    ChartValuesError,
    chart_values,
    merge_values,
    policy_errors,
)
from orchestrator.api.models import ProgressiveSync
from orchestrator.watcher.decision import ReconcilePolicy
from orchestrator.watcher.refusal import sync_options_refusal
from tests.support.builders import make_ps, make_stage

VALUES_YAML = Path(__file__).resolve().parents[2] / "charts" / "progressive-sync" / "values.yaml"
CLUSTER_TEMPLATE = {"templates": [{"name": "error-rate", "clusterScope": True}]}
TEMPLATE = {"templates": [{"name": "error-rate"}]}


def ps_with(*, namespace: str | None = "argocd", **spec: Any) -> ProgressiveSync:
    return ProgressiveSync.model_validate(make_ps("web", namespace=namespace, **spec))


def policy(**values: Any) -> ChartPolicy:
    return ChartPolicy.from_values(chart_values(values))


@pytest.mark.parametrize(
    ("ps", "values", "expected"),
    [
        pytest.param(ps_with(), {}, [], id="defaults-accept-a-plain-one"),
        pytest.param(
            ps_with(syncOptions={"prune": True}),
            {},
            [
                "spec.syncOptions.prune: true is not allowed by the chart (policy.allowPrune: false): "
                "the watcher refuses the rollout with Valid=False, reason SyncOptionNotAllowed (set it "
                "to false, or install the chart with policy.allowPrune: true)"
            ],
            id="prune-without-allowPrune",
        ),
        pytest.param(
            ps_with(syncOptions={"prune": True}), {"policy": {"allowPrune": True}}, [], id="prune-allowed"
        ),
        pytest.param(
            ps_with(syncOptions={"options": ["ServerSideApply=true", "Replace=true"]}),
            {},
            [
                "spec.syncOptions.options[1]: Replace=true is not allowed by the chart "
                "(policy.allowedSyncOptions: ApplyOutOfSyncOnly=true, FailOnSharedResource=true, "
                "PruneLast=true, RespectIgnoreDifferences=true, ServerSideApply=true) (remove it, or "
                "add Replace=true to the chart's policy.allowedSyncOptions)"
            ],
            id="an-option-outside-the-list",
        ),
        pytest.param(
            ps_with(syncOptions={"options": ["Replace=true"]}),
            {"policy": {"allowedSyncOptions": ["*"]}},
            [],
            id="any-option-with-a-star",
        ),
        pytest.param(
            ps_with(namespace="team-a"),
            {},
            [
                "metadata.namespace: team-a is not watched by the chart's watcher (it watches argocd: "
                "argocdNamespace, as watchNamespaces is empty); no rollout would ever start (create "
                "it in argocd, or install the chart with workflowNamespace and watchNamespaces: [team-a])",
                "metadata.namespace: the ApplicationSet's namespace team-a is not one where the chart "
                "lets the watcher read ApplicationSets (argocd: workflowNamespace and argocdNamespace) "
                "(keep the ApplicationSet in argocd, or install the chart with argocdNamespace: team-a)",
            ],
            id="a-namespace-the-watcher-does-not-watch",
        ),
        pytest.param(
            ps_with(namespace="team-a"),
            {"workflowNamespace": "team-a", "watchNamespaces": ["team-a"]},
            [],
            id="a-namespace-the-chart-was-told-to-watch",
        ),
        pytest.param(ps_with(namespace=None), {}, [], id="no-namespace-is-kubectls-choice"),
        pytest.param(
            ps_with(appSetRef={"name": "web", "namespace": "apps"}),
            {},
            [
                "spec.appSetRef.namespace: the ApplicationSet's namespace apps is not one where the "
                "chart lets the watcher read ApplicationSets (argocd: workflowNamespace and "
                "argocdNamespace) (keep the ApplicationSet in argocd, or install the chart with "
                "argocdNamespace: apps)"
            ],
            id="an-application-set-elsewhere",
        ),
        pytest.param(
            ps_with(stages=[make_stage("all") | {"analysis": TEMPLATE}]),
            {"analysis": {"enabled": False}},
            [
                "spec.stages[0].analysis: the chart grants the steps no analysis rights "
                "(analysis.enabled: false): the analyze step would fail with Forbidden (remove the "
                "analysis, or install the chart with analysis.enabled: true)"
            ],
            id="analysis-without-analysis-rights",
        ),
        pytest.param(
            ps_with(analysis=CLUSTER_TEMPLATE),
            {},
            [
                "spec.analysis.templates[0].clusterScope: ClusterAnalysisTemplate error-rate is not "
                "readable by the steps (analysis.clusterTemplates: false) (use an AnalysisTemplate in "
                "the ProgressiveSync's namespace, or install the chart with analysis.clusterTemplates: true)"
            ],
            id="a-cluster-template-without-clusterTemplates",
        ),
        pytest.param(
            ps_with(analysis=CLUSTER_TEMPLATE),
            {"analysis": {"clusterTemplates": True}},
            [],
            id="a-cluster-template-allowed",
        ),
    ],
)
def test_what_the_chart_refuses(ps: ProgressiveSync, values: dict[str, Any], expected: list[str]) -> None:
    assert [str(error) for error in policy_errors(ps, policy(**values))] == expected


@pytest.mark.parametrize(
    ("base", "override", "merged"),
    [
        pytest.param({"a": {"b": 1, "c": 2}}, {"a": {"b": 3}}, {"a": {"b": 3, "c": 2}}, id="maps-merge"),
        pytest.param({"a": [1, 2]}, {"a": [3]}, {"a": [3]}, id="lists-replace"),
        pytest.param({"a": 1, "b": 2}, {"a": None}, {"b": 2}, id="null-removes"),
        pytest.param({"a": {"b": 1}}, {"a": "x"}, {"a": "x"}, id="a-scalar-replaces-a-map"),
    ],
)
def test_values_merge_as_helm_merges_them(
    base: dict[str, Any], override: dict[str, Any], merged: dict[str, Any]
) -> None:
    assert merge_values(base, override) == merged


def test_later_values_files_win() -> None:
    values = chart_values({"policy": {"allowPrune": True}}, {"policy": {"allowPrune": False}})
    assert ChartPolicy.from_values(values).allow_prune is False


@pytest.mark.parametrize(
    ("values", "message"),
    [
        pytest.param(
            {"policy": {"allowPrune": "yes"}}, "policy.allowPrune: expected true or false", id="a-string-bool"
        ),
        pytest.param(
            {"policy": {"allowedSyncOptions": "PruneLast=true"}}, "policy.allowedSyncOptions", id="not-a-list"
        ),
        pytest.param({"analysis": []}, "analysis: expected a map", id="not-a-map"),
    ],
)
def test_values_of_the_wrong_type_are_refused_naming_the_key(values: dict[str, Any], message: str) -> None:
    with pytest.raises(ChartValuesError, match=message):
        ChartPolicy.from_values(chart_values(values))


def test_the_defaults_are_the_charts_values_yaml() -> None:
    chart = yaml.safe_load(VALUES_YAML.read_text())
    for key, value in CHART_DEFAULTS.items():
        if isinstance(value, dict):
            assert {k: chart[key][k] for k in value} == value, key
        else:
            assert chart[key] == value, key


@pytest.mark.parametrize(
    "sync_options",
    [
        pytest.param({}, id="none"),
        pytest.param({"prune": True}, id="prune"),
        pytest.param({"options": ["PruneLast=true"]}, id="an-allowed-option"),
        pytest.param({"options": ["Replace=true"]}, id="another-option"),
    ],
)
@pytest.mark.parametrize("allow_prune", [False, True])
def test_sync_options_agree_with_the_watchers_refusal(
    sync_options: dict[str, Any], allow_prune: bool
) -> None:
    ps = ps_with(syncOptions=sync_options)
    chart = policy(policy={"allowPrune": allow_prune})
    watcher = ReconcilePolicy(allow_prune=allow_prune, allowed_sync_options=chart.allowed_sync_options)
    assert bool(policy_errors(ps, chart)) == (sync_options_refusal(ps.spec, watcher) is not None)


OPTIONS = ("ServerSideApply=true", "PruneLast=true", "Replace=true", "Validate=false", "Force=true")


@settings(max_examples=100, deadline=None)
@given(
    prune=st.booleans(),
    options=st.lists(st.sampled_from(OPTIONS), unique=True, max_size=4),
    allowed=st.lists(st.sampled_from(OPTIONS), unique=True),
    extra=st.sampled_from(OPTIONS),
    allow_prune=st.booleans(),
)
def test_allowing_more_never_refuses_more(
    prune: bool, options: list[str], allowed: list[str], extra: str, allow_prune: bool
) -> None:
    ps = ps_with(syncOptions={"prune": prune, "options": options})
    stricter = ChartPolicy(allow_prune=allow_prune, allowed_sync_options=tuple(allowed))
    looser = ChartPolicy(allow_prune=True, allowed_sync_options=(*allowed, extra))
    refused = {error.path for error in policy_errors(ps, looser)}
    assert refused <= {error.path for error in policy_errors(ps, stricter)}
    # Each refused option is one the policy does not list, and every such option is refused.
    unlisted = {f"spec.syncOptions.options[{i}]" for i, o in enumerate(options) if o not in allowed}
    assert {p for p in (e.path for e in policy_errors(ps, stricter)) if "options[" in p} == unlisted
