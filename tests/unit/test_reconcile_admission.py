"""Who may roll out what, and with which sync options: a ProgressiveSync refused by the
ApplicationSet it names (namespace, prune, sync options) is Valid=False with the reason and starts
nothing; an admitted one starts its rollout.

No API server: inputs from tests/support/decide_inputs.py; time is a fixed `NOW`.
"""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.api.models import (
    ConditionStatus,
    ProgressiveSyncSpec,
    ProgressiveSyncStatus,
)
from orchestrator.argocd.fleet import AppSetView
from orchestrator.watcher.decide import decide
from orchestrator.watcher.decision import (
    CreateWorkflow,
    Observed,
    ReconcilePolicy,
)
from orchestrator.watcher.status_patch import apply_patch
from tests.support.decide_inputs import (
    NOW,
    POLICY,
    SPEC,
    actions_of,
    observed,
    patch_of,
)

# --- who may roll out what, and which sync options ------------------------------------------------


def spec_with(*, namespace: str | None = None, prune: bool = False, options: list[str] | None = None) -> Any:
    body = SPEC.to_api()
    if namespace is not None:
        body["appSetRef"]["namespace"] = namespace
    body["syncOptions"] = {"prune": prune, **({"options": options} if options else {})}
    return ProgressiveSyncSpec.model_validate(body)


SHARED = AppSetView(name="myservice", namespace="argocd", uid="u1", allowed_namespaces=("team-a",))


@pytest.mark.parametrize(
    ("obs", "policy", "reason", "words"),
    [
        pytest.param(
            observed(namespace="team-b", appset=SHARED, spec=spec_with(namespace="argocd")),
            POLICY,
            "NamespaceNotAllowed",
            ["argocd/myservice", "(team-a)", "not of namespace team-b", "allowed-namespaces"],
            id="another-namespace-not-listed-by-the-applicationset-is-refused",
        ),
        pytest.param(
            observed(
                namespace="team-b",
                appset=AppSetView(name="myservice", namespace="argocd", uid="u1"),
                spec=spec_with(namespace="argocd"),
            ),
            POLICY,
            "NamespaceNotAllowed",
            ["(none)", "not of namespace team-b"],
            id="an-applicationset-without-the-annotation-admits-only-its-own-namespace",
        ),
        pytest.param(
            observed(appset_watched=False, watched_appset_namespaces=("argocd",), appset=None),
            POLICY,
            "ApplicationSetNamespaceNotWatched",
            ["reads ApplicationSets only in namespace(s) argocd", "spec.appSetRef.namespace"],
            id="an-applicationset-in-a-namespace-the-watcher-does-not-read-is-refused",
        ),
        pytest.param(
            observed(spec=spec_with(prune=True)),
            POLICY,
            "SyncOptionNotAllowed",
            ["spec.syncOptions.prune: true", "policy.allowPrune"],
            id="prune-is-refused-unless-allowed",
        ),
        pytest.param(
            observed(spec=spec_with(options=["ServerSideApply=true", "Replace=true"])),
            POLICY,
            "SyncOptionNotAllowed",
            ["spec.syncOptions.options[1]: Replace=true", "allowed: ApplyOutOfSyncOnly=true"],
            id="a-sync-option-outside-the-allowed-list-is-refused-naming-field-and-value",
        ),
        pytest.param(
            observed(spec=spec_with(options=["Validate=false"])),
            ReconcilePolicy(allowed_sync_options=("ServerSideApply=true",)),
            "SyncOptionNotAllowed",
            ["options[0]: Validate=false", "allowed: ServerSideApply=true"],
            id="the-installation-list-replaces-the-default",
        ),
    ],
)
def test_a_refused_progressive_sync_is_valid_false_with_the_reason_and_starts_nothing(
    obs: Observed, policy: ReconcilePolicy, reason: str, words: list[str]
) -> None:
    decision = decide(obs, policy)
    assert actions_of(decision, CreateWorkflow) == []
    status = apply_patch(ProgressiveSyncStatus(), patch_of(decision), NOW)
    valid = next(c for c in status.conditions or [] if c.type == "Valid")
    assert (valid.status, valid.reason) == (ConditionStatus.FALSE, reason)
    for word in words:
        assert word in valid.message, valid.message


@pytest.mark.parametrize(
    ("obs", "policy"),
    [
        pytest.param(
            observed(namespace="team-a", appset=SHARED, spec=spec_with(namespace="argocd")),
            POLICY,
            id="a-namespace-the-applicationset-lists-may-roll-it-out",
        ),
        pytest.param(
            observed(
                namespace="team-z",
                appset=AppSetView(name="myservice", namespace="argocd", allowed_namespaces=("*",)),
                spec=spec_with(namespace="argocd"),
            ),
            POLICY,
            id="star-admits-every-namespace",
        ),
        pytest.param(observed(), POLICY, id="its-own-namespace-needs-no-annotation"),
        pytest.param(
            observed(spec=spec_with(prune=True, options=["Replace=true"])),
            ReconcilePolicy(allow_prune=True, allowed_sync_options=("*",)),
            id="prune-and-any-option-when-the-installation-allows-them",
        ),
        pytest.param(
            observed(spec=spec_with(options=["ServerSideApply=true", "PruneLast=true"])),
            POLICY,
            id="default-allowed-options",
        ),
    ],
)
def test_an_admitted_progressive_sync_starts_its_rollout(obs: Observed, policy: ReconcilePolicy) -> None:
    decision = decide(obs, policy)
    assert decision.step == "create", decision.reason
