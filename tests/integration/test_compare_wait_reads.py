"""`select`'s wait for Argo CD's answers to its compare requests reads only what it waits on.

In a namespace of 4,000 Applications (200 ApplicationSets x 20 clusters, issue 33) each poll of
that wait listed all of them. It now GETs the pending ones when that is the cheaper read
(`steps.select_stage.read_by_name`), and lists otherwise; either way it returns every Application
with Argo CD's answers in. On a real kube-apiserver, with Argo CD's answer played when the step
sleeps (the clock is the test's), and the reads counted on the real adapter they go through.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest

from orchestrator.argocd import appsync
from orchestrator.kube.client import APPLICATIONS, Kube
from steps.select_stage import _wait_for_answers
from tests.support.argocd_play import ArgoWorld
from tests.support.builders import NEW_REVISION as REVISION
from tests.support.builders import OLD_REVISION
from tests.support.clock import ManualClock

pytestmark = pytest.mark.integration

CLUSTERS = ["c1", "c2", "c3"]


@dataclass
class CountingKube:
    """The real adapter; each Application read it passes on is also noted ("get <name>", "list")."""

    kube: Kube
    reads: list[str] = field(default_factory=list)

    def get(self, resource: Any, namespace: str, name: str) -> dict[str, Any]:
        self.reads.append(f"get {name}")
        return self.kube.get(resource, namespace, name)

    def list(self, resource: Any, namespace: str, **kwargs: Any) -> Any:
        self.reads.append("list")
        return self.kube.list(resource, namespace, **kwargs)


class AnsweringClock(ManualClock):
    """A manual clock that plays Argo CD's answers the first time the step sleeps."""

    def __init__(self, start: datetime, answer: Callable[[], None]) -> None:
        super().__init__(start)
        self._answer: Callable[[], None] | None = answer

    def sleep(self, seconds: float) -> None:
        if self._answer is not None:
            self._answer()
            self._answer = None
        super().sleep(seconds)


@pytest.fixture
def world(kube: Kube, namespace: str) -> Iterator[ArgoWorld]:
    now = datetime.now(UTC).replace(microsecond=0)
    yield ArgoWorld.create(
        kube, namespace, clusters=CLUSTERS, revision=REVISION, previous=OLD_REVISION, now=now
    )


def ask(world: ArgoWorld, clusters: list[str]) -> list[str]:
    """Leave a compare request pending on each cluster's Application, as `ask_to_compare` does."""
    for cluster in clusters:
        world.kube.patch(
            APPLICATIONS, world.namespace, world.app(cluster), appsync.refresh_patch(datetime.now(UTC))
        )
    return [world.app(cluster) for cluster in clusters]


def answer(world: ArgoWorld, clusters: list[str]) -> Callable[[], None]:
    def play() -> None:
        for cluster in clusters:
            world.compares(cluster, datetime.now(UTC), sync="OutOfSync", revision=REVISION)

    return play


@pytest.mark.parametrize(
    ("pending", "reads"),
    [
        pytest.param(
            ["c2"], ["get myservice-c2", "get myservice-c2"], id="one-of-three-pending-is-read-by-name"
        ),
        pytest.param(CLUSTERS, ["list", "list"], id="all-three-pending-are-listed"),
    ],
)
def test_the_wait_reads_what_is_cheaper_and_returns_every_application_answered(
    kube: Kube, world: ArgoWorld, pending: list[str], reads: list[str]
) -> None:
    names = ask(world, pending)
    items, _ = kube.list(APPLICATIONS, world.namespace)
    counting = CountingKube(kube)
    clock = AnsweringClock(datetime.now(UTC), answer(world, pending))
    got, left = _wait_for_answers(counting, world.namespace, items, names, clock=clock, wait_seconds=30)  # type: ignore[arg-type]
    assert left == ()
    assert counting.reads == reads
    assert sorted(item["metadata"]["name"] for item in got) == [world.app(c) for c in CLUSTERS]
    answered = {item["metadata"]["name"]: item for item in got}
    for name in names:
        assert not appsync.refresh_requested(answered[name]), (
            f"{name}: the answer is in what select plans with"
        )
        assert answered[name]["status"]["sync"] == {"status": "OutOfSync", "revision": REVISION}


def test_a_pending_application_deleted_meanwhile_is_answered_and_no_longer_planned(
    kube: Kube, world: ArgoWorld
) -> None:
    names = ask(world, ["c2"])
    items, _ = kube.list(APPLICATIONS, world.namespace)
    counting = CountingKube(kube)
    clock = AnsweringClock(
        datetime.now(UTC), lambda: kube.delete(APPLICATIONS, world.namespace, world.app("c2"))
    )
    got, left = _wait_for_answers(counting, world.namespace, items, names, clock=clock, wait_seconds=30)  # type: ignore[arg-type]
    assert left == ()
    assert counting.reads == ["get myservice-c2", "get myservice-c2"]
    assert sorted(item["metadata"]["name"] for item in got) == [world.app("c1"), world.app("c3")]


def test_a_request_left_unanswered_is_returned_pending_when_the_wait_runs_out(
    kube: Kube, world: ArgoWorld
) -> None:
    names = ask(world, ["c2"])
    items, _ = kube.list(APPLICATIONS, world.namespace)
    counting = CountingKube(kube)
    clock = ManualClock(datetime.now(UTC))
    started = clock.now()
    got, left = _wait_for_answers(counting, world.namespace, items, names, clock=clock, wait_seconds=5)  # type: ignore[arg-type]
    assert left == ("myservice-c2",)
    assert (clock.now() - started).total_seconds() == 5
    assert set(counting.reads) == {"get myservice-c2"}
    assert len(got) == len(CLUSTERS)
