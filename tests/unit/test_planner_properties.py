"""Invariants of the planner over generated fleets and specs (Hypothesis), and canary spread."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.api.models import ProgressiveSyncSpec, StagePhase
from orchestrator.argocd.fleet import AppView, Cluster, HealthStatus, SyncStatus
from orchestrator.planning.planner import RolloutPlan, RolloutProgress, StageProgress, plan_rollout
from tests.support.builders import (
    NEW_REVISION,
    make_app,
    make_app_set,
    make_cluster,
    make_spec,
    make_stage,
    regional_fleet,
    up_to_date,
)

REGIONS = ("eu", "us", "ap", "sa")
APP_STATES = ("stale", "fresh", "degraded", "two-apps", "by-name", "unowned")
MAYBE_REGION = st.sampled_from((*REGIONS, None))
ZONE_LETTER = st.sampled_from("ab")
APP_STATE = st.sampled_from(APP_STATES)
PROPERTY_SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def fleets(draw: st.DrawFn) -> tuple[list[Cluster], list[AppView]]:
    """Up to 30 clusters over a few regions and zones, each with Applications in some state."""
    clusters: list[Cluster] = []
    apps: list[AppView] = []
    for i in range(draw(st.integers(min_value=1, max_value=30))):
        name = f"c{i}"
        region = draw(MAYBE_REGION)
        zone = f"{region}{draw(ZONE_LETTER)}" if region else None
        clusters.append(make_cluster(name, region=region, zone=zone))
        state = draw(APP_STATE)
        if state == "fresh":
            apps.append(up_to_date(name))
        elif state == "degraded":
            apps.append(make_app(cluster=name, sync="Synced", health="Degraded"))
        elif state == "two-apps":
            apps += [up_to_date(name, name=f"web-{name}"), make_app(f"worker-{name}", cluster=name)]
        elif state == "by-name":
            apps.append(make_app(cluster=name, by="name"))
        elif state == "unowned":
            apps.append(make_app(cluster=name, owner="someone-else"))
        else:
            apps.append(make_app(cluster=name))
    return clusters, apps


# Strategies are built once: building them inside a composite on every draw is what is slow.
SIZES = st.one_of(
    st.integers(min_value=1, max_value=12), st.integers(min_value=1, max_value=100).map("{}%".format)
)
SELECTORS = st.one_of(
    st.just({}),
    st.sampled_from(REGIONS).map(lambda r: {"labels": {"region": r}}),
    st.sampled_from(REGIONS).map(
        lambda r: {"expressions": [{"key": "region", "operator": "NotIn", "values": [r]}]}
    ),
    st.just({"expressions": [{"key": "region", "operator": "Exists"}]}),
)
SPREAD_BY = st.sampled_from((None, "region", "zone"))


@st.composite
def stages(draw: st.DrawFn, index: int) -> dict[str, Any]:
    """One stage with a random selector, sizes and spreadBy."""
    selector = draw(SELECTORS)
    max_targets = draw(SIZES)
    max_parallel = draw(SIZES)
    if isinstance(max_targets, int) and isinstance(max_parallel, int):
        max_parallel = min(max_parallel, max_targets)  # the model refuses maxParallel > maxTargets
    spread_by = draw(SPREAD_BY)
    return make_stage(
        f"s{index}", max_targets=max_targets, max_parallel=max_parallel, spread_by=spread_by, **selector
    )


@st.composite
def specs(draw: st.DrawFn, catch_all: bool = False) -> ProgressiveSyncSpec:
    """A spec of 1-5 stages; with `catch_all`, a last stage takes every remaining cluster."""
    count = draw(st.integers(min_value=1, max_value=5))
    drawn = [draw(stages(i)) for i in range(count)]
    if catch_all:
        drawn.append(make_stage("rest", max_targets="100%"))
    return make_spec(*drawn, allow_partial=draw(st.booleans()))


def plan(
    spec: ProgressiveSyncSpec, clusters: list[Cluster], apps: list[AppView], **kwargs: Any
) -> RolloutPlan:
    return plan_rollout(
        spec,
        ps_name=kwargs.pop("ps_name", "myservice"),
        appset=make_app_set(),
        clusters=clusters,
        apps=apps,
        **kwargs,
    )


@PROPERTY_SETTINGS
@given(fleet=fleets(), spec=specs())
def test_every_out_of_date_cluster_is_in_exactly_one_stage_or_reported_uncovered(
    fleet: tuple[list[Cluster], list[AppView]], spec: ProgressiveSyncSpec
) -> None:
    result = plan(spec, *fleet)
    appearances = Counter(target for stage in result.stages for target in stage.targets)
    for name in result.out_of_date:
        assert (appearances[name] == 1) != (name in result.uncovered), name
    assert all(count == 1 for count in appearances.values())
    assert set(appearances) <= set(result.out_of_date)


@PROPERTY_SETTINGS
@given(fleet=fleets(), spec=specs(catch_all=True))
def test_with_a_catch_all_stage_every_out_of_date_cluster_is_in_exactly_one_stage(
    fleet: tuple[list[Cluster], list[AppView]], spec: ProgressiveSyncSpec
) -> None:
    result = plan(spec, *fleet)
    covered = Counter(target for stage in result.stages for target in stage.targets)
    assert result.uncovered == ()
    assert {name: covered[name] for name in result.out_of_date} == dict.fromkeys(result.out_of_date, 1)
    assert not any(issue.code == "UncoveredClusters" for issue in (*result.errors, *result.warnings))


@PROPERTY_SETTINGS
@given(fleet=fleets(), spec=specs())
def test_no_stage_exceeds_its_resolved_sizes(
    fleet: tuple[list[Cluster], list[AppView]], spec: ProgressiveSyncSpec
) -> None:
    for stage in plan(spec, *fleet).stages:
        assert len(stage.targets) <= stage.max_targets
        assert stage.max_targets <= max(stage.available, 12)  # percentages never exceed what there is
        if stage.targets:
            assert stage.max_parallel >= 1
        assert set(stage.apps) == set(stage.targets)


@PROPERTY_SETTINGS
@given(fleet=fleets(), spec=specs())
def test_matched_counts_agree_with_the_selector_asked_cluster_by_cluster(
    fleet: tuple[list[Cluster], list[AppView]], spec: ProgressiveSyncSpec
) -> None:
    """The planner asks each selector once per distinct label combination; the counts must not change."""
    clusters, apps = fleet
    result = plan(spec, clusters, apps)
    in_fleet = [c for c in clusters if c.name in result.clusters]
    for stage_spec, stage in zip(spec.stages, result.stages, strict=True):
        selector = stage_spec.targets.clusters.selector
        assert stage.matched == sum(selector.matches(dict(c.labels)) for c in in_fleet)


@PROPERTY_SETTINGS
@given(fleet=fleets(), spec=specs(), data=st.data())
def test_plan_does_not_depend_on_input_order(
    fleet: tuple[list[Cluster], list[AppView]], spec: ProgressiveSyncSpec, data: st.DataObject
) -> None:
    clusters, apps = fleet
    shuffled_clusters = data.draw(st.permutations(clusters))
    shuffled_apps = data.draw(st.permutations(apps))
    assert plan(spec, clusters, apps).to_dict() == plan(spec, shuffled_clusters, shuffled_apps).to_dict()


@PROPERTY_SETTINGS
@given(fleet=fleets(), spec=specs())
def test_same_inputs_give_the_same_plan(
    fleet: tuple[list[Cluster], list[AppView]], spec: ProgressiveSyncSpec
) -> None:
    first, second = plan(spec, *fleet), plan(spec, *fleet)
    assert first == second
    assert first.to_dict(generation=3) == second.to_dict(generation=3)


@PROPERTY_SETTINGS
@given(fleet=fleets(), spec=specs())
def test_a_running_rollout_keeps_the_plan_it_started_with(
    fleet: tuple[list[Cluster], list[AppView]], spec: ProgressiveSyncSpec
) -> None:
    """Run the stages one by one (their clusters become up to date); each replan, given the release being
    rolled out (as the steps are given the Workflow's), agrees with the start."""
    clusters, apps = fleet
    at_start = plan(spec, clusters, apps)
    updated: set[str] = set()
    recorded: list[StageProgress] = []
    for stage in at_start.stages:
        updated.update(stage.targets)
        recorded.append(
            StageProgress(stage.name, stage.targets, completed=stage.targets, phase=StagePhase.SUCCEEDED)
        )
        now_apps = [_updated(a) if _cluster_of(a, clusters) in updated else a for a in apps]
        now = plan(
            spec,
            clusters,
            now_apps,
            progress=RolloutProgress("r1", tuple(recorded)),
            release=at_start.revisions,
        )
        assert [s.targets for s in now.stages] == [s.targets for s in at_start.stages]
        assert [(s.max_targets, s.max_parallel) for s in now.stages] == [
            (s.max_targets, s.max_parallel) for s in at_start.stages
        ]


def _cluster_of(app: AppView, clusters: list[Cluster]) -> str:
    if app.destination_name:
        return app.destination_name
    return next(c.name for c in clusters if c.server == app.destination_server)


def _updated(app: AppView) -> AppView:
    """The Application after a successful sync of the release, as Argo CD would report it."""
    return replace(
        app,
        sync_status=SyncStatus.SYNCED,
        health_status=HealthStatus.HEALTHY,
        sync_revisions=(NEW_REVISION,),
        operation_in_progress=False,
    )


def test_first_canary_is_spread_over_the_eligible_clusters() -> None:
    """Across 1,000 ProgressiveSync names every cluster is the canary about equally often."""
    clusters = regional_fleet({"eu": 4, "us": 4, "ap": 4})
    apps = [make_app(cluster=c.name) for c in clusters]
    spec = make_spec(make_stage("canary", max_targets=1), make_stage("rest"))
    canaries = Counter(
        plan(spec, clusters, apps, ps_name=f"service-{i}").stages[0].targets[0] for i in range(1000)
    )
    expected = 1000 / len(clusters)
    chi_square = sum((canaries[c.name] - expected) ** 2 / expected for c in clusters)
    assert set(canaries) == {c.name for c in clusters}
    assert min(canaries.values()) >= 40, canaries
    assert chi_square < 31.26, (chi_square, canaries)  # df = 11, p = 0.001


def test_first_canary_is_only_ever_an_out_of_date_cluster() -> None:
    clusters = regional_fleet({"eu": 4, "us": 4, "ap": 4})
    fresh = {"eu-1", "us-2", "ap-3", "ap-4"}
    apps = [up_to_date(c.name) if c.name in fresh else make_app(cluster=c.name) for c in clusters]
    spec = make_spec(make_stage("canary", max_targets=1), make_stage("rest"))
    canaries = Counter(
        plan(spec, clusters, apps, ps_name=f"service-{i}").stages[0].targets[0] for i in range(1000)
    )
    assert set(canaries) == {c.name for c in clusters} - fresh
    assert min(canaries.values()) >= 125 * 0.5, canaries  # 8 eligible: about 125 each
