"""A list → watch cache of slim values (an "informer") on the one watch loop.

The loop itself (list, watch from the list's resourceVersion, resume after a dropped or half-open
stream, re-list on 410 Gone, one backoff policy that progress resets) is
`orchestrator.kube.watchloop.WatchLoop`; the informer adds the cache:

1. every **list** (the first, and after 410) is diffed against the cache, so changes *and
   deletions* that happened while blind are still reported;
2. every **event** updates the cache and reports the change;
3. when failures follow each other without any progress (a list, a stream the server accepted,
   an event) for every delay of `backoffs`, `run` raises `InformerFailed` (the process should exit
   and be restarted rather than serve a cache it cannot refresh). Streams cut every few seconds
   never get there: each reconnect that works is progress;
   a 403 (the account lost list/watch) or a missing CRD (404) is not such a failure: the informer
   waits for it, capped and for as long as it takes, says so once (`blocked`, `on_blocked`) and
   resumes by itself (see `orchestrator.kube.watchloop.blocked_by`); meanwhile its cache is stale
   (or empty, when it never listed) and `usable` is False;
4. `resync()` reports every cached object again (`ChangeType.RESYNC`), so a missed or mishandled
   event is healed by the periodic full resync the caller drives.

The cache keeps only what `slim(obj)` returns for each object: a small frozen value with the fields
the caller needs (10,000 Applications have to fit in tens of MB). `slim` may return None for an
object the caller does not care about; it is then treated as absent (a change to None is reported
as a deletion). Changes whose slim value is equal to the cached one are not reported: unrelated
writes (Argo CD's `reconciledAt`, managedFields) do not wake the work queue.

Handlers run on the informer's thread and must be quick (enqueue a key, nothing more). Readers may
call `get`, `values` and `by_index` from any thread.

Callers: `orchestrator.watcher.caches` (ProgressiveSyncs, ApplicationSets, Applications, Workflows, cluster
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

from orchestrator.kube.client import Kube, Resource, WatchEvent
from orchestrator.kube.watchloop import (
    DEFAULT_IDLE_TIMEOUT_SECONDS,
    BackoffPolicy,
    Blocked,
    Changed,
    Listed,
    WatchGaveUp,
    WatchLoop,
    WatchLoopSettings,
    WatchStats,
)

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


class InformerFailed(WatchGaveUp):
    """Every backoff was used up without progress: the cache can no longer be trusted."""


@dataclass(frozen=True)
class InformerSettings:
    """How one informer watches: stream length, backoffs. Built by `orchestrator.watcher.settings`."""

    # The server ends each watch after this long and the loop resumes from the last resourceVersion.
    watch_timeout_seconds: int = 300
    # Sleeps between failed attempts; their number bounds the failures in a row *without progress*
    # (a list, a stream the server accepted, an event) tolerated. Short and capped: a stream cut
    # by the network is resumed within the first delay, the cache is never deaf for long.
    backoffs: tuple[float, ...] = (0.2, 0.5, 1.0, 2.0, 4.0, *(5.0,) * 19)
    # Silence on a stream beyond this means a half-open connection: the read timeout fires.
    idle_timeout_seconds: float = DEFAULT_IDLE_TIMEOUT_SECONDS
    # Items per page of a list. Small pages keep the transient raw objects of a big list small:
    # measured with 10,000 Applications, 100 per page costs the process ~13 MB over its idle size
    # where 500 per page costs ~26 MB.
    page_size: int = 100

    @property
    def loop(self) -> WatchLoopSettings:
        """The watch loop's settings; the backoffs bound the failures in a row."""
        return WatchLoopSettings(
            watch_timeout_seconds=self.watch_timeout_seconds,
            idle_timeout_seconds=self.idle_timeout_seconds,
            page_size=self.page_size,
            backoff=BackoffPolicy.bounded(self.backoffs),
            wait_when_blocked=True,
        )


InformerStats = WatchStats
"""The loop's counters: lists, relists_after_gone, watches, events, bookmarks, failures."""


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
        on_blocked: Callable[[Informer[T], Blocked | None], None] | None = None,
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
        self.synced = threading.Event()
        self._loop = WatchLoop(
            kube,
            resource,
            namespace,
            settings=settings.loop,
            label_selector=label_selector,
            transform=self._keyed_slim,
            name=self.name,
            on_blocked=None if on_blocked is None else lambda blocked: on_blocked(self, blocked),
        )
        self.stats = self._loop.stats

    @property
    def resource_version(self) -> str:
        """Where the watch resumes: the last resourceVersion seen (list, event or bookmark)."""
        return self._loop.resource_version

    @property
    def blocked(self) -> Blocked | None:
        """What the informer waits on (a permission, a CRD), or None while it lists and watches."""
        return self._loop.blocked

    @property
    def usable(self) -> bool:
        """Listed at least once and not waiting on a permission or a CRD: the cache is current."""
        return self.synced.is_set() and self._loop.blocked is None

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
        """List and watch until `stop` is set; raises InformerFailed when the backoffs are used up
        without progress."""
        try:
            for step in self._loop.run(stop):
                if isinstance(step, Listed):
                    self._replace(step.items)
                elif isinstance(step, Changed):
                    self._apply(step.event)
        except WatchGaveUp as exc:
            raise InformerFailed(str(exc), status=exc.status) from exc

    def stop_stream(self) -> None:
        """End the watch stream in progress (call after setting the stop Event)."""
        self._loop.close_stream()

    def resync(self) -> int:
        """Report every cached object again as RESYNC; returns how many."""
        with self._lock:
            snapshot = list(self._cache.items())
        for key, value in snapshot:
            self._emit(Change(ChangeType.RESYNC, key, value, value))
        return len(snapshot)

    def _replace(self, pairs: list[tuple[ObjectKey, T]]) -> None:
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
        log.debug("%s: %d objects cached (%d changes)", self.name, len(fresh), len(changes))
        self.synced.set()
        for change in changes:
            self._emit(change)

    def _keyed_slim(self, obj: dict[str, Any]) -> tuple[ObjectKey, T] | None:
        value = self._slim(obj)
        return None if value is None else (_key_of(obj), value)

    def _apply(self, event: WatchEvent) -> None:
        if event.type == "BOOKMARK":
            return
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
    informers: Iterable[Informer[Any]],
    stop: threading.Event,
    timeout: float | None = None,
    *,
    or_blocked: bool = False,
) -> bool:
    """Wait until every informer has listed once (or `stop` is set / `timeout` passes).

    `or_blocked`: an informer waiting on a permission or a missing CRD counts as done (the caller
    starts without it and holds back whatever needs it)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    for informer in informers:
        while not informer.synced.wait(0.1):
            if or_blocked and informer.blocked is not None:
                break
            if stop.is_set() or (deadline is not None and time.monotonic() >= deadline):
                return False
    return True
