"""The ApplicationSet controller's hold on generated Applications' metadata, simulated.

On every reconcile Argo CD's ApplicationSet controller (`createOrUpdateInCluster`) sets each generated
Application's annotations and labels to what its template renders, keeping only the preserved keys
that exist on the Application: `argocd.argoproj.io/refresh`, `argocd.argoproj.io/hydrate`,
`notified.notifications.argoproj.io`, the ApplicationSet's `spec.preservedFields` and the
controller's `--preserved-annotations` / `--preserved-labels`. Any change to an Application's
annotations requeues the ApplicationSet, so a write by someone else is undone within moments. It does
not touch `.operation` or `status`.

The template is rendered for the cluster generator's parameters (`name`, `nameNormalized`, `server`,
`metadata.labels.<k>`, `metadata.annotations.<k>`), in fasttemplate (`{{name}}`) or Go template
(`{{ .name }}`, `{{ index .metadata.labels "k" }}`) form. Other generators and spec rewriting are not
simulated. The simulator's own `simulator.progressivesync.io/` annotations always survive: they are the
test's steering wheel, not part of the world.

Pure. Callers: `behaviours.next_step`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from orchestrator.simulator.config import ANNOTATION_PREFIX

DEFAULT_PRESERVED_ANNOTATIONS = (
    "notified.notifications.argoproj.io",
    "argocd.argoproj.io/refresh",
    "argocd.argoproj.io/hydrate",
)

_FAST = re.compile(r"\{\{\s*([A-Za-z0-9_.\-/]+)\s*\}\}")
_GO_FIELD = re.compile(r"\{\{\s*\.([A-Za-z0-9_.\-]+)\s*\}\}")
_GO_INDEX = re.compile(r"\{\{\s*index\s+\.metadata\.(labels|annotations)\s+\"([^\"]+)\"\s*\}\}")


@dataclass(frozen=True)
class ClusterParams:
    """A cluster generator's parameters for one cluster."""

    name: str
    server: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)

    def lookup(self, key: str) -> str | None:
        """The value of a parameter path (`name`, `metadata.labels.region`, ...), None when unknown."""
        if key == "name":
            return self.name
        if key == "nameNormalized":
            return re.sub(r"[^a-z0-9\-.]", "-", self.name.lower())
        if key == "server":
            return self.server
        for prefix, values in (
            ("metadata.labels.", self.labels),
            ("metadata.annotations.", self.annotations),
        ):
            if key.startswith(prefix):
                return values.get(key[len(prefix) :])
        return None


def render(text: str, params: ClusterParams, *, go_template: bool) -> str:
    """Render one template string; placeholders it does not know stay as written."""

    def keep_or(value: str | None, match: re.Match[str]) -> str:
        return match.group(0) if value is None else value

    if go_template:
        text = _GO_INDEX.sub(lambda m: keep_or(params.lookup(f"metadata.{m.group(1)}.{m.group(2)}"), m), text)
        return _GO_FIELD.sub(lambda m: keep_or(params.lookup(m.group(1)), m), text)
    return _FAST.sub(lambda m: keep_or(params.lookup(m.group(1)), m), text)


def owner_app_set(app: Mapping[str, Any]) -> str | None:
    """The name of the ApplicationSet that controls the Application, or None."""
    for ref in (app.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("kind") == "ApplicationSet" and ref.get("controller"):
            return str(ref.get("name") or "") or None
    return None


def desired_metadata(
    app: Mapping[str, Any],
    app_set: Mapping[str, Any],
    params: ClusterParams,
    *,
    preserved_annotations: tuple[str, ...] = (),
    preserved_labels: tuple[str, ...] = (),
) -> tuple[dict[str, str], dict[str, str]]:
    """(annotations, labels) the ApplicationSet controller writes onto the Application."""
    spec = app_set.get("spec") or {}
    template = (spec.get("template") or {}).get("metadata") or {}
    go_template = bool(spec.get("goTemplate"))
    annotations = {
        key: render(str(value), params, go_template=go_template)
        for key, value in (template.get("annotations") or {}).items()
    }
    labels = {
        key: render(str(value), params, go_template=go_template)
        for key, value in (template.get("labels") or {}).items()
    }
    preserved = spec.get("preservedFields") or {}
    keep_annotations = (
        *DEFAULT_PRESERVED_ANNOTATIONS,
        *(preserved.get("annotations") or ()),
        *preserved_annotations,
    )
    keep_labels = (*(preserved.get("labels") or ()), *preserved_labels)
    metadata = app.get("metadata") or {}
    current_annotations = metadata.get("annotations") or {}
    current_labels = metadata.get("labels") or {}
    for key, value in current_annotations.items():
        if key in keep_annotations or key.startswith(ANNOTATION_PREFIX):
            annotations[key] = value
    for key in keep_labels:
        if key in current_labels:
            labels[key] = current_labels[key]
    return annotations, labels
