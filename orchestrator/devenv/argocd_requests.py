"""What a person (or Argo CD's API server) does to the dev stack's Argo CD: sync an Application
(`request_sync`, as the API server's `Sync`), ask for a comparison now (`request_refresh`, as a Git
webhook), commit the starter app's next release; and reading back what it did (the Applications of
an ApplicationSet, `status.history`, a one-line summary of an Application).

Callers: `orchestrator.devenv.argocd` (ArgoCDStack's bootstrap, `release`, `refresh`, its waits),
`progressive-sync dev-cluster release`, tests/support/argocd_harness, the real-Argo-CD tests.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from orchestrator.devenv import starter_app
from orchestrator.devenv.argocd_settings import ArgoCDStackError
from orchestrator.devenv.gitrepo import ReleaseRepo
from orchestrator.kube.client import APPLICATIONS, Conflict, Kube


def request_sync(
    kube: Kube,
    namespace: str,
    name: str,
    *,
    revision: str = "",
    revisions: Sequence[str] = (),
    username: str = "dev-cluster",
    prune: bool = False,
    info: Mapping[str, str] | None = None,
    attempts: int = 5,
) -> dict[str, Any]:
    """Sync one Application the way Argo CD's API server `Sync` does (a person's sync).

    The operation carries the Application's own `spec.syncPolicy.syncOptions` and `retry`, the
    source and the pinned revision (a multi-source Application: its sources and `revisions`, one
    per source); a finished `status.operationState` is cleared in the same update. Raises
    `ArgoCDStackError` while another operation is in progress.
    """
    for _ in range(attempts):
        app = kube.get(APPLICATIONS, namespace, name)
        state = (app.get("status") or {}).get("operationState") or {}
        if app.get("operation") or state.get("phase") in ("Running", "Terminating"):
            raise ArgoCDStackError(f"Application {name}: another operation is in progress")
        policy = (app.get("spec") or {}).get("syncPolicy") or {}
        sync: dict[str, Any] = {"prune": prune}
        spec = app.get("spec") or {}
        if spec.get("sources"):
            if len(revisions) != len(spec["sources"]):
                raise ArgoCDStackError(
                    f"Application {name} has {len(spec['sources'])} sources: pin one revision each, "
                    f"not {list(revisions)}"
                )
            sync["revisions"] = list(revisions)
            sync["sources"] = spec["sources"]
        else:
            sync["revision"] = revision or (revisions[0] if revisions else "")
            if spec.get("source"):
                sync["source"] = spec["source"]
        if policy.get("syncOptions"):
            sync["syncOptions"] = list(policy["syncOptions"])
        operation: dict[str, Any] = {"sync": sync, "initiatedBy": {"username": username}}
        if policy.get("retry"):
            operation["retry"] = policy["retry"]
        if info:
            operation["info"] = [{"name": key, "value": value} for key, value in info.items()]
        app["operation"] = operation
        if state:
            app["status"].pop("operationState")
        try:
            return kube.replace(APPLICATIONS, namespace, app)
        except Conflict:
            continue
    raise ArgoCDStackError(f"Application {name} kept changing under the sync request ({attempts} attempts)")


def request_refresh(kube: Kube, namespace: str, names: Iterable[str], *, hard: bool = False) -> None:
    """Ask Argo CD to compare these Applications with Git now, as a Git webhook would."""
    value = "hard" if hard else "normal"
    for name in names:
        kube.patch(
            APPLICATIONS,
            namespace,
            name,
            {"metadata": {"annotations": {"argocd.argoproj.io/refresh": value}}},
        )


def app_set_applications(kube: Kube, namespace: str, app_set: str) -> list[str]:
    """The names of the Applications an ApplicationSet owns."""
    items, _ = kube.list(APPLICATIONS, namespace)
    return [
        str(item["metadata"]["name"])
        for item in items
        if any(
            ref.get("kind") == "ApplicationSet" and ref.get("name") == app_set
            for ref in item["metadata"].get("ownerReferences") or []
        )
    ]


def commit_next_release(repo: ReleaseRepo, app_set: str, message: str | None = None) -> tuple[int, str]:
    """Commit the starter app's next release (its ConfigMap names release n + 1); (n + 1, SHA)."""
    path = f"{starter_app.APP_PATH}/configmap.yaml"
    number = starter_app.release_number(repo.show(path)) + 1
    sha = repo.commit(starter_app.release_files(number, app=app_set), message or f"Release {number}")
    return number, sha


def operation_history(app: Mapping[str, Any]) -> list[dict[str, Any]]:
    """`status.history`: one entry per successful sync (id, revision, deployStartedAt, initiatedBy)."""
    return list((app.get("status") or {}).get("history") or [])


def app_summary(app: Mapping[str, Any] | None) -> str:
    """One line on where an Application stands (sync@revision, health, operation), for error messages."""
    if app is None:
        return "missing"
    status = app.get("status") or {}
    sync = status.get("sync") or {}
    state = status.get("operationState") or {}
    return (
        f"{sync.get('status', '?')}@{str(sync.get('revision', ''))[:8]} "
        f"{(status.get('health') or {}).get('status', '?')} op={state.get('phase', '-')} "
        f"{state.get('message', '')}".strip()
    )
