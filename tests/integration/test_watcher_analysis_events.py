"""The watcher and analysis gates: one `AnalysisFailed` / `AnalysisInconclusive` Event per gate that
ends so (also across a watcher restart), and `Valid=False` for an analysis that cannot run, before
anything starts.

Real: the control plane, the watcher in this process as its own user, the ProgressiveSync and
ProgressiveSyncStage CRDs. No Workflow and no Argo Rollouts controller run: the test plays the
`analyze` step's part (it writes `status.stages[].analysis` as the step does, with
`note_analysis`), so which phase the gate reaches, and when, is the test's. Argo Rollouts' CRDs are
installed (`rollouts_crds`) for the templates the watcher reads, as the chart's Roles let it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from orchestrator.api.rollout_status import note_analysis
from orchestrator.devenv import controlplane as devcluster
from orchestrator.kube.client import ANALYSIS_TEMPLATES, EVENTS, Kube
from orchestrator.kube.status_writer import update_status
from orchestrator.watcher.decide_release import ANALYSIS_RECHECK_SECONDS
from tests.integration.test_watcher_summary import PS, STAGE, WATCHER_USER, start_the_stage
from tests.support.analysis import analysis_template
from tests.support.fault_rig import grant_watcher
from tests.support.wait import wait_for
from tests.support.watcher_harness import (
    create_ps,
    in_process_watcher,
    patch_spec,
    seed,
    status_of,
    watcher_idle,
    workflows_of,
)

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

RUN = "web-r1-all-0123456789"


@pytest.fixture(scope="module")
def watcher_kube(control_plane: devcluster.DevCluster) -> Iterator[Kube]:
    """The adapter as the watcher's own user."""
    client = Kube.from_kubeconfig(str(control_plane.mint_user(WATCHER_USER, ["system:masters"])))
    yield client
    client.close()


def analysis(kube: Kube, namespace: str, run: str, phase: str, message: str) -> None:
    """What the analyze step writes while it follows the stage's AnalysisRun."""
    update_status(
        kube,
        namespace,
        PS,
        lambda status: note_analysis(status, stage=STAGE, run=run, phase=phase, message=message),
        what="test analyze",
    )


def events(kube: Kube, namespace: str, reason: str) -> list[dict[str, Any]]:
    items, _ = kube.list(EVENTS, namespace)
    return [e for e in items if e["reason"] == reason and e["involvedObject"]["name"] == PS]


def test_a_failed_and_an_inconclusive_gate_each_give_one_event_also_across_a_restart(
    kube: Kube, watcher_kube: Kube, namespace: str
) -> None:
    fleet = seed(kube, namespace, clusters=1)
    create_ps(
        kube,
        namespace,
        PS,
        fleet.app_set,
        stages=[{"name": STAGE, "targets": {"clusters": {"selector": {}}}}],
    )
    with in_process_watcher(watcher_kube, namespace) as watcher:
        wait_for(
            lambda: (status_of(kube, namespace, PS).get("rollout") or {}).get("id"),
            what="the rollout recorded",
        )
        start_the_stage(kube, namespace, list(fleet.clusters))
        analysis(kube, namespace, RUN, "Running", "error-rate: Running")
        analysis(kube, namespace, RUN, "Failed", "metric error-rate = 0.3 (result[0] < 0.05)")
        wait_for(lambda: events(kube, namespace, "AnalysisFailed"), what="the AnalysisFailed Event")
        (failed,) = events(kube, namespace, "AnalysisFailed")
        assert failed["type"] == "Warning"
        assert RUN in failed["message"] and "error-rate = 0.3" in failed["message"], failed["message"]
        # The step writes the same final phase again (its closing note): no second Event.
        analysis(kube, namespace, RUN, "Failed", "analysis failed: metric error-rate = 0.3")
        assert watcher_idle(watcher, 10)

    # A new watcher sees the failed gate for the first time: it says nothing about it again.
    with in_process_watcher(watcher_kube, namespace) as watcher:
        assert watcher_idle(watcher, 10)
        analysis(kube, namespace, "web-r1-all-again-0123456789", "Inconclusive", "no decision")
        wait_for(
            lambda: events(kube, namespace, "AnalysisInconclusive"), what="the AnalysisInconclusive Event"
        )
        assert watcher_idle(watcher, 10)
    assert len(events(kube, namespace, "AnalysisFailed")) == 1
    assert len(events(kube, namespace, "AnalysisInconclusive")) == 1


def condition(status: dict[str, Any], type_: str) -> tuple[str, str, str]:
    for item in status.get("conditions") or []:
        if item["type"] == type_:
            return item["status"], item["reason"], item.get("message", "")
    return "", "", ""


def test_an_analysis_that_cannot_run_is_valid_false_before_anything_starts(
    kube: Kube, control_plane: devcluster.DevCluster, namespace: str, rollouts_crds: None
) -> None:
    # The watcher as the chart grants it (its namespace Roles, AnalysisTemplates: get only).
    user = f"watcher-{namespace}"
    grant_watcher(kube, namespace, user)
    watcher_kube = Kube.from_kubeconfig(str(control_plane.mint_user(user)))
    fleet = seed(kube, namespace, clusters=1)
    stages = [{"name": STAGE, "targets": {"clusters": {"selector": {}}}}]
    create_ps(kube, namespace, PS, fleet.app_set, stages=stages, analysis={"templates": [{"name": "errors"}]})
    metric = {
        "name": "error-rate",
        "successCondition": "result == 0",
        "provider": {"web": {"url": "http://x"}},
    }
    try:
        with in_process_watcher(watcher_kube, namespace):
            wait_for(
                lambda: (
                    condition(status_of(kube, namespace, PS), "Valid")[:2]
                    == ("False", "AnalysisTemplateNotFound")
                ),
                what="Valid=False: the template is missing",
            )
            message = condition(status_of(kube, namespace, PS), "Valid")[2]
            assert "AnalysisTemplate errors" in message and "create it" in message, message
            assert workflows_of(kube, namespace, PS) == []

            # The template appears, with an argument nobody gives a value: seen on the recheck.
            kube.create(
                ANALYSIS_TEMPLATES,
                namespace,
                analysis_template("errors", [metric], args=[{"name": "service"}]),
            )
            wait_for(
                lambda: (
                    condition(status_of(kube, namespace, PS), "Valid")[:2] == ("False", "AnalysisArgMissing")
                ),
                timeout=ANALYSIS_RECHECK_SECONDS + 15,
                what="Valid=False: the argument has no value",
            )
            message = condition(status_of(kube, namespace, PS), "Valid")[2]
            assert "argument 'service'" in message and "analysis.args" in message, message
            assert workflows_of(kube, namespace, PS) == []

            # The spec gives the value: the release starts.
            patch_spec(
                kube,
                namespace,
                PS,
                {
                    "analysis": {
                        "templates": [{"name": "errors"}],
                        "args": [{"name": "service", "value": "web"}],
                    }
                },
            )
            wait_for(lambda: workflows_of(kube, namespace, PS), what="the rollout's Workflow")
            wait_for(
                lambda: condition(status_of(kube, namespace, PS), "Valid")[:2] == ("True", "Valid"),
                what="Valid=True (the Workflow is created before the status says so)",
            )
    finally:
        watcher_kube.close()
