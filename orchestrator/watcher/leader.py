"""Leader election on a coordination.k8s.io Lease: one watcher acts, the others stand by.

The Python client's `leaderelection` keeps calling the worker after the lease is lost, so this is a
small loop of our own, with client-go's semantics:

- every `retry_seconds` the elector reads the Lease and either **takes** it (absent, released —
  empty holder —, or its record unchanged for `lease_seconds` as measured on *our* monotonic clock
  since we first saw that record, so wall-clock skew between replicas does not matter), **renews**
  it (we hold it), or **waits** (another holder renewed within `lease_seconds`); a write carries the
  resourceVersion it read, so two candidates never both win;
- `holds()` is true only while the last successful write *started* less than
  `renew_deadline_seconds` ago (monotonic). `renew_deadline < lease` leaves a margin: another
  replica may take over only `lease_seconds` after it last saw our record change, by which time
  `holds()` has been false for at least `lease - renew_deadline` seconds;
- the watcher's writes go through `Kube.gated(elector.holds)`: the moment `holds()` turns false no
  write leaves the process, even one a reconcile was about to send; `run_elected` then stops that
  watcher and goes back to standing by;
- every API call of the elector has its own short timeout and no retry (the loop is the retry);
- `release()` (on SIGTERM) hands the Lease over at once: empty holder, 1 s duration.

`decide_lease` is the pure decision; `LeaderElector` the loop; `run_elected` the watcher's life
under it. Callers: `orchestrator.cli.watch_cmd`, tests.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from orchestrator.core.clock import format_micro_time
from orchestrator.kube.client import LEASES, AlreadyExists, Conflict, Kube, KubeError, KubeSettings, NotFound

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LeaseSettings:
    """Which Lease, who we are, and the timings (client-go's defaults)."""

    namespace: str
    name: str
    identity: str
    lease_seconds: float = 15.0
    renew_deadline_seconds: float = 10.0
    retry_seconds: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.retry_seconds < self.renew_deadline_seconds < self.lease_seconds:
            raise ValueError(
                "leader election needs 0 < retry period < renew deadline < lease duration "
                f"(got {self.retry_seconds}, {self.renew_deadline_seconds}, {self.lease_seconds})"
            )
        if not self.identity:
            raise ValueError("leader election needs an identity")


class LeaseAction(StrEnum):
    """What the elector does with the Lease it read."""

    CREATE = "create"  # there is none
    RENEW = "renew"  # we hold it
    TAKE = "take"  # released, or its holder stopped renewing
    WAIT = "wait"  # someone else holds it


@dataclass(frozen=True)
class LeaseRecord:
    """What a Lease says (spec) and its resourceVersion."""

    holder: str
    renew_time: str
    lease_seconds: float
    transitions: int
    resource_version: str

    @classmethod
    def of(cls, obj: dict[str, Any]) -> LeaseRecord:
        """Read a Lease object."""
        spec = obj.get("spec") or {}
        return cls(
            holder=str(spec.get("holderIdentity") or ""),
            renew_time=str(spec.get("renewTime") or ""),
            lease_seconds=float(spec.get("leaseDurationSeconds") or 0),
            transitions=int(spec.get("leaseTransitions") or 0),
            resource_version=str((obj.get("metadata") or {}).get("resourceVersion") or ""),
        )


def decide_lease(record: LeaseRecord | None, identity: str, unchanged_for: float) -> LeaseAction:
    """Create, renew, take over or wait; `unchanged_for` is how long (our monotonic clock) the
    record has looked the same to us."""
    if record is None:
        return LeaseAction.CREATE
    if record.holder == identity:
        return LeaseAction.RENEW
    if not record.holder or unchanged_for >= record.lease_seconds:
        return LeaseAction.TAKE
    return LeaseAction.WAIT


class LeaderElector:
    """The Lease loop (`run` in a thread) and the gate (`holds`). Thread-safe."""

    def __init__(
        self,
        kube: Kube,
        settings: LeaseSettings,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),
        on_change: Callable[[bool], None] | None = None,
    ) -> None:
        # Each call is bounded well inside the renew deadline and never retried here.
        timeout = max(1.0, settings.renew_deadline_seconds / 3)
        self.kube = kube.with_settings(
            KubeSettings(connect_timeout=min(timeout, 5.0), read_timeout=timeout, retry_backoffs=())
        )
        self.settings = settings
        self.monotonic = monotonic
        self.wall = wall
        self.on_change = on_change
        self.changed = threading.Event()
        self.transitions = 0
        self._lock = threading.Lock()
        self._leading = False
        self._renewed_at = float("-inf")
        self._seen: tuple[str, str, str] | None = None
        self._seen_at = 0.0
        self._resource_version = ""

    # -- the gate ---------------------------------------------------------------------------

    def holds(self) -> bool:
        """True while we lead and our last successful renew started within the renew deadline."""
        with self._lock:
            return (
                self._leading and self.monotonic() - self._renewed_at < self.settings.renew_deadline_seconds
            )

    # -- the loop ---------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Try to acquire or renew every retry period until `stop`; never raises."""
        while not stop.is_set():
            self.step()
            stop.wait(self.settings.retry_seconds)

    def step(self) -> bool:
        """One attempt to acquire or renew; updates the leading state; True when we hold the Lease."""
        started = self.monotonic()
        try:
            won = self._try(started)
        except KubeError as exc:
            log.warning(
                "leader election: the Lease %s/%s: %s", self.settings.namespace, self.settings.name, exc
            )
            won = False
        with self._lock:
            was = self._leading
            if won:
                self._renewed_at = started
                self._leading = True
            elif (
                self._leading and self.monotonic() - self._renewed_at >= self.settings.renew_deadline_seconds
            ):
                self._leading = False
            now_leading = self._leading
        if now_leading != was:
            self.transitions += 1
            log.info(
                "%s the lease %s/%s as %s",
                "acquired" if now_leading else "LOST",
                self.settings.namespace,
                self.settings.name,
                self.settings.identity,
            )
            self.changed.set()
            if self.on_change is not None:
                self.on_change(now_leading)
        return won

    def _try(self, started: float) -> bool:
        s = self.settings
        try:
            obj = self.kube.get(LEASES, s.namespace, s.name)
        except NotFound:
            obj = None
        record = LeaseRecord.of(obj) if obj is not None else None
        if record is not None:
            seen = (record.holder, record.renew_time, record.resource_version)
            if seen != self._seen:
                self._seen, self._seen_at = seen, started
        unchanged_for = started - self._seen_at if record is not None else 0.0
        action = decide_lease(record, s.identity, unchanged_for)
        if action == LeaseAction.WAIT:
            return False
        now = format_micro_time(self.wall())
        spec: dict[str, Any] = {
            "holderIdentity": s.identity,
            "leaseDurationSeconds": round(s.lease_seconds),
            "renewTime": now,
        }
        if action == LeaseAction.CREATE:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": s.name, "namespace": s.namespace},
                "spec": {**spec, "acquireTime": now, "leaseTransitions": 0},
            }
            try:
                stored = self.kube.create(LEASES, s.namespace, body)
            except AlreadyExists:
                return False
        else:
            assert obj is not None and record is not None
            if action == LeaseAction.TAKE:
                spec.update(acquireTime=now, leaseTransitions=record.transitions + 1)
                log.info(
                    "taking the lease %s/%s over from %r (unchanged for %.1fs)",
                    s.namespace,
                    s.name,
                    record.holder,
                    unchanged_for,
                )
            obj["spec"] = {**(obj.get("spec") or {}), **spec}
            try:
                stored = self.kube.replace(LEASES, s.namespace, obj)
            except Conflict:
                return False
        self._resource_version = str(stored["metadata"]["resourceVersion"])
        self._seen = (s.identity, now, self._resource_version)
        self._seen_at = started
        return True

    def release(self) -> None:
        """Hand the Lease over at once (SIGTERM): empty holder, 1 s; only if we still hold it."""
        with self._lock:
            leading, self._leading = self._leading, False
        if not leading:
            return
        s = self.settings
        try:
            obj = self.kube.get(LEASES, s.namespace, s.name)
            if LeaseRecord.of(obj).holder != s.identity:
                return
            obj["spec"] = {
                **(obj.get("spec") or {}),
                "holderIdentity": "",
                "leaseDurationSeconds": 1,
                "renewTime": format_micro_time(self.wall()),
            }
            self.kube.replace(LEASES, s.namespace, obj)
            log.info("released the lease %s/%s", s.namespace, s.name)
        except KubeError as exc:
            log.warning(
                "could not release the lease %s/%s: %s; it expires by itself", s.namespace, s.name, exc
            )
