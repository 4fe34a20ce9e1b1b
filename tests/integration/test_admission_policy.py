"""The chart's admission policies, enforced by the real API server: the steps' service account may
change an Application only the way a sync needs, the watcher's only to end a sync we started, and
the watcher's Workflows run as the steps' service account only.

Real: the control plane, the chart rendered by the real helm, its ServiceAccounts, Roles and
ValidatingAdmissionPolicies applied, requests made with the service accounts' own tokens (the
TokenRequest API), and the real `sync` step program running as the steps' service account.
"""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from orchestrator.argocd import appsync
from orchestrator.core.clock import SystemClock
from orchestrator.devenv.controlplane import DevCluster
from orchestrator.kube.client import APPLICATIONS, WORKFLOWS, Forbidden, Invalid, Kube
from orchestrator.simulator.seed import seed_fleet
from tests.support.builders import NEW_REVISION as REVISION
from tests.support.builders import foreign_operation
from tests.support.chart import FULLNAME, apply, helm_binary, isolate, render, service_account_kubeconfig
from tests.support.kubectl import Kubectl
from tests.support.steps_harness import StepRunner, make_progressive_sync, publish_inventory
from tests.support.wait import wait_for

T0 = datetime(2026, 1, 1, 12, 0, 0, 250000, tzinfo=UTC)

pytestmark = pytest.mark.integration

STEPS_SA = "progressive-sync-steps"
WATCHER_SA = f"{FULLNAME}-watcher"
POLICY_KINDS = {
    "ServiceAccount",
    "Role",
    "RoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
}


@dataclass
class Installed:
    """The chart's accounts and policies in one namespace, and adapters acting as each account."""

    namespace: str
    admin: Kube
    steps: Kube
    watcher: Kube
    steps_kubeconfig: Path

    def app(self, name: str) -> dict[str, Any]:
        return self.admin.get(APPLICATIONS, self.namespace, name)


@pytest.fixture(scope="module")
def installed(control_plane: DevCluster, kube: Kube, kubectl: Kubectl) -> Iterator[Installed]:
    """Policies and RBAC of the chart in a namespace of this module (argocd = workflow namespace)."""
    namespace = f"t-admission-{uuid.uuid4().hex[:6]}"
    kubectl.ok("create", "namespace", namespace)
    documents = render(
        helm_binary(control_plane),
        namespace,
        f"argocdNamespace={namespace}",
        f"workflowNamespace={namespace}",
        f"watchNamespaces={{{namespace}}}",
    )
    apply(kubectl, isolate(documents, namespace), kinds=POLICY_KINDS)
    steps_config = service_account_kubeconfig(control_plane, kubectl, namespace, STEPS_SA)
    steps = Kube.from_kubeconfig(str(steps_config))
    watcher = Kube.from_kubeconfig(
        str(service_account_kubeconfig(control_plane, kubectl, namespace, WATCHER_SA))
    )
    seed_fleet(kube, namespace, clusters=1, regions=["eu-west-1"], revision=REVISION, app_set="probe")
    probe = next(iter(kube.list(APPLICATIONS, namespace)[0]))["metadata"]["name"]

    def policy_active() -> bool:
        # A new value every time: a change that slipped in before the policy was in force must
        # not turn the next attempts into no-ops (which the policy rightly lets through).
        body = kube.get(APPLICATIONS, namespace, probe)
        body["spec"]["project"] = f"probe-{uuid.uuid4().hex[:8]}"
        try:
            steps.replace(APPLICATIONS, namespace, body)
        except Invalid as exc:
            return "may not change an Application's spec" in str(exc)
        return False

    def watcher_policy_active() -> bool:
        body = kube.get(APPLICATIONS, namespace, probe)
        body["spec"]["project"] = f"probe-{uuid.uuid4().hex[:8]}"
        try:
            watcher.replace(APPLICATIONS, namespace, body)
        except Invalid as exc:
            return "may only ask Argo CD to compare" in str(exc)
        return False

    wait_for(policy_active, timeout=60, interval=0.5, what="the admission policy in force")
    wait_for(watcher_policy_active, timeout=60, interval=0.5, what="the watcher's admission policy in force")
    try:
        yield Installed(namespace, kube, steps, watcher, steps_config)
    finally:
        steps.close()
        watcher.close()
        kubectl.run("delete", "namespace", namespace, "--wait=false")


@pytest.fixture
def app(installed: Installed, request: pytest.FixtureRequest) -> dict[str, Any]:
    """A fresh Application of its own ApplicationSet (OutOfSync at REVISION, no operation)."""
    test_id = request.node.callspec.id if hasattr(request.node, "callspec") else request.node.name
    name = "".join(ch for ch in test_id.lower() if ch.isalnum())[-40:]
    seeded = seed_fleet(
        installed.admin,
        installed.namespace,
        clusters=1,
        regions=["eu-west-1"],
        revision=REVISION,
        app_set=name,
    )
    return installed.app(seeded.applications[0])


def sync_request(app: dict[str, Any], **sync: Any) -> dict[str, Any]:
    body = appsync.build_sync_request(
        app,
        revisions=[REVISION],
        rollout_id="r1",
        stage="canary",
        prune=False,
        sync_options=[],
        now=SystemClock().now(),
    )
    body["operation"]["sync"].update(sync)
    return body


def running_state(username: str) -> dict[str, Any]:
    return {
        "operation": {"initiatedBy": {"username": username}, "sync": {"revision": REVISION}},
        "phase": "Running",
        "startedAt": "2030-01-01T12:00:00Z",
        "message": "syncing",
    }


def with_state(state: dict[str, Any] | None, operation: dict[str, Any] | None = None) -> Callable[..., None]:
    def given(app: dict[str, Any]) -> None:
        status = app.setdefault("status", {})
        if state is None:
            status.pop("operationState", None)
        else:
            status["operationState"] = state
        if operation is not None:
            app["operation"] = operation

    return given


def set_path(path: str, value: Any) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def change(app: dict[str, Any]) -> dict[str, Any]:
        body = copy.deepcopy(app)
        *parents, leaf = path.split(".")
        node = body
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
        return body

    return change


def terminate(app: dict[str, Any]) -> dict[str, Any]:
    body = copy.deepcopy(app)
    body["status"]["operationState"]["phase"] = "Terminating"
    return body


def withdraw(app: dict[str, Any]) -> dict[str, Any]:
    body = copy.deepcopy(app)
    body.pop("operation", None)
    return body


def no_given(_app: dict[str, Any]) -> None:
    return None


ALLOWED = None
CASES = [
    # -- what a sync needs ---------------------------------------------------------------------
    pytest.param(no_given, sync_request, ALLOWED, id="a-pinned-sync-request"),
    pytest.param(
        with_state({**running_state("alice"), "phase": "Succeeded", "finishedAt": "2030-01-01T12:01:00Z"}),
        sync_request,
        ALLOWED,
        id="a-sync-request-clearing-a-finished-operation-state",
    ),
    pytest.param(
        lambda app: app["spec"].setdefault("syncPolicy", {}).update(syncOptions=["CreateNamespace=true"]),
        lambda app: sync_request(app, syncOptions=["CreateNamespace=true", "ServerSideApply=true"]),
        ALLOWED,
        id="sync-options-the-application-itself-sets-or-the-policy-allows",
    ),
    pytest.param(
        with_state(running_state("progressive-sync")),
        terminate,
        ALLOWED,
        id="terminating-our-running-operation",
    ),
    pytest.param(
        no_given,
        set_path("metadata.annotations", {"argocd.argoproj.io/refresh": "normal"}),
        ALLOWED,
        id="asking-for-a-refresh",
    ),
    pytest.param(
        no_given,
        set_path("metadata.annotations", appsync.refresh_patch(T0)["metadata"]["annotations"]),
        ALLOWED,
        id="asking-for-a-refresh-stamped-as-argo-cd-does",
    ),
    pytest.param(
        with_state(
            None, operation={"initiatedBy": {"username": "progressive-sync"}, "sync": {"revision": REVISION}}
        ),
        withdraw,
        ALLOWED,
        id="withdrawing-our-own-request",
    ),
    # -- everything else -----------------------------------------------------------------------
    pytest.param(
        no_given,
        set_path("spec.source.repoURL", "https://evil.example/repo.git"),
        "may not change an Application's spec",
        id="pointing-it-at-another-repository",
    ),
    pytest.param(
        no_given,
        set_path("spec.destination.server", "https://elsewhere.example"),
        "may not change an Application's spec",
        id="pointing-it-at-another-cluster",
    ),
    pytest.param(
        no_given,
        lambda app: sync_request(app, source={"repoURL": "https://evil.example/r.git", "path": "."}),
        "no source",
        id="a-sync-from-another-source",
    ),
    pytest.param(
        no_given,
        lambda app: sync_request(app, manifests=["kind: Namespace"]),
        "no source",
        id="a-sync-of-local-manifests",
    ),
    pytest.param(
        no_given,
        lambda app: sync_request(app, revision=""),
        "pinned to a revision",
        id="a-sync-without-a-pinned-revision",
    ),
    pytest.param(
        no_given,
        set_path("operation", {"initiatedBy": {"username": "admin"}, "sync": {"revision": REVISION}}),
        "by progressive-sync",
        id="a-sync-in-someone-elses-name",
    ),
    pytest.param(
        no_given,
        lambda app: sync_request(app, syncOptions=["Replace=true"]),
        "not allowed by this installation (policy.allowedSyncOptions): Replace=true",
        id="a-sync-option-the-policy-does-not-allow",
    ),
    pytest.param(
        no_given,
        lambda app: sync_request(app, prune=True),
        "prune is not allowed",
        id="prune-without-the-policy",
    ),
    pytest.param(
        no_given,
        lambda app: sync_request(app, syncStrategy={"apply": {"force": True}}),
        "forced sync",
        id="a-forced-sync",
    ),
    pytest.param(
        with_state(running_state("alice")),
        terminate,
        "may only clear a finished status.operationState",
        id="terminating-someone-elses-operation",
    ),
    pytest.param(
        with_state(running_state("progressive-sync")),
        set_path("status.operationState.message", "x"),
        "may only clear a finished",
        id="rewriting-an-operation-state",
    ),
    pytest.param(
        with_state(running_state("alice")),
        sync_request,
        "may only clear a finished",
        id="clearing-a-running-operation-state",
    ),
    pytest.param(
        with_state(None, operation=foreign_operation()),
        withdraw,
        "someone else requested",
        id="removing-someone-elses-request",
    ),
    pytest.param(
        with_state(None, operation=foreign_operation()),
        set_path("operation.sync.revision", REVISION),
        "someone else requested",
        id="changing-someone-elses-request",
    ),
    pytest.param(
        no_given,
        set_path("status.health", {"status": "Degraded", "message": "forged"}),
        "no status field but status.operationState",
        id="writing-health",
    ),
    pytest.param(
        no_given,
        set_path("metadata.labels", {"team": "other"}),
        "labels, finalizers or owners",
        id="changing-labels",
    ),
    pytest.param(
        no_given,
        set_path("metadata.finalizers", ["example.com/block"]),
        "labels, finalizers or owners",
        id="adding-a-finalizer",
    ),
    pytest.param(
        no_given,
        set_path("metadata.annotations", {"notified.notifications.argoproj.io": "{}"}),
        "only the annotations",
        id="another-annotation",
    ),
]


@pytest.mark.parametrize(("given", "change", "refusal"), CASES)
def test_the_steps_service_account_changes_an_application_only_the_way_a_sync_needs(
    installed: Installed,
    app: dict[str, Any],
    given: Callable[[dict[str, Any]], None],
    change: Callable[[dict[str, Any]], dict[str, Any]],
    refusal: str | None,
) -> None:
    name = app["metadata"]["name"]
    given(app)
    app = installed.admin.replace(APPLICATIONS, installed.namespace, app)
    body = change(app)
    if refusal is None:
        stored = installed.steps.replace(APPLICATIONS, installed.namespace, body)
        assert stored["metadata"]["resourceVersion"] != app["metadata"]["resourceVersion"]
        return
    with pytest.raises(Invalid) as raised:
        installed.steps.replace(APPLICATIONS, installed.namespace, body)
    assert "ValidatingAdmissionPolicy" in str(raised.value) and refusal in str(raised.value), raised.value
    assert installed.app(name)["metadata"]["resourceVersion"] == app["metadata"]["resourceVersion"]
    # The policy binds the steps' account only: an administrator's same change goes through.
    installed.admin.replace(APPLICATIONS, installed.namespace, body)


WATCHER_CASES = [
    # -- ending a sync we started, when no exit handler can (issue 29, point 7) ---------------------
    pytest.param(
        with_state(running_state("progressive-sync")),
        terminate,
        ALLOWED,
        id="watcher-terminating-our-running-operation",
    ),
    pytest.param(
        with_state(
            None, operation={"initiatedBy": {"username": "progressive-sync"}, "sync": {"revision": REVISION}}
        ),
        withdraw,
        ALLOWED,
        id="watcher-withdrawing-our-own-request",
    ),
    # -- everything else, a sync above all -----------------------------------------------------
    pytest.param(
        no_given, sync_request, "the watcher's service account may only", id="watcher-requesting-a-sync"
    ),
    pytest.param(
        no_given,
        set_path("spec.source.repoURL", "https://evil.example/repo.git"),
        "may only ask Argo CD to compare an Application (annotation argocd.argoproj.io/refresh) or end",
        id="watcher-pointing-it-at-another-repository",
    ),
    pytest.param(
        with_state(running_state("alice")),
        terminate,
        "or move an operation progress-sync started from Running to Terminating",
        id="watcher-terminating-someone-elses-operation",
    ),
    pytest.param(
        with_state(running_state("progressive-sync")),
        set_path("status.operationState.message", "x"),
        "or move an operation progress-sync started from Running to Terminating",
        id="watcher-rewriting-an-operation-state",
    ),
    pytest.param(
        with_state(None, operation=foreign_operation()),
        withdraw,
        "or withdraw a sync request progress-sync made",
        id="watcher-removing-someone-elses-request",
    ),
    pytest.param(
        no_given,
        set_path("status.health", {"status": "Degraded", "message": "forged"}),
        "or move an operation progress-sync started",
        id="watcher-writing-health",
    ),
    pytest.param(
        no_given,
        set_path("metadata.annotations", {"team.example.com/owner": "us"}),
        "no annotation of an Application but argocd.argoproj.io/refresh",
        id="watcher-another-annotation",
    ),
]


@pytest.mark.parametrize(("given", "change", "refusal"), WATCHER_CASES)
def test_the_watchers_service_account_changes_an_application_only_to_end_our_sync(
    installed: Installed,
    app: dict[str, Any],
    given: Callable[[dict[str, Any]], None],
    change: Callable[[dict[str, Any]], dict[str, Any]],
    refusal: str | None,
) -> None:
    given(app)
    app = installed.admin.replace(APPLICATIONS, installed.namespace, app)
    body = change(app)
    if refusal is None:
        stored = installed.watcher.replace(APPLICATIONS, installed.namespace, body)
        assert stored["metadata"]["resourceVersion"] != app["metadata"]["resourceVersion"]
        return
    with pytest.raises(Invalid) as raised:
        installed.watcher.replace(APPLICATIONS, installed.namespace, body)
    assert "ValidatingAdmissionPolicy" in str(raised.value) and refusal in str(raised.value), raised.value
    assert (
        installed.app(app["metadata"]["name"])["metadata"]["resourceVersion"]
        == app["metadata"]["resourceVersion"]
    )


def test_rbac_still_forbids_what_the_policy_never_sees(installed: Installed, app: dict[str, Any]) -> None:
    with pytest.raises(Forbidden):
        installed.steps.delete(APPLICATIONS, installed.namespace, app["metadata"]["name"])
    body = copy.deepcopy(app)
    body["metadata"] = {"name": "created-by-the-steps"}
    with pytest.raises(Forbidden):
        installed.steps.create(APPLICATIONS, installed.namespace, body)


def test_the_sync_step_runs_as_the_steps_service_account_under_the_policy(
    installed: Installed, app: dict[str, Any], tmp_path: Path
) -> None:
    app_set = app["metadata"]["ownerReferences"][0]["name"]
    publish_inventory(installed.admin, installed.namespace)
    make_progressive_sync(installed.admin, installed.namespace, name=app_set, app_set=app_set)
    runner = StepRunner(
        kubeconfig=installed.steps_kubeconfig,
        namespace=installed.namespace,
        outputs_dir=tmp_path / "out",
        name=app_set,
    )
    result = runner.run("select", "--stage", "canary")
    assert result.returncode == 0, result.stdout + result.stderr
    [cluster] = json.loads(runner.targets())
    result = runner.run("sync", "--stage", "canary", "--cluster", cluster)
    assert result.returncode == 0, result.stdout + result.stderr
    stored = installed.app(app["metadata"]["name"])
    assert stored["operation"]["initiatedBy"]["username"] == "progressive-sync"
    assert stored["operation"]["sync"]["revision"] == REVISION


def workflow(service_account: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"generateName": "probe-"},
        "spec": {
            "serviceAccountName": service_account,
            "entrypoint": "main",
            "templates": [{"name": "main", "container": {"image": "busybox", "command": ["true"]}}],
            **spec,
        },
    }


@pytest.mark.parametrize(
    ("body", "refusal"),
    [
        pytest.param(workflow(STEPS_SA), None, id="running-as-the-steps-account"),
        pytest.param(workflow("default"), "run as the steps' service account", id="another-account"),
        pytest.param(
            workflow(STEPS_SA, podSpecPatch='{"serviceAccountName": "default"}'),
            "run as the steps' service account",
            id="a-pod-spec-patch",
        ),
    ],
)
def test_the_watchers_workflows_run_as_the_steps_service_account_only(
    installed: Installed, body: dict[str, Any], refusal: str | None
) -> None:
    if refusal is None:
        created = installed.watcher.create(WORKFLOWS, installed.namespace, body)
        installed.admin.delete(WORKFLOWS, installed.namespace, created["metadata"]["name"])
        return
    before, _ = installed.admin.list(WORKFLOWS, installed.namespace)
    with pytest.raises(Invalid) as raised:
        installed.watcher.create(WORKFLOWS, installed.namespace, body)
    assert refusal in str(raised.value)
    assert installed.admin.list(WORKFLOWS, installed.namespace)[0] == before


@pytest.mark.parametrize(
    ("patch", "refusal"),
    [
        pytest.param(appsync.refresh_patch(T0), None, id="asking-argo-cd-to-compare"),
        pytest.param(
            {"metadata": {"annotations": {"team.example.com/owner": "us"}}},
            "no annotation of an Application but argocd.argoproj.io/refresh",
            id="another-annotation",
        ),
        pytest.param({"spec": {"project": "elsewhere"}}, "may only ask Argo CD to compare", id="the-spec"),
        pytest.param(
            {"operation": {"sync": {"revision": REVISION}}}, "may only ask Argo CD to compare", id="a-sync"
        ),
        pytest.param(
            {"metadata": {"labels": {"env": "dev"}}}, "may only ask Argo CD to compare", id="a-label"
        ),
    ],
)
def test_the_watcher_may_only_ask_argo_cd_to_compare_an_application(
    installed: Installed, app: dict[str, Any], patch: dict[str, Any], refusal: str | None
) -> None:
    """Before a rollout starts the watcher asks Argo CD to compare the fleet (docs/design/watcher.md, "Sized
    for the whole fleet"): its one write to Applications, and the chart allows no other."""
    name = app["metadata"]["name"]
    if refusal is None:
        installed.watcher.patch(APPLICATIONS, installed.namespace, name, patch)
        assert appsync.refresh_requested(installed.app(name))
        return
    with pytest.raises(Invalid) as raised:
        installed.watcher.patch(APPLICATIONS, installed.namespace, name, patch)
    assert refusal in str(raised.value)
    assert installed.app(name)["metadata"].get("resourceVersion") == app["metadata"]["resourceVersion"]
