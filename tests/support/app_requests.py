"""Writing to Applications the way people and Argo CD's API server do, and reading when an operation
has settled, for tests of the fleet simulator and of scenarios built on it.

`request_sync` is what Argo CD's API server writes for `argocd app sync` (`.operation` set and the
finished `operationState` dropped, in one update with the resourceVersion); `settled` waits past
Argo CD's in-between state (the operation done, the comparison after it not yet written).
"""

from __future__ import annotations

from typing import Any

from orchestrator.kube.client import APPLICATIONS, Conflict, Kube

REVISION = "4f1c2e9b7a3d5c8e1f0a2b4c6d8e0f1a3b5c7d9e"


def change(kube: Kube, namespace: str, name: str, edit: Any) -> dict[str, Any]:
    """Read, edit, write with the resourceVersion; again on 409 (the simulator writes too)."""
    for _ in range(20):
        app = kube.get(APPLICATIONS, namespace, name)
        edit(app)
        try:
            return kube.replace(APPLICATIONS, namespace, app)
        except Conflict:
            continue
    raise AssertionError(f"{name} kept conflicting")


def request_sync(kube: Kube, namespace: str, name: str, *, revision: str = REVISION, **sync: Any) -> None:
    """What Argo CD's API server does for `argocd app sync`: `.operation` set, operationState dropped."""

    def edit(app: dict[str, Any]) -> None:
        app["operation"] = {
            "initiatedBy": {"username": "tester", "automated": True},
            "info": [{"name": "rollout-id", "value": "r1"}],
            "sync": {"revision": revision, **sync},
        }
        app.get("status", {}).pop("operationState", None)

    change(kube, namespace, name, edit)


def annotate(kube: Kube, namespace: str, name: str, annotations: dict[str, str | None]) -> None:
    """Set (or with None remove) annotations on an Application."""

    def edit(app: dict[str, Any]) -> None:
        current = app["metadata"].setdefault("annotations", {})
        for key, value in annotations.items():
            if value is None:
                current.pop(key, None)
            else:
                current[key] = value

    change(kube, namespace, name, edit)


def settled(kube: Kube, namespace: str, name: str) -> dict[str, Any] | None:
    """The Application once its operation failed, or succeeded and health settled after the
    comparison that followed it (until then Argo CD still shows the health of before)."""
    app = kube.get(APPLICATIONS, namespace, name)
    status = app.get("status") or {}
    state = status.get("operationState") or {}
    if state.get("phase") in ("Failed", "Error") and "operation" not in app:
        return app
    sync = status.get("sync") or {}
    compared = sync.get("status") == "Synced" and sync.get("revision") == (state.get("syncResult") or {}).get(
        "revision"
    )
    if (
        state.get("phase") == "Succeeded"
        and compared
        and status["health"]["status"] in ("Healthy", "Degraded")
    ):
        return app
    return None
