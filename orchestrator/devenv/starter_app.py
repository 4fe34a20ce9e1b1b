"""The app the real-Argo-CD dev stack deploys: its manifests, its ApplicationSet and a health probe.

- `release_files(n)`: the starter app's manifests at release `n` (a ConfigMap whose data names
  the release); committing `release_files(n + 1)` is a new release.
- `application_set(...)`: an ApplicationSet with a cluster generator over labelled cluster
  Secrets, one Application per cluster (`<appset>-<cluster>`), each into its own namespace
  `<appset>-<cluster>` (several cluster names may share one API server), automated sync off and
  `CreateNamespace=true` among the Application's own sync options; or one per cluster and
  component (a matrix with a list generator), Applications of a chart from a Helm chart
  repository (`helm_source`), or multi-source ones (the chart with its values from Git:
  `helm_source(..., value_files=["$values/..."])` plus `values_source`).
- `HealthProbe` (`testing.progressivesync.io/v1`): a tiny CRD whose health Argo CD reads through
  a Lua check in `argocd-cm` (`resource.customizations.health.<group>_<kind>`) from
  `status.health`, which a test sets on the destination cluster to drive an Application
  Progressing, Healthy, Degraded or Suspended on purpose. Without a status it is Progressing.

Pure data: nothing here talks to a cluster. Callers: `orchestrator.devenv.argocd` (and its
`argocd_settings`, `argocd_manifests`, `argocd_requests`), the demo, the real-Argo-CD tests.
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


def app_name(app_set: str, cluster: str, component: str = "") -> str:
    """The Application the ApplicationSet generates for `cluster` (and `component`, when it
    generates several per cluster)."""
    return f"{app_set}-{cluster}-{component}" if component else f"{app_set}-{cluster}"


def destination_namespace(app_set: str, cluster: str, component: str = "") -> str:
    """Where that Application's objects go on the cluster (one per cluster name and component)."""
    return app_name(app_set, cluster, component)


COMPONENT_PARAMETER = "{{component}}"


def helm_source(
    repo_url: str,
    chart: str,
    target_revision: str,
    *,
    value_files: Sequence[str] = (),
) -> dict[str, Any]:
    """A chart from a Helm chart repository: `target_revision` an exact version (`1.2.4`) or a
    semver constraint (`1.2.*`); Argo CD reports the version it resolved as the revision.
    `value_files` may name files of a `ref` source (`$values/path/values.yaml`)."""
    source: dict[str, Any] = {"repoURL": repo_url, "chart": chart, "targetRevision": target_revision}
    if value_files:
        source["helm"] = {"valueFiles": list(value_files)}
    return source


def values_source(repo_url: str, ref: str = "values", target_revision: str = "main") -> dict[str, Any]:
    """A Git source that only lends its files to another source's `$<ref>/...` (no path: nothing of
    it is deployed by itself)."""
    return {"repoURL": repo_url, "targetRevision": target_revision, "ref": ref}


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
    sources: Sequence[Mapping[str, Any]] = (),
    components: Sequence[str] = (),
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """An ApplicationSet: one Application per cluster Secret matching `selector`.

    `labels` go into the template's metadata (values may be templates, e.g.
    `{{metadata.labels.region}}`: the cluster's label on its Application, as Argo CD RollingSync
    setups do).

    `target_revision` may be a template (e.g. `{{metadata.labels.track}}`: a branch per cluster).
    One `sources` entry replaces the Git source (`repo_url`, `path`, `target_revision`), e.g. a
    `helm_source`; several make multi-source Applications (`spec.sources`). `components` make it
    generate one Application per cluster and component (a matrix of the cluster generator and a
    list generator), `<appset>-<cluster>-<component>`, each into its own namespace; `{{component}}`
    in `path` is the component's folder.
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
    clusters: dict[str, Any] = {"clusters": {"selector": dict(selector or {})}}
    component = COMPONENT_PARAMETER if components else ""
    generator = clusters
    if components:
        elements = [{"component": each} for each in components]
        generator = {"matrix": {"generators": [clusters, {"list": {"elements": elements}}]}}
    template_spec: dict[str, Any] = {"project": project}
    if len(sources) > 1:
        template_spec["sources"] = [dict(source) for source in sources]
    elif sources:
        template_spec["source"] = dict(sources[0])
    else:
        template_spec["source"] = {"repoURL": repo_url, "path": path, "targetRevision": target_revision}
    template_spec["destination"] = {
        "server": "{{server}}",
        "namespace": destination_namespace(name, "{{name}}", component),
    }
    template_spec["syncPolicy"] = sync_policy
    spec: dict[str, Any] = {
        "generators": [generator],
        "template": {"metadata": {"name": app_name(name, "{{name}}", component)}, "spec": template_spec},
    }
    if labels:
        spec["template"]["metadata"]["labels"] = dict(labels)
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
