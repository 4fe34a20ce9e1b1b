"""The Workflow writes of `argo stop` and of the watcher's suspend and resume, through our adapter.

These write the same fields the argo CLI writes, so they work the same under Argo Workflows and
under the local executor:

- stop: `spec.shutdown: Stop` (running steps are killed, the exit handler runs); `shutdown_patch`
  also gives Terminate's (`spec.shutdown: Terminate`: no exit handler);
- suspend: `spec.suspend: true` (no new step starts; running ones finish);
- the watcher's resume clears `spec.suspend` and its own mark only.

The merge-patch bodies are built here and nowhere else (`shutdown_patch`, `suspend_patch`,
`lift_watcher_suspend_patch`): the watcher suspends for `spec.paused` with our
`suspended-by` annotation in the same patch, and lifts only a suspend it made.

Callers: the watcher and the operator commands (`cancel` stops). `argo terminate`, `argo suspend`
and `argo resume` as the tests drive them (where the argo CLI does not build) are in
`tests/support/workflow_control.py`; `progressive-sync approve` (orchestrator.ops.actions) opens
one stage's gate only.
"""

from __future__ import annotations

from typing import Any

from orchestrator.api.metadata import (
    STOPPED_BY_WATCHER_ANNOTATION,
    SUSPENDED_BY_ANNOTATION,
    SUSPENDED_BY_WATCHER,
)
from orchestrator.kube.client import WORKFLOWS, Kube
from orchestrator.workflows.phases import Shutdown

# An annotation value is free text; a stop's reason is kept to this many characters.
_STOP_REASON_MAX_CHARS = 512


def shutdown_patch(strategy: Shutdown, *, watcher_reason: str | None = None) -> dict[str, Any]:
    """The merge patch of `spec.shutdown` (Stop: the exit handler runs; Terminate: it does not);
    the watcher's also says why it stopped the rollout (`STOPPED_BY_WATCHER_ANNOTATION`), so the
    exit handler tells it from a person's cancel."""
    patch: dict[str, Any] = {"spec": {"shutdown": strategy.value}}
    if watcher_reason is not None:
        reason = watcher_reason[:_STOP_REASON_MAX_CHARS] or "stopped by the watcher"
        patch["metadata"] = {"annotations": {STOPPED_BY_WATCHER_ANNOTATION: reason}}
    return patch


def suspend_patch(*, by_watcher: bool) -> dict[str, Any]:
    """The merge patch of `spec.suspend: true`; the watcher's also says the suspend is its own."""
    patch: dict[str, Any] = {"spec": {"suspend": True}}
    if by_watcher:
        patch["metadata"] = {"annotations": {SUSPENDED_BY_ANNOTATION: SUSPENDED_BY_WATCHER}}
    return patch


def lift_watcher_suspend_patch() -> dict[str, Any]:
    """The merge patch removing `spec.suspend` and the watcher's mark (the watcher's resume)."""
    return {"metadata": {"annotations": {SUSPENDED_BY_ANNOTATION: None}}, "spec": {"suspend": None}}


def stop(kube: Kube, namespace: str, name: str) -> None:
    """`argo stop`: running steps end, the exit handler runs, the Workflow ends Failed."""
    kube.patch(WORKFLOWS, namespace, name, shutdown_patch(Shutdown.STOP))


def terminate(kube: Kube, namespace: str, name: str) -> None:
    """`argo terminate`: every running step ends, the exit handler too (a rollback in progress)."""
    kube.patch(WORKFLOWS, namespace, name, shutdown_patch(Shutdown.TERMINATE))
