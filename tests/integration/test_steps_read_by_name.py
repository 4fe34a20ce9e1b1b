"""A cluster step reads its Applications by name (issue 33), counted on the real API server (steps
called in process with a counting adapter): `select` records the Applications it planned for each
target in the stage's records (`spec.targetApps`), and a `cluster` step, a `batch` and the chained
hand-off read those one by one instead of listing every Application of the namespace. Records
written before the field (no `targetApps`) take the list, as before, with the same outcome; so does
a cluster none of whose named Applications is found any more.

The world (seeded fleet, steps' runner, simulator) is tests/support/steps_rig.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

import pytest

from orchestrator.argocd import appsync
from orchestrator.kube.client import APPLICATIONS, PROGRESSIVE_SYNC_STAGES, Kube
from steps.batch import run_batch
from steps.chain import run_and_hand_off
from steps.cluster import run_cluster
from steps.common import Tuning
from tests.integration.test_steps_chain import chain_args, create_workflow
from tests.support.steps_harness import CountingKube, make_progressive_sync
from tests.support.steps_rig import REST, Rig, assert_ok, opened, ours, requested, select_canary

pytestmark = pytest.mark.integration
Outcome = TypeVar("Outcome")
FIELD = "targetApps"
LISTS = ("list", "applications", False)
SYNC_WRITES = ("replace", "applications", False)
FAST_WAIT = Tuning(watch_window_seconds=2)

RECORDS = [pytest.param(True, id="records-name-them"), pytest.param(False, id="older-records-without-names")]


def counted(rig: Rig, step: Callable[[Kube], Outcome]) -> tuple[CountingKube, Outcome]:
    """Run `step` on the rig's Kube behind a CountingKube: (what it called, what it returned)."""
    counting = CountingKube(rig.kube)
    return counting, step(cast(Kube, counting))


def stage_records(rig: Rig, stage: str) -> list[dict[str, Any]]:
    """The stage's ProgressiveSyncStage objects as stored."""
    return [
        rig.kube.get(PROGRESSIVE_SYNC_STAGES, rig.namespace, name)
        for name in rig.stage(stage).entry.records or []
    ]


def planned(rig: Rig, stage: str) -> dict[str, list[str]]:
    """The stage's `targetApps`, every part's together."""
    found: dict[str, list[str]] = {}
    for record in stage_records(rig, stage):
        found.update(record["spec"].get(FIELD) or {})
    return found


def as_written_before_the_field(rig: Rig, stage: str) -> None:
    """Each of the stage's records created again without `targetApps` (its spec is immutable), status
    kept: the records a `select` of an older version wrote."""
    for record in stage_records(rig, stage):
        meta = record["metadata"]
        rig.kube.delete(PROGRESSIVE_SYNC_STAGES, rig.namespace, meta["name"])
        kept = ("name", "namespace", "labels", "annotations", "ownerReferences")
        record["metadata"] = {key: value for key, value in meta.items() if key in kept}
        record["spec"].pop(FIELD)
        rig.kube.create(PROGRESSIVE_SYNC_STAGES, rig.namespace, record)
    assert planned(rig, stage) == {}


def check_planned(rig: Rig, stage: str, targets: list[str], named: bool) -> None:
    """`select` recorded each target's one Application (the rig's fleet); or, made older, none."""
    if named:
        assert planned(rig, stage) == {c: [f"{rig.fleet.app_set}-{c}"] for c in targets}
    else:
        as_written_before_the_field(rig, stage)


@pytest.mark.parametrize("named", RECORDS)
def test_a_cluster_step_reads_its_planned_applications_by_name(rig: Rig, named: bool) -> None:
    """Named: no list of Applications at all, one sync write, done; older records: one list, the
    same outcome."""
    make_progressive_sync(rig.kube, rig.namespace)
    cluster = select_canary(rig.runner)
    check_planned(rig, "canary", [cluster], named)
    rig.simulate()
    counting, result = counted(
        rig, lambda kube: run_cluster(kube, opened(rig, kube, "canary", tuning=FAST_WAIT), cluster)
    )
    assert result.outcome.value == "done", result.summary
    assert counting.calls[LISTS] == (0 if named else 1), counting.calls
    assert counting.calls[SYNC_WRITES] == 1, counting.calls
    assert counting.calls[("get", "applications", False)] >= 1, counting.calls
    assert appsync.sync_started_at(rig.app(cluster), "r1") is not None


@pytest.mark.parametrize("named", RECORDS)
def test_a_batch_reads_its_clusters_planned_applications_by_name(rig: Rig, named: bool) -> None:
    """Three clusters in one batch: named, no list; each Application synced exactly once either way."""
    make_progressive_sync(rig.kube, rig.namespace, stages=[REST])
    assert_ok(rig.runner.run("select", "--stage", "rest"))
    targets = rig.stage("rest").targets
    check_planned(rig, "rest", targets, named)
    rig.simulate()
    sizing = {"rest": {"batches": 1, "max_parallel": 3}}
    counting, result = counted(
        rig, lambda kube: run_batch(kube, opened(rig, kube, "rest", sizing=sizing, tuning=FAST_WAIT), 0)
    )
    assert [r.outcome.value for r in result.results] == ["done"] * 3, result.summary
    assert counting.calls[LISTS] == (0 if named else 1), counting.calls
    assert counting.calls[SYNC_WRITES] == 3, counting.calls
    for cluster in targets:
        assert appsync.sync_started_at(rig.app(cluster), "r1") is not None, cluster


@pytest.mark.parametrize("named", RECORDS)
def test_the_chained_hand_off_reads_the_next_clusters_applications_by_name(rig: Rig, named: bool) -> None:
    """The first cluster's step (its sync started by `select`) waits, then hands off to the next:
    named, neither lists; the next cluster's Application gets its one sync write either way."""
    make_progressive_sync(rig.kube, rig.namespace, stages=[REST])
    create_workflow(rig)
    assert_ok(rig.runner.run("select", "--stage", "rest", *chain_args(rig)))
    targets = rig.stage("rest").targets
    assert [ours(rig, c) for c in targets] == [True, False, False]
    check_planned(rig, "rest", targets, named)
    rig.simulate()
    sizing = {"rest": {"targets": 3, "max_parallel": 1, "start_syncs": 1}}
    counting, result = counted(
        rig,
        lambda kube: run_and_hand_off(
            kube, opened(rig, kube, "rest", sizing=sizing, tuning=FAST_WAIT), targets[0]
        ),
    )
    assert result.cluster.outcome.value == "done", result.summary
    assert result.hand_off.started == targets[1], result.summary
    assert counting.calls[LISTS] == (0 if named else 1), counting.calls
    assert counting.calls[SYNC_WRITES] == 1, counting.calls  # the hand-off's; the first was select's
    assert [requested(rig, c) for c in targets[1:]] == [True, False]


def test_a_named_application_deleted_falls_back_to_a_list(rig: Rig) -> None:
    """The canary's one named Application is gone and the ApplicationSet made it again under another
    name: none of the named ones is found, so the step lists the namespace, as before the field,
    finds the new one and syncs it once."""
    make_progressive_sync(rig.kube, rig.namespace)
    cluster = select_canary(rig.runner)
    check_planned(rig, "canary", [cluster], True)
    app = rig.app(cluster)
    rig.kube.delete(APPLICATIONS, rig.namespace, app["metadata"]["name"])
    renamed = f"{app['metadata']['name']}-renamed"
    kept = ("namespace", "labels", "ownerReferences")
    app["metadata"] = {key: value for key, value in app["metadata"].items() if key in kept} | {
        "name": renamed
    }
    app.pop("status", None)
    rig.kube.create(APPLICATIONS, rig.namespace, app)
    rig.simulate()
    counting, result = counted(
        rig, lambda kube: run_cluster(kube, opened(rig, kube, "canary", tuning=FAST_WAIT), cluster)
    )
    assert result.outcome.value == "done", result.summary
    assert counting.calls[LISTS] == 1, counting.calls
    assert counting.calls[SYNC_WRITES] == 1, counting.calls
    found = rig.kube.get(APPLICATIONS, rig.namespace, renamed)
    assert appsync.sync_started_at(found, "r1") is not None
