"""The watcher refuses ProgressiveSyncs on a `spec.dependsOn` cycle (docs/depends-on.md) on a real
kube-apiserver: `Valid=False` with reason DependencyCycle naming the cycle, for one naming itself
and for the second of two naming each other; one that names a ProgressiveSync not there (yet) is not
refused for it. The watcher runs in this process as its own user; no ApplicationSet is needed: the
cycle is refused before the ApplicationSet is looked up.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from orchestrator.devenv import controlplane as devcluster
from orchestrator.kube.client import Kube
from tests.support.wait import wait_for
from tests.support.watcher_harness import create_ps, in_process_watcher, status_of

pytestmark = pytest.mark.integration

WATCHER_USER = "progressive-sync-watcher"


@pytest.fixture(scope="module")
def watcher_kube(control_plane: devcluster.DevCluster) -> Iterator[Kube]:
    """The adapter as the watcher's own user."""
    client = Kube.from_kubeconfig(str(control_plane.mint_user(WATCHER_USER, ["system:masters"])))
    yield client
    client.close()


def _valid(kube: Kube, namespace: str, name: str) -> tuple[str, str, str]:
    for item in status_of(kube, namespace, name).get("conditions") or []:
        if item["type"] == "Valid":
            return item["status"], item["reason"], item.get("message", "")
    return "", "", ""


def test_a_cycle_is_valid_false_naming_it(kube: Kube, watcher_kube: Kube, namespace: str) -> None:
    with in_process_watcher(watcher_kube, namespace):
        create_ps(kube, namespace, "gamma", "gamma", dependsOn=[{"name": "gamma"}])
        create_ps(kube, namespace, "alpha", "alpha", dependsOn=[{"name": "beta", "stage": "canary"}])
        wait_for(
            lambda: _valid(kube, namespace, "gamma")[:2] == ("False", "DependencyCycle"),
            what="gamma, naming itself, refused",
            describe=lambda: _valid(kube, namespace, "gamma"),
        )
        assert "spec.dependsOn makes a cycle: gamma -> gamma" in _valid(kube, namespace, "gamma")[2]
        # alpha's dependency is not there yet: not a cycle (its missing ApplicationSet is what it hears).
        alpha: Any = wait_for(
            lambda: (valid := _valid(kube, namespace, "alpha"))[0] and valid,
            what="alpha reconciled",
        )
        assert alpha[1] != "DependencyCycle", alpha
        create_ps(kube, namespace, "beta", "beta", dependsOn=[{"name": "alpha"}])
        wait_for(
            lambda: _valid(kube, namespace, "beta")[:2] == ("False", "DependencyCycle"),
            what="beta, closing the cycle, refused",
            describe=lambda: _valid(kube, namespace, "beta"),
        )
        assert "spec.dependsOn makes a cycle: beta -> alpha -> beta" in _valid(kube, namespace, "beta")[2]
