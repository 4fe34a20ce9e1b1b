"""A bounded list → watch → resume → re-list loop with a small in-memory cache (an "informer").

The Python client's own `Watch.stream()` recovers badly from 410 Gone and stops reconnecting after
`timeout_seconds` (see docs REFERENCE.md), so the watcher owns this loop:

1. **list** the resource; the list's resourceVersion is where the watch starts;
2. **watch** from there, with bookmarks; every event (BOOKMARK included) moves the resume point;
3. a stream the server ends (its `timeoutSeconds`, an API server restart, a dropped connection)
   is **resumed** from the last resourceVersion seen, without a re-list;
4. **410 Gone** (the resume point was compacted away) → re-list at once, and diff the new list
   against the cache, so changes *and deletions* that happened while blind are still reported;
5. any other failure (`Retryable`, an unknown error status) → **back off** along a bounded tuple of
   delays, logging "attempt n/m failed: ...; retrying in Xs"; a success resets the count, and when
   every delay is used up `run` raises `InformerFailed` (the process should exit and be restarted
   rather than serve a cache it cannot refresh);
6. `resync()` reports every cached object again (`ChangeType.RESYNC`), so a missed or mishandled
   event is healed by the periodic full resync the caller drives.

The cache keeps only what `slim(obj)` returns for each object: a small frozen value with the fields
the caller needs (10,000 Applications have to fit in tens of MB). `slim` may return None for an
object the caller does not care about; it is then treated as absent (a change to None is reported
as a deletion). Changes whose slim value is equal to the cached one are not reported: unrelated
writes (Argo CD's `reconciledAt`, managedFields) do not wake the work queue.

Handlers run on the informer's thread and must be quick (enqueue a key, nothing more). Readers may
call `get`, `values` and `by_index` from any thread.

Callers: `orchestrator.watcher.loop` (ProgressiveSyncs, ApplicationSets, Applications, Workflows, cluster
Secrets); tests.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Generic, TypeVar

from orchestrator.kube.client import Gone, Kube, KubeError, Resource, WatchEvent

log = logging.getLogger(__name__)

T = TypeVar("T")

ObjectKey = tuple[str, str]
"""(namespace, name) of a namespaced object."""


class ChangeType(StrEnum):
    """What happened to a cached object."""

    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"
    RESYNC = "RESYNC"  # nothing changed: the periodic full resync reports every object again


@dataclass(frozen=True)
class Change(Generic[T]):
    """One reported change: the object's key, its cached value before and after."""

    type: ChangeType
    key: ObjectKey
    old: T | None
    new: T | None

    @property
    def current(self) -> T | None:
        """The value after the change, or the last known value of a deleted object."""
        return self.new if self.new is not None else self.old


class InformerFailed(Exception):
    """Every backoff was used up without a successful list or watch: the cache can no longer be trusted."""


@dataclass(frozen=True)
class InformerSettings:
    """How one informer watches: stream length, backoffs. Built by `orchestrator.watcher.settings`."""

    # The server ends each watch after this long and the loop resumes from the last resourceVersion;
    # short enough that a silently dead connection is noticed (read timeout = this + 30 s).
    watch_timeout_seconds: int = 300
    # Sleeps between failed attempts; their number bounds the consecutive failures tolerated.
    backoffs: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 30.0, 30.0, 30.0)
    # Items per page of a list. Small pages keep the transient raw objects of a big list small:
    # measured with 10,000 Applications, 100 per page costs the process ~13 MB over its idle size
    # where 500 per page costs ~26 MB.
    page_size: int = 100


@dataclass
class InformerStats:
    """Counters a test or a debug log can read: how often the loop listed, resumed and failed."""

    lists: int = 0
    relists_after_gone: int = 0
    watches: int = 0
    events: int = 0
    bookmarks: int = 0
    failures: int = 0


def _no_indexers() -> dict[str, Callable[[Any], Iterable[str]]]:
    return {}


@dataclass
class _Index:
    """value → keys for one index function, kept in step with the cache."""

    function: Callable[[Any], Iterable[str]]
    keys_by_value: dict[str, set[ObjectKey]] = field(default_factory=dict)

    def add(self, key: ObjectKey, item: Any) -> None:
        for value in self.function(item):
            self.keys_by_value.setdefault(value, set()).add(key)

    def remove(self, key: ObjectKey, item: Any) -> None:
        for value in self.function(item):
            keys = self.keys_by_value.get(value)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self.keys_by_value[value]


class Informer(Generic[T]):
    """List-then-watch one resource in one namespace (or all) into a cache of slim values."""

    def __init__(
        self,
        kube: Kube,
        resource: Resource,
        namespace: str | None,
        *,
        slim: Callable[[dict[str, Any]], T | None],
        handler: Callable[[Change[T]], None],
        settings: InformerSettings,
        label_selector: str | None = None,
        indexers: Mapping[str, Callable[[T], Iterable[str]]] | None = None,
        name: str | None = None,
    ) -> None:
        self._kube = kube
        self.resource = resource
        self.namespace = namespace
        self._slim = slim
        self._handler = handler
        self.settings = settings
        self.label_selector = label_selector
        self.name = name or f"{resource.plural}@{namespace or '*'}"
        self._lock = threading.RLock()
        self._cache: dict[ObjectKey, T] = {}
        self._indexes = {index: _Index(function) for index, function in (indexers or _no_indexers()).items()}
        self._close_stream: Callable[[], None] | None = None
        self.synced = threading.Event()
        self.resource_version = ""
        self.stats = InformerStats()

    # -- reading the cache ----------------------------------------------------------------

    def get(self, key: ObjectKey) -> T | None:
        """The cached value of one object, or None."""
        with self._lock:
            return self._cache.get(key)

    def values(self) -> list[T]:
        """A snapshot of every cached value."""
        with self._lock:
            return list(self._cache.values())

    def items(self) -> list[tuple[ObjectKey, T]]:
        """A snapshot of every cached (key, value)."""
        with self._lock:
            return list(self._cache.items())

    def keys(self) -> list[ObjectKey]:
        """A snapshot of every cached key."""
        with self._lock:
            return list(self._cache)

    def by_index(self, index: str, value: str) -> list[T]:
        """The cached values whose index function yields `value`."""
        with self._lock:
            keys = self._indexes[index].keys_by_value.get(value, ())
            return [self._cache[key] for key in keys]

    def __len__(self) -> int:
        with self._lock:
            return len(self._cache)

    # -- the loop -------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """List and watch until `stop` is set; raises InformerFailed when every backoff is used up."""
        backoffs = self.settings.backoffs
        attempts = len(backoffs) + 1
        failures = 0
        need_list = True
        while not stop.is_set():
            try:
                if need_list:
                    self._list()
                    need_list = False
                    failures = 0
                self._watch(stop)
                failures = 0
            except Gone as exc:
                # Not a failure: the resume point is too old. Re-list at once (a list without a
                # resourceVersion is served from etcd and never answers 410).
                log.info(
                    "%s: resourceVersion %s is gone (%s); re-listing", self.name, self.resource_version, exc
                )
                self.stats.relists_after_gone += 1
                need_list = True
            except KubeError as exc:
                if stop.is_set():
                    break
                failures += 1
                self.stats.failures += 1
                if failures >= attempts:
                    raise InformerFailed(
                        f"{self.name}: attempt {failures}/{attempts} failed: {exc}; giving up"
                    ) from exc
                delay = backoffs[failures - 1]
                log.warning(
                    "%s: attempt %d/%d failed: %s; retrying in %.1fs",
                    self.name,
                    failures,
                    attempts,
                    exc,
                    delay,
                )
                stop.wait(delay)
        log.debug("%s: stopped at resourceVersion %s", self.name, self.resource_version)

    def stop_stream(self) -> None:
        """End the watch stream in progress (call after setting the stop Event)."""
        close = self._close_stream
        if close is not None:
            close()

    def resync(self) -> int:
        """Report every cached object again as RESYNC; returns how many."""
        with self._lock:
            snapshot = list(self._cache.items())
        for key, value in snapshot:
            self._emit(Change(ChangeType.RESYNC, key, value, value))
        return len(snapshot)

    def _list(self) -> None:
        # Slimmed page by page: the raw objects of a big list are never all in memory at once.
        pairs, list_rv = self._kube.list(
            self.resource,
            self.namespace,
            label_selector=self.label_selector,
            limit=self.settings.page_size,
            transform=self._keyed_slim,
        )
        fresh: dict[ObjectKey, T] = dict(pairs)
        del pairs
        changes: list[Change[T]] = []
        with self._lock:
            old_cache = self._cache
            for key, value in fresh.items():
                old = old_cache.get(key)
                if old is None:
                    changes.append(Change(ChangeType.ADDED, key, None, value))
                elif old != value:
                    changes.append(Change(ChangeType.MODIFIED, key, old, value))
            for key, old in old_cache.items():
                if key not in fresh:
                    # Deleted while we were not watching: only the diff can tell.
                    changes.append(Change(ChangeType.DELETED, key, old, None))
            self._cache = fresh
            for index in self._indexes.values():
                index.keys_by_value.clear()
                for key, value in fresh.items():
                    index.add(key, value)
            self.resource_version = list_rv
        self.stats.lists += 1
        log.debug(
            "%s: listed %d objects at resourceVersion %s (%d changes)",
            self.name,
            len(fresh),
            list_rv,
            len(changes),
        )
        self.synced.set()
        for change in changes:
            self._emit(change)

    def _keyed_slim(self, obj: dict[str, Any]) -> tuple[ObjectKey, T] | None:
        value = self._slim(obj)
        return None if value is None else (_key_of(obj), value)

    def _watch(self, stop: threading.Event) -> None:
        self.stats.watches += 1

        def remember_closer(close: Callable[[], None]) -> None:
            self._close_stream = close
            if stop.is_set():  # stop arrived while the request was on its way
                close()

        try:
            stream = self._kube.watch(
                self.resource,
                self.namespace,
                resource_version=self.resource_version,
                timeout_seconds=self.settings.watch_timeout_seconds,
                label_selector=self.label_selector,
                on_open=remember_closer,
            )
            for event in stream:
                if stop.is_set():
                    break
                self._apply(event)
        finally:
            self._close_stream = None

    def _apply(self, event: WatchEvent) -> None:
        if event.type == "BOOKMARK":
            self.stats.bookmarks += 1
            self.resource_version = event.resource_version or self.resource_version
            return
        self.stats.events += 1
        key = _key_of(event.object)
        value = None if event.type == "DELETED" else self._slim(event.object)
        with self._lock:
            old = self._cache.get(key)
            if old is not None:
                for index in self._indexes.values():
                    index.remove(key, old)
            if value is None:
                self._cache.pop(key, None)
            else:
                self._cache[key] = value
                for index in self._indexes.values():
                    index.add(key, value)
            self.resource_version = event.resource_version or self.resource_version
        if value is None:
            change: Change[T] | None = Change(ChangeType.DELETED, key, old, None) if old is not None else None
        elif old is None:
            change = Change(ChangeType.ADDED, key, None, value)
        elif old != value:
            change = Change(ChangeType.MODIFIED, key, old, value)
        else:
            change = None
        if change is not None:
            self._emit(change)

    def _emit(self, change: Change[T]) -> None:
        try:
            self._handler(change)
        except Exception:
            # A handler bug must not kill the watch loop; the periodic resync gives it another go.
            log.exception("%s: handler failed on %s %s", self.name, change.type, change.key)


def _key_of(obj: Mapping[str, Any]) -> ObjectKey:
    metadata = obj.get("metadata") or {}
    return str(metadata.get("namespace") or ""), str(metadata.get("name") or "")


def run_in_thread(
    informer: Informer[Any], stop: threading.Event, on_failure: Callable[[BaseException], None]
) -> threading.Thread:
    """Start `informer.run(stop)` on a daemon thread; `on_failure` hears of an InformerFailed or a crash."""

    def target() -> None:
        try:
            informer.run(stop)
        except BaseException as exc:  # the supervisor decides; a dead informer must not go unnoticed
            log.error("%s: watch loop ended: %s", informer.name, exc)
            on_failure(exc)

    thread = threading.Thread(target=target, name=f"informer-{informer.name}", daemon=True)
    thread.start()
    return thread


def wait_synced(
    informers: Iterable[Informer[Any]], stop: threading.Event, timeout: float | None = None
) -> bool:
    """Wait until every informer has listed once (or `stop` is set / `timeout` passes)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    for informer in informers:
        while not informer.synced.wait(0.1):
            if stop.is_set() or (deadline is not None and time.monotonic() >= deadline):
                return False
    return True
