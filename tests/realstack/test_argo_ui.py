"""The rollout as a person sees it in the real Argo UI, driven by headless Chromium.

Real: the stack of tests/support/realstack.py (a node, the real workflow-controller, `argo server`
serving the UI built from Argo v3.7.18's sources), the step image's pods, Debian's `chromium`. Argo
CD is the fleet simulator. One test, two rollouts of one ProgressiveSync in three stages:

1. a release rolls out; in the second stage one cluster turns Degraded (one failure tolerated);
   while the third stage's gate waits for approval the page must show a node per stage with the
   stage's name, each stage's clusters under it by name, the gate waiting, the failed cluster
   failed. Screenshot `argo-ui-rollout-running.png`; then it is approved and finishes.
2. the next release is bad on the canary: the page shows the canary failed and the later stages
   never run. Screenshot `argo-ui-canary-stops-bad-release.png`.

The screenshots go to $PROGRESSIVE_SYNC_UI_SCREENSHOTS when set (README's pictures are made with
it set to docs/images, see CONTRIBUTING.md, "The rollout in the Argo UI"), else to the test's tmp folder.
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path

import pytest

from orchestrator.kube.client import PROGRESSIVE_SYNCS
from tests.support.argo_ui import Graph, GraphNode, WorkflowPage, phases
from tests.support.chromium import Chromium
from tests.support.engines import ARGO, rollout_engine
from tests.support.realstack import RealStack
from tests.support.rollout_rig import PS_NAME, REVISION_2, rollout_rig
from workflow_templates import names

SCREENSHOTS_ENV = "PROGRESSIVE_SYNC_UI_SCREENSHOTS"
TIMEOUT = 300.0

CANARY = "canary"
PER_REGION = "one-per-region"
REST = "everything-else"
STAGES = [
    {
        "name": CANARY,
        "targets": {"clusters": {"selector": {"matchLabels": {"region": "eu-west-1"}}}},
        "maxTargets": 1,
    },
    {
        "name": PER_REGION,
        "targets": {"clusters": {"selector": {}}},
        "maxTargets": 3,
        "maxParallel": 3,
        "spreadBy": "region",
    },
    {"name": REST, "targets": {"clusters": {"selector": {}}}, "maxParallel": 2, "approval": "Manual"},
]
STAGE_NAMES = [CANARY, PER_REGION, REST]

pytestmark = [pytest.mark.timeout(900)]


def _screenshots(tmp_path: Path) -> Path:
    folder = Path(os.environ.get(SCREENSHOTS_ENV) or tmp_path / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _stage_nodes(graph: Graph) -> list[GraphNode]:
    """The three stage nodes, top to bottom (each stage name is its label: they pass Argo's rule)."""
    return [graph.one(stage) for stage in STAGE_NAMES]


def _phase(graph: Graph, label: str) -> str | None:
    """The phase of the one node labelled `label`, None while it is not drawn (or not once)."""
    found = graph.labelled(label)
    return found[0].phase if len(found) == 1 else None


def _cluster(graph: Graph, cluster: str) -> GraphNode | None:
    """The node of `cluster` (its Retry node), by the name it shows, if drawn.

    Its label is the cluster's name, the template's display name, when the controller evaluated
    the node again while it ran or when it failed; a node that succeeded while its fan-out's every
    slot was busy keeps Argo's default name `cluster(<i>:<name>)` (Argo v3.7.18 checkParallelism and
    processNodeRetries; docs/design/workflow.md, How the Argo UI draws it).
    """
    default = re.compile(r"cluster\(\d+:" + re.escape(cluster) + r"\)")
    found = [n for n in graph.nodes if n.label == cluster or default.fullmatch(n.label)]
    assert len(found) <= 1, f"{cluster} drawn {len(found)} times: {graph.labels()}"
    return found[0] if found else None


def _phase_of(node: GraphNode | None) -> str | None:
    return node.phase if node is not None else None


def _between(node: GraphNode, upper: GraphNode, lower: GraphNode | None) -> bool:
    return upper.y < node.y and (lower is None or node.y < lower.y)


def _assert_clusters_under(graph: Graph, stage: str, clusters: list[str]) -> None:
    """Each cluster is drawn once, by name, below its stage's node and above the next stage's."""
    stages = _stage_nodes(graph)
    index = STAGE_NAMES.index(stage)
    upper, lower = stages[index], (stages[index + 1] if index + 1 < len(stages) else None)
    for cluster in clusters:
        node = _cluster(graph, cluster)
        assert node is not None, f"{cluster} not drawn: {graph.labels()}"
        assert _between(node, upper, lower), (cluster, node, upper, lower, graph.labels())


def test_the_argo_ui_shows_a_rollout_by_stage_and_a_canary_stopping_a_bad_release(
    real_stack: RealStack, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    shots = _screenshots(tmp_path)
    with (
        rollout_engine(request, ARGO, tmp_path) as engine,
        rollout_rig(engine, clusters=6) as rig,
        Chromium.launch(width=1400, height=1000) as browser,
    ):
        [canary] = rig.planned_targets(STAGES, CANARY)
        per_region = rig.planned_targets(STAGES, PER_REGION)
        rest = rig.planned_targets(STAGES, REST)
        bad = per_region[1]
        rig.simulate({bad: {"degrade": True}})
        rig.run_engine()
        server = real_stack.argo_server_url
        try:
            # 1. A release rolling out, waiting at the third stage's gate.
            # Named as the docs name a rollout (`myservice-<rollout id>`, the id the release makes).
            first = rig.start_rollout(STAGES, max_failed_clusters=1)
            page = WorkflowPage(browser, server, rig.namespace, first)
            page.open(timeout=120)
            gate_waiting = page.wait_for_graph(
                lambda g: (
                    _phase(g, names.APPROVE_TASK) == "Suspended" and all(_cluster(g, c) for c in per_region)
                ),
                timeout=TIMEOUT,
                what="the gate of the third stage waiting, the second stage's clusters drawn",
            )
            assert phases(gate_waiting, [CANARY, PER_REGION, REST]) == {
                CANARY: "Succeeded",
                PER_REGION: "Succeeded",  # one failed cluster is tolerated
                REST: "Running",
            }
            _assert_clusters_under(gate_waiting, CANARY, [canary])
            _assert_clusters_under(gate_waiting, PER_REGION, per_region)
            assert {c: _phase_of(_cluster(gate_waiting, c)) for c in per_region} == {
                cluster: "Failed" if cluster == bad else "Succeeded" for cluster in per_region
            }
            # The tolerated failure is drawn on its cluster only: not on the stage's fan-out.
            assert {n.phase for n in gate_waiting.labelled(names.CLUSTERS_TASK)} == {"Succeeded"}
            gate = gate_waiting.one(names.APPROVE_TASK)
            assert _between(gate, gate_waiting.one(REST), None)
            assert not any(_cluster(gate_waiting, c) for c in rest)  # nothing past the gate has started
            page.screenshot(shots / "argo-ui-rollout-running.png")

            engine.argo("resume", first)
            assert rig.wait_finished(first, timeout=TIMEOUT)["status"]["phase"] == "Succeeded"
            done = page.wait_for_graph(
                lambda g: _phase(g, REST) == "Succeeded" and all(_cluster(g, c) for c in rest),
                timeout=60,
                what="the third stage drawn Succeeded",
            )
            _assert_clusters_under(done, REST, rest)

            # 2. The next release is bad in eu-west-1, where the canary is: the rollout stops there.
            assert rig.fleet is not None
            for cluster in rig.fleet.clusters:
                if cluster.region == "eu-west-1":
                    rig.set_behaviour(cluster.name, degrade="true")
            rig.release(REVISION_2)
            # No failure tolerated this time: the canary's stops the rollout.
            rig.kube.patch(
                PROGRESSIVE_SYNCS,
                rig.namespace,
                PS_NAME,
                {"spec": {"failurePolicy": {"maxFailedClusters": 0}}},
            )
            rig.ps = rig.progressive_sync()
            second = rig.start_rollout()
            finished = rig.wait_finished(second, timeout=TIMEOUT)
            assert finished["status"]["phase"] == "Failed"
            [canary] = rig.stage_targets()[CANARY]
            # The reason is the node's message (the panel a click opens): the step's summary line,
            # its termination message, after Argo's "main: Error (exit code 1)".
            [attempt] = [
                n
                for n in finished["status"]["nodes"].values()
                if n["type"] == "Pod" and n.get("templateName") == names.CLUSTER_TEMPLATE
            ]
            assert re.fullmatch(
                r"main: Error \(exit code 1\): .*" + re.escape(canary) + ".*", attempt["message"]
            ), attempt["message"]
            page = WorkflowPage(browser, server, rig.namespace, second)
            page.open(timeout=120)
            stopped = page.wait_for_graph(
                lambda g: _phase_of(_cluster(g, canary)) == "Failed" and _phase(g, REST) == "Omitted",
                timeout=60,
                what="the canary cluster drawn Failed",
            )
            assert phases(stopped, [CANARY, PER_REGION, REST]) == {
                CANARY: "Failed",
                PER_REGION: "Omitted",
                REST: "Omitted",
            }
            _assert_clusters_under(stopped, CANARY, [canary])
            assert not any(_cluster(stopped, c) for c in per_region + rest if c != canary)
            page.screenshot(shots / "argo-ui-canary-stops-bad-release.png")
            # The bad release reached the canary only.
            assert rig.sync_starts() == {c: 2 if c == canary else 1 for c in rig.all_clusters()}
        except BaseException:
            # What the page showed when it went wrong, next to the screenshots.
            with contextlib.suppress(Exception):
                browser.screenshot(shots / "failure.png", full_page=True)
            raise
