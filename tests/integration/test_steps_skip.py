"""A skip mark (docs/skip.md) before `select`: the cluster is left out and the status says why.
After `select` took it: the `sync` step asks again right before it writes, records the cluster
Skipped with why instead of syncing it, and writes nothing on a second run; `wait-healthy` then has
nothing to wait for; the stage's record and the status say so. Real kube-apiserver, the steps
through their entrypoint, the fleet simulator playing Argo CD (it would sync any `.operation`: none
may appear).

The world (seeded fleet, steps' runner, simulator) is tests/support/steps_rig.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.api.metadata import SKIP_ANNOTATION
from orchestrator.api.stage_records import ClusterState
from orchestrator.argocd.fleet import app_view_from_object, cluster_from_secret
from orchestrator.kube.client import APPLICATIONS
from orchestrator.planning.planner import plan_rollout
from tests.support.outcomes import stage_outcomes
from tests.support.steps_harness import describe, make_progressive_sync, writes_by
from tests.support.steps_rig import Rig, assert_ok, select_canary

pytestmark = pytest.mark.integration

HOLD = {"applications": {"selector": {"matchLabels": {"release-hold": "yes"}}}}


def _annotate(value: str) -> Any:
    def change(app: dict[str, Any]) -> None:
        app["metadata"].setdefault("annotations", {})[SKIP_ANNOTATION] = value

    return change


def _label(app: dict[str, Any]) -> None:
    app["metadata"].setdefault("labels", {})["release-hold"] = "yes"


@pytest.mark.parametrize(
    ("spec", "mark", "reason"),
    [
        pytest.param({}, _annotate("true"), "is annotated progressivesync.io/skip", id="annotation-true"),
        pytest.param(
            {},
            _annotate("INC-4411: disk pressure"),
            "is annotated progressivesync.io/skip: INC-4411: disk pressure",
            id="annotation-with-a-reason",
        ),
        pytest.param(
            {"skip": HOLD},
            _label,
            "matches spec.skip.applications.selector",
            id="label-matching-spec-skip",
        ),
    ],
)
def test_a_mark_added_after_select_is_honoured_by_sync(
    rig: Rig, spec: dict[str, Any], mark: Any, reason: str
) -> None:
    make_progressive_sync(rig.kube, rig.namespace, **spec)
    cluster = select_canary(rig.runner)
    rig.simulate()
    rig.update_app(cluster, mark)

    before = rig.control_plane.audit_mark()
    result = rig.runner.run("sync", "--stage", "canary", "--cluster", cluster)
    assert_ok(result)
    assert f"cluster {cluster} skipped, nothing written" in result.stdout, result.stdout
    writes = writes_by(rig.control_plane, before)
    assert [(w.resource, w.verb) for w in writes] == [("progressivesyncstages", "patch")], describe(writes)
    assert "operation" not in rig.app(cluster), "a skipped cluster is never synced"

    record = stage_outcomes(rig.kube, "myservice", rig.namespace)["canary"].clusters[cluster]
    assert record.state == ClusterState.SKIPPED
    assert f"Application myservice-{cluster} {reason}" == record.reason

    # Idempotent: the second run finds the record and writes nothing, even with the mark gone.
    rig.update_app(cluster, lambda app: app["metadata"].get("annotations", {}).pop(SKIP_ANNOTATION, None))
    before = rig.control_plane.audit_mark()
    again = rig.runner.run("sync", "--stage", "canary", "--cluster", cluster)
    assert_ok(again)
    assert "skipped" in again.stdout
    assert writes_by(rig.control_plane, before) == []

    # wait-healthy: nothing to wait for; done for the stage, nothing written.
    before = rig.control_plane.audit_mark()
    waited = rig.runner.run("wait-healthy", "--stage", "canary", "--cluster", cluster)
    assert_ok(waited)
    assert f"cluster {cluster} done (already recorded): skipped" in waited.stdout, waited.stdout
    assert writes_by(rig.control_plane, before) == []
    assert "operation" not in rig.app(cluster)


def test_a_skipped_canary_lets_the_stage_succeed_and_the_status_lists_it(rig: Rig) -> None:
    make_progressive_sync(rig.kube, rig.namespace)
    cluster = select_canary(rig.runner)
    rig.update_app(cluster, _annotate("maintenance"))
    assert_ok(rig.runner.run("sync", "--stage", "canary", "--cluster", cluster))
    assert_ok(rig.runner.run("wait-healthy", "--stage", "canary", "--cluster", cluster))
    recorded = rig.runner.run("record", "--stage", "canary")
    assert_ok(recorded)
    stage = rig.stage()
    assert stage.entry.phase.value == "Succeeded", stage.entry
    assert "0 of 1 clusters updated, 1 skipped" in stage.entry.message
    assert [(s.name, s.reason) for s in stage.entry.skipped] == [
        (cluster, f"Application myservice-{cluster} is annotated {SKIP_ANNOTATION}: maintenance")
    ]
    assert stage.entry.counts is not None and stage.entry.counts.skipped == 1


def test_select_leaves_a_marked_cluster_out_and_says_why_in_the_status(rig: Rig) -> None:
    ps = make_progressive_sync(rig.kube, rig.namespace)
    held = (
        plan_rollout(
            ps.spec,
            ps_name="myservice",
            appset=None,
            clusters=[cluster_from_secret(s) for s in rig.kube.list_cluster_secrets(rig.namespace)],
            apps=[app_view_from_object(a) for a in rig.kube.list(APPLICATIONS, rig.namespace)[0]],
        )
        .stage("canary")
        .targets[0]
    )
    rig.update_app(held, _annotate("INC-7"))

    canary = select_canary(rig.runner)
    assert canary != held, "the canary moves to the next cluster"
    entry = rig.stage().entry
    assert [(s.name, s.reason) for s in entry.skipped] == [
        (held, f"Application myservice-{held} is annotated {SKIP_ANNOTATION}: INC-7")
    ]
    assert "1 out-of-date cluster(s) skipped" in entry.message
    rest = rig.runner.run("select", "--stage", "rest")
    assert_ok(rest)
    assert held not in stage_outcomes(rig.kube, "myservice", rig.namespace)["rest"].targets
