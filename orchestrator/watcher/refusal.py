"""Rule 8 of the watcher's decision: may this ProgressiveSync start a rollout at all?

`refusal_of(obs, policy)` says why not (a `Refusal`: a reason of the catalog and its message, shown
as `Valid=False`), in order: sync options the installation does not allow; a cycle of
`spec.dependsOn` through it (`Observed.dependency_cycle`, docs/depends-on.md); then who may roll out
what (the ApplicationSet is looked up where the spec says: `appSetRef.namespace`, else the
ProgressiveSync's own namespace; it must be in a namespace the watcher reads, exist, admit the
ProgressiveSync's namespace, not be rolled out by another admitted ProgressiveSync, and not be
rolled out by Argo CD's own RollingSync). A refusal never stops a rollout that runs; it keeps a new
one from starting.

Callers: `orchestrator.watcher.decide` (once per decision, before the rules that start rollouts).
"""

from __future__ import annotations

from orchestrator.api.depends import describe_cycle
from orchestrator.api.metadata import ALLOWED_NAMESPACES_ANNOTATION
from orchestrator.api.models import ProgressiveSyncSpec
from orchestrator.api.reasons import Reason
from orchestrator.watcher.decision import ANY_SYNC_OPTION, Observed, ReconcilePolicy, Refusal

# ApplicationSet `spec.strategy.type` of Argo CD's own progressive sync, which we refuse to fight.
ROLLING_SYNC = "RollingSync"


def refusal_of(obs: Observed, policy: ReconcilePolicy) -> Refusal | None:
    """Why this ProgressiveSync may not start a rollout, or None (see the module docstring)."""
    if obs.spec is None:
        return None
    options = sync_options_refusal(obs.spec, policy)
    if options is not None:
        return options
    if obs.dependency_cycle:
        return Refusal(
            Reason.DEPENDENCY_CYCLE, Reason.DEPENDENCY_CYCLE.say(cycle=describe_cycle(obs.dependency_cycle))
        )
    name = obs.spec.app_set_ref.name
    appset_namespace = obs.appset_namespace or obs.namespace
    if not obs.appset_watched:
        watched = ", ".join(obs.watched_appset_namespaces) or "none"
        return Refusal(
            Reason.APPLICATION_SET_NAMESPACE_NOT_WATCHED,
            Reason.APPLICATION_SET_NAMESPACE_NOT_WATCHED.say(
                app_set=f"{appset_namespace}/{name}", watched=watched
            ),
        )
    if obs.appset is None:
        return Refusal(
            Reason.APPLICATION_SET_NOT_FOUND,
            Reason.APPLICATION_SET_NOT_FOUND.say(app_set=name, namespace=appset_namespace),
        )
    if not obs.appset.admits(obs.namespace):
        return Refusal(
            Reason.NAMESPACE_NOT_ALLOWED,
            Reason.NAMESPACE_NOT_ALLOWED.say(
                app_set=f"{appset_namespace}/{name}",
                annotation=ALLOWED_NAMESPACES_ANNOTATION,
                allowed=", ".join(obs.appset.allowed_namespaces) or "none",
                namespace=obs.namespace,
            ),
        )
    if obs.claimed_by:
        return Refusal(
            Reason.APPLICATION_SET_CLAIMED,
            Reason.APPLICATION_SET_CLAIMED.say(app_set=name, owner=obs.claimed_by),
        )
    if obs.appset.strategy == ROLLING_SYNC:
        # Argo CD's own progressive sync (applicationset/controllers/progressive_sync.go) syncs the
        # same Applications step by step: two orchestrators would race over every sync.
        return Refusal(
            Reason.APPLICATION_SET_ROLLING_SYNC, Reason.APPLICATION_SET_ROLLING_SYNC.say(app_set=name)
        )
    return None


def sync_options_refusal(spec: ProgressiveSyncSpec, policy: ReconcilePolicy) -> Refusal | None:
    """The first sync option of the spec the installation does not allow, or None."""
    if spec.sync_options.prune and not policy.allow_prune:
        return Refusal(
            Reason.SYNC_OPTION_NOT_ALLOWED,
            "spec.syncOptions.prune: true is not allowed by this installation (the chart's "
            "policy.allowPrune, the watcher's --allow-prune); set it to false or ask the operators",
        )
    if ANY_SYNC_OPTION in policy.allowed_sync_options:
        return None
    for index, option in enumerate(spec.sync_options.options or []):
        if option not in policy.allowed_sync_options:
            allowed = ", ".join(policy.allowed_sync_options) or "none"
            return Refusal(
                Reason.SYNC_OPTION_NOT_ALLOWED,
                f"spec.syncOptions.options[{index}]: {option} is not allowed by this installation "
                f"(allowed: {allowed}; the chart's policy.allowedSyncOptions, the watcher's "
                "--allowed-sync-option)",
            )
    return None
