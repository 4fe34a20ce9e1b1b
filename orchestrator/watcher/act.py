"""Act: carry out a decision's actions, in order, through the Kubernetes adapter.

`Actor.execute(cached, obs, decision)` runs each action as `decide` wrote it (nothing is decided or
read back from the plan here): the finalizer by a conditional update (a merge patch would replace
another controller's finalizers), the Workflow `build` made from the decision's `CreateWorkflow`
created as it is (through Argo Server when `--argo-server` is set; AlreadyExists with our name
label: adopt it), stop/suspend/resume as merge patches, Events best-effort (`record_event`), the
refresh annotation of `RequestCompare` as one merge patch per Application (`appsync.refresh_patch`;
a 403 is logged and the wait, bounded, goes on), `RequeueAfter` handed to the loop's queue,
`EndSyncs` as the steps end our syncs (each Application read now, `appsync.decide_terminate` on it,
one update carrying its resourceVersion, a 409 read and decided again a few times), the status
through the optimistic-concurrency writer (`status_writer.update_status`) only when the patch
changes the cached status, and the live summaries `summaries.plan_summaries` chose
(`write_summaries`, the same writer).

Callers: `orchestrator.watcher.loop` (after `decide` and `build`, for Events from status transitions and from
held-back ProgressiveSyncs).
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from orchestrator.api.metadata import FINALIZER, NAME_LABEL, bounded_name, label_value
from orchestrator.api.models import OBJECT_NAME_MAX_LENGTH, ProgressiveSyncStatus
from orchestrator.argocd import appsync
from orchestrator.core.clock import Clock, format_time
from orchestrator.kube.argo_server import ArgoServerSubmitter
from orchestrator.kube.client import (
    APPLICATIONS,
    EVENTS,
    PROGRESSIVE_SYNCS,
    WORKFLOWS,
    AlreadyExists,
    Conflict,
    Forbidden,
    Kube,
    KubeError,
    NotFound,
)
from orchestrator.kube.status_writer import update_status
from orchestrator.watcher.caches import CachedPS, Key
from orchestrator.watcher.decision import (
    AddFinalizer,
    CreateWorkflow,
    Decision,
    EndSyncs,
    Observed,
    RecordEvent,
    RemoveFinalizer,
    RequestCompare,
    RequeueAfter,
    ResumeWorkflow,
    StatusPatch,
    StopWorkflow,
    SuspendWorkflow,
    UpdateStatus,
)
from orchestrator.watcher.settings import Settings
from orchestrator.watcher.status_patch import apply_patch
from orchestrator.watcher.summaries import SummaryPlan, apply_plan
from orchestrator.workflows import control
from orchestrator.workflows.phases import Shutdown

log = logging.getLogger(__name__)

# Waits before reading an Application again after our update to end a sync lost a race (409).
END_SYNC_CONFLICT_BACKOFFS = (0.05, 0.2, 0.5)


# An Event's create: each attempt's read timeout and the sleeps between attempts.
EVENT_READ_TIMEOUT_SECONDS = 5.0
EVENT_RETRY_BACKOFFS = (0.5, 1.0, 2.0)


def event_name(ps_name: str, identity: str = "") -> str:
    """`<ProgressiveSync name>.<suffix>`: the transition's identity (the same name from any
    watcher), else a random one (a new Event each time); within an object name's 253 characters
    (`bounded_name`)."""
    suffix = identity or uuid.uuid4().hex[:12]
    return bounded_name(ps_name, f".{suffix}", OBJECT_NAME_MAX_LENGTH)


class Actor:
    """The watcher's writes. `requeue(key, seconds)` is how `RequeueAfter` reaches the work queue."""

    def __init__(
        self, kube: Kube, settings: Settings, clock: Clock, requeue: Callable[[Key, float], None]
    ) -> None:
        self.kube = kube
        # Events: short attempts and few retries (worst case 4 x 5 s + 3.5 s of sleeps, under the
        # 30 s one attempt with the default timeout could take): a notice never holds a reconcile long.
        self._events_kube = kube.with_settings(
            replace(
                kube.settings, read_timeout=EVENT_READ_TIMEOUT_SECONDS, retry_backoffs=EVENT_RETRY_BACKOFFS
            )
        )
        self.clock = clock
        self._requeue = requeue
        self._submitter: ArgoServerSubmitter | None = None
        if settings.argo_server:
            self._submitter = ArgoServerSubmitter(
                settings.argo_server,
                settings.argo_token,
                verify_tls=settings.argo_verify_tls,
                timeout_seconds=settings.request_timeout_seconds,
            )

    def close(self) -> None:
        """Close the Argo Server session, if any."""
        if self._submitter is not None:
            self._submitter.close()

    def execute(self, cached: CachedPS, obs: Observed, decision: Decision) -> None:
        """Carry out `decision.actions` in order for the ProgressiveSync `cached`."""
        namespace, name = cached.key
        extra = {"ps": f"{namespace}/{name}", "step": decision.step}
        for action in decision.actions:
            if isinstance(action, AddFinalizer | RemoveFinalizer):
                self._set_finalizer(namespace, name, present=isinstance(action, AddFinalizer))
            elif isinstance(action, CreateWorkflow):
                self._create_workflow(namespace, name, action, extra)
            elif isinstance(action, RequestCompare):
                self._request_compare(action, extra)
            elif isinstance(action, StopWorkflow):
                self._patch_workflow(
                    namespace,
                    action.name,
                    control.shutdown_patch(Shutdown.STOP, watcher_reason=action.reason),
                    action.reason,
                    extra,
                )
            elif isinstance(action, EndSyncs):
                self._end_syncs(action, extra)
            elif isinstance(action, SuspendWorkflow):
                self._patch_workflow(
                    namespace,
                    action.name,
                    control.suspend_patch(by_watcher=True),
                    "spec.paused is true",
                    extra,
                )
            elif isinstance(action, ResumeWorkflow):
                self._patch_workflow(
                    namespace,
                    action.name,
                    control.lift_watcher_suspend_patch(),
                    "spec.paused is false",
                    extra,
                )
            elif isinstance(action, RecordEvent):
                self.record_event(cached, action)
            elif isinstance(action, RequeueAfter):
                self._requeue(cached.key, action.seconds)
            elif isinstance(action, UpdateStatus):
                self._write_status(cached, obs.status, action.patch, decision.step, extra)

    def record_event(self, cached: CachedPS, action: RecordEvent) -> None:
        """Write one Event on the ProgressiveSync; an Event is a courtesy: a failure is only logged."""
        namespace, name = cached.key
        meta = cached.obj.get("metadata") or {}
        now = format_time(action.at or self.clock.now())
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": event_name(name, action.identity), "namespace": namespace},
            "involvedObject": {
                "apiVersion": cached.obj.get("apiVersion", ""),
                "kind": "ProgressiveSync",
                "name": name,
                "namespace": namespace,
                "uid": meta.get("uid", ""),
                "resourceVersion": meta.get("resourceVersion", ""),
            },
            "reason": action.reason,
            "message": action.message[:1024],
            "type": action.type,
            "source": {"component": "progressive-sync-watcher"},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "reportingComponent": "progressive-sync-watcher",
        }
        if action.replayed and action.identity and self._recorded_already(namespace, body):
            log.debug("event %s on %s/%s was already recorded", action.reason, namespace, name)
            return
        try:
            # Retried on a transient error (5xx, 429, a lost answer): an overloaded API server must
            # not silently drop a rollout's notice. The name is fixed before the first attempt, so
            # an attempt whose answer was lost answers AlreadyExists to the next one: recorded once.
            # A named transition (`identity`) another watcher recorded answers AlreadyExists too.
            self._events_kube.retrying(
                f"create event {action.reason}", lambda: self._create_event(namespace, body)
            )
        except KubeError as exc:  # never fail a reconcile over an Event
            log.info("could not record event %s on %s/%s: %s", action.reason, namespace, name, exc)
        log.info(
            "%s/%s: %s: %s",
            namespace,
            name,
            action.reason,
            action.message,
            extra={"ps": f"{namespace}/{name}", "event": action.reason},
        )

    def _recorded_already(self, namespace: str, body: dict[str, Any]) -> bool:
        """A replayed transition's Event exists (its predecessor recorded it): a read, so a watcher
        that starts on a converged fleet writes nothing. Unsure (refused, unreachable): not known
        to exist, so the create decides (AlreadyExists if it does)."""
        try:
            self._events_kube.get(EVENTS, namespace, body["metadata"]["name"])
        except KubeError:
            return False
        return True

    def _create_event(self, namespace: str, body: dict[str, Any]) -> None:
        with contextlib.suppress(AlreadyExists):
            self._events_kube.create(EVENTS, namespace, body)

    def _set_finalizer(self, namespace: str, name: str, *, present: bool) -> None:
        # A conditional update (resourceVersion) rather than a merge patch: a merge patch replaces
        # the whole finalizers list and could drop another controller's finalizer.
        try:
            obj = self.kube.get(PROGRESSIVE_SYNCS, namespace, name)
        except NotFound:
            return
        finalizers = list((obj.get("metadata") or {}).get("finalizers") or [])
        if (FINALIZER in finalizers) == present:
            return
        finalizers = [*finalizers, FINALIZER] if present else [f for f in finalizers if f != FINALIZER]
        obj["metadata"]["finalizers"] = finalizers
        try:
            self.kube.replace(PROGRESSIVE_SYNCS, namespace, obj)
        except NotFound:
            return
        log.info(
            "%s finalizer %s on %s/%s",
            "added" if present else "removed",
            FINALIZER,
            namespace,
            name,
            extra={"ps": f"{namespace}/{name}"},
        )

    def _create_workflow(
        self, namespace: str, ps_name: str, action: CreateWorkflow, extra: dict[str, str]
    ) -> None:
        if not action.workflow:
            raise ValueError(f"Workflow {action.name} was not built: run the decision through `build` first")
        body = dict(action.workflow)
        try:
            if self._submitter is not None:
                self._submit_through_argo_server(namespace, body)
            else:
                self.kube.create(WORKFLOWS, namespace, body)
        except AlreadyExists:
            existing = self.kube.get(WORKFLOWS, namespace, action.name)
            owner = str(((existing.get("metadata") or {}).get("labels") or {}).get(NAME_LABEL, ""))
            if owner != label_value(ps_name):
                raise KubeError(
                    f"Workflow {namespace}/{action.name} exists but belongs to {owner or 'nobody'}; "
                    "not adopting it"
                ) from None
            log.info(
                "Workflow %s exists already; adopting it",
                action.name,
                extra={**extra, "workflow": action.name},
            )
            return
        log.info(
            "created Workflow %s (rollout %s, attempt %d)",
            action.name,
            action.rollout_id,
            action.attempt,
            extra={**extra, "workflow": action.name},
        )

    def _request_compare(self, action: RequestCompare, extra: dict[str, str]) -> None:
        """Ask Argo CD to compare each Application again; one gone meanwhile needs no answer."""
        asked: list[str] = []
        for app in action.names:
            try:
                self.kube.patch(APPLICATIONS, action.namespace, app, appsync.refresh_patch(self.clock.now()))
            except NotFound:
                continue
            except Forbidden as exc:
                # An installation that does not let the watcher annotate Applications still rolls
                # out: the wait is bounded, and Argo CD's own timer compares them meanwhile.
                log.warning(
                    "could not ask Argo CD to compare Applications in %s: %s; waiting for its own "
                    "comparisons instead (grant the watcher patch on applications.argoproj.io)",
                    action.namespace,
                    exc,
                    extra=extra,
                )
                break
            asked.append(app)
        if asked:
            shown = ", ".join(asked[:10]) + (f" and {len(asked) - 10} more" if len(asked) > 10 else "")
            log.info(
                "asked Argo CD to compare %d Application(s) against release %s before its rollout starts: %s",
                len(asked),
                action.release,
                shown,
                extra=extra,
            )

    def _submit_through_argo_server(self, namespace: str, body: dict[str, Any]) -> None:
        assert self._submitter is not None
        try:
            self._submitter.create(namespace, body)
        except AlreadyExists:
            raise
        except KubeError:
            # Argo Server does not always say 409 for a duplicate name; if it is there, it exists.
            try:
                self.kube.get(WORKFLOWS, namespace, body["metadata"]["name"])
            except NotFound:
                raise
            raise AlreadyExists(f"Workflow {body['metadata']['name']} exists", status=409) from None

    def _patch_workflow(
        self, namespace: str, name: str, patch: dict[str, Any], reason: str, extra: dict[str, str]
    ) -> None:
        try:
            self.kube.patch(WORKFLOWS, namespace, name, patch)
        except NotFound:
            log.info("Workflow %s is gone; nothing to patch", name, extra=extra)
            return
        log.info(
            "Workflow %s: %s (%s)", name, describe_patch(patch), reason, extra={**extra, "workflow": name}
        )

    def _end_syncs(self, action: EndSyncs, extra: dict[str, str]) -> None:
        """End the rollout's syncs still in flight on each Application; raise after trying them all
        when some could not be written (the reconcile is retried; the decision is made again)."""
        done: dict[appsync.TerminateAction, list[str]] = {}
        failures: list[str] = []
        for name in action.apps:
            try:
                outcome = self._end_sync(action.namespace, name, action.rollout_id)
            except KubeError as exc:
                failures.append(f"{name}: {exc}")
                continue
            done.setdefault(outcome, []).append(name)
        withdrawn = done.get(appsync.TerminateAction.WITHDRAW, [])
        terminated = done.get(appsync.TerminateAction.TERMINATE, [])
        if withdrawn or terminated:
            log.info(
                "rollout %s: sync request(s) withdrawn: %s; running sync(s) set Terminating: %s",
                action.rollout_id,
                ", ".join(withdrawn) or "none",
                ", ".join(terminated) or "none",
                extra={**extra, "rollout": action.rollout_id},
            )
        if failures:
            raise KubeError(
                f"rollout {action.rollout_id}: could not end the sync of {len(failures)} Application(s): "
                + "; ".join(failures[:5])
            )

    def _end_sync(self, namespace: str, name: str, rollout_id: str) -> appsync.TerminateAction:
        """One Application: read it now, decide, write at most one update (a 409 decides again)."""
        for attempt in range(len(END_SYNC_CONFLICT_BACKOFFS) + 1):
            try:
                app = self.kube.get(APPLICATIONS, namespace, name)
            except NotFound:
                return appsync.TerminateAction.NONE
            decision = appsync.decide_terminate(app, rollout_id)
            if decision.action == appsync.TerminateAction.WITHDRAW:
                body = appsync.build_withdraw_request(app)
            elif decision.action == appsync.TerminateAction.TERMINATE:
                body = appsync.build_terminate_request(app)
            else:
                return decision.action
            try:
                self.kube.replace(APPLICATIONS, namespace, body)
            except NotFound:
                return appsync.TerminateAction.NONE
            except Conflict:
                if attempt == len(END_SYNC_CONFLICT_BACKOFFS):
                    raise
                time.sleep(END_SYNC_CONFLICT_BACKOFFS[attempt])
                continue
            log.info("%s", decision.reason)
            return decision.action
        raise AssertionError("unreachable")

    def _write_status(
        self,
        cached: CachedPS,
        status: ProgressiveSyncStatus,
        patch: StatusPatch,
        step: str,
        extra: dict[str, str],
    ) -> None:
        namespace, name = cached.key
        now = self.clock.now()
        # Compare on the cached status first: a converged ProgressiveSync costs no request at all.
        if apply_patch(status.model_copy(deep=True), patch, now).to_api() == status.to_api():
            log.debug("%s/%s: status unchanged; not writing", namespace, name, extra=extra)
            return
        try:
            result = update_status(
                self.kube,
                namespace,
                name,
                lambda current: apply_patch(current, patch, now),
                what=f"watcher {step}",
            )
        except NotFound:
            return
        if result.written:
            log.debug("%s/%s: status written (%s)", namespace, name, step, extra=extra)

    def write_summaries(self, cached: CachedPS, plan: SummaryPlan) -> bool:
        """Put the live summaries of `plan` into the status (re-applied on a conflict, written only
        when they change it); True when written."""
        namespace, name = cached.key
        try:
            result = update_status(
                self.kube,
                namespace,
                name,
                lambda current: apply_plan(current, plan.rollout_id, plan.write),
                what="watcher summary",
            )
        except NotFound:
            return False
        log.debug("%s/%s: %s; summary written: %s", namespace, name, plan.reason, result.written)
        return result.written


def describe_patch(patch: Mapping[str, Any]) -> str:
    """A Workflow control patch in a word or two, for the log."""
    spec = patch.get("spec") or {}
    if spec.get("shutdown"):
        return f"shutdown {spec['shutdown']}"
    if spec.get("suspend") is True:
        return "suspended"
    return "resumed"
