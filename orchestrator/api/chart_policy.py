"""Would the chart, installed with these values, accept this ProgressiveSync? (`validate --values`)

The chart (charts/progressive-sync) decides what a ProgressiveSync may ask for in three places: the
watcher refuses a rollout with `Valid=False` (`SyncOptionNotAllowed`, ...; the chart passes its
`policy.*` values to it), the admission policy keeps the steps from writing anything else into an
Application (templates/admission.yaml), and RBAC grants the steps (or not) what an analysis gate
needs (templates/rbac.yaml). This module states those rules over the chart's values, so a
manifest can be checked before it is applied:

- `spec.syncOptions.prune: true` needs `policy.allowPrune: true`;
- each `spec.syncOptions.options` entry must be in `policy.allowedSyncOptions` (or that list holds
  `*`);
- `metadata.namespace`, when written, must be the namespace the watcher watches (`watchNamespaces`,
  empty: `argocdNamespace`), or no watcher ever sees the object;
- the ApplicationSet's namespace (`spec.appSetRef.namespace`, else the ProgressiveSync's) must be
  one where the chart lets the watcher read ApplicationSets (`workflowNamespace`, `argocdNamespace`);
- an analysis gate (`spec.analysis`, `stages[].analysis`) needs `analysis.enabled: true`, and a
  ClusterAnalysisTemplate (`clusterScope: true`) also `analysis.clusterTemplates: true`.

`chart_values(*overrides)` merges values files over the chart's defaults as Helm does (maps merge
key by key, anything else replaces, null removes); `ChartPolicy.from_values` reads what the rules
need; `policy_errors(ps, policy)` returns one `FieldError` per violation, naming the field, the
chart value that forbids it and the fix. Pure: dicts in, errors out; the CLI reads the files.

`CHART_DEFAULTS` repeats the chart's values.yaml for the keys read here, so the check works where
the CLI is installed without the chart (tests/unit/test_chart_policy.py keeps the two equal).

Callers: `progressive-sync validate --values` (`orchestrator.cli.validate_cmd`); tests.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.api.models import ProgressiveSync
from orchestrator.api.validation import FieldError

ANY_SYNC_OPTION = "*"

# The chart's values.yaml for the keys this module reads (a unit test keeps them equal).
CHART_DEFAULTS: dict[str, Any] = {
    "argocdNamespace": "argocd",
    "watchNamespaces": [],
    "workflowNamespace": "argocd",
    "analysis": {"enabled": True, "clusterTemplates": False},
    "policy": {
        "allowPrune": False,
        "allowedSyncOptions": [
            "ApplyOutOfSyncOnly=true",
            "FailOnSharedResource=true",
            "PruneLast=true",
            "RespectIgnoreDifferences=true",
            "ServerSideApply=true",
        ],
    },
}


class ChartValuesError(ValueError):
    """A values file holds something the chart would refuse for a key this module reads."""


def merge_values(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """`override` over `base` as Helm merges values files: maps key by key, null removes a key,
    anything else (lists included) replaces."""
    merged: dict[str, Any] = dict(base)
    for key, value in override.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = merge_values(merged[key], value)
        else:
            merged[key] = value
    return merged


def chart_values(*overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The chart's defaults with each values file merged over them, in order (as `helm -f a -f b`)."""
    values: dict[str, Any] = dict(CHART_DEFAULTS)
    for override in overrides:
        values = merge_values(values, override)
    return values


@dataclass(frozen=True)
class ChartPolicy:
    """What an installation of the chart accepts, read from its values."""

    allow_prune: bool = False
    allowed_sync_options: tuple[str, ...] = tuple(CHART_DEFAULTS["policy"]["allowedSyncOptions"])
    argocd_namespace: str = "argocd"
    workflow_namespace: str = "argocd"
    watch_namespaces: tuple[str, ...] = ()  # as written; empty: the Argo CD namespace
    analysis_enabled: bool = True
    cluster_templates: bool = False

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> ChartPolicy:
        """The policy of the chart installed with `values` (merged over the defaults already)."""
        policy = _mapping(values, "policy")
        analysis = _mapping(values, "analysis")
        return cls(
            allow_prune=_boolean(policy, "allowPrune", "policy.allowPrune", default=False),
            allowed_sync_options=_strings(policy, "allowedSyncOptions", "policy.allowedSyncOptions"),
            argocd_namespace=_string(values, "argocdNamespace", "argocdNamespace", default="argocd"),
            workflow_namespace=_string(values, "workflowNamespace", "workflowNamespace", default="argocd"),
            watch_namespaces=_strings(values, "watchNamespaces", "watchNamespaces"),
            analysis_enabled=_boolean(analysis, "enabled", "analysis.enabled", default=True),
            cluster_templates=_boolean(
                analysis, "clusterTemplates", "analysis.clusterTemplates", default=False
            ),
        )

    @property
    def watched(self) -> tuple[str, ...]:
        """The namespaces whose ProgressiveSyncs the watcher follows."""
        return self.watch_namespaces or (self.argocd_namespace,)

    @property
    def app_set_namespaces(self) -> tuple[str, ...]:
        """Where the watcher may read ApplicationSets (the chart's `appNamespaces`)."""
        return tuple(dict.fromkeys((self.workflow_namespace, self.argocd_namespace)))


def policy_errors(ps: ProgressiveSync, policy: ChartPolicy) -> list[FieldError]:
    """Every field of `ps` the chart installed with `policy` would refuse; [] when it accepts it."""
    errors = _sync_option_errors(ps, policy)
    errors += _namespace_errors(ps, policy)
    errors += _analysis_errors(ps, policy)
    return errors


def _sync_option_errors(ps: ProgressiveSync, policy: ChartPolicy) -> list[FieldError]:
    errors = []
    if ps.spec.sync_options.prune and not policy.allow_prune:
        errors.append(
            FieldError(
                "spec.syncOptions.prune",
                "true is not allowed by the chart (policy.allowPrune: false): the watcher refuses the "
                "rollout with Valid=False, reason SyncOptionNotAllowed",
                "set it to false, or install the chart with policy.allowPrune: true",
            )
        )
    if ANY_SYNC_OPTION in policy.allowed_sync_options:
        return errors
    allowed = ", ".join(policy.allowed_sync_options) or "none"
    for index, option in enumerate(ps.spec.sync_options.options or []):
        if option not in policy.allowed_sync_options:
            errors.append(
                FieldError(
                    f"spec.syncOptions.options[{index}]",
                    f"{option} is not allowed by the chart (policy.allowedSyncOptions: {allowed})",
                    f"remove it, or add {option} to the chart's policy.allowedSyncOptions",
                )
            )
    return errors


def _namespace_errors(ps: ProgressiveSync, policy: ChartPolicy) -> list[FieldError]:
    errors = []
    namespace = ps.metadata.namespace
    watched = ", ".join(policy.watched)
    where = "watchNamespaces" if policy.watch_namespaces else "argocdNamespace, as watchNamespaces is empty"
    if namespace and namespace not in policy.watched:
        errors.append(
            FieldError(
                "metadata.namespace",
                f"{namespace} is not watched by the chart's watcher (it watches {watched}: {where}); "
                "no rollout would ever start",
                f"create it in {policy.watched[0]}, or install the chart with workflowNamespace and "
                f"watchNamespaces: [{namespace}]",
            )
        )
    app_set_namespace = ps.spec.app_set_ref.namespace or namespace
    if app_set_namespace and app_set_namespace not in policy.app_set_namespaces:
        field = "spec.appSetRef.namespace" if ps.spec.app_set_ref.namespace else "metadata.namespace"
        readable = ", ".join(policy.app_set_namespaces)
        errors.append(
            FieldError(
                field,
                f"the ApplicationSet's namespace {app_set_namespace} is not one where the chart lets "
                f"the watcher read ApplicationSets ({readable}: workflowNamespace and argocdNamespace)",
                f"keep the ApplicationSet in {readable}, or install the chart with argocdNamespace: "
                f"{app_set_namespace}",
            )
        )
    return errors


def _analysis_errors(ps: ProgressiveSync, policy: ChartPolicy) -> list[FieldError]:
    gates = [("spec.analysis", ps.spec.analysis)] + [
        (f"spec.stages[{index}].analysis", stage.analysis) for index, stage in enumerate(ps.spec.stages)
    ]
    errors = []
    for path, analysis in gates:
        if analysis is None:
            continue
        if not policy.analysis_enabled:
            errors.append(
                FieldError(
                    path,
                    "the chart grants the steps no analysis rights (analysis.enabled: false): the "
                    "analyze step would fail with Forbidden",
                    "remove the analysis, or install the chart with analysis.enabled: true",
                )
            )
            continue
        for index, template in enumerate(analysis.templates or []):
            if template.cluster_scope and not policy.cluster_templates:
                errors.append(
                    FieldError(
                        f"{path}.templates[{index}].clusterScope",
                        f"ClusterAnalysisTemplate {template.name} is not readable by the steps "
                        "(analysis.clusterTemplates: false)",
                        "use an AnalysisTemplate in the ProgressiveSync's namespace, or install the "
                        "chart with analysis.clusterTemplates: true",
                    )
                )
    return errors


# --- reading values --------------------------------------------------------------------------


def _mapping(values: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = values.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ChartValuesError(f"{key}: expected a map, got {value!r}")
    return value


def _boolean(values: Mapping[str, Any], key: str, name: str, *, default: bool) -> bool:
    value = values.get(key, default)
    if not isinstance(value, bool):
        raise ChartValuesError(f"{name}: expected true or false, got {value!r}")
    return value


def _string(values: Mapping[str, Any], key: str, name: str, *, default: str) -> str:
    value = values.get(key, default)
    if not isinstance(value, str) or not value:
        raise ChartValuesError(f"{name}: expected a namespace name, got {value!r}")
    return value


def _strings(values: Mapping[str, Any], key: str, name: str) -> tuple[str, ...]:
    value = values.get(key) or []
    if (
        not isinstance(value, Sequence)
        or isinstance(value, str)
        or not all(isinstance(v, str) for v in value)
    ):
        raise ChartValuesError(f"{name}: expected a list of strings, got {value!r}")
    return tuple(value)
