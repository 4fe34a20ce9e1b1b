"""Terminating what we started: our Argo CD sync operations still in flight, the way `argocd app
terminate-op` does it, then a bounded wait until Argo CD ended them.

Nothing we started may apply a release after we said stop (DESIGN.md §3). So when a cluster fails
(its deadline passed while a sync window held the sync back, a sibling Application failed, ...) and
when a rollout ends Failed or Cancelled, every operation of this rollout that still runs is ended:

- requested but not yet taken up by the controller (`.operation` ours, `status.operationState` not):
  the request is withdrawn (`.operation` removed) in one update carrying the resourceVersion;
- running (`status.operationState` ours, phase Running, between Argo CD's own retries too): phase set
  to `Terminating`, as Argo CD's API server `TerminateOperation` does (controller/appcontroller.go
  then stops it and writes Failed);
- someone else's operation, or one already ended, is never touched.

A 409 re-reads and decides again (bounded, `Tuning.app_conflict_backoffs`). Then the Applications
are followed (list → watch) until none runs an operation of ours, or `Tuning.terminate_wait_seconds`
passed; what still runs then is reported, not waited for.

Callers: `steps.wait_healthy` and `steps.sync` (a failed cluster), `steps.finalize` (a rollout that
failed or was cancelled). The decisions are `orchestrator.argocd.appsync.decide_terminate`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from orchestrator.argocd import appsync
from orchestrator.argocd.appwatch import follow_applications
from orchestrator.core.clock import Clock
from orchestrator.kube.client import APPLICATIONS, Conflict, Kube, NotFound
from orchestrator.kube.status_writer import ConflictsExhausted
from steps.common import RolloutRef, Tuning

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TerminateResult:
    """What was ended: requests withdrawn, operations terminated, and what still ran at the bound."""

    withdrawn: tuple[str, ...] = ()
    terminated: tuple[str, ...] = ()
    still_running: tuple[str, ...] = ()

    @property
    def acted(self) -> bool:
        """True when anything of ours was in flight."""
        return bool(self.withdrawn or self.terminated or self.still_running)

    @property
    def summary(self) -> str:
        """A clause for status messages ("" when nothing of ours was in flight)."""
        parts = []
        if self.withdrawn:
            parts.append(f"sync request of {', '.join(self.withdrawn)} withdrawn before Argo CD took it up")
        ended = [name for name in self.terminated if name not in self.still_running]
        if ended:
            parts.append(f"running sync of {', '.join(ended)} terminated")
        if self.still_running:
            parts.append(
                f"termination of the sync of {', '.join(self.still_running)} requested; Argo CD had not "
                "ended it yet"
            )
        return "; ".join(parts)


def terminate_operations(
    kube: Kube,
    rollout: RolloutRef,
    names: Sequence[str],
    *,
    clock: Clock,
    tuning: Tuning,
) -> TerminateResult:
    """End every operation of this rollout still in flight on the named Applications (see module)."""
    withdrawn: list[str] = []
    terminated: list[str] = []
    waiting: list[str] = []
    for name in dict.fromkeys(names):
        action = _end_one(kube, rollout, name, clock=clock, tuning=tuning)
        if action == appsync.TerminateAction.WITHDRAW:
            withdrawn.append(name)
        elif action == appsync.TerminateAction.TERMINATE:
            terminated.append(name)
            waiting.append(name)
        elif action == appsync.TerminateAction.WAIT:
            waiting.append(name)
    still = _wait_until_ended(kube, rollout, waiting, clock=clock, tuning=tuning) if waiting else []
    result = TerminateResult(tuple(withdrawn), tuple(terminated), tuple(still))
    if result.acted:
        log.info("rollout %s: %s", rollout.rollout_id, result.summary)
    return result


def _end_one(
    kube: Kube, rollout: RolloutRef, name: str, *, clock: Clock, tuning: Tuning
) -> appsync.TerminateAction:
    backoffs = tuning.app_conflict_backoffs
    for attempt in range(len(backoffs) + 1):
        try:
            app = kube.get(APPLICATIONS, rollout.applications_namespace, name)
        except NotFound:
            return appsync.TerminateAction.NONE
        decision = appsync.decide_terminate(app, rollout.rollout_id)
        if decision.action == appsync.TerminateAction.WITHDRAW:
            body = appsync.build_withdraw_request(app)
        elif decision.action == appsync.TerminateAction.TERMINATE:
            body = appsync.build_terminate_request(app)
        else:
            return decision.action
        try:
            kube.replace(APPLICATIONS, rollout.applications_namespace, body)
        except Conflict as exc:
            if attempt == len(backoffs):
                raise ConflictsExhausted(
                    f"Application {name}: still conflicting after {attempt + 1} attempts to end our sync: "
                    f"{exc}",
                    status=409,
                ) from exc
            clock.sleep(backoffs[attempt])
            continue
        except NotFound:
            return appsync.TerminateAction.NONE
        log.info("%s", decision.reason)
        return decision.action
    raise AssertionError("unreachable")


def _wait_until_ended(
    kube: Kube, rollout: RolloutRef, names: Sequence[str], *, clock: Clock, tuning: Tuning
) -> list[str]:
    """Follow the Applications until none runs an operation of ours; the ones still running at the bound."""
    deadline = clock.now() + timedelta(seconds=tuning.terminate_wait_seconds)

    def window() -> int:
        left = (deadline - clock.now()).total_seconds()
        return tuning.watch_window_for(left)

    running: list[str] = list(names)
    snapshots = follow_applications(kube, rollout.applications_namespace, list(names), window_seconds=window)
    try:
        for snapshot in snapshots:
            running = [name for name in names if _still_ours(snapshot.objects.get(name), rollout.rollout_id)]
            if not running or clock.now() >= deadline:
                return running
    finally:
        snapshots.close()
    return running


def _still_ours(app: dict[str, Any] | None, rollout_id: str) -> bool:
    return (
        app is not None and appsync.decide_terminate(app, rollout_id).action != appsync.TerminateAction.NONE
    )
