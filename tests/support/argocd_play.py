"""Writing Application objects exactly as Argo CD's controllers do, one write at a time, by hand.

The contract tests (tests/integration/test_argocd_contract.py) play Argo CD step by step against the
real API server, so each rule of DESIGN.md §3 is pinned without a simulator in between:

- `ArgoWorld.create(...)`: cluster Secrets, an ApplicationSet, one Application per cluster (owned by
  it, OutOfSync at the release revision, Healthy at the previous one), as Argo CD shows them;
- the ApplicationSet controller's reconcile (`appset_reconciles`): annotations and labels set to
  what the template generates, keeping only its default preserved annotations
  (applicationset_controller.go `createOrUpdateInCluster`);
- the application controller (controller/appcontroller.go): taking up `.operation`
  (`NewOperationState`: the operation copied into `status.operationState`, phase Running,
  `.operation` kept), completing it (phase, `finishedAt`, `syncResult`, `.operation` removed, a
  `status.history` entry for a sync that ran), a failed attempt with retries left (Running with
  `finishedAt`), comparing (`CompareWithLatest`: sync, health, `reconciledAt`, the refresh
  annotation consumed) and health moving on (`CompareWithRecent`: `reconciledAt` stays).

Every object written keeps the fields the real CRDs require (`operationState.operation`, `phase`,
`startedAt`; history `id`, `deployedAt`). Real: the API server. Nothing else runs.
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from orchestrator.argocd import appsync
from orchestrator.core.clock import format_time
from orchestrator.kube.client import APPLICATION_SETS, APPLICATIONS, SECRETS, Conflict, Kube

# What the ApplicationSet controller keeps of an Application's annotations by default.
PRESERVED_ANNOTATIONS = (
    "notified.notifications.argoproj.io",
    appsync.REFRESH_ANNOTATION,
    "argocd.argoproj.io/hydrate",
)
GENERATED_ANNOTATIONS = {"team": "payments"}


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


@dataclass
class ArgoWorld:
    """One namespace holding an Argo CD fleet, and Argo CD's writes to it."""

    kube: Kube
    namespace: str
    app_set: str = "myservice"
    clusters: list[str] = field(default_factory=list)

    @classmethod
    def create(
        cls,
        kube: Kube,
        namespace: str,
        *,
        clusters: list[str],
        revision: str,
        previous: str,
        now: datetime,
        app_set: str = "myservice",
    ) -> ArgoWorld:
        """Cluster Secrets (label `region`), the ApplicationSet and one Application per cluster."""
        world = cls(kube, namespace, app_set, list(clusters))
        for cluster in clusters:
            kube.create(
                SECRETS,
                namespace,
                {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "metadata": {
                        "name": f"cluster-{cluster}",
                        "labels": {"argocd.argoproj.io/secret-type": "cluster", "region": cluster},
                    },
                    "data": {"name": _b64(cluster), "server": _b64(world.server(cluster))},
                },
            )
        owner = kube.create(
            APPLICATION_SETS,
            namespace,
            {
                "apiVersion": "argoproj.io/v1alpha1",
                "kind": "ApplicationSet",
                "metadata": {"name": app_set},
                "spec": {
                    "generators": [{"clusters": {"selector": {}}}],
                    "template": {
                        "metadata": {"name": f"{app_set}-{{{{name}}}}", "annotations": GENERATED_ANNOTATIONS},
                        "spec": {
                            "project": "default",
                            "source": {"repoURL": "https://git.example.test/x.git", "path": "deploy"},
                            "destination": {"server": "{{server}}", "namespace": app_set},
                        },
                    },
                },
            },
        )
        for cluster in clusters:
            kube.create(
                APPLICATIONS,
                namespace,
                {
                    "apiVersion": "argoproj.io/v1alpha1",
                    "kind": "Application",
                    "metadata": {
                        "name": world.app(cluster),
                        "annotations": dict(GENERATED_ANNOTATIONS),
                        "ownerReferences": [
                            {
                                "apiVersion": "argoproj.io/v1alpha1",
                                "kind": "ApplicationSet",
                                "name": app_set,
                                "uid": owner["metadata"]["uid"],
                                "controller": True,
                            }
                        ],
                    },
                    "spec": {
                        "project": "default",
                        "source": {
                            "repoURL": "https://git.example.test/x.git",
                            "path": "deploy",
                            "targetRevision": "main",
                        },
                        "destination": {"server": world.server(cluster), "namespace": app_set},
                    },
                    "status": {
                        "sync": {"status": "OutOfSync", "revision": revision},
                        "health": {"status": "Healthy"},
                        "reconciledAt": format_time(now),
                        "history": [
                            {
                                "id": 0,
                                "revision": previous,
                                "deployStartedAt": format_time(now - timedelta(days=1)),
                                "deployedAt": format_time(now - timedelta(days=1)),
                                "initiatedBy": {"username": "alice"},
                            }
                        ],
                    },
                },
            )
        return world

    def server(self, cluster: str) -> str:
        return f"https://{cluster}.clusters.example.test"

    def app(self, cluster: str) -> str:
        return f"{self.app_set}-{cluster}"

    def get(self, cluster: str) -> dict[str, Any]:
        return self.kube.get(APPLICATIONS, self.namespace, self.app(cluster))

    def write(self, cluster: str, change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        """Read, change, write with the resourceVersion; again on 409 (what every controller does)."""
        for _ in range(10):
            app = self.get(cluster)
            change(app)
            try:
                return self.kube.replace(APPLICATIONS, self.namespace, app)
            except Conflict:
                continue
        raise AssertionError(f"{self.app(cluster)}: still conflicting")

    # --- the ApplicationSet controller ---------------------------------------------------------

    def appset_reconciles(self, cluster: str) -> dict[str, Any]:
        """Annotations back to the template's, keeping only the preserved ones."""

        def change(app: dict[str, Any]) -> None:
            found = app["metadata"].get("annotations") or {}
            generated = dict(GENERATED_ANNOTATIONS)
            generated.update({k: v for k, v in found.items() if k in PRESERVED_ANNOTATIONS})
            app["metadata"]["annotations"] = generated

        return self.write(cluster, change)

    # --- the application controller ------------------------------------------------------------

    def takes_up(self, cluster: str, now: datetime) -> dict[str, Any]:
        """NewOperationState: the requested operation copied into the state, Running."""

        def change(app: dict[str, Any]) -> None:
            op = app["operation"]
            app["status"]["operationState"] = {
                "operation": copy.deepcopy(op),
                "phase": "Running",
                "startedAt": format_time(now),
            }

        return self.write(cluster, change)

    def completes(
        self,
        cluster: str,
        now: datetime,
        *,
        phase: str = "Succeeded",
        revision: str | None = None,
        message: str = "successfully synced (all tasks run)",
    ) -> dict[str, Any]:
        """The operation ends: phase, finishedAt, syncResult; `.operation` removed; history appended."""

        def change(app: dict[str, Any]) -> None:
            state = app["status"]["operationState"]
            sync = state["operation"].get("sync") or {}
            resolved = revision or sync.get("revision") or ""
            state.update(
                phase=phase,
                message=message,
                finishedAt=format_time(now),
                syncResult={"revision": resolved, "source": app["spec"]["source"]},
            )
            app.pop("operation", None)
            if phase == "Succeeded":
                history = app["status"].setdefault("history", [])
                history.append(
                    {
                        "id": len(history),
                        "revision": resolved,
                        "deployStartedAt": state["startedAt"],
                        "deployedAt": format_time(now),
                        "initiatedBy": {
                            k: v
                            for k, v in (state["operation"].get("initiatedBy") or {}).items()
                            if k in ("username", "automated")
                        },
                    }
                )

        return self.write(cluster, change)

    def attempt_fails_with_retries_left(self, cluster: str, now: datetime, message: str) -> dict[str, Any]:
        """A failed attempt with retries left: Running, finishedAt set, retryCount up (appcontroller.go)."""

        def change(app: dict[str, Any]) -> None:
            state = app["status"]["operationState"]
            count = int(state.get("retryCount", 0)) + 1
            state.update(
                phase="Running",
                finishedAt=format_time(now),
                retryCount=count,
                message=f"{message}. Retrying attempt #{count} at {now:%I:%M%p}.",
            )

        return self.write(cluster, change)

    def held_by_sync_window(self, cluster: str) -> dict[str, Any]:
        """Our Running sync held back by a deny window (controller/sync.go `syncWindowPreventsSync`)."""

        def change(app: dict[str, Any]) -> None:
            app["status"]["operationState"]["message"] = "Sync operation blocked by sync window"

        return self.write(cluster, change)

    def ends_terminated(self, cluster: str, now: datetime) -> dict[str, Any]:
        """The controller ends a Terminating operation: Failed, finishedAt, `.operation` removed."""

        def change(app: dict[str, Any]) -> None:
            state = app["status"]["operationState"]
            assert state["phase"] == "Terminating", state
            state.update(phase="Failed", message="Operation terminated", finishedAt=format_time(now))
            app.pop("operation", None)

        return self.write(cluster, change)

    def compares(
        self, cluster: str, now: datetime, *, sync: str, revision: str, health: str = "Healthy"
    ) -> dict[str, Any]:
        """CompareWithLatest: sync status and revision, health, reconciledAt; the refresh consumed."""

        def change(app: dict[str, Any]) -> None:
            for key in appsync.REFRESH_ANNOTATIONS:
                (app["metadata"].get("annotations") or {}).pop(key, None)
            app["status"].update(
                sync={"status": sync, "revision": revision},
                health={"status": health},
                reconciledAt=format_time(now),
            )

        return self.write(cluster, change)

    def health_moves(self, cluster: str, health: str, message: str = "") -> dict[str, Any]:
        """CompareWithRecent after a resource changed: health only; reconciledAt stays."""

        def change(app: dict[str, Any]) -> None:
            app["status"]["health"] = {"status": health, **({"message": message} if message else {})}

        return self.write(cluster, change)

    def someone_syncs(self, cluster: str, username: str, revision: str) -> dict[str, Any]:
        """A person syncs in the UI (the API server's write: `.operation` set, finished state cleared)."""

        def change(app: dict[str, Any]) -> None:
            app["operation"] = {
                "initiatedBy": {"username": username},
                "sync": {"revision": revision, "syncStrategy": {"hook": {}}},
            }
            app["status"].pop("operationState", None)

        return self.write(cluster, change)
