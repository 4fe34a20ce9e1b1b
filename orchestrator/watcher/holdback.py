"""Hold back: which ProgressiveSyncs must not be decided on while an informer they need is not usable.

An informer that meets a 403 (a RoleBinding removed) or a missing CRD waits without giving up
(`orchestrator.kube.watchloop.blocked_by`); until it lists again its cache is stale. A ProgressiveSync
it affects (its namespace is theirs, their ApplicationSet's, their Argo CD's or their Workflows') is
held back meanwhile and looked at again every `BLOCKED_RECHECK_SECONDS`; `HoldBack.check` says so and
returns the Events to record: one Warning per cause (`WatchForbidden`, `CRDMissing`, naming the
resource, what is missing and the fix), then one Normal `WatchResumed` when every cause is gone.
The others carry on.

A **403 on a reconcile's own call** (a Role narrowed: e.g. `update` on `progressivesyncs/status` taken
away) cannot be said in a condition (the status is what may not be written): `forbidden` gives one
Warning Event `ReconcileForbidden` per episode, quoting the API server (which verb on which resource)
and the fix, while the loop retries along the capped backoff; `allowed` gives a Normal
`ReconcileResumed` once a reconcile of it works again. It writes nothing itself.

Callers: `orchestrator.watcher.loop` (before and after each reconcile; it records the Events).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from orchestrator.api.reasons import Reason
from orchestrator.kube.informer import Informer
from orchestrator.watcher.caches import CachedPS, Key
from orchestrator.watcher.decision import RecordEvent
from orchestrator.watcher.settings import Settings

# A ProgressiveSync held back by an informer waiting on a permission or a CRD is looked at again this
# often (the informer's recovery queues it at once too): no busy loop, and a missed wake-up heals.
BLOCKED_RECHECK_SECONDS = 15.0


def affects(informer_namespace: str | None, cached: CachedPS, settings: Settings) -> bool:
    """True when an informer of `informer_namespace` (None: every namespace) feeds `cached`'s decision."""
    if informer_namespace is None:
        return True
    ps_namespace = cached.key[0]
    return informer_namespace in (
        ps_namespace,
        cached.app_set_namespace,
        settings.argocd_namespace_for(ps_namespace),
        settings.workflow_namespace,
    )


class HoldBack:
    """Per ProgressiveSync, the waits (informer name, reason) and the 403 already reported. Thread-safe."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._reported: dict[Key, set[tuple[str, str]]] = {}
        self._forbidden: dict[Key, str] = {}
        self._lock = threading.Lock()

    def forbidden(self, key: Key, refusal: str) -> RecordEvent | None:
        """The Warning Event for a reconcile of `key` refused with a 403 (`refusal`: the API server's
        message, naming the verb, the resource and the account); None when this episode has one."""
        with self._lock:
            first = key not in self._forbidden
            self._forbidden[key] = refusal
        if not first:
            return None
        cap = max(self.settings.reconcile_backoffs)
        return RecordEvent(
            "Warning",
            Reason.RECONCILE_FORBIDDEN,
            f"not reconciled: {refusal}: grant the watcher's account this permission (the chart's "
            "Role has it: was the Role narrowed or its RoleBinding removed?); retrying with "
            f"backoff (at most {cap:.0f}s apart), resuming by itself once it is back",
        )

    def allowed(self, key: Key) -> RecordEvent | None:
        """The Normal Event for a reconcile of `key` that worked after a 403; None when none was met."""
        with self._lock:
            was = self._forbidden.pop(key, None)
        if was is None:
            return None
        return RecordEvent("Normal", Reason.RECONCILE_RESUMED, Reason.RECONCILE_RESUMED.say())

    def check(self, cached: CachedPS, informers: Sequence[Informer[Any]]) -> tuple[bool, list[RecordEvent]]:
        """(held back?, the Events to record): held back when an informer this ProgressiveSync needs is
        waiting on a permission or a CRD, or has not listed yet: its cache cannot be trusted."""
        waiting = [i for i in informers if not i.usable and affects(i.namespace, cached, self.settings)]
        key = cached.key
        causes = {(i.name, blocked.reason): blocked for i in waiting if (blocked := i.blocked) is not None}
        with self._lock:
            reported = self._reported.get(key, set())
            new = [cause for cause in causes if cause not in reported]
            if causes:
                self._reported[key] = reported | set(causes)
            else:
                self._reported.pop(key, None)
        events = [
            RecordEvent(
                "Warning",
                Reason.named(causes[cause].reason),
                f"not reconciled meanwhile: {causes[cause].message}",
            )
            for cause in new
        ]
        if not waiting and reported:
            was = ", ".join(sorted(f"{name} ({reason})" for name, reason in reported))
            events.append(
                RecordEvent(
                    "Normal",
                    Reason.WATCH_RESUMED,
                    "every resource this ProgressiveSync needs is listed and watched again "
                    f"(was waiting on {was})",
                )
            )
        return bool(waiting), events
