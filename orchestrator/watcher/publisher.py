"""Keeps the cluster inventory ConfigMap of each Argo CD namespace current (see
`orchestrator.argocd.inventory`): the steps read clusters from it, never the Secrets.

`InventoryPublisher(kube, clusters_of, namespaces)` (`namespaces()` says which Argo CD namespaces to
publish: the pinned one, or, watching every namespace, each that holds clusters or ProgressiveSyncs):

- `publish(namespace)` builds the ConfigMap from `clusters_of(namespace)` (the watcher's cluster
  informer cache: names, servers and labels, never credentials), reads the live one and writes only
  when they differ: create when absent, else a conditional replace (the live resourceVersion);
- `mark(namespace)` / `mark_all()` ask the background loop (`run`) to publish again; changes that
  arrive close together are published once (`coalesce_seconds`). A failed publish is retried along
  `backoffs` (the last repeats) until it succeeds or the loop stops.

The watcher publishes every namespace synchronously before its first reconcile (a Workflow never
starts before its inventory exists), marks a namespace on every cluster Secret change, and marks
them all on each resync, which also repairs a ConfigMap someone edited by hand.

Callers: `orchestrator.watcher.loop` (built on `Caches.clusters_in`; a cluster Secret's change marks
its namespace).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Sequence

from orchestrator.argocd.fleet import Cluster
from orchestrator.argocd.inventory import INVENTORY_NAME, InventoryError, inventory_configmap, same_content
from orchestrator.kube.client import CONFIG_MAPS, AlreadyExists, Conflict, Kube, KubeError, NotFound

log = logging.getLogger(__name__)


class InventoryPublisher:
    """See the module docstring. Thread-safe."""

    def __init__(
        self,
        kube: Kube,
        clusters_of: Callable[[str], Sequence[Cluster]],
        namespaces: Callable[[], Iterable[str]],
        *,
        backoffs: Sequence[float] = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0),
        coalesce_seconds: float = 0.2,
        on_published: Callable[[str], None] | None = None,
    ) -> None:
        self.kube = kube
        self.clusters_of = clusters_of
        self.namespaces = namespaces
        self.backoffs = tuple(backoffs)
        self.coalesce_seconds = coalesce_seconds
        self.on_published = on_published
        self.writes = 0
        self._dirty: set[str] = set()
        self._lock = threading.Lock()
        self._wake = threading.Event()

    def publish(self, namespace: str) -> bool:
        """Publish one namespace now; True when a write was needed. Raises KubeError/InventoryError."""
        clusters = self.clusters_of(namespace)
        desired = inventory_configmap(namespace, clusters)
        count = len(clusters)
        try:
            live = self.kube.get(CONFIG_MAPS, namespace, INVENTORY_NAME)
        except NotFound:
            live = None
        if live is not None and same_content(live, desired):
            log.debug("cluster inventory %s/%s is current (%d clusters)", namespace, INVENTORY_NAME, count)
            return False
        if live is None:
            try:
                self.kube.create(CONFIG_MAPS, namespace, desired)
            except AlreadyExists as exc:
                raise Conflict(
                    f"{namespace}/{INVENTORY_NAME} appeared while we created it", status=409
                ) from exc
        else:
            desired["metadata"]["resourceVersion"] = live["metadata"]["resourceVersion"]
            # Keep labels and annotations others added (e.g. Helm's or a backup tool's).
            meta = live.get("metadata") or {}
            desired["metadata"]["labels"] = {**(meta.get("labels") or {}), **desired["metadata"]["labels"]}
            desired["metadata"]["annotations"] = {
                **(meta.get("annotations") or {}),
                **desired["metadata"]["annotations"],
            }
            self.kube.replace(CONFIG_MAPS, namespace, desired)
        self.writes += 1
        log.info("published the cluster inventory %s/%s (%d clusters)", namespace, INVENTORY_NAME, count)
        if self.on_published is not None:
            self.on_published(namespace)
        return True

    def mark(self, namespace: str) -> None:
        """Ask the loop to publish `namespace` again (cheap; call from informer handlers)."""
        with self._lock:
            self._dirty.add(namespace)
        self._wake.set()

    def mark_all(self) -> None:
        """Ask the loop to check every namespace (the resync)."""
        with self._lock:
            self._dirty.update(self.namespaces())
        self._wake.set()

    def run(self, stop: threading.Event) -> None:
        """Publish marked namespaces until `stop` is set; failures are retried with backoff."""
        failures = 0
        while not stop.is_set():
            self._wake.wait(timeout=1.0)
            if stop.is_set():
                return
            if not self._wake.is_set():
                continue
            # Let a burst of Secret changes (a fleet being registered) settle into one write.
            stop.wait(self.coalesce_seconds)
            self._wake.clear()
            with self._lock:
                batch, self._dirty = sorted(self._dirty), set()
            failed: list[str] = []
            for namespace in batch:
                try:
                    self.publish(namespace)
                except (KubeError, InventoryError) as exc:
                    failed.append(namespace)
                    log.warning("publishing the cluster inventory of %s failed: %s", namespace, exc)
            if not failed:
                failures = 0
                continue
            delay = self.backoffs[min(failures, len(self.backoffs) - 1)]
            failures += 1
            log.info("publishing the cluster inventory again in %.1fs (attempt %d)", delay, failures + 1)
            with self._lock:
                self._dirty.update(failed)
            if stop.wait(delay):
                return
            self._wake.set()
