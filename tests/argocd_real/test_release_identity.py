"""Release identity on the real Argo CD (issue 29): Helm charts, multi-source, two Applications per
cluster, each release seen late.

Argo CD decides what each Application runs; progressive-sync must know, for every Application,
whether it already runs the release. Three fleets, each an ApplicationSet over the stack's four
clusters with automated sync off:

- Helm charts from a chart repository (`orchestrator/devenv/helmrepo.py`, started by the test on
  127.0.0.1, charts packaged by the real `helm`): Argo CD reports the chart version itself as the
  revision (`status.sync.revision: "1.2.4"`, not a SHA). The release is chart 1.2.4 published
  next to 1.2.3 (the Applications ask for `1.2.*`), or the ApplicationSet moving its exact
  version from 1.2.3 to 1.2.4;
- multi-source Applications: the chart from that repository with its values from Git
  (`spec.sources`, `ref: values`, `$values/...`); the release is a values commit (a new SHA beside
  the same chart version) or a new chart version (a new version beside the same SHA);
- two Applications per cluster (one ApplicationSet, a matrix of clusters x components); the
  release is one commit that changes both components.

Each release is seen late, the way it is without Git webhooks: Argo CD's timed comparison is on
(`TIMER_SECONDS` plus up to `JITTER_SECONDS`; the repo-server keeps resolved Git refs and Helm
indexes as long), the test sends no refresh, and the ProgressiveSync exists before the release (its
phase Pending, "up to date"). Argo CD's timer finds the release for one Application first (19-24 s
after it here: the repo-server's cache of Git refs and Helm indexes lives as long as the timer); the
others still read Synced and Healthy at the old revision until progressive-sync asks Argo CD to
compare them (the watcher before it builds the Workflow, `select` before it plans). Each
fleet must end with every Application Synced and Healthy at the release, synced exactly once by
progressive-sync (so nothing was adopted that was not at the release: an adopted Application is
one we did not sync), each in the stage that took its cluster.

Real: see conftest.py; plus the chart repository and `helm` (the repo-server renders the charts
with the same binary). The timer is switched on for this module only (`ArgoCDStack.
set_reconciliation` restarts the repo-server and the application controller) and off after it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from orchestrator.argocd.appsync import INFO_STAGE, INITIATOR, info_value
from orchestrator.devenv import starter_app
from orchestrator.devenv.argocd import ArgoCDStack
from orchestrator.devenv.argocd_manifests import CONFIG_MAPS
from orchestrator.devenv.helmrepo import HelmRepoServer
from orchestrator.kube.client import APPLICATION_SETS, APPLICATIONS, PROGRESSIVE_SYNCS
from orchestrator.ops import actions as ops_actions
from tests.support.app_recorder import AppRecorder, recording
from tests.support.argocd_harness import (
    CANARY,
    CANARY_THEN_REGIONS,
    CANARY_THEN_REST,
    CHART,
    ROLLOUT_TIMEOUT,
    SCENARIO_CONFIGMAP,
    SMALL,
    Scenario,
    chart_repository,
    publish_chart,
    rollout_actors,
    scenario_of,
)
from tests.support.wait import wait_for

pytestmark = pytest.mark.argocd

# Argo CD's timed comparison here: every 20 s plus up to 20 s (its default is 120 s plus up to 60 s).
# With 10 s plus up to 5 s (the first run, 3 Dec 09:30) Argo CD had compared every Application with
# the release before our first sync request in all five scenarios: no lag left where it matters.
TIMER_SECONDS = 20
JITTER_SECONDS = 20
VALUES_FILE = "values.yaml"  # under the scenario's app folder in Git
COMPONENTS = ("web", "worker")


@pytest.fixture(scope="module")
def timed_comparison(argocd_stack: ArgoCDStack) -> Iterator[ArgoCDStack]:
    """The package's stack with Argo CD's timed comparison on, for this module's tests."""
    argocd_stack.set_reconciliation(TIMER_SECONDS, JITTER_SECONDS)
    try:
        yield argocd_stack
    finally:
        argocd_stack.set_reconciliation(0)


@pytest.fixture
def chart_repo(tmp_path: Path) -> Iterator[HelmRepoServer]:
    """A chart repository holding chart `myservice` 1.2.3."""
    with chart_repository(tmp_path / "charts") as repo:
        yield repo


def values_yaml(release: str) -> str:
    return f'release: "{release}"\n'


def deployed(stack: ArgoCDStack, scenario: Scenario, cluster: str, component: str = "") -> dict[str, str]:
    """The data of the scenario's ConfigMap on `cluster` (in that Application's namespace)."""
    configmap = stack.cluster_kube(cluster).get(
        CONFIG_MAPS, scenario.destination_namespace(cluster, component), SCENARIO_CONFIGMAP
    )
    return dict(configmap.get("data") or {})


@dataclass(frozen=True)
class SeenLate:
    """What a rollout of a release seen late left: the recorder, and which Applications Argo CD had
    compared with the release when the watcher started the rollout (the others were still Synced at
    the revision before: `select` asks Argo CD to compare those before it plans)."""

    seen: AppRecorder
    at_release_at_start: list[str]
    behind_at_start: list[str]


def roll_out_seen_late(
    scenario: Scenario,
    stack: ArgoCDStack,
    workdir: Path,
    release: Callable[[], Sequence[str]],
) -> SeenLate:
    """Create the ProgressiveSync (nothing to do: Pending), make the release (`release()` returns its
    revisions, one per source), wait for the rollout to end and check the fleet: every Application
    Synced and Healthy at the release, each synced exactly once by us."""
    with (
        recording(stack.kube, stack.namespace, keep=lambda n: n in scenario.apps) as seen,
        rollout_actors(stack, workdir),
    ):
        scenario.create_progressive_sync(CANARY_THEN_REGIONS, deadline_seconds=120)
        assert scenario.wait_phase("Pending", "Progressing", timeout=60) == "Pending", scenario.explain()
        assert not scenario.status().get("rollout"), scenario.explain()
        released = time.monotonic()
        revisions = list(release())
        wait_for(
            lambda: bool((scenario.status().get("rollout") or {}).get("id")),
            timeout=ROLLOUT_TIMEOUT,
            interval=0.2,
            what="the watcher to start a rollout of the release",
        )
        started = {app: scenario.revisions_of(app) for app in scenario.apps}
        at_release = sorted(app for app, compared in started.items() if compared == revisions)
        behind = sorted(app for app in scenario.apps if app not in at_release)
        print(
            f"rollout started {time.monotonic() - released:.1f}s after the release; Argo CD had compared "
            f"{len(at_release)} of {len(started)} Applications with it, not yet: {behind}"
        )
        phase = scenario.wait_rollout_ended()
        print(f"release {revisions} -> rollout {phase}: {time.monotonic() - released:.1f}s")
        assert phase == "Succeeded", scenario.explain()
        # Not once the timer would have got there: the rollout itself brought each one.
        scenario.wait_at_release(revisions, timeout=30)
    joined = ",".join(revisions)
    compared_at = {
        app: round(seen_at.monotonic - released, 1)
        for app in scenario.apps
        if (seen_at := seen.first_seen(app, lambda s: s.sync_revision == joined)) is not None
    }
    requested_at = [
        seen_at.monotonic - released
        for app in scenario.apps
        if (seen_at := seen.first_seen(app, lambda s: s.requested_by == INITIATOR)) is not None
    ]
    print(
        f"seconds after the release each Application was first seen compared with it: {compared_at}; "
        f"our first sync request: {min(requested_at):.1f}"
    )
    for app in scenario.apps:
        assert seen.sync_starts(app, by=INITIATOR) == 1, (app, seen.history(app))
        state = seen.history(app)[-1]
        assert (state.started_by, state.applied) == (INITIATOR, joined), (app, state)
    targets = [cluster for stage in scenario.status()["stages"] for cluster in stage.get("targets") or []]
    assert sorted(targets) == sorted(scenario.clusters), scenario.explain()
    return SeenLate(seen, at_release, behind)


# --- (a) Helm charts from a chart repository ------------------------------------------------------


def _publish_next(scenario: Scenario, repo: HelmRepoServer) -> Sequence[str]:
    publish_chart(repo, "1.2.4")
    return ["1.2.4"]


def _pin_next_in_the_application_set(scenario: Scenario, repo: HelmRepoServer) -> Sequence[str]:
    publish_chart(repo, "1.2.4")
    scenario.kube.patch(
        APPLICATION_SETS,
        scenario.namespace,
        scenario.name,
        {"spec": {"template": {"spec": {"source": {"targetRevision": "1.2.4"}}}}},
    )
    return ["1.2.4"]


@pytest.mark.parametrize(
    ("target_revision", "release"),
    [
        pytest.param("1.2.*", _publish_next, id="constraint-a-new-version-published"),
        pytest.param("1.2.3", _pin_next_in_the_application_set, id="exact-version-raised-in-the-appset"),
    ],
)
def test_helm_charts_from_a_chart_repository_reach_the_new_chart_version(
    timed_comparison: ArgoCDStack,
    chart_repo: HelmRepoServer,
    tmp_path: Path,
    target_revision: str,
    release: Callable[[Scenario, HelmRepoServer], Sequence[str]],
) -> None:
    stack = timed_comparison
    with scenario_of(
        stack,
        prefix="helm",
        sources=lambda _git: [starter_app.helm_source(chart_repo.url, CHART, target_revision)],
    ) as scenario:
        # Argo CD reports the chart version it resolved as the revision, not a SHA.
        assert {a: scenario.revisions_of(a) for a in scenario.apps} == {a: ["1.2.3"] for a in scenario.apps}
        roll_out_seen_late(scenario, stack, tmp_path, lambda: release(scenario, chart_repo))
        for cluster in scenario.clusters:
            assert deployed(stack, scenario, cluster) == {"chart": "1.2.4", "release": "chart-default"}


# --- (b) multi-source: the chart with its values from Git ----------------------------------------


def _commit_values(scenario: Scenario, repo: HelmRepoServer) -> Sequence[str]:
    return ["1.2.3", scenario.commit({VALUES_FILE: values_yaml("2")}, "Values of release 2")]


def _publish_chart(scenario: Scenario, repo: HelmRepoServer) -> Sequence[str]:
    publish_chart(repo, "1.2.4")
    return ["1.2.4", scenario.repo.head()]


@pytest.mark.parametrize(
    ("release", "expected"),
    [
        pytest.param(_commit_values, {"chart": "1.2.3", "release": "2"}, id="a-values-commit"),
        pytest.param(_publish_chart, {"chart": "1.2.4", "release": "1"}, id="a-new-chart-version"),
    ],
)
def test_multi_source_applications_reach_the_release_of_each_source(
    timed_comparison: ArgoCDStack,
    chart_repo: HelmRepoServer,
    tmp_path: Path,
    release: Callable[[Scenario, HelmRepoServer], Sequence[str]],
    expected: dict[str, str],
) -> None:
    stack = timed_comparison

    def sources(git: Any) -> list[dict[str, Any]]:
        values = f"$values/{starter_app.APP_PATH}/{VALUES_FILE}"
        return [
            starter_app.helm_source(chart_repo.url, CHART, "1.2.*", value_files=[values]),
            starter_app.values_source(git.url),
        ]

    with scenario_of(
        stack, prefix="multi", files={VALUES_FILE: values_yaml("1")}, sources=sources
    ) as scenario:
        first = scenario.revisions_of(scenario.apps[0])
        assert first == ["1.2.3", scenario.repo.head()], first
        roll_out_seen_late(scenario, stack, tmp_path, lambda: release(scenario, chart_repo))
        for cluster in scenario.clusters:
            assert deployed(stack, scenario, cluster) == expected


# --- (c) two Applications per cluster --------------------------------------------------------------


def test_two_applications_per_cluster_each_reach_the_release(
    timed_comparison: ArgoCDStack, tmp_path: Path
) -> None:
    stack = timed_comparison

    def component_files(release: str) -> dict[str, str]:
        return {
            f"{component}/configmap.yaml": starter_app.configmap_manifest(
                SCENARIO_CONFIGMAP, {"release": release, "component": component}
            )
            for component in COMPONENTS
        }

    with scenario_of(stack, prefix="pair", files=component_files("1"), components=COMPONENTS) as scenario:
        assert len(scenario.apps) == 2 * len(scenario.clusters)
        roll_out_seen_late(
            scenario, stack, tmp_path, lambda: [scenario.commit(component_files("2"), "Release 2")]
        )
        # Both Applications of a cluster were synced by the stage that took the cluster.
        stage_of = {c: s["name"] for s in scenario.status()["stages"] for c in s.get("targets") or []}
        for cluster in scenario.clusters:
            for component in COMPONENTS:
                assert deployed(stack, scenario, cluster, component) == {
                    "release": "2",
                    "component": component,
                }
                operation = scenario.kube.get(
                    APPLICATIONS, scenario.namespace, scenario.app(cluster, component)
                )["status"]["operationState"]["operation"]
                assert info_value(operation, INFO_STAGE) == stage_of[cluster], (cluster, component, operation)


# --- issue 32: a chart version rolled back on the real Argo CD ----------------------------------------


def test_a_cancelled_rollout_rolls_the_canary_back_to_the_chart_version_it_ran(
    argocd_stack: ArgoCDStack, chart_repo: HelmRepoServer, tmp_path: Path
) -> None:
    """A Helm chart from a chart repository: Argo CD records the chart version as the revision in
    the Application's history, and that is what the rollback pins. The canary reaches 1.2.4, the
    rollout waits at the next stage's approval gate, a person cancels it (`rollback.on: [Cancelled]`):
    the canary is synced back to 1.2.3, once; the other cluster is never touched."""
    stages = [CANARY_THEN_REST[0], {**CANARY_THEN_REST[1], "approval": "Manual"}]
    with (
        scenario_of(
            argocd_stack,
            prefix="helm",
            selector=SMALL,
            sources=lambda _git: [starter_app.helm_source(chart_repo.url, CHART, "1.2.*")],
        ) as scenario,
        rollout_actors(argocd_stack, tmp_path),
    ):
        publish_chart(chart_repo, "1.2.4")
        scenario.refresh()
        scenario.wait_out_of_sync("1.2.4")
        with recording(argocd_stack.kube, argocd_stack.namespace, keep=lambda n: n in scenario.apps) as seen:
            scenario.create_progressive_sync(stages, rollback={"on": ["Cancelled"]})
            wait_for(
                lambda: (
                    deployed(argocd_stack, scenario, CANARY).get("chart") == "1.2.4"
                    and any(
                        s.get("name") == "canary" and s.get("phase") == "Succeeded"
                        for s in scenario.status().get("stages") or []
                    )
                ),
                timeout=ROLLOUT_TIMEOUT,
                interval=0.5,
                what="the canary at 1.2.4, its stage done (the rest waits for approval)",
            )
            ops_actions.cancel(scenario.kube, ops_actions.Target(scenario.namespace, scenario.name))
            assert scenario.wait_phase("RolledBack", "Cancelled", "Failed") == "RolledBack", (
                scenario.explain()
            )
        canary = scenario.application(CANARY)
        assert canary["status"]["history"][-1]["revision"] == "1.2.3"
        assert deployed(argocd_stack, scenario, CANARY)["chart"] == "1.2.3"
        assert seen.sync_starts(scenario.app(CANARY), by=INITIATOR) == 2, seen.history(scenario.app(CANARY))
        other = next(c for c in scenario.clusters if c != CANARY)
        assert seen.sync_starts(scenario.app(other), by=INITIATOR) == 0
        rollback = argocd_stack.kube.get(PROGRESSIVE_SYNCS, scenario.namespace, scenario.name)["status"][
            "rollback"
        ]
        assert (rollback["trigger"], rollback["stages"], rollback["rolledBack"]) == (
            "Cancelled",
            ["canary"],
            1,
        )


def test_a_multi_source_application_is_rolled_back_source_by_source(
    argocd_stack: ArgoCDStack, chart_repo: HelmRepoServer, tmp_path: Path
) -> None:
    """A chart with its values from Git, both changed by the release (chart 1.2.4, values "2"): the
    rollback restores each source's revision Argo CD recorded before our sync (chart 1.2.3 and the
    values commit before), one rollback sync; the other cluster is never touched."""

    def sources(git: Any) -> list[dict[str, Any]]:
        values = f"$values/{starter_app.APP_PATH}/{VALUES_FILE}"
        return [
            starter_app.helm_source(chart_repo.url, CHART, "1.2.*", value_files=[values]),
            starter_app.values_source(git.url),
        ]

    stages = [CANARY_THEN_REST[0], {**CANARY_THEN_REST[1], "approval": "Manual"}]
    with (
        scenario_of(
            argocd_stack,
            prefix="multi",
            selector=SMALL,
            files={VALUES_FILE: values_yaml("1")},
            sources=sources,
        ) as scenario,
        rollout_actors(argocd_stack, tmp_path),
    ):
        before = ["1.2.3", scenario.repo.head()]
        publish_chart(chart_repo, "1.2.4")
        after = ["1.2.4", scenario.commit({VALUES_FILE: values_yaml("2")}, "Values of release 2")]
        scenario.refresh()
        wait_for(
            lambda: all(scenario.revisions_of(app) == after for app in scenario.apps),
            timeout=60,
            interval=0.2,
            what="Argo CD to compare every Application with chart 1.2.4 and the new values",
        )
        with recording(argocd_stack.kube, argocd_stack.namespace, keep=lambda n: n in scenario.apps) as seen:
            scenario.create_progressive_sync(stages, rollback={"on": ["Cancelled"]})
            wait_for(
                lambda: (
                    deployed(argocd_stack, scenario, CANARY) == {"chart": "1.2.4", "release": "2"}
                    and any(
                        s.get("name") == "canary" and s.get("phase") == "Succeeded"
                        for s in scenario.status().get("stages") or []
                    )
                ),
                timeout=ROLLOUT_TIMEOUT,
                interval=0.5,
                what="the canary at chart 1.2.4 with values 2, its stage done",
            )
            ops_actions.cancel(scenario.kube, ops_actions.Target(scenario.namespace, scenario.name))
            assert scenario.wait_phase("RolledBack", "Cancelled", "Failed") == "RolledBack", (
                scenario.explain()
            )
        canary = scenario.application(CANARY)
        assert canary["status"]["history"][-1]["revisions"] == before
        assert deployed(argocd_stack, scenario, CANARY) == {"chart": "1.2.3", "release": "1"}
        assert seen.sync_starts(scenario.app(CANARY), by=INITIATOR) == 2, seen.history(scenario.app(CANARY))
        other = next(c for c in scenario.clusters if c != CANARY)
        assert seen.sync_starts(scenario.app(other), by=INITIATOR) == 0
