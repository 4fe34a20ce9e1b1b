"""The watcher's Events against a real API server: an Event whose create was answered with a lost
answer (the connection closed before the watcher heard; the API server may or may not have committed
it) is retried, and recorded exactly once either way; a replayed transition is recorded once, and
replayed again it is only read.

Real: the control plane, the Events API. The watcher's client talks through the test's TCP proxy
(tests/support/tcp_proxy.py), which drops the answer to one write.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from orchestrator.api.reasons import Reason
from orchestrator.core.clock import SystemClock
from orchestrator.devenv import controlplane as devcluster
from orchestrator.kube.client import EVENTS, Kube
from orchestrator.watcher.act import Actor
from orchestrator.watcher.caches import CachedPS
from orchestrator.watcher.decision import RecordEvent
from orchestrator.watcher.settings import Settings
from orchestrator.watcher.transitions import TransitionKind, transition_identity
from tests.support.tcp_proxy import FaultProxy, kubeconfig_via, proxied

pytestmark = [pytest.mark.integration]


@pytest.fixture
def proxy(control_plane: devcluster.DevCluster) -> Iterator[FaultProxy]:
    with proxied(control_plane.api_url) as started:
        yield started


@pytest.fixture
def proxied_kube(control_plane: devcluster.DevCluster, proxy: FaultProxy, tmp_path: Path) -> Iterator[Kube]:
    config = kubeconfig_via(proxy, control_plane.kubeconfig, tmp_path / "proxied.kubeconfig")
    client = Kube.from_kubeconfig(str(config))
    yield client
    client.close()


def test_an_event_whose_create_answer_was_lost_is_retried_and_recorded_once(
    proxy: FaultProxy, proxied_kube: Kube, kube: Kube, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    actor = Actor(proxied_kube, Settings(), SystemClock(), requeue=lambda key, seconds: None)
    cached = CachedPS(
        {
            "apiVersion": "progressive-sync.io/v1alpha1",
            "kind": "ProgressiveSync",
            "metadata": {"name": "web", "namespace": namespace, "uid": "u-1", "resourceVersion": "1"},
        }
    )
    # As long as a failed rollout's message can be (the watcher keeps 1,024 characters): the create
    # (~1,950 bytes) is the only request over 1,500 bytes, so its answer is the one dropped.
    failed = ", ".join(f"cluster-{i:03d} (SyncFailed)" for i in range(40))
    message = f"Workflow web-r1 ended Failed; failed: {failed}"[:1024]
    proxy.lose_write_answers(1, over_bytes=1500)

    with caplog.at_level(logging.WARNING, logger="orchestrator.kube.client"):
        actor.record_event(cached, RecordEvent("Warning", Reason.ROLLOUT_FAILED, message))

    assert proxy.counts["answers_dropped"] == 1, "the first create's answer was lost"
    retries = [
        r.getMessage() for r in caplog.records if "create event RolloutFailed: attempt 1/" in r.getMessage()
    ]
    assert len(retries) == 1, [r.getMessage() for r in caplog.records]
    items, _ = kube.list(EVENTS, namespace, field_selector="involvedObject.name=web")
    assert [(e["reason"], e["message"]) for e in items] == [("RolloutFailed", message)]


def test_a_replayed_transition_is_recorded_once_and_a_second_replay_only_reads(
    control_plane: devcluster.DevCluster, kube: Kube, namespace: str
) -> None:
    """What a new leader replays (`replayed_transitions`) under the name its predecessor gave the
    Event: created when missing, found by a read when present, so a watcher restarted on a converged
    fleet writes nothing (docs/design/watcher.md, "Events: once each")."""
    actor = Actor(kube, Settings(), SystemClock(), requeue=lambda key, seconds: None)
    cached = CachedPS(
        {
            "apiVersion": "progressive-sync.io/v1alpha1",
            "kind": "ProgressiveSync",
            "metadata": {"name": "web", "namespace": namespace, "uid": "u-2", "resourceVersion": "1"},
        }
    )
    at = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
    identity = transition_identity("u-2", "r1", 1, TransitionKind.STAGE_SUCCEEDED, stage="canary")
    message = "stage 'canary' succeeded"
    replayed = RecordEvent("Normal", Reason.STAGE_SUCCEEDED, message, identity=identity, at=at, replayed=True)

    actor.record_event(cached, replayed)
    mark = control_plane.audit_mark()
    actor.record_event(cached, replayed)

    items, _ = kube.list(EVENTS, namespace, field_selector="involvedObject.name=web")
    assert [(e["metadata"]["name"], e["reason"], e["lastTimestamp"]) for e in items] == [
        (f"web.{identity}", "StageSucceeded", "2030-01-01T12:00:00Z")
    ]
    assert [e for e in control_plane.audit_events_since(mark) if e.resource == "events"] == []


@pytest.mark.parametrize(
    "identity",
    [pytest.param("0123456789abcdef", id="a-transition"), pytest.param("", id="a-notice-with-a-random-name")],
)
def test_a_progressive_sync_with_the_longest_name_gets_its_events(
    kube: Kube, namespace: str, identity: str
) -> None:
    """A ProgressiveSync's name may be 253 characters: the Event's name (`<name>.<suffix>`) is cut
    and hashed to stay one the API server accepts, and the Event still names its object whole."""
    name = "w" * 120 + "." + "e" * 132
    actor = Actor(kube, Settings(), SystemClock(), requeue=lambda key, seconds: None)
    cached = CachedPS(
        {
            "apiVersion": "progressive-sync.io/v1alpha1",
            "kind": "ProgressiveSync",
            "metadata": {"name": name, "namespace": namespace, "uid": "u-3", "resourceVersion": "1"},
        }
    )
    notice = RecordEvent("Normal", Reason.STAGE_SUCCEEDED, "stage 'canary' succeeded", identity)
    actor.record_event(cached, notice)

    items, _ = kube.list(EVENTS, namespace, field_selector=f"involvedObject.name={name}")
    assert [(len(e["metadata"]["name"]), e["reason"]) for e in items] == [(253, "StageSucceeded")]
