"""Holding a cluster back while its ProgressiveSync is paused (`spec.paused`, DESIGN.md §3: no new
cluster starts, running syncs finish).

One pod per cluster, Argo's suspended Workflow starts no new pod; but a step already running whose
cluster's sync is not written yet (a `batch` between its clusters, a `sync` that waited for a rollout
window: steps.window_gate) must not start the cluster while paused. `hold_while_paused` waits, looking
every `Tuning.pause_poll_seconds`, at most `Tuning.pause_hold_seconds`; past that `PausedTooLong`
(exit 75: Argo runs the step again later).

Callers: `steps.batch` (before each cluster), `steps.sync` (after a window wait).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta

from orchestrator.core.clock import Clock
from orchestrator.core.errors import TemporaryError
from steps.common import Tuning

log = logging.getLogger(__name__)


class PausedTooLong(TemporaryError):
    """The ProgressiveSync stayed paused past `Tuning.pause_hold_seconds`: temporary (exit 75), not
    retried in the pod (the hold was the wait), Argo runs the batch again later; recorded clusters are
    reported as they are."""


def hold_while_paused(paused: Callable[[], bool], cluster: str, *, clock: Clock, tuning: Tuning) -> None:
    """Return once `paused()` is false: looked at every `pause_poll_seconds`, at most `pause_hold_seconds`."""
    if not paused():
        return
    log.info("cluster %s: not starting while the ProgressiveSync is paused", cluster)
    deadline = clock.now() + timedelta(seconds=tuning.pause_hold_seconds)
    while paused():
        if clock.now() >= deadline:
            raise PausedTooLong(
                f"cluster {cluster}: the ProgressiveSync stayed paused for {tuning.pause_hold_seconds}s"
            )
        clock.sleep(tuning.pause_poll_seconds)
    log.info("cluster %s: the pause was lifted; starting", cluster)
