"""Rollout history, the effect: delete the records of rollouts past `--rollout-history`.

`RecordHistory.keep(cached, status)` runs after each reconcile (`orchestrator.watcher.loop`) and
acts only when there is something to look at: on the first reconcile of each ProgressiveSync after
the watcher starts, and when its `status.rollout.id` changed since its last complete pass. It
reads the records from the watcher's cache (`Caches.all_records_of`; none while their informer
cannot list), lets `retention.plan_retention` (pure) choose, and deletes through the records'
adapter (`kube.stage_records.delete_record`):

- each record by name with a precondition on its uid: a record created again under that name is
  not deleted; NotFound (gone already) counts as done;
- at most `DELETES_PER_PASS` deletes per pass; the rest on the next pass, queued at once;
- every call through the Kubernetes adapter, with its timeouts and retries; any other error fails
  the reconcile, which the work queue retries along its backoff;
- 403 (an installation whose watcher may not delete records) is logged once per rollout with the
  fix; the records stay, as before this existed.

Only the leader deletes: the watcher runs only while it holds the Lease, on an adapter that refuses
every write once it is lost. Nothing kept here is needed for correctness: after a restart the
first pass looks at every ProgressiveSync again, and the decision reads only the cache, so a
ProgressiveSync with nothing to delete costs no request at all.

Callers: `orchestrator.watcher.loop`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from orchestrator.api.models import ProgressiveSyncStatus
from orchestrator.kube.client import Forbidden, Kube
from orchestrator.kube.stage_records import delete_record
from orchestrator.watcher.caches import CachedPS, CachedRecord, Caches, Key
from orchestrator.watcher.retention import RecordRef, plan_retention

log = logging.getLogger(__name__)

DELETES_PER_PASS = 50


class RecordHistory:
    """See the module docstring. `requeue(key, seconds)` queues the next pass of a long backlog."""

    def __init__(
        self, kube: Kube, caches: Caches, history: int, requeue: Callable[[Key, float], None]
    ) -> None:
        self._kube = kube
        self._caches = caches
        self._history = history
        self._requeue = requeue
        # Per ProgressiveSync: the rollout id of its last complete pass (no pass yet: absent).
        self._done: dict[Key, str | None] = {}
        # Per ProgressiveSync: uids deleted in a pass not finished yet (the cache may still show them).
        self._deleted: dict[Key, set[str]] = {}

    def forget(self, key: Key) -> None:
        """The ProgressiveSync is gone: nothing to remember of it."""
        self._done.pop(key, None)
        self._deleted.pop(key, None)

    def keep(self, cached: CachedPS, status: ProgressiveSyncStatus) -> None:
        """One pass for the ProgressiveSync `cached` (see the module docstring)."""
        key = cached.key
        current = status.rollout.id if status.rollout is not None else None
        if cached.deleting or (key in self._done and self._done[key] == current):
            return  # deleting: the garbage collector takes every record with it
        records = self._caches.all_records_of(*key)
        if records is None:  # cannot list them yet; the informer's recovery queues every key again
            return
        extra = {"ps": f"{key[0]}/{key[1]}"}
        deleted = self._deleted.setdefault(key, set())
        owner = str((cached.obj.get("metadata") or {}).get("uid") or "")
        plan = plan_retention(
            (record_ref(record, owner) for record in records if record.uid not in deleted),
            current=current,
            started_at=status.rollout.started_at if status.rollout is not None else None,
            history=self._history,
        )
        log.debug("%s/%s: rollout history: %s", *key, plan.reason, extra=extra)
        batch = plan.delete[:DELETES_PER_PASS]
        for ref in batch:
            try:
                gone_now = delete_record(self._kube, key[0], ref.name, ref.uid)
            except Forbidden as exc:
                log.warning(
                    "%s/%s: rollout history: cannot delete record %s: %s; the records of old rollouts "
                    "stay (grant the watcher delete on progressivesyncstages.progressivesync.io)",
                    *key,
                    ref.name,
                    exc,
                    extra=extra,
                )
                self._finish(key, current)
                return
            deleted.add(ref.uid)
            if gone_now:
                log.debug(
                    "%s/%s: deleted record %s (rollout %s)", *key, ref.name, ref.rollout_id, extra=extra
                )
        if batch:
            log.info(
                "%s/%s: rollout history: %s",
                *key,
                _done_part(plan.reason, len(batch), len(plan.delete)),
                extra=extra,
            )
        if len(plan.delete) > len(batch):
            self._requeue(key, 0.0)
            return
        self._finish(key, current)

    def _finish(self, key: Key, current: str | None) -> None:
        self._done[key] = current
        self._deleted.pop(key, None)


def record_ref(record: CachedRecord, owner_uid: str) -> RecordRef:
    """What retention reads of a cached record; owned when an ownerReference names `owner_uid` (and
    it has a uid, so its delete can carry the precondition)."""
    return RecordRef(
        name=record.name,
        uid=record.uid,
        rollout_id=record.rollout_id,
        created=record.created,
        owned=bool(owner_uid and record.uid) and owner_uid in record.owner_uids,
    )


def _done_part(reason: str, done: int, planned: int) -> str:
    if done == planned:
        return reason
    return f"{reason} ({done} in this pass, the rest next)"
