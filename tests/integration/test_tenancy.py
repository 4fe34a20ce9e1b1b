"""Who may roll out what: a ProgressiveSync rolls out the ApplicationSet its spec names, looked up
where the spec says (`appSetRef.namespace`, else its own namespace), only when that ApplicationSet
admits the ProgressiveSync's namespace; a squatter elsewhere cannot block the owner.

Real: the control plane, the watcher (in this process, watching two tenant namespaces, with the
Argo CD namespace pinned), the local executor running the real steps, the fleet simulator playing
Argo CD in the Argo CD namespace.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.api.metadata import ALLOWED_NAMESPACES_ANNOTATION
from orchestrator.devenv.controlplane import DevCluster
from orchestrator.engine.executor import LocalExecutor
from orchestrator.engine.executor_settings import ExecutorSettings
from orchestrator.kube.client import APPLICATION_SETS, NAMESPACES, PROGRESSIVE_SYNCS, Kube
from orchestrator.simulator.appcontroller import FleetSimulator
from orchestrator.simulator.config import SimulatorConfig
from tests.support.builders import canary_then_rest, make_ps
from tests.support.wait import wait_for
from tests.support.watcher_harness import (
    FAST_FLEET,
    in_process_watcher,
    seed,
    status_of,
    sync_starts,
    workflows_of,
)

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

ROLLOUT_TIMEOUT = 240.0


def valid(kube: Kube, namespace: str, name: str) -> tuple[str, str, str]:
    for item in status_of(kube, namespace, name).get("conditions") or []:
        if item["type"] == "Valid":
            return item["status"], item["reason"], item["message"]
    return "", "", ""


@pytest.fixture
def tenants(kube: Kube) -> Iterator[tuple[str, str]]:
    """Two more namespaces: the ApplicationSet's owner team and a squatter."""
    suffix = uuid.uuid4().hex[:6]
    names = (f"team-owner-{suffix}", f"team-squatter-{suffix}")
    for name in names:
        kube.create(NAMESPACES, None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield names
    for name in names:
        kube.delete(NAMESPACES, None, name)


def cross_namespace_ps(name: str, appset_namespace: str | None) -> dict[str, Any]:
    body = make_ps(name, namespace=None, app_set="myservice", stages=canary_then_rest())
    if appset_namespace is not None:
        body["spec"]["appSetRef"]["namespace"] = appset_namespace
    return body


@pytest.mark.timeout(600)
def test_only_admitted_namespaces_roll_out_an_applicationset_and_a_squatter_cannot_block_the_owner(
    kube: Kube, control_plane: DevCluster, namespace: str, tenants: tuple[str, str], tmp_path: Path
) -> None:
    argocd, (owner, squatter) = namespace, tenants
    fleet = seed(kube, argocd, clusters=2)
    appset = kube.get(APPLICATION_SETS, argocd, "myservice")
    appset["metadata"].setdefault("annotations", {})[ALLOWED_NAMESPACES_ANNOTATION] = owner
    kube.replace(APPLICATION_SETS, argocd, appset)
    events_log = tmp_path / "simulator.jsonl"
    steps_user = control_plane.mint_user("tenancy-steps", ["system:masters"])

    simulator = FleetSimulator(
        kube, argocd, SimulatorConfig.from_yaml(FAST_FLEET), events_log=events_log
    ).start()
    executor = LocalExecutor(
        kube, ExecutorSettings(kubeconfig=steps_user, namespace=owner, watch_timeout_seconds=30)
    ).start()
    try:
        with in_process_watcher(kube, owner, namespaces=(owner, squatter), argocd_namespace=argocd):
            # The squatter comes first: it is refused, and it does not count as a claimant.
            kube.create(PROGRESSIVE_SYNCS, squatter, cross_namespace_ps("squat", argocd))
            wait_for(
                lambda: valid(kube, squatter, "squat")[:2] == ("False", "NamespaceNotAllowed"),
                what="the squatter refused",
            )
            assert f"not of namespace {squatter}" in valid(kube, squatter, "squat")[2]

            # Without appSetRef.namespace the ApplicationSet is looked up in the owner's namespace.
            kube.create(PROGRESSIVE_SYNCS, owner, cross_namespace_ps("local", None))
            wait_for(
                lambda: valid(kube, owner, "local")[:2] == ("False", "ApplicationSetNotFound"),
                what="no ApplicationSet in the owner's namespace",
            )
            assert f"in namespace {owner} does not exist" in valid(kube, owner, "local")[2]

            # The owner's rollout runs, although the squatter's object is older.
            kube.create(PROGRESSIVE_SYNCS, owner, cross_namespace_ps("web", argocd))
            wait_for(
                lambda: status_of(kube, owner, "web").get("phase") == "Succeeded",
                timeout=ROLLOUT_TIMEOUT,
                what="the owner's rollout Succeeded",
            )
            assert valid(kube, owner, "web")[:2] == ("True", "Valid")
    finally:
        executor.stop(timeout=15)
        simulator.stop()

    assert workflows_of(kube, squatter, "squat") == []
    assert workflows_of(kube, owner, "local") == []
    assert len(workflows_of(kube, owner, "web")) == 1
    assert sync_starts(events_log) == dict.fromkeys(fleet.apps, 1)
