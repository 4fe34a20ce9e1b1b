"""The one list → watch → resume → re-list-on-410 loop, with one backoff policy.

Every follower of the API server (the watcher's informers, the local executor, the fleet simulator,
the steps' Application follower) iterates `WatchLoop.run(stop)` and reacts to what it yields:

- `Listed(items, resource_version)`: a full (re-)list, the first and after 410 Gone; the caller
  replaces what it knows (an informer diffs, so deletions while blind are reported);
- `Changed(event)`: one watch event (ADDED, MODIFIED, DELETED, BOOKMARK); the resume point has
  already moved past it;
- `WindowEnded()`: the server ended the stream at its `timeoutSeconds` (a quiet window: time for
  the caller to look at its clock); the loop resumes from the last resourceVersion seen.

What the loop does on its own:

1. a stream that drops (reset, truncated chunk, API server restart) is **resumed** from the last
   resourceVersion, without a re-list;
2. a stream that is silent for longer than `idle_timeout_seconds` (the server sends a BOOKMARK at
   least about once a minute, and ends every stream at `timeoutSeconds`) is a half-open
   connection: the read timeout fires and the stream is resumed;
3. **410 Gone** (on a watch, or on a later page of a paginated list whose continue token was
   compacted) → re-list from scratch at once; 410s in a row without progress back off like
   failures (compaction faster than a big list cannot make it spin);
4. any other failure backs off along `Backoff`: the delays grow to a cap and **progress resets
   them** — a successful list, a stream the server accepted, an event. A network that keeps
   working, however often it drops streams, never exhausts the policy; only consecutive failures
   without progress do, and then `run` raises `WatchGaveUp` (when the policy has a limit at all);
5. with `wait_when_blocked`, a **403** (the account lost list/watch on the resource: a RoleBinding
   removed) or a **404 on a custom resource** (its CRD not installed, or removed at run time) is not
   a failure that can exhaust the policy: nothing on our side can fix it, so the loop waits along
   the same capped delays for as long as it takes, says once what is missing and how to fix it
   (`Blocked`, given to `on_blocked` and logged), and resumes by itself (`on_blocked(None)`) once
   a list or a watch works again. After a 404 the loop re-lists: the objects went with their CRD.

`Backoff` is pure (no clock, no sleeping): `failed()` says how long to wait or that it is time to
give up, `waiting()` how long to wait without ever giving up, `progressed()` resets it.
`blocked_by(exc, ...)` is the pure decision of which errors are "wait and say so".

Callers: `orchestrator.kube.informer`, `orchestrator.engine.executor`,
`orchestrator.simulator.appcontroller`, `orchestrator.argocd.appwatch`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from orchestrator.kube.client import Gone, Kube, KubeError, Resource, WatchEvent, retry_after_note

log = logging.getLogger(__name__)

# How long a stream may stay silent before it counts as half-open. The API server sends a BOOKMARK
# to a watch that asked for them about once a minute (measured here: see docs/design/watcher.md) and ends
# the stream at its timeoutSeconds, so a longer silence means no one is at the other end.
DEFAULT_IDLE_TIMEOUT_SECONDS = 75.0


class WatchGaveUp(KubeError):
    """Every attempt the backoff policy allows failed in a row, without any progress between them."""


@dataclass(frozen=True)
class BackoffPolicy:
    """Delays between failed attempts (the last one repeats) and how many failures in a row to bear.

    `give_up_after`: consecutive failures without progress after which the loop gives up; None:
    never (a controller that must ride out any outage: the simulator, the executor).
    """

    delays: tuple[float, ...] = (0.2, 0.5, 1.0, 2.0, 4.0, 5.0)
    give_up_after: int | None = None

    def __post_init__(self) -> None:
        if not self.delays or any(delay < 0 for delay in self.delays):
            raise ValueError(
                f"backoff delays must be a non-empty tuple of non-negative seconds: {self.delays}"
            )
        if self.give_up_after is not None and self.give_up_after < 1:
            raise ValueError(f"give_up_after must be at least 1 (or None): {self.give_up_after}")

    @property
    def cap(self) -> float:
        """The longest wait between two attempts."""
        return max(self.delays)

    @classmethod
    def bounded(cls, delays: tuple[float, ...]) -> BackoffPolicy:
        """The informers' old contract: one attempt per delay, then one more, then give up."""
        return cls(delays=delays, give_up_after=len(delays) + 1)


@dataclass
class Backoff:
    """The state of one loop's policy: failures since the last progress."""

    policy: BackoffPolicy
    failures: int = 0

    def failed(self) -> float | None:
        """One more failure: the delay before the next attempt, or None when it is time to give up."""
        self.failures += 1
        limit = self.policy.give_up_after
        if limit is not None and self.failures >= limit:
            return None
        delays = self.policy.delays
        return delays[min(self.failures, len(delays)) - 1]

    def waiting(self) -> float:
        """One more attempt blocked by something only an operator can fix: the delay before the next
        attempt, along the same capped delays, never giving up."""
        self.failures += 1
        delays = self.policy.delays
        return delays[min(self.failures, len(delays)) - 1]

    def progressed(self) -> None:
        """Something worked: the next failure starts from the shortest delay again."""
        self.failures = 0

    def describe(self) -> str:
        """`n/m` (or `n` without a limit), for log lines."""
        limit = self.policy.give_up_after
        return f"{self.failures}/{limit}" if limit is not None else str(self.failures)


# Who installs the CRDs of each custom resource group the watcher follows (for the fix in the message).
_CRD_OWNERS = {
    "argoproj.io/workflows": "Argo Workflows",
    "argoproj.io/workflowtemplates": "Argo Workflows",
    "argoproj.io/applications": "Argo CD",
    "argoproj.io/applicationsets": "Argo CD",
    "argoproj.io/appprojects": "Argo CD",
    "progressivesync.io/progressivesyncs": "progressive-sync",
}


@dataclass(frozen=True)
class Blocked:
    """Why a loop waits on an operator: a permission or a CRD missing, and how to fix it.

    `reason` is an Event reason (`WatchForbidden`, `CRDMissing`); `message` names the resource, the
    namespace, what is missing and the fix.
    """

    reason: str
    message: str
    status: int


# Event reasons of the catalog (orchestrator.api.reasons: WATCH_FORBIDDEN, CRD_MISSING), spelled out
# here because this loop also serves the simulator, which imports nothing of the API;
# tests/unit/test_reasons.py fails when they are not in the catalog.
FORBIDDEN = "WatchForbidden"
CRD_MISSING = "CRDMissing"


def blocked_by(exc: KubeError, resource: Resource, namespace: str | None, verb: str) -> Blocked | None:
    """Whether `exc`, met on `verb` (list or watch) of `resource`, is "wait and say so", and what to say.

    403: the account may not `verb` the resource (a RoleBinding removed, a Role narrowed).
    404 on a custom resource's collection: its CRD is not installed (a list of an installed
    resource in a namespace that does not exist answers 200 and no items, never 404).
    Anything else (5xx, 429, a refused connection, a core resource's 404) is an ordinary failure.
    """
    full_name = f"{resource.plural}.{resource.group}" if resource.group else resource.plural
    where = f"in namespace {namespace}" if namespace else "cluster-wide"
    if exc.status == 403:
        return Blocked(
            FORBIDDEN,
            f"forbidden to {verb} {full_name} {where}: grant the watcher's account get, list and watch "
            f"on {full_name} (a Role or RoleBinding removed?); waiting, resuming by itself once it is back",
            403,
        )
    if exc.status == 404 and resource.group:
        owner = _CRD_OWNERS.get(f"{resource.group}/{resource.plural}")
        possessive = f"{owner}'" if owner and owner.endswith("s") else f"{owner}'s"
        fix = f"install {possessive} CRDs" if owner else f"install the CRD {full_name}"
        return Blocked(
            CRD_MISSING,
            f"the CustomResourceDefinition {full_name} is not installed (404 on {verb} {where}): {fix} "
            f"(kubectl get crd {full_name}); waiting, resuming by itself once it is there",
            404,
        )
    return None


@dataclass(frozen=True)
class WatchLoopSettings:
    """How one loop watches: stream length, silence bound, page size, backoff."""

    # The server ends each stream after this long (the loop resumes); an int, or a function asked
    # before each stream (a caller with a deadline passes the time left).
    watch_timeout_seconds: int | Callable[[], int] = 300
    # Silence on a stream beyond this is a dead connection (read timeout). The stream's own end
    # (timeoutSeconds) is always allowed, with a margin.
    idle_timeout_seconds: float = DEFAULT_IDLE_TIMEOUT_SECONDS
    page_size: int = 500
    backoff: BackoffPolicy = field(default_factory=BackoffPolicy)
    # Errors raised to the caller at once instead of retried (a step's 403 or missing CRD is
    # permanent; a controller's loop retries them and says so).
    fatal: tuple[type[KubeError], ...] = ()
    # A controller's loop: a 403 or a missing CRD waits (capped, never giving up) and says so
    # (`blocked_by`); without it they are ordinary failures.
    wait_when_blocked: bool = False

    def window(self) -> int:
        """The next stream's timeoutSeconds (at least 1)."""
        value = self.watch_timeout_seconds
        return max(1, int(value() if callable(value) else value))

    def read_timeout(self, window: int) -> float:
        """The read timeout of one stream of `window` seconds: its end plus a margin, or the idle bound."""
        return min(window + 5.0, self.idle_timeout_seconds)


@dataclass
class WatchStats:
    """Counters a test or a debug log can read: how often the loop listed, resumed and failed."""

    lists: int = 0
    relists_after_gone: int = 0
    watches: int = 0
    events: int = 0
    bookmarks: int = 0
    failures: int = 0
    throttled: int = 0  # of the failures: 429s (API Priority and Fairness), each waited out


@dataclass(frozen=True)
class Listed:
    """A full list: the (transformed) items and the list's resourceVersion."""

    items: list[Any]
    resource_version: str


@dataclass(frozen=True)
class Changed:
    """One watch event (BOOKMARK included)."""

    event: WatchEvent


@dataclass(frozen=True)
class WindowEnded:
    """The server ended a stream at its timeoutSeconds."""


Step = Listed | Changed | WindowEnded


class WatchLoop:
    """List, then watch, one resource in one namespace (or all), for as long as the caller iterates."""

    def __init__(
        self,
        kube: Kube,
        resource: Resource,
        namespace: str | None,
        *,
        settings: WatchLoopSettings,
        label_selector: str | None = None,
        field_selector: str | None = None,
        transform: Callable[[dict[str, Any]], Any] | None = None,
        name: str | None = None,
        on_blocked: Callable[[Blocked | None], None] | None = None,
    ) -> None:
        self._kube = kube
        self.resource = resource
        self.namespace = namespace
        self.settings = settings
        self.label_selector = label_selector
        self.field_selector = field_selector
        self._transform = transform
        self.name = name or f"{resource.plural}@{namespace or '*'}"
        self.resource_version = ""
        self.stats = WatchStats()
        self._close_stream: Callable[[], None] | None = None
        self._on_blocked = on_blocked
        # What the loop waits on (a permission, a CRD), None while it works; read from any thread.
        self.blocked: Blocked | None = None

    def close_stream(self) -> None:
        """End the stream in progress from another thread (after setting the stop Event)."""
        close = self._close_stream
        if close is not None:
            close()

    def run(self, stop: threading.Event) -> Iterator[Step]:
        """Yield lists, events and quiet window ends until `stop` is set (or the caller stops).

        Raises WatchGaveUp when the backoff policy's limit of failures in a row is reached.
        """
        backoff = Backoff(self.settings.backoff)
        need_list = True
        gone_in_a_row = 0
        while not stop.is_set():
            try:
                if need_list:
                    listed = self._list()
                    need_list = False
                    gone_in_a_row = 0
                    backoff.progressed()
                    self._unblock()
                    yield listed
                    continue
                yield from self._stream(stop, backoff)
            except Gone as exc:
                # Not a failure as such: the resume point (or a list's continue token) is too old.
                # Re-list at once; a list that itself keeps meeting 410 waits like a failure.
                log.info(
                    "%s: resourceVersion %s is gone (%s); re-listing", self.name, self.resource_version, exc
                )
                self.stats.relists_after_gone += 1
                need_list = True
                gone_in_a_row += 1
                if gone_in_a_row > 1:
                    self._wait(stop, backoff, exc)
            except KubeError as exc:
                if stop.is_set():
                    return
                if isinstance(exc, self.settings.fatal):
                    raise
                blocked = (
                    blocked_by(exc, self.resource, self.namespace, "list" if need_list else "watch")
                    if self.settings.wait_when_blocked
                    else None
                )
                if blocked is None:
                    self._wait(stop, backoff, exc)
                    continue
                if blocked.status == 404:
                    need_list = True  # the objects went with their CRD: the cache learns it by a list
                self._wait_blocked(stop, backoff, blocked)
        log.debug("%s: stopped at resourceVersion %s", self.name, self.resource_version)

    def _wait(self, stop: threading.Event, backoff: Backoff, exc: KubeError) -> None:
        self.stats.failures += 1
        delay = backoff.failed()
        if delay is None:
            raise WatchGaveUp(
                f"{self.name}: attempt {backoff.describe()} failed: {exc}; giving up", status=exc.status
            ) from exc
        if exc.status == 429:
            self.stats.throttled += 1
        delay = max(delay, exc.retry_after or 0.0)  # a 429's Retry-After is honoured
        log.warning(
            "%s: attempt %s failed: %s%s; retrying in %.1fs",
            self.name,
            backoff.describe(),
            exc,
            retry_after_note(exc),
            delay,
        )
        stop.wait(delay)

    def _wait_blocked(self, stop: threading.Event, backoff: Backoff, blocked: Blocked) -> None:
        self.stats.failures += 1
        delay = backoff.waiting()
        if self.blocked is None or blocked.reason != self.blocked.reason:
            # Said once per cause, not once per attempt (nor again when a 404 on watch turns into
            # a 404 on the re-list).
            self.blocked = blocked
            log.warning("%s: %s: %s", self.name, blocked.reason, blocked.message)
            if self._on_blocked is not None:
                self._on_blocked(blocked)
        else:
            log.debug("%s: still %s; next attempt in %.1fs", self.name, blocked.reason, delay)
        stop.wait(delay)

    def _unblock(self) -> None:
        if self.blocked is None:
            return
        log.warning("%s: %s is over: list/watch works again", self.name, self.blocked.reason)
        self.blocked = None
        if self._on_blocked is not None:
            self._on_blocked(None)

    def _list(self) -> Listed:
        # Transformed page by page: the raw objects of a big list are never all in memory at once.
        items, list_rv = self._kube.list(
            self.resource,
            self.namespace,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            limit=self.settings.page_size,
            transform=self._transform,
        )
        self.resource_version = list_rv
        self.stats.lists += 1
        log.debug("%s: listed %d objects at resourceVersion %s", self.name, len(items), list_rv)
        return Listed(items, list_rv)

    def _stream(self, stop: threading.Event, backoff: Backoff) -> Iterator[Step]:
        self.stats.watches += 1
        window = self.settings.window()

        def opened(close: Callable[[], None]) -> None:
            self._close_stream = close
            backoff.progressed()  # the server answered: the network and the API server work
            self._unblock()
            if stop.is_set():  # stop arrived while the request was on its way
                close()

        try:
            stream = self._kube.watch(
                self.resource,
                self.namespace,
                resource_version=self.resource_version,
                timeout_seconds=window,
                label_selector=self.label_selector,
                field_selector=self.field_selector,
                on_open=opened,
                read_timeout=self.settings.read_timeout(window),
            )
            for event in stream:
                if stop.is_set():
                    return
                if event.type == "BOOKMARK":
                    self.stats.bookmarks += 1
                else:
                    self.stats.events += 1
                self.resource_version = event.resource_version or self.resource_version
                backoff.progressed()
                yield Changed(event)
        finally:
            self._close_stream = None
        if not stop.is_set():
            yield WindowEnded()
