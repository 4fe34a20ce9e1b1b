"""The app the real-Argo-CD dev stack deploys: its manifests, its ApplicationSet and a health probe.

- `release_files(n)`: the starter app's manifests at release `n` (a ConfigMap whose data names
  the release); committing `release_files(n + 1)` is a new release.
- `application_set(...)`: an ApplicationSet with a cluster generator over labelled cluster
  Secrets, one Application per cluster (`<appset>-<cluster>`), each into its own namespace
  `<appset>-<cluster>` (several cluster names may share one API server), automated sync off and
  `CreateNamespace=true` among the Application's own sync options.
- `HealthProbe` (`testing.progressivesync.io/v1`): a tiny CRD whose health Argo CD reads through
  a Lua check in `argocd-cm` (`resource.customizations.health.<group>_<kind>`) from
  `status.health`, which a test sets on the destination cluster to drive an Application
  Progressing, Healthy, Degraded or Suspended on purpose. Without a status it is Progressing.

Pure data: nothing here talks to a cluster. Callers: `orchestrator.devenv.argocd`, the demo, the
real-Argo-CD tests.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import yaml

APP_SET = "myservice"
APP_PATH = APP_SET
PROBE_GROUP = "testing.progressivesync.io"
PROBE_KIND = "HealthProbe"
PROBE_PLURAL = "healthprobes"
PROBE_VERSION = "v1"
PROBE_HEALTH_VALUES = ("Healthy", "Progressing", "Degraded", "Suspended", "Missing", "Unknown")

# argocd-cm key and Lua source of the probe's health check (run by gitops-engine for each probe).
PROBE_HEALTH_KEY = f"resource.customizations.health.{PROBE_GROUP}_{PROBE_KIND}"
PROBE_HEALTH_LUA = """\
hs = {status = "Progressing", message = "waiting for status.health"}
if obj.status ~= nil and obj.status.health ~= nil then
  hs.status = obj.status.health
  hs.message = obj.status.message or ""
end
return hs
"""


def _metadata(name: str, annotations: Mapping[str, str] | None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if annotations:
        metadata["annotations"] = dict(annotations)
    return metadata


def configmap_manifest(
    name: str, data: Mapping[str, str], *, annotations: Mapping[str, str] | None = None
) -> str:
    """A ConfigMap manifest (no namespace: it goes to the Application's destination namespace);
    `annotations` e.g. a sync wave."""
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": _metadata(name, annotations),
            "data": dict(data),
        },
        sort_keys=False,
    )


def probe_manifest(name: str, *, kind: str = PROBE_KIND, annotations: Mapping[str, str] | None = None) -> str:
    """A HealthProbe (or another kind of `probe_crd`) manifest; `annotations` e.g. a sync wave."""
    return yaml.safe_dump(
        {
            "apiVersion": f"{PROBE_GROUP}/{PROBE_VERSION}",
            "kind": kind,
            "metadata": _metadata(name, annotations),
            "spec": {"purpose": "the test sets status.health to drive the Application's health"},
        },
        sort_keys=False,
    )


def release_files(release: int, *, path: str = APP_PATH, app: str = APP_SET) -> dict[str, str]:
    """The starter app's manifests at release number `release`."""
    return {f"{path}/configmap.yaml": configmap_manifest(app, {"release": str(release)})}


def release_number(configmap_yaml: str) -> int:
    """The release number in a committed starter ConfigMap (0 when it names none)."""
    document = yaml.safe_load(configmap_yaml) or {}
    try:
        return int((document.get("data") or {}).get("release", 0))
    except (TypeError, ValueError):
        return 0


def probe_crd(kind: str = PROBE_KIND) -> dict[str, Any]:
    """The HealthProbe CustomResourceDefinition (installed on every destination cluster); another
    `kind` gives a CRD of the same shape that no cluster has until a test installs it."""
    plural = f"{kind.lower()}s"
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{PROBE_GROUP}"},
        "spec": {
            "group": PROBE_GROUP,
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": kind.lower(), "kind": kind, "listKind": f"{kind}List"},
            "versions": [
                {
                    "name": PROBE_VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                                "status": {
                                    "type": "object",
                                    "properties": {
                                        "health": {"type": "string", "enum": list(PROBE_HEALTH_VALUES)},
                                        "message": {"type": "string"},
                                    },
                                },
                            },
                        }
                    },
                }
            ],
        },
    }


def app_name(app_set: str, cluster: str) -> str:
    """The Application the ApplicationSet generates for `cluster`."""
    return f"{app_set}-{cluster}"


def destination_namespace(app_set: str, cluster: str) -> str:
    """Where that Application's objects go on the cluster (one per cluster name)."""
    return f"{app_set}-{cluster}"


def application_set(
    name: str,
    *,
    repo_url: str,
    path: str,
    selector: Mapping[str, Any] | None = None,
    target_revision: str = "main",
    project: str = "default",
    sync_options: Sequence[str] = ("CreateNamespace=true",),
    retry: Mapping[str, Any] | None = None,
    preserved_annotations: Sequence[str] = (),
    preserve_resources_on_deletion: bool = False,
) -> dict[str, Any]:
    """An ApplicationSet: one Application per cluster Secret matching `selector`.

    `target_revision` may be a template (e.g. `{{metadata.labels.track}}`: a branch per cluster).
    The ApplicationSet controller gives each Application Argo CD's resources finalizer (deleting
    the Application deletes its resources) unless `preserve_resources_on_deletion`
    (`spec.syncPolicy.preserveResourcesOnDeletion`): then an Application is deleted at once and its
    resources stay.
    """
    sync_policy: dict[str, Any] = {}
    if sync_options:
        sync_policy["syncOptions"] = list(sync_options)
    if retry:
        sync_policy["retry"] = dict(retry)
    spec: dict[str, Any] = {
        "generators": [{"clusters": {"selector": dict(selector or {})}}],
        "template": {
            "metadata": {"name": app_name(name, "{{name}}")},
            "spec": {
                "project": project,
                "source": {"repoURL": repo_url, "path": path, "targetRevision": target_revision},
                "destination": {
                    "server": "{{server}}",
                    "namespace": destination_namespace(name, "{{name}}"),
                },
                "syncPolicy": sync_policy,
            },
        },
    }
    if preserved_annotations:
        spec["preservedFields"] = {"annotations": list(preserved_annotations)}
    if preserve_resources_on_deletion:
        spec["syncPolicy"] = {"preserveResourcesOnDeletion": True}
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "ApplicationSet",
        "metadata": {"name": name},
        "spec": spec,
    }
