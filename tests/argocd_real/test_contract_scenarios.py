"""The Argo CD contract (issue 12) against the real Argo CD: one scenario per finding.

Each test sets up what real Argo CD does in that situation (the ApplicationSet controller rewriting
annotations, an Application's own sync options and retry, a sync that never finishes, two revisions
in one release, Applications that refresh late, a workload that is Degraded for a moment or
Suspended, a manifest removed without prune, a deny sync window) and checks what progressive-sync
must make of it. Every scenario runs (the last four marked as awaiting a fix passed on 30 Nov 2026
once issue 12's fixes were on main; the rollout with prune needs `PrunePropagationPolicy=background`
here, see `_legacy_scenario`).

Real: see conftest.py. Health is driven through HealthProbe objects on the destination clusters,
whose Lua health check in argocd-cm reads `status.health` (ProbeDriver sets it).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from orchestrator.devenv import starter_app
from orchestrator.devenv.argocd import ArgoCDStack
from orchestrator.devenv.argocd_manifests import APP_PROJECTS, CONFIG_MAPS, default_project
from orchestrator.kube.client import APPLICATIONS, PROGRESSIVE_SYNCS, NotFound
from orchestrator.ops import actions as ops_actions
from tests.support.app_recorder import recording
from tests.support.argocd_harness import (
    CANARY,
    CANARY_THEN_REGIONS,
    CANARY_THEN_REST,
    SCENARIO_CONFIGMAP,
    SMALL,
    ProbeDriver,
    Scenario,
    rollout_actors,
    scenario_of,
)
from tests.support.wait import wait_for

pytestmark = pytest.mark.argocd

OTHER = "us-1"  # the second cluster of the SMALL scenarios, on the other API server


def status_text(scenario: Scenario) -> str:
    """Every message of the ProgressiveSync's status, lowercased (where a reason must appear)."""
    status = scenario.status()
    parts: list[str] = [str(c.get("message", "")) for c in status.get("conditions") or []]
    for stage in status.get("stages") or []:
        parts.append(str(stage.get("message", "")))
        for failed in stage.get("failed") or []:
            parts.append(str(failed))
        for note in stage.get("notes") or []:  # what holds a cluster while it lasts
            parts.append(str(note))
    return " ".join(parts).lower()


def configmap_release(stack: ArgoCDStack, scenario: Scenario, cluster: str, name: str | None = None) -> str:
    """The release number the scenario's ConfigMap on `cluster` says ("" when it does not exist)."""
    try:
        configmap = stack.cluster_kube(cluster).get(
            CONFIG_MAPS, scenario.destination_namespace(cluster), name or scenario.configmap
        )
    except NotFound:
        return ""
    return str((configmap.get("data") or {}).get("release", ""))


def operation_state(scenario: Scenario, cluster: str) -> dict[str, Any]:
    return dict((scenario.application(cluster).get("status") or {}).get("operationState") or {})


# --- 1: the ApplicationSet controller owns the Applications' annotations ------------------------------


def test_the_application_set_controller_removes_annotations_it_did_not_generate(scenario: Scenario) -> None:
    """What finding 1 rests on (checked here so REFERENCE.md stays true): our annotation is undone."""
    app = scenario.app(CANARY)
    scenario.kube.patch(
        APPLICATIONS,
        scenario.namespace,
        app,
        {"metadata": {"annotations": {"progressivesync.io/rollout-id": "r1", "example.com/kept": "no"}}},
    )

    def removed() -> bool:
        annotations = scenario.application(CANARY)["metadata"].get("annotations") or {}
        return "progressivesync.io/rollout-id" not in annotations and "example.com/kept" not in annotations

    wait_for(
        removed, timeout=30, interval=0.2, what="the ApplicationSet controller to restore the annotations"
    )


# --- 2: the Application's own sync options and retry --------------------------------------------------


def test_a_first_deploy_carries_the_applications_create_namespace_and_retries_a_transient_failure(
    argocd_stack: ArgoCDStack, tmp_path: Path
) -> None:
    """Never-synced Applications (their namespaces do not exist) with CreateNamespace=true and a retry
    policy; the release holds a Gadget, whose CRD appears on us-1's server only after a first failure."""
    retry = {"limit": 5, "backoff": {"duration": "2s", "factor": 2, "maxDuration": "20s"}}
    gadget_crd = starter_app.probe_crd(kind="Gadget")
    argocd_stack.install_crd(CANARY, gadget_crd)
    files = {
        "configmap.yaml": starter_app.configmap_manifest(SCENARIO_CONFIGMAP, {"release": "1"}),
        "gadget.yaml": starter_app.probe_manifest("gadget", kind="Gadget"),
    }
    with (
        scenario_of(
            argocd_stack, selector=SMALL, files=files, bootstrap=False, app_set_changes={"retry": retry}
        ) as scenario,
        rollout_actors(argocd_stack, tmp_path),
    ):
        scenario.create_progressive_sync(CANARY_THEN_REST, deadline_seconds=150)
        # us-1's first attempt fails (no Gadget kind there); Argo CD then retries.
        wait_for(
            lambda: int(operation_state(scenario, OTHER).get("retryCount", 0) or 0) >= 1,
            timeout=120,
            interval=0.5,
            what="a retry of us-1's sync",
        )
        argocd_stack.install_crd(OTHER, gadget_crd)
        phase = scenario.wait_phase("Succeeded", "Failed")
        # Failed once in CI (1 of ~10 runs): us-1's sync succeeded after the CRD came, and Argo CD
        # then compared it no more for 2.5 min (reconciledAt stayed at the sync's second) despite a
        # refresh request every 10 s. What Argo CD says of it is in the message if it happens again.
        assert phase == "Succeeded", scenario.explain()
        for cluster in scenario.clusters:
            operation = operation_state(scenario, cluster)["operation"]
            assert "CreateNamespace=true" in operation["sync"].get("syncOptions", [])
            assert operation["retry"]["limit"] == 5
            assert configmap_release(argocd_stack, scenario, cluster) == "1"


# --- 3: terminate what we start --------------------------------------------------------------------


def _gated_release(scenario: Scenario) -> str:
    """Release 2 whose ConfigMap waits (sync wave 1) behind a HealthProbe gate (wave 0) that stays
    Progressing until the test says otherwise: the sync stays Running."""
    return scenario.release(
        {
            "configmap.yaml": starter_app.configmap_manifest(
                scenario.configmap, {"release": "2"}, annotations={"argocd.argoproj.io/sync-wave": "1"}
            ),
            "gate.yaml": starter_app.probe_manifest(
                "gate", annotations={"argocd.argoproj.io/sync-wave": "0"}
            ),
        }
    )


def test_a_sync_still_running_at_the_deadline_is_terminated_and_applies_nothing_later(
    argocd_stack: ArgoCDStack, tmp_path: Path
) -> None:
    with scenario_of(argocd_stack, selector=SMALL) as scenario, rollout_actors(argocd_stack, tmp_path):
        revision = _gated_release(scenario)
        scenario.refresh()
        scenario.wait_out_of_sync(revision)
        scenario.create_progressive_sync(CANARY_THEN_REST, deadline_seconds=20)
        assert scenario.wait_phase("Failed", "Succeeded") == "Failed"
        state = operation_state(scenario, CANARY)
        assert state["phase"] in ("Failed", "Error"), state
        # Once the gate turns Healthy nothing may apply wave 1 any more.
        argocd_stack.set_probe_health(CANARY, scenario.destination_namespace(CANARY), "gate", "Healthy")
        wait_for(
            lambda: (
                (scenario.application(CANARY).get("status") or {}).get("health", {}).get("status")
                == "Healthy"
                or configmap_release(argocd_stack, scenario, CANARY) == "2"
            ),
            timeout=30,
            interval=0.5,
            what="Argo CD to see the gate Healthy",
        )
        assert configmap_release(argocd_stack, scenario, CANARY) == "1"
        assert operation_state(scenario, CANARY)["phase"] in ("Failed", "Error")
        assert configmap_release(argocd_stack, scenario, OTHER) == "1"


def test_cancelling_a_rollout_terminates_the_sync_it_started(
    argocd_stack: ArgoCDStack, tmp_path: Path
) -> None:
    with scenario_of(argocd_stack, selector=SMALL) as scenario, rollout_actors(argocd_stack, tmp_path):
        revision = _gated_release(scenario)
        scenario.refresh()
        scenario.wait_out_of_sync(revision)
        scenario.create_progressive_sync(CANARY_THEN_REST, deadline_seconds=180)
        wait_for(
            lambda: (
                operation_state(scenario, CANARY).get("phase") == "Running"
                and operation_state(scenario, CANARY)
                .get("operation", {})
                .get("initiatedBy", {})
                .get("username")
                == "progressive-sync"
            ),
            timeout=90,
            interval=0.5,
            what="our sync of the canary to be Running behind its gate",
        )
        ops_actions.cancel(scenario.kube, ops_actions.Target(scenario.namespace, scenario.name))
        assert scenario.wait_phase("Cancelled", "Failed", "Succeeded") == "Cancelled"
        wait_for(
            lambda: operation_state(scenario, CANARY).get("phase") in ("Failed", "Error"),
            timeout=60,
            interval=0.5,
            what="the canary's sync to be terminated",
        )
        argocd_stack.set_probe_health(CANARY, scenario.destination_namespace(CANARY), "gate", "Healthy")
        wait_for(
            lambda: (
                (scenario.application(CANARY).get("status") or {}).get("health", {}).get("status")
                == "Healthy"
            ),
            timeout=30,
            interval=0.5,
            what="Argo CD to see the gate Healthy",
        )
        assert configmap_release(argocd_stack, scenario, CANARY) == "1"


def test_inside_a_deny_sync_window_the_rollout_waits_says_so_and_goes_on_when_it_closes(
    argocd_stack: ArgoCDStack, tmp_path: Path
) -> None:
    """The AppProject's deny window is read before each sync (steps/window_gate.py, docs/windows.md):
    no sync is written while it is in force (none for Argo CD to hold, no maxParallel slot taken),
    the status says the cluster waits for the window; once it is gone each cluster is synced once."""
    project = default_project()
    project["metadata"]["name"] = f"windows-{int(time.time())}"
    argocd_stack.kube.create(APP_PROJECTS, argocd_stack.namespace, project)
    name = project["metadata"]["name"]
    try:
        with scenario_of(argocd_stack, selector=SMALL, app_set_changes={"project": name}) as scenario:
            deny = {"kind": "deny", "schedule": "* * * * *", "duration": "1h", "applications": ["*"]}
            argocd_stack.kube.patch(
                APP_PROJECTS, argocd_stack.namespace, name, {"spec": {"syncWindows": [deny]}}
            )
            revision = scenario.release()
            scenario.refresh()
            scenario.wait_out_of_sync(revision)
            keep = lambda n: n in scenario.apps  # noqa: E731
            with recording(argocd_stack.kube, argocd_stack.namespace, keep=keep) as seen:
                with rollout_actors(argocd_stack, tmp_path):
                    scenario.create_progressive_sync(CANARY_THEN_REST, deadline_seconds=120)
                    wait_for(
                        lambda: "waiting for window" in status_text(scenario),
                        timeout=90,
                        interval=0.5,
                        what=f"the status to say the rollout waits for a sync window ({scenario.status()})",
                    )
                    assert f"appproject {name}" in status_text(scenario)
                    assert configmap_release(argocd_stack, scenario, CANARY) == "1"
                    written = [c for c in scenario.clusters if "operation" in scenario.application(c)]
                    assert written == [], "a sync was written while the deny window was in force"
                    assert not any(
                        seen.sync_starts(scenario.app(c), by="progressive-sync") for c in scenario.clusters
                    )
                    argocd_stack.kube.patch(
                        APP_PROJECTS, argocd_stack.namespace, name, {"spec": {"syncWindows": None}}
                    )
                    assert scenario.wait_phase("Succeeded", "Failed") == "Succeeded", scenario.explain()
                assert all(
                    seen.sync_starts(scenario.app(c), by="progressive-sync") == 1 for c in scenario.clusters
                )
            assert all(configmap_release(argocd_stack, scenario, c) == "2" for c in scenario.clusters)
    finally:
        argocd_stack.kube.delete(APP_PROJECTS, argocd_stack.namespace, name)


# --- 4: two revisions in one release ---------------------------------------------------------------


def test_a_release_of_two_revisions_syncs_each_application_to_its_own(
    argocd_stack: ArgoCDStack, tmp_path: Path
) -> None:
    """eu-* follow branch main, us-* branch stable (the `track` label): one release, two revisions."""
    with scenario_of(
        argocd_stack, branches=("stable",), app_set_changes={"target_revision": "{{metadata.labels.track}}"}
    ) as scenario:
        main = scenario.release()
        stable = scenario.commit(
            {"configmap.yaml": starter_app.configmap_manifest(scenario.configmap, {"release": "2-stable"})},
            "Release 2 (stable)",
            branch="stable",
        )
        scenario.refresh()
        track = {c.name: c.labels["track"] for c in argocd_stack.clusters}
        expected = {c: main if track[c] == "main" else stable for c in scenario.clusters}
        for cluster, revision in expected.items():
            scenario.wait_out_of_sync(revision, [cluster])
        with recording(argocd_stack.kube, argocd_stack.namespace, keep=lambda n: n in scenario.apps) as seen:
            with rollout_actors(argocd_stack, tmp_path):
                scenario.create_progressive_sync(CANARY_THEN_REGIONS)
                assert scenario.wait_phase("Succeeded", "Failed") == "Succeeded", scenario.explain()
            for cluster, revision in expected.items():
                scenario.wait_synced(revision, [cluster])
                assert operation_state(scenario, cluster)["syncResult"]["revision"] == revision
                assert seen.sync_starts(scenario.app(cluster), by="progressive-sync") == 1


# --- 5: refresh lag -------------------------------------------------------------------------------


def test_applications_that_see_the_commit_late_are_still_rolled_out(
    scenario: Scenario, tmp_path: Path
) -> None:
    """Only the canary's Application was refreshed when the rollout starts; Argo CD's timer is off, so
    the others compare with the new commit only if someone asks (as progressive-sync must). Their last
    comparison (the one after the bootstrap sync) can be stamped in the second the rollout starts,
    against the old commit: select asks by revision, not by reconciledAt (issue 13)."""
    revision = scenario.release()
    scenario.refresh([CANARY])
    scenario.wait_out_of_sync(revision, [CANARY])
    assert scenario.compared_revision(OTHER) != revision
    with (
        recording(scenario.kube, scenario.namespace, keep=lambda n: n in scenario.apps) as seen,
        rollout_actors(scenario.stack, tmp_path),
    ):
        scenario.create_progressive_sync(CANARY_THEN_REGIONS)
        scenario.wait_synced(revision, timeout=240)
        for app in scenario.apps:
            assert seen.sync_starts(app, by="progressive-sync") == 1


# --- 6: done and failed ---------------------------------------------------------------------------


def _probed_release(scenario: Scenario) -> str:
    """Release 2 adds a HealthProbe: the Application is Progressing until the test sets its health."""
    return scenario.release({"probe.yaml": starter_app.probe_manifest("probe")})


def test_a_degraded_moment_right_after_the_sync_does_not_fail_the_cluster(
    argocd_stack: ArgoCDStack, tmp_path: Path
) -> None:
    with scenario_of(argocd_stack, selector=SMALL) as scenario:
        revision = _probed_release(scenario)
        scenario.refresh()
        scenario.wait_out_of_sync(revision)
        scripts = {CANARY: [("Degraded", 5.0), ("Healthy", 0.0)], OTHER: [("Healthy", 0.0)]}
        with ProbeDriver(scenario, scripts) as driver, rollout_actors(argocd_stack, tmp_path):
            scenario.create_progressive_sync(CANARY_THEN_REST, deadline_seconds=120)
            assert scenario.wait_phase("Succeeded", "Failed") == "Succeeded", scenario.explain()
        assert driver.applied[CANARY] == ["Degraded", "Healthy"]


def test_a_suspended_workload_holds_the_cluster_and_the_status_says_so(
    argocd_stack: ArgoCDStack, tmp_path: Path
) -> None:
    with scenario_of(argocd_stack, selector=SMALL) as scenario:
        revision = _probed_release(scenario)
        scenario.refresh()
        scenario.wait_out_of_sync(revision)
        scripts: dict[str, list[tuple[str, float | None]]] = {
            CANARY: [("Suspended", None), ("Healthy", 0.0)],
            OTHER: [("Healthy", 0.0)],
        }
        with ProbeDriver(scenario, scripts) as driver, rollout_actors(argocd_stack, tmp_path):
            scenario.create_progressive_sync(CANARY_THEN_REST, deadline_seconds=120)
            wait_for(
                lambda: "suspended" in status_text(scenario),
                timeout=90,
                interval=0.5,
                what=f"the status to say the canary is Suspended ({scenario.status()})",
            )
            assert scenario.status().get("phase") == "Progressing"
            driver.release(CANARY)
            assert scenario.wait_phase("Succeeded", "Failed") == "Succeeded", scenario.explain()


def _release_without_legacy(scenario: Scenario) -> str:
    return scenario.release({"legacy.yaml": None})


def _legacy_scenario(stack: ArgoCDStack, sync_options: tuple[str, ...] = ("CreateNamespace=true",)) -> Any:
    """Release 1 holds the starter ConfigMap and a `legacy` ConfigMap that release 2 removes.

    A rollout with prune needs `PrunePropagationPolicy=background` among the Applications' sync
    options here: Argo CD prunes with foreground deletion by default, whose finalizer only a garbage
    collector removes, and the destination API servers run no kube-controller-manager, so the pruned
    ConfigMap stayed and the Application Progressing ("Caused by" it) to the deadline."""
    files = {
        "configmap.yaml": starter_app.configmap_manifest(SCENARIO_CONFIGMAP, {"release": "1"}),
        "legacy.yaml": starter_app.configmap_manifest("legacy", {"left": "over"}),
    }
    return scenario_of(stack, selector=SMALL, files=files, app_set_changes={"sync_options": sync_options})


def test_a_removed_manifest_without_prune_gives_a_reason_instead_of_waiting_to_the_deadline(
    argocd_stack: ArgoCDStack, tmp_path: Path
) -> None:
    with _legacy_scenario(argocd_stack) as scenario, rollout_actors(argocd_stack, tmp_path):
        revision = _release_without_legacy(scenario)
        scenario.refresh()
        scenario.wait_out_of_sync(revision)
        scenario.create_progressive_sync(CANARY_THEN_REST, deadline_seconds=60)
        wait_for(
            lambda: "prun" in status_text(scenario),
            timeout=50,  # before the deadline
            interval=0.5,
            what=f"the status to name the pruning the Application needs ({scenario.status()})",
        )


def test_with_prune_the_removed_manifest_is_deleted_and_the_rollout_succeeds(
    argocd_stack: ArgoCDStack, tmp_path: Path
) -> None:
    with (
        _legacy_scenario(
            argocd_stack, ("CreateNamespace=true", "PrunePropagationPolicy=background")
        ) as scenario,
        rollout_actors(argocd_stack, tmp_path, allow_prune=True),  # the chart's policy.allowPrune
    ):
        revision = _release_without_legacy(scenario)
        scenario.refresh()
        scenario.wait_out_of_sync(revision)
        scenario.create_progressive_sync(CANARY_THEN_REST, syncOptions={"prune": True})
        assert scenario.wait_phase("Succeeded", "Failed") == "Succeeded", scenario.explain()
        scenario.wait_synced(revision)
        for cluster in scenario.clusters:
            with pytest.raises(NotFound):
                argocd_stack.cluster_kube(cluster).get(
                    CONFIG_MAPS, scenario.destination_namespace(cluster), "legacy"
                )


# --- issue 32: a failed canary is rolled back on the real Argo CD ---------------------------------------


def test_a_canary_that_fails_is_rolled_back_to_the_commit_it_ran_synced_once_each_way(
    argocd_stack: ArgoCDStack, tmp_path: Path
) -> None:
    """Release 2 never turns Healthy on the canary (its gate stays Progressing): the canary fails at
    its deadline and the rollback syncs it back to release 1's commit, the revision Argo CD had
    recorded in its history before our sync. One forward and one rollback operation of ours; the
    other cluster is never touched; Argo CD then shows the canary OutOfSync against release 2."""
    with scenario_of(argocd_stack, selector=SMALL) as scenario, rollout_actors(argocd_stack, tmp_path):
        before = scenario.repo.head()
        revision = _gated_release(scenario)
        scenario.refresh()
        scenario.wait_out_of_sync(revision)
        with recording(scenario.kube, scenario.namespace, keep=lambda n: n in scenario.apps) as seen:
            scenario.create_progressive_sync(
                CANARY_THEN_REST,
                deadline_seconds=25,
                rollback={"on": ["StageFailed"], "progressDeadlineSeconds": 120},
            )

            def rollback_requested() -> bool:
                op = operation_state(scenario, CANARY).get("operation") or {}
                return any(i.get("name") == "rollback" for i in op.get("info") or [])

            wait_for(rollback_requested, timeout=150, interval=0.5, what="the canary's rollback sync")
            # The gate release 2 left behind (no prune) is a stand-in for the old workload coming back
            # healthy: the Application is Healthy once it is.
            argocd_stack.set_probe_health(CANARY, scenario.destination_namespace(CANARY), "gate", "Healthy")
            assert scenario.wait_phase("RolledBack", "Failed", "Succeeded") == "RolledBack", (
                scenario.explain()
            )
        app = scenario.application(CANARY)
        state = app["status"]["operationState"]
        assert (state["phase"], state["syncResult"]["revision"]) == ("Succeeded", before)
        assert app["status"]["history"][-1]["revision"] == before
        assert app["status"]["sync"]["status"] == "OutOfSync"  # Git still names release 2
        assert configmap_release(argocd_stack, scenario, CANARY) == "1"
        canary_app = scenario.app(CANARY)
        assert seen.sync_starts(canary_app, by="progressive-sync") == 2, seen.history(canary_app)
        assert seen.sync_starts(scenario.app(OTHER), by="progressive-sync") == 0
        rollback = scenario.kube.get(PROGRESSIVE_SYNCS, scenario.namespace, scenario.name)["status"][
            "rollback"
        ]
        assert (rollback.get("trigger"), rollback.get("rolledBack"), rollback.get("failed")) == (
            "StageFailed",
            1,
            0,
        )


# --- issue 35: stages by Application labels (docs/concepts.md) ------------------------------------------


def test_a_stage_by_application_labels_takes_exactly_the_clusters_whose_applications_carry_the_label(
    argocd_stack: ArgoCDStack, tmp_path: Path
) -> None:
    """The real ApplicationSet controller copies each cluster's region onto its Application as `wave`
    (a key no cluster Secret has, so only the Applications' labels can decide); the first stage
    selects `wave: eu` and takes eu-1 and eu-2, the second the others."""
    first, rest = "eu by Application label", "the rest"
    stages: list[dict[str, Any]] = [
        {
            "name": first,
            "targets": {"applications": {"selector": {"matchLabels": {"wave": "eu"}}}},
            "maxParallel": 2,
        },
        {"name": rest, "targets": {"clusters": {"selector": {}}}, "maxParallel": 2},
    ]
    with scenario_of(
        argocd_stack, app_set_changes={"labels": {"wave": "{{metadata.labels.region}}"}}
    ) as scenario:
        waves = {
            c: (scenario.application(c)["metadata"].get("labels") or {}).get("wave")
            for c in scenario.clusters
        }
        assert waves == {"eu-1": "eu", "us-1": "us", "eu-2": "eu", "us-2": "us"}, "the controller labels them"
        revision = scenario.release()
        scenario.refresh()
        scenario.wait_out_of_sync(revision)
        with rollout_actors(argocd_stack, tmp_path):
            scenario.create_progressive_sync(stages)
            assert scenario.wait_phase("Succeeded", "Failed") == "Succeeded", scenario.explain()
        targets = {stage["name"]: sorted(stage.get("targets") or []) for stage in scenario.status()["stages"]}
        assert targets == {first: ["eu-1", "eu-2"], rest: ["us-1", "us-2"]}
        scenario.wait_synced(revision)
