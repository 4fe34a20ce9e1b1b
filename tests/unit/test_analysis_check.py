"""Is a spec's analysis runnable before anything is synced (orchestrator/analysis/check.py)?

Pure: the templates are a dict the lookup reads; the watcher's reads and its Valid=False are in
tests/unit/test_reconcile_decide.py and tests/integration/test_watcher_analysis_events.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.analysis.check import analysis_blocker, has_analysis
from orchestrator.api.reasons import Reason
from tests.support.builders import make_spec, make_stage

METRIC = {
    "name": "error-rate",
    "successCondition": "result[0] < 0.05",
    "provider": {"web": {"url": "http://x"}},
}


def template(
    *args: dict[str, Any], metric: str = "error-rate", includes: tuple[str, ...] = ()
) -> dict[str, Any]:
    spec: dict[str, Any] = {"metrics": [{**METRIC, "name": metric}], "args": list(args)}
    if includes:
        spec = {"templates": [{"templateName": name} for name in includes]}
    return {"spec": spec}


def spec_with(analysis: dict[str, Any], stage_analysis: dict[str, Any] | None = None) -> Any:
    canary = make_stage("canary")
    if stage_analysis is not None:
        canary["analysis"] = stage_analysis
    return make_spec(canary, make_stage("rest"), analysis=analysis)


def blocker(spec: Any, templates: dict[tuple[str, bool], dict[str, Any]]) -> tuple[str, str] | None:
    reads: list[tuple[str, bool]] = []

    def lookup(name: str, cluster_scope: bool) -> dict[str, Any] | None:
        reads.append((name, cluster_scope))
        return templates.get((name, cluster_scope))

    found = analysis_blocker(spec, "shop", lookup)
    assert len(reads) == len(set(reads)), "each template is read once"
    return (found.reason.value, found.message) if found else None


REFS = {"templates": [{"name": "errors"}]}
ARG = {"name": "service"}


@pytest.mark.parametrize(
    ("spec", "templates", "reason", "words"),
    [
        pytest.param(spec_with(REFS), {("errors", False): template()}, None, [], id="runnable"),
        pytest.param(
            spec_with(REFS),
            {},
            Reason.ANALYSIS_TEMPLATE_NOT_FOUND,
            ["stage 'canary'", "AnalysisTemplate errors in namespace shop not found", "create it"],
            id="template-missing",
        ),
        pytest.param(
            spec_with({"templates": [{"name": "errors", "clusterScope": True}]}),
            {("errors", False): template()},
            Reason.ANALYSIS_TEMPLATE_NOT_FOUND,
            ["ClusterAnalysisTemplate errors not found"],
            id="cluster-template-missing-a-namespaced-one-does-not-count",
        ),
        pytest.param(
            spec_with(REFS),
            {("errors", False): template(ARG)},
            Reason.ANALYSIS_ARG_MISSING,
            ["analysis errors", "argument 'service'", "add it to analysis.args"],
            id="arg-without-value-or-default",
        ),
        pytest.param(
            spec_with({**REFS, "args": [{"name": "service", "value": "checkout"}]}),
            {("errors", False): template(ARG)},
            None,
            [],
            id="arg-given-a-value",
        ),
        pytest.param(
            spec_with(
                {
                    **REFS,
                    "perCluster": True,
                    "args": [{"name": "service", "valueFrom": {"clusterName": True}}],
                }
            ),
            {("errors", False): template(ARG)},
            None,
            [],
            id="arg-from-the-cluster-is-the-steps-to-resolve",
        ),
        pytest.param(
            spec_with(REFS),
            {("errors", False): template({"name": "service", "value": "checkout"})},
            None,
            [],
            id="arg-with-a-default",
        ),
        pytest.param(
            spec_with(REFS),
            {
                ("errors", False): template(
                    {"name": "token", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}
                )
            },
            None,
            [],
            id="arg-from-a-secret-in-the-template",
        ),
        pytest.param(
            spec_with(REFS),
            {("errors", False): template(includes=("base",)), ("base", False): template(ARG)},
            Reason.ANALYSIS_ARG_MISSING,
            ["argument 'service'"],
            id="nested-template-arg-missing",
        ),
        pytest.param(
            spec_with(REFS),
            {("errors", False): template(includes=("base",))},
            Reason.ANALYSIS_TEMPLATE_NOT_FOUND,
            ["AnalysisTemplate base"],
            id="nested-template-missing",
        ),
        pytest.param(
            spec_with({"templates": [{"name": "errors"}, {"name": "more"}]}),
            {("errors", False): template(), ("more", False): template()},
            Reason.ANALYSIS_METRIC_DUPLICATE,
            ["metric 'error-rate'"],
            id="metric-twice",
        ),
        pytest.param(
            spec_with(REFS, stage_analysis={"templates": [{"name": "canary-only"}]}),
            {("errors", False): template()},
            Reason.ANALYSIS_TEMPLATE_NOT_FOUND,
            ["stage 'canary'", "canary-only"],
            id="a-stage-override-is-checked",
        ),
    ],
)
def test_analysis_blocker(
    spec: Any, templates: dict[tuple[str, bool], dict[str, Any]], reason: Reason | None, words: list[str]
) -> None:
    found = blocker(spec, templates)
    if reason is None:
        assert found is None
        return
    assert found is not None and found[0] == reason.value, found
    for word in words:
        assert word in found[1], found[1]


def test_a_spec_without_analysis_reads_nothing() -> None:
    spec = make_spec(make_stage("all"))
    assert not has_analysis(spec)
    assert analysis_blocker(spec, "shop", lambda name, scope: pytest.fail("read")) is None
