"""Writing a ProgressiveSync's status without lost updates, with at most one write per change.

Many steps write one ProgressiveSync at once (a stage fanning out over 50 clusters, each finishing
`wait-healthy` on its own). The scheme is optimistic concurrency: every status change is a pure
function `mutate(status) -> status` (see `orchestrator.api.rollout_status`), applied as

    read the object -> mutate a copy of its status -> compare -> PUT /status with resourceVersion

and on 409 Conflict the object is read again and the same function applied again, with bounded,
jittered backoffs. Because the function states an end result, re-applying it is always right; the
API server's resourceVersion check guarantees no writer overwrites a change it did not see. When
the mutated status equals the one read, nothing is written (and a debug line says so), which is
what makes every step idempotent at the API level.

Callers: the steps. Tests prove it with 50 concurrent writers against the real API server.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from orchestrator.api.models import ProgressiveSyncStatus
from orchestrator.kube.client import PROGRESSIVE_SYNCS, Conflict, Kube, Retryable

log = logging.getLogger(__name__)

Mutation = Callable[[ProgressiveSyncStatus], ProgressiveSyncStatus]


@dataclass(frozen=True)
class StatusWriterSettings:
    """How hard to retry a conflicting status write: one sleep per retry (len + 1 attempts)."""

    # Fifty writers racing on one object (a wide stage whose clusters finish together) took up to
    # 10 attempts in tests; 20 leave room. Each sleep is drawn from [b/2, b] to spread the writers.
    conflict_backoffs: tuple[float, ...] = (0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0, 1.5, 1.5) + (2.0,) * 9


class ConflictsExhausted(Retryable):
    """Every attempt lost the race to another writer: temporary, the caller may run again."""


@dataclass(frozen=True)
class StatusUpdate:
    """The outcome of `update_status`: the status now stored, whether we wrote, and attempts made."""

    status: ProgressiveSyncStatus
    written: bool
    attempts: int
    object: dict[str, Any]


def read_status(obj: dict[str, Any]) -> ProgressiveSyncStatus:
    """The status of a ProgressiveSync object as the model (empty when it has none yet)."""
    return ProgressiveSyncStatus.model_validate(obj.get("status") or {})


def update_status(
    kube: Kube,
    namespace: str,
    name: str,
    mutate: Mutation,
    *,
    what: str,
    settings: StatusWriterSettings | None = None,
    sleep: Callable[[float], None] | None = None,
    rng: random.Random | None = None,
) -> StatusUpdate:
    """Apply `mutate` to the stored status: read, mutate, compare, PUT /status; re-apply on Conflict.

    Raises NotFound when the ProgressiveSync is gone and ConflictsExhausted after the last attempt.
    """
    settings = settings or StatusWriterSettings()
    rng = rng or random.Random()
    if sleep is None:
        import time  # noqa: PLC0415 - only the real sleep needs it

        sleep = time.sleep
    backoffs = settings.conflict_backoffs
    attempts = len(backoffs) + 1
    for attempt in range(1, attempts + 1):
        obj = kube.get(PROGRESSIVE_SYNCS, namespace, name)
        before = read_status(obj)
        after = mutate(before.model_copy(deep=True))
        before_json, after_json = before.to_api(), after.to_api()
        if before_json == after_json:
            log.debug("status of %s/%s: %s changes nothing; not writing", namespace, name, what)
            return StatusUpdate(before, written=False, attempts=attempt, object=obj)
        body = {**obj, "status": after_json}
        try:
            stored = kube.replace(PROGRESSIVE_SYNCS, namespace, body, subresource="status")
        except Conflict as exc:
            if attempt == attempts:
                raise ConflictsExhausted(
                    f"status of {namespace}/{name}: {what}: "
                    f"still conflicting after {attempts} attempts: {exc}",
                    status=409,
                ) from exc
            delay = rng.uniform(backoffs[attempt - 1] / 2, backoffs[attempt - 1])
            log.debug(
                "status of %s/%s: %s: attempt %d/%d conflicted; retrying in %.2fs",
                namespace,
                name,
                what,
                attempt,
                attempts,
                delay,
            )
            sleep(delay)
            continue
        log.debug("status of %s/%s: %s written (attempt %d)", namespace, name, what, attempt)
        return StatusUpdate(read_status(stored), written=True, attempts=attempt, object=stored)
    raise AssertionError("unreachable")
