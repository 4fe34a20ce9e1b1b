"""The one watch loop against the real API server through a fault-injecting proxy (issue 18).

Real: kube-apiserver + etcd; `tests/support/tcp_proxy.py` between the informer and the API server
cuts streams, holds them half-open, refuses connections. The test's own client talks directly.
ConfigMaps stand in for any resource. Every wait has a deadline.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.devenv import controlplane as devcluster
from orchestrator.devenv.controlplane import DevCluster
from orchestrator.kube.client import CONFIG_MAPS, NAMESPACES, Kube, KubeSettings
from orchestrator.kube.informer import Informer, InformerSettings, run_in_thread
from tests.support import etcd
from tests.support.tcp_proxy import FaultProxy, Mode, kubeconfig_via, proxied
from tests.support.wait import wait_for

pytestmark = pytest.mark.integration

Slim = tuple[str, str]


def slim(obj: dict[str, Any]) -> Slim:
    return obj["metadata"]["name"], str((obj.get("data") or {}).get("value", ""))


def config_map(name: str, value: str = "0") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"value": value}}


class Running:
    """One informer on its thread; `failures` collects what `run` raised."""

    def __init__(self, informer: Informer[Any]) -> None:
        self.informer = informer
        self.stop = threading.Event()
        self.failures: list[BaseException] = []
        self.thread = run_in_thread(informer, self.stop, self.failures.append)

    def close(self) -> None:
        self.stop.set()
        self.informer.stop_stream()
        self.thread.join(timeout=15)
        assert not self.thread.is_alive(), "the informer stops promptly"


@pytest.fixture
def proxy(control_plane: DevCluster) -> Iterator[FaultProxy]:
    with proxied(control_plane.api_url) as running:
        yield running


@pytest.fixture
def proxied_kube(proxy: FaultProxy, control_plane: DevCluster, tmp_path: Path) -> Iterator[Kube]:
    path = kubeconfig_via(proxy, control_plane.kubeconfig, tmp_path / "proxied.kubeconfig")
    client = Kube.from_kubeconfig(str(path), settings=KubeSettings(read_timeout=5.0, retry_backoffs=(0.2,)))
    yield client
    client.close()


def start(kube: Kube, namespace: str, settings: InformerSettings) -> Running:
    informer: Informer[Slim] = Informer(
        kube, CONFIG_MAPS, namespace, slim=slim, handler=lambda change: None, settings=settings
    )
    return Running(informer)


def stream_open(running: Running) -> bool:
    return running.informer._loop._close_stream is not None


def test_streams_cut_again_and_again_never_exhaust_the_backoffs(
    kube: Kube, namespace: str, proxy: FaultProxy, proxied_kube: Kube
) -> None:
    """The old informer counted every stream that dropped after delivering events as one more failure
    and gave up after len(backoffs)+1 of them; here 25 cuts go by a policy that allows 3 in a row."""
    running = start(
        proxied_kube, namespace, InformerSettings(watch_timeout_seconds=300, backoffs=(0.05,) * 3)
    )
    try:
        wait_for(running.informer.synced.is_set, timeout=30, what="the first list")
        for round_ in range(25):
            wait_for(lambda: stream_open(running) or running.failures, timeout=30, what="a stream to open")
            assert not running.failures, running.failures
            kube.create(CONFIG_MAPS, namespace, config_map(f"cm-{round_}"))
            wait_for(
                lambda r=round_: running.informer.get((namespace, f"cm-{r}")) is not None,
                timeout=30,
                what=f"cm-{round_} through the stream",
            )
            proxy.cut()  # the stream delivered an event, then the network dropped it
            wait_for(lambda: not stream_open(running), timeout=30, what="the loop to notice the cut")
        assert not running.failures, running.failures
        stats = running.informer.stats
        assert stats.failures >= 25, "every cut was a failed stream"
        assert stats.lists == 1, "a cut stream is resumed, never re-listed"
    finally:
        running.close()


def test_a_half_open_stream_is_noticed_by_the_read_timeout(
    kube: Kube, namespace: str, proxy: FaultProxy, proxied_kube: Kube
) -> None:
    idle = 3.0
    running = start(
        proxied_kube,
        namespace,
        InformerSettings(watch_timeout_seconds=300, idle_timeout_seconds=idle, backoffs=(0.2,) * 20),
    )
    try:
        wait_for(lambda: stream_open(running), timeout=30, what="a stream to open")
        proxy.set_mode(Mode.BLACKHOLE)  # the connection stays up; nothing arrives any more
        kube.create(CONFIG_MAPS, namespace, config_map("while-half-open"))
        # Without the bound the stream would hang until timeoutSeconds + 30 (330 s).
        wait_for(lambda: running.informer.stats.failures >= 1, timeout=idle + 10, what="the read timeout")
        assert running.informer.get((namespace, "while-half-open")) is None
        proxy.set_mode(Mode.PASS)
        wait_for(
            lambda: running.informer.get((namespace, "while-half-open")) is not None,
            timeout=20,
            what="the event once the network is back",
        )
        assert not running.failures, running.failures
        assert running.informer.stats.lists == 1, "resumed from where it was, no re-list"
    finally:
        running.close()


def test_an_outage_of_tens_of_seconds_is_waited_out(
    kube: Kube, namespace: str, proxy: FaultProxy, proxied_kube: Kube
) -> None:
    """Refused for 20 s with the production backoffs: no give-up, and resumed within one cap."""
    settings = InformerSettings(watch_timeout_seconds=300)
    running = start(proxied_kube, namespace, settings)
    try:
        wait_for(lambda: stream_open(running), timeout=30, what="a stream to open")
        proxy.set_mode(Mode.REFUSE)
        kube.create(CONFIG_MAPS, namespace, config_map("during-outage"))
        wait_for(lambda: running.informer.stats.failures >= 5, timeout=30, what="the loop to keep trying")
        outage = threading.Event()
        outage.wait(20.0 - 10.0)  # the rest of a 20 s outage (failures took the first seconds)
        assert not running.failures, running.failures
        proxy.set_mode(Mode.PASS)
        cap = max(settings.backoffs)
        wait_for(
            lambda: running.informer.get((namespace, "during-outage")) is not None,
            timeout=cap + 10,
            what="the change made during the outage",
        )
    finally:
        running.close()


@pytest.fixture(scope="module")
def uncached() -> Iterator[tuple[DevCluster, Kube]]:
    """A control plane serving lists and watches from etcd: a compacted continue token answers 410
    (with the watch cache a paginated list is served from the cache's snapshot and never does)."""
    with devcluster.running(extra_apiserver_args=["--watch-cache=false"]) as cluster:
        client = Kube.from_kubeconfig(str(cluster.kubeconfig))
        yield cluster, client
        client.close()


def test_a_410_on_a_later_page_of_a_list_restarts_the_list(uncached: tuple[DevCluster, Kube]) -> None:
    """A paginated list whose continue token is compacted away mid-list (410) lists again from scratch."""
    control_plane, kube = uncached
    namespace = "paged-410"
    kube.create(NAMESPACES, None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    for index in range(7):
        kube.create(CONFIG_MAPS, namespace, config_map(f"cm-{index}"))
    compacted = threading.Event()

    def slim_and_compact(obj: dict[str, Any]) -> Slim:
        if not compacted.is_set():  # between page 1 and page 2 of the first list, once
            compacted.set()
            kube.create(
                CONFIG_MAPS,
                "default",
                {**config_map(f"bump-{namespace}"), "metadata": {"generateName": "bump-"}},
            )
            etcd.compact(control_plane.etcd_url)
        return slim(obj)

    informer: Informer[Slim] = Informer(
        kube,
        CONFIG_MAPS,
        namespace,
        slim=slim_and_compact,
        handler=lambda change: None,
        settings=InformerSettings(page_size=2),
    )
    running = Running(informer)
    try:
        wait_for(informer.synced.is_set, timeout=30, what="a complete list")
        assert compacted.is_set()
        assert informer.stats.relists_after_gone == 1, "page 2 met 410 and the list started again"
        assert sorted(name for name, _ in informer.values()) == [f"cm-{i}" for i in range(7)]
        assert not running.failures
    finally:
        running.close()
