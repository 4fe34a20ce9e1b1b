"""The fault suite (issue 18), its identity rows: the watcher as a minted user or a ServiceAccount
holding the chart's watcher rules, then a RoleBinding removed mid-run or missing at start, the
status write forbidden, API Priority and Fairness answering 429 with Retry-After, the credentials
rotated (the old token refused, the new one used without a restart).

Each row runs one rollout under its fault and the same three checks (the phase and one Workflow,
every Application synced at most once, recovery within the row's bound): tests/support/fault_rig.py.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import re
import ssl
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from orchestrator.api.reasons import Reason
from orchestrator.devenv import controlplane as devcluster
from orchestrator.kube.client import (
    APPLICATIONS,
    SECRETS,
    AlreadyExists,
    Kube,
    NotFound,
    Resource,
)
from orchestrator.kube.watchloop import FORBIDDEN
from tests.support.fault_rig import (
    PS,
    ROLE_BINDINGS,
    ROLES,
    ROLLOUT_SECONDS,
    WATCHER_RULES,
    Fault,
    Heal,
    Rig,
    event_messages,
    event_reasons,
    mint_token,
    survives,
    watcher_binding,
    write_token,
)
from tests.support.wait import wait_for
from tests.support.watcher_harness import (
    create_ps,
    status_of,
    workflows_of,
)

pytestmark = [pytest.mark.integration, pytest.mark.e2e]


def showed_forbidden_reported(rig: Rig) -> str:
    assert rig.watcher is not None
    forbidden = event_messages(rig.kube, rig.namespace, PS, FORBIDDEN)
    assert len(forbidden) == 1, f"one WatchForbidden Event: {forbidden}"
    assert f"forbidden to watch workflows.argoproj.io in namespace {rig.namespace}" in forbidden[0] or (
        f"forbidden to list workflows.argoproj.io in namespace {rig.namespace}" in forbidden[0]
    ), forbidden[0]
    wait_for(
        lambda: Reason.WATCH_RESUMED in event_reasons(rig.kube, rig.namespace, PS),
        timeout=30,
        what="WatchResumed",
    )
    forbidden_attempts = sum(i.stats.failures for i in rig.watcher.caches.workflow_informers)
    return (
        f"Events {event_reasons(rig.kube, rig.namespace, PS)}; {forbidden_attempts} forbidden Workflow "
        "list/watch attempts waited out (capped at 5 s), the other informers kept watching"
    )


def _revoke_workflows(rig: Rig) -> Heal:
    """Remove the watcher's RoleBinding for Workflows; the proxy drops every connection, as a network
    blip would, so the watcher re-authorizes at once (an open watch is not re-checked until its 20 s
    window ends). Its Workflow informers wait and say so; the others keep watching."""
    watcher = rig.watcher
    assert watcher is not None
    rig.kube.delete(ROLE_BINDINGS, rig.namespace, "watcher-workflows")
    rig.proxy.cut()
    wait_for(
        lambda: all(i.blocked is not None for i in watcher.caches.workflow_informers),
        timeout=30,
        what="the Workflow informers to meet the 403",
    )
    assert all(
        i.blocked is not None and i.blocked.reason == FORBIDDEN for i in watcher.caches.workflow_informers
    )
    others = [i for i in watcher.informers if i not in watcher.caches.workflow_informers]
    wait_for(lambda: all(i.usable for i in others), timeout=30, what="the other informers to keep watching")
    assert not watcher.failed

    def restore() -> None:  # called again after the rollout ended: idempotent
        with contextlib.suppress(AlreadyExists):
            binding = watcher_binding("watcher-workflows", rig.watcher_user)
            rig.kube.create(ROLE_BINDINGS, rig.namespace, binding)

    return restore


def _forbidden_reported(rig: Rig) -> None:
    wait_for(
        lambda: FORBIDDEN in event_reasons(rig.kube, rig.namespace, PS),
        timeout=30,
        what="the WatchForbidden Event on the ProgressiveSync",
    )


def rolebinding_removed(rig: Rig) -> Heal:
    """The watcher's RoleBinding for Workflows removed mid-rollout, restored once it said so (the
    steps, another identity, go on meanwhile)."""
    restore = _revoke_workflows(rig)
    _forbidden_reported(rig)
    return restore


def rolebinding_missing_at_start(rig: Rig) -> Heal:
    """The binding is gone when the ProgressiveSync arrives: nothing is done on a blind Workflow cache
    (no Workflow created), it is said, and the rollout starts once the binding is back."""
    restore = _revoke_workflows(rig)
    create_ps(rig.kube, rig.namespace, PS, "myservice")
    _forbidden_reported(rig)
    assert not workflows_of(rig.kube, rig.namespace, PS), "no Workflow while the watcher cannot watch them"
    assert not rig.first_sync_started()
    return restore


PRIORITY_LEVELS = Resource(
    "flowcontrol.apiserver.k8s.io", "v1", "prioritylevelconfigurations", "PriorityLevelConfiguration"
)
FLOW_SCHEMAS = Resource("flowcontrol.apiserver.k8s.io", "v1", "flowschemas", "FlowSchema")
RETRY_LINE = re.compile(r"Retry-After (?P<asked>[0-9.]+)s\); retrying in (?P<waited>[0-9.]+)s")


def rejected_by_apf(cluster: devcluster.DevCluster, flow_schema: str) -> int:
    """Requests of `flow_schema` that API Priority and Fairness answered 429 (kube-apiserver's metrics)."""
    total = 0
    for line in cluster.metrics_text().splitlines():
        if line.startswith("apiserver_flowcontrol_rejected_requests_total{") and (
            f'flow_schema="{flow_schema}"' in line
        ):
            total += int(float(line.rsplit(" ", 1)[1]))
    return total


class RetryLines(logging.Handler):
    """Collects the log lines of retries the server asked to wait for (`Retry-After`)."""

    def __init__(self, into: list[str]) -> None:
        super().__init__(logging.WARNING)
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "Retry-After" in message:
            self.into.append(message)


def apf_throttles_the_watcher(rig: Rig) -> Heal:
    """API Priority and Fairness throttles the watcher's own identity for the whole rollout: a
    FlowSchema matching its user (not system:masters, which is exempt) sends every request of it to
    a PriorityLevelConfiguration with no seats of its own (nominalConcurrencyShares 0, nothing
    borrowed) and no queues (limitResponse Reject). Such a level serves one request at a time (the
    API server lets a request exceed the limit only while nothing else of the level executes): any
    two of the watcher's requests at once, and the second is answered 429 with a Retry-After. The
    proxy cuts the watcher's connections until the reconnect storm has met some 429s for certain;
    after that the rollout runs throttled."""
    name = f"ps-throttle-{rig.namespace}"[:63]
    rig.kube.create(
        PRIORITY_LEVELS,
        None,
        {
            "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
            "kind": "PriorityLevelConfiguration",
            "metadata": {"name": name},
            "spec": {
                "type": "Limited",
                "limited": {
                    "nominalConcurrencyShares": 0,
                    "lendablePercent": 0,
                    "borrowingLimitPercent": 0,
                    "limitResponse": {"type": "Reject"},
                },
            },
        },
    )
    every = {
        "verbs": ["*"],
        "apiGroups": ["*"],
        "resources": ["*"],
        "namespaces": ["*"],
        "clusterScope": True,
    }
    rig.kube.create(
        FLOW_SCHEMAS,
        None,
        {
            "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
            "kind": "FlowSchema",
            "metadata": {"name": name},
            "spec": {
                "priorityLevelConfiguration": {"name": name},
                "matchingPrecedence": 300,  # before global-default (9900) and service-accounts (9000)
                "distinguisherMethod": {"type": "ByUser"},
                "rules": [
                    {
                        "subjects": [{"kind": "User", "user": {"name": rig.watcher_user}}],
                        "resourceRules": [every],
                        "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
                    }
                ],
            },
        },
    )
    handler = RetryLines(rig.retry_after_lines)
    logging.getLogger("orchestrator").addHandler(handler)

    def reconnect_storm_met_429s() -> bool:
        rig.proxy.cut()
        return rejected_by_apf(rig.cluster, name) >= 3

    wait_for(reconnect_storm_met_429s, timeout=60, interval=1.0, what="APF to answer the watcher 429s")

    def lift() -> None:  # called again after the rollout ended: idempotent
        if handler in logging.getLogger("orchestrator").handlers:
            rig.rejected_by_apf = rejected_by_apf(rig.cluster, name)
            logging.getLogger("orchestrator").removeHandler(handler)
        for resource in (FLOW_SCHEMAS, PRIORITY_LEVELS):
            with contextlib.suppress(NotFound):
                rig.kube.delete(resource, None, name)

    return lift


def showed_throttled(rig: Rig) -> str:
    assert rig.rejected_by_apf >= 3, f"the API server answered the watcher 429s: {rig.rejected_by_apf}"
    waits = [m.groupdict() for line in rig.retry_after_lines if (m := RETRY_LINE.search(line))]
    assert waits, f"the watcher logged its 429s with the Retry-After asked: {rig.retry_after_lines[:3]}"
    for wait in waits:
        assert float(wait["waited"]) >= float(wait["asked"]), wait  # Retry-After honoured
    asked = sorted({float(w["asked"]) for w in waits})
    return (
        f"{rig.rejected_by_apf} of the watcher's requests rejected by APF (kube-apiserver's "
        f"apiserver_flowcontrol_rejected_requests_total), {len(waits)} 429s met by its loops and "
        f"retries, each waited at least the Retry-After asked ({asked} s)"
    )


def token_id(token: str) -> str:
    """`JTI=<id>`: how the audit log names the token that authenticated a request."""
    payload = token.split(".")[1]
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    return f"JTI={claims['jti']}"


def token_refused(cluster: devcluster.DevCluster, token: str) -> bool:
    """True once the API server answers 401 to `token`."""
    context = ssl.create_default_context(cafile=str(cluster.ca_cert_path))
    request = urllib.request.Request(f"{cluster.api_url}/api", headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=10, context=context):
            return False
    except urllib.error.HTTPError as exc:
        return exc.code == 401


def credentials_rotated(rig: Rig) -> Heal:
    """Mid-rollout, the watcher's ServiceAccount token is rotated in place: a new token written to
    the file its kubeconfig names (`tokenFile`), the old one revoked (its bound Secret deleted)
    until the API server refuses it. The watcher goes on with the new one, without a restart."""
    assert rig.token_path is not None
    # The rollout must still be running once the old token is refused (which takes up to ~10 s, the
    # API server's token cache): every cluster is held Progressing until then, so the watcher's
    # writes on the rollout's end come after the revocation, however fast the rollout is.
    hold_health(rig, "3600")
    old = rig.token_path.read_text().strip()
    new = mint_token(rig.cluster, rig.namespace, "watcher-token-2")
    write_token(rig.token_path, new)
    rig.kube.delete(SECRETS, rig.namespace, "watcher-token-1")
    # The API server caches a token it accepted for up to 10 s.
    wait_for(lambda: token_refused(rig.cluster, old), timeout=30, interval=0.5, what="the old token refused")
    rig.rotated_mark = rig.cluster.audit_mark()
    rig.new_credential = token_id(new)
    return lambda: hold_health(rig, "0")


def hold_health(rig: Rig, seconds: str) -> None:
    """Every Application of the fleet turns Healthy `seconds` after its sync (the simulator's
    annotation; a merge patch, so no race with the steps' sync writes)."""
    items, _ = rig.kube.list(APPLICATIONS, rig.namespace)
    patch = {"metadata": {"annotations": {"simulator.progressivesync.io/health-seconds": seconds}}}
    for item in items:
        rig.kube.patch(APPLICATIONS, rig.namespace, item["metadata"]["name"], patch)


def showed_new_credentials_used(rig: Rig) -> str:
    def writes() -> list[devcluster.AuditEvent]:
        return [e for e in rig.cluster.audit_events_since(rig.rotated_mark) if e.user == rig.watcher_user]

    # Its last writes (the RolloutSucceeded Event at the latest) come after the revocation.
    after = wait_for(writes, timeout=30, what="the watcher's writes after the old token was refused")
    assert all(e.credential == rig.new_credential for e in after), [
        (e.verb, e.resource, e.credential) for e in after
    ]
    # The token is what this fault is about: nothing refused as unauthenticated or forbidden. A 409
    # is the status writer's optimistic concurrency (a step wrote the status first; it reads again
    # and re-applies, writing nothing when the change is already there), so it may come last.
    refused = [(e.verb, e.resource, e.code) for e in after if e.code in (401, 403)]
    assert not refused, refused
    assert any(e.code < 400 for e in after), [(e.verb, e.resource, e.code) for e in after]
    return (
        f"the old token refused (401) after its Secret was deleted; {len(after)} writes by the watcher "
        f"after that, all with the new token ({rig.new_credential[:12]}...), no restart"
    )


STATUS_RULE = WATCHER_RULES["watcher"][1]
assert STATUS_RULE["resources"] == ["progressivesyncs/status"]


def _set_watcher_rules(rig: Rig, rules: list[dict[str, list[str]]]) -> None:
    role = rig.kube.get(ROLES, rig.namespace, "watcher")
    role["rules"] = rules
    rig.kube.replace(ROLES, rig.namespace, role)


def status_write_forbidden(rig: Rig) -> Heal:
    """The watcher's Role narrowed before the ProgressiveSync arrives: it may read ProgressiveSyncs
    but not update `progressivesyncs/status` (403 on its status writes). It says what is missing and
    the fix in an Event, keeps running (the Workflow it created rolls out meanwhile: the steps write
    the status as themselves), and converges once the rule is back."""
    narrowed = [rule for rule in WATCHER_RULES["watcher"] if rule is not STATUS_RULE]
    _set_watcher_rules(rig, narrowed)
    create_ps(rig.kube, rig.namespace, PS, "myservice")
    wait_for(
        lambda: Reason.RECONCILE_FORBIDDEN in event_reasons(rig.kube, rig.namespace, PS),
        timeout=30,
        what="the ReconcileForbidden Event on the ProgressiveSync",
    )
    # The rest keeps working: the Workflow created before the refused status write runs its syncs.
    wait_for(rig.first_sync_started, timeout=ROLLOUT_SECONDS, what="a sync while the status is forbidden")
    assert rig.watcher is not None and not rig.watcher.failed

    def restore() -> None:  # called again after the rollout ended: idempotent
        _set_watcher_rules(rig, WATCHER_RULES["watcher"])

    return restore


def showed_status_forbidden_reported(rig: Rig) -> str:
    forbidden = event_messages(rig.kube, rig.namespace, PS, Reason.RECONCILE_FORBIDDEN)
    assert len(forbidden) == 1, f"one ReconcileForbidden Event: {forbidden}"
    assert 'cannot update resource "progressivesyncs/status"' in forbidden[0], forbidden[0]
    assert "grant the watcher's account this permission" in forbidden[0], forbidden[0]
    wait_for(
        lambda: Reason.RECONCILE_RESUMED in event_reasons(rig.kube, rig.namespace, PS),
        timeout=30,
        what="ReconcileResumed",
    )
    # The watcher's own fields are written once it may again (the steps cannot write these).
    wait_for(
        lambda: (status_of(rig.kube, rig.namespace, PS).get("rollout") or {}).get("workflow"),
        timeout=30,
        what="the watcher to record the rollout's Workflow",
    )
    refused = rig.audit("progressivesyncs", "update", 403)
    # No crash loop: the reconcile backs off (0.5, 1, 2, 5, 10 s ...), events re-queue it at most
    # once per change; a few dozen refusals over the whole window at most.
    assert 1 <= refused <= 40, refused
    return f"Events {event_reasons(rig.kube, rig.namespace, PS)}; {refused} status writes answered 403"


FAULTS = [
    # Bound: the rollout ends within the fault-free time once the binding is back (the watcher
    # notices at its next attempt, 5 s at most, and reconciles every ProgressiveSync at once).
    pytest.param(
        Fault(
            rolebinding_removed,
            "first-sync",
            ROLLOUT_SECONDS,
            showed=showed_forbidden_reported,
            watcher_as_user=True,
        ),
        id="identity-rolebinding-removed-mid-run",
    ),
    pytest.param(
        Fault(
            rolebinding_missing_at_start,
            "start",
            ROLLOUT_SECONDS,
            showed=showed_forbidden_reported,
            watcher_as_user=True,
            creates_ps=True,
        ),
        id="identity-rolebinding-missing-at-start",
    ),
    # Lasting: the rollout runs throttled from the 429s to its end.
    pytest.param(
        Fault(
            apf_throttles_the_watcher,
            "start",
            2 * ROLLOUT_SECONDS,
            lasting=True,
            showed=showed_throttled,
            watcher_as_user=True,
        ),
        id="apiserver-apf-429-retry-after",
    ),
    # Bound: from the Role's repair; the rollout itself went on meanwhile.
    pytest.param(
        Fault(
            status_write_forbidden,
            "start",
            ROLLOUT_SECONDS,
            showed=showed_status_forbidden_reported,
            watcher_as_user=True,
            creates_ps=True,
        ),
        id="identity-status-write-forbidden",
    ),
    pytest.param(
        Fault(
            credentials_rotated,
            "first-sync",
            ROLLOUT_SECONDS,
            showed=showed_new_credentials_used,
            watcher_as_service_account=True,
        ),
        id="identity-credentials-rotated",
    ),
]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("fault", FAULTS)
def test_a_rollout_survives(
    fault: Fault, plane: tuple[devcluster.DevCluster, Kube], request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    survives(fault, plane, request, tmp_path)
