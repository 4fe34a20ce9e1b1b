"""A release rolled out by progressive-sync through the real Argo CD.

Real: Argo CD's ApplicationSet controller generates one Application per labelled cluster Secret;
a Git commit (plus the refresh a webhook would send) makes them OutOfSync; the watcher and the
steps roll the release out in stages; Argo CD's application controller syncs each Application
into its destination kube-apiserver. Every Application must end Synced and Healthy at the new
revision, synced exactly once (counted from the operations Argo CD started, seen on one watch
stream), in stage order.
"""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import pytest

from orchestrator.devenv.argocd import ArgoCDStack
from orchestrator.devenv.argocd_manifests import CONFIG_MAPS
from orchestrator.devenv.argocd_requests import operation_history
from tests.support.app_recorder import recording
from tests.support.argocd_harness import CANARY, Scenario, rollout_actors

pytestmark = pytest.mark.argocd


def test_the_application_set_generates_one_application_per_cluster_and_a_commit_makes_them_out_of_sync(
    scenario: Scenario, argocd_stack: ArgoCDStack
) -> None:
    for cluster in scenario.clusters:
        app = scenario.application(cluster)
        owners = [ref["kind"] for ref in app["metadata"].get("ownerReferences") or []]
        assert owners == ["ApplicationSet"]
        assert app["spec"]["destination"]["server"] == argocd_stack.cluster(cluster).server
        # Release 1 really reached the destination API server, in the Application's own namespace.
        configmap = argocd_stack.cluster_kube(cluster).get(
            CONFIG_MAPS, scenario.destination_namespace(cluster), scenario.configmap
        )
        assert configmap["data"] == {"release": "1"}

    committed = time.monotonic()
    revision = scenario.release()
    scenario.refresh()
    scenario.wait_out_of_sync(revision)
    print(f"commit -> every Application OutOfSync (refresh requested): {time.monotonic() - committed:.2f}s")
    # Argo CD reports the full SHA of what it compared with.
    assert all(len(scenario.application(c)["status"]["sync"]["revision"]) == 40 for c in scenario.clusters)


def test_a_release_rolls_out_in_stages_each_application_synced_once(
    scenario: Scenario, argocd_stack: ArgoCDStack, tmp_path: Path
) -> None:
    with recording(
        argocd_stack.kube, argocd_stack.namespace, keep=lambda name: name in scenario.apps
    ) as seen:
        revision = scenario.release()
        scenario.refresh()
        scenario.wait_out_of_sync(revision)
        with rollout_actors(argocd_stack, tmp_path):
            started = time.monotonic()
            scenario.create_progressive_sync()
            phase = scenario.wait_phase("Succeeded", "Failed")
            print(
                f"staged rollout over {len(scenario.apps)} clusters on real Argo CD: "
                f"{time.monotonic() - started:.1f}s"
            )
        assert phase == "Succeeded", scenario.explain()
        scenario.wait_synced(revision)

        for cluster in scenario.clusters:
            app = scenario.application(cluster)
            state = app["status"]["operationState"]
            assert state["phase"] == "Succeeded"
            assert state["syncResult"]["revision"] == revision
            ours = [h for h in operation_history(app) if h.get("revision") == revision]
            assert len(ours) == 1, f"{cluster}: {ours}"
            assert seen.sync_starts(scenario.app(cluster), by="progressive-sync") == 1
            configmap = argocd_stack.cluster_kube(cluster).get(
                CONFIG_MAPS, scenario.destination_namespace(cluster), scenario.configmap
            )
            assert configmap["data"] == {"release": "2"}

        stages = [stage["targets"] for stage in scenario.status()["stages"]]
        assert stages[0] == [CANARY]
        assert sorted(c for stage in stages for c in stage) == sorted(scenario.clusters)
        order = seen.first_requested(by="progressive-sync")
        expected_blocks = [[scenario.app(c) for c in stage] for stage in stages]
        position = {app: index for index, app in enumerate(order)}
        for earlier, later in itertools.pairwise(expected_blocks):
            assert max(position[a] for a in earlier) < min(position[a] for a in later), order
            # A stage starts only after every Application of the stage before is Healthy at the release.
            healthy = [
                seen.first_seq(a, lambda s: s.health == "Healthy" and s.applied == revision) for a in earlier
            ]
            requested = [seen.first_seq(a, lambda s: s.requested_by == "progressive-sync") for a in later]
            assert all(h is not None for h in healthy)
            assert max(h for h in healthy if h is not None) < min(r for r in requested if r is not None)
