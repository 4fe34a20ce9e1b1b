"""Who may do what once the chart is installed: each identity can do its job and cannot do the rest.

The chart is rendered by the real helm with four distinct namespaces (the release's, the workflow
namespace, the Argo CD namespace, and another one nothing is granted in) and applied to the real
API server. Every row is asked twice: `kubectl auth can-i` (impersonating the identity), and a real
request made with the identity's own credentials — a service-account token from the TokenRequest
API, a minted user's client certificate — sent as a server-side dry run (nothing is stored;
authorization is decided exactly as for a real write). A request counts as allowed when RBAC let it
through, whatever the object's existence or validity said next.

The same matrix is written out in docs/security.md.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from orchestrator.devenv.controlplane import DevCluster
from tests.support.chart import FULLNAME, apply, helm_binary, isolate, render, service_account_kubeconfig
from tests.support.kubectl import Kubectl

pytestmark = pytest.mark.integration

# Namespace roles, replaced by this test's real namespace names.
RELEASE, WORKFLOWS, ARGOCD, OTHER = "<release>", "<workflows>", "<argocd>", "<other>"
INVENTORY = "progressive-sync-clusters"
LEASE = f"{FULLNAME}-watcher"


@dataclass(frozen=True)
class Row:
    """One question: may this identity `verb` the `resource` (optionally one `name`) in `namespace`?"""

    verb: str
    resource: str  # plural[.group][/subresource]
    namespace: str
    allowed: bool
    name: str = ""

    def describe(self, namespaces: dict[str, str]) -> str:
        target = f"{self.resource}{'/' + self.name if self.name else ''}"
        return f"{self.verb} {target} in {namespaces.get(self.namespace, self.namespace)}"


def yes(verb: str, resource: str, namespace: str, name: str = "") -> Row:
    return Row(verb, resource, namespace, True, name)


def no(verb: str, resource: str, namespace: str, name: str = "") -> Row:
    return Row(verb, resource, namespace, False, name)


PS = "progressivesyncs.progressivesync.io"
PSS = "progressivesyncstages.progressivesync.io"  # the per-cluster records of a rollout stage
APPS = "applications.argoproj.io"
PROJECTS = "appprojects.argoproj.io"
APPSETS = "applicationsets.argoproj.io"
WFS = "workflows.argoproj.io"
LEASES = "leases.coordination.k8s.io"

MATRIX: dict[str, list[Row]] = {
    "watcher": [
        yes("watch", PS, WORKFLOWS),
        yes("update", f"{PS}/status", WORKFLOWS),
        yes("update", f"{PS}/finalizers", WORKFLOWS),
        yes("watch", PSS, WORKFLOWS),  # the live summary of the stages in flight
        yes("delete", PSS, WORKFLOWS, "probe"),  # rollout history: the records of old rollouts
        no("patch", PSS, WORKFLOWS, "probe"),
        no("create", PSS, WORKFLOWS),
        no("delete", PSS, OTHER, "probe"),
        yes("create", WFS, WORKFLOWS),
        yes("patch", WFS, WORKFLOWS),
        yes("create", "events", WORKFLOWS),
        yes("watch", APPS, ARGOCD),
        yes("patch", APPS, ARGOCD),  # the refresh annotation only (admission policy)
        yes("watch", APPSETS, ARGOCD),
        yes("watch", APPS, WORKFLOWS),
        yes("list", "secrets", ARGOCD),
        yes("create", "configmaps", ARGOCD),
        yes("update", "configmaps", ARGOCD, INVENTORY),
        yes("create", LEASES, RELEASE),
        yes("update", LEASES, RELEASE, LEASE),
        # and nothing else:
        no("list", "secrets", WORKFLOWS),
        no("list", "secrets", RELEASE),
        no("list", "secrets", OTHER),
        no("create", WFS, ARGOCD),
        no("create", WFS, OTHER),
        no("delete", WFS, WORKFLOWS),
        no("list", PS, OTHER),
        # Applications: only to ask for a comparison or end a sync we started (the admission policy).
        yes("update", APPS, ARGOCD),
        no("delete", APPS, ARGOCD),
        no("create", APPS, ARGOCD),
        no("patch", APPSETS, ARGOCD),
        no("update", APPSETS, ARGOCD),
        no("update", "configmaps", ARGOCD, "argocd-cm"),
        no("update", LEASES, RELEASE, "someone-elses-lease"),
        no("create", "pods", WORKFLOWS),
        no("list", "nodes", ""),
    ],
    "steps": [
        yes("get", PS, WORKFLOWS, "probe"),
        yes("update", f"{PS}/status", WORKFLOWS),
        yes("create", PSS, WORKFLOWS),  # select: one record per part of a stage
        yes("list", PSS, WORKFLOWS),
        yes("patch", PSS, WORKFLOWS, "probe"),  # each cluster's record (a merge patch, no conflict)
        no("delete", PSS, WORKFLOWS, "probe"),
        no("update", PSS, WORKFLOWS, "probe"),
        no("list", PSS, OTHER),
        yes("get", WFS, WORKFLOWS, "probe"),
        yes("update", APPS, ARGOCD),
        yes("watch", APPS, ARGOCD),
        yes("update", APPS, WORKFLOWS),
        yes("get", APPSETS, ARGOCD, "probe"),
        yes("get", "configmaps", ARGOCD, INVENTORY),
        yes("get", PROJECTS, ARGOCD, "probe"),  # the sync windows (steps/window_gate.py)
        # and nothing else: no Secret anywhere, no Application elsewhere, no Workflow, no spec.
        no("get", "secrets", ARGOCD, "cluster-eu-1"),
        no("list", "secrets", ARGOCD),
        no("list", "secrets", WORKFLOWS),
        no("list", "configmaps", ARGOCD),
        no("get", "configmaps", ARGOCD, "argocd-cm"),
        no("get", PROJECTS, OTHER, "probe"),
        no("update", APPS, OTHER),
        no("delete", APPS, ARGOCD),
        no("create", APPS, ARGOCD),
        no("update", APPSETS, ARGOCD),
        no("update", PS, WORKFLOWS),
        no("update", f"{PS}/finalizers", WORKFLOWS),
        no("create", WFS, WORKFLOWS),
        no("update", f"{PS}/status", OTHER),
        no("create", "pods", WORKFLOWS),
    ],
    # A rollout author: Kubernetes' edit role in the workflow namespace (the chart's edit ClusterRole
    # aggregates into it; bound directly here, as there is no controller-manager to aggregate).
    "alice": [
        yes("create", PS, WORKFLOWS),
        yes("patch", PS, WORKFLOWS),
        yes("delete", PS, WORKFLOWS),
        yes("list", PSS, WORKFLOWS),
        no("patch", PSS, WORKFLOWS, "probe"),
        no("update", f"{PS}/status", WORKFLOWS),
        no("create", PS, OTHER),
        no("list", "secrets", ARGOCD),
        no("get", "configmaps", ARGOCD, INVENTORY),
        no("update", APPS, ARGOCD),
    ],
    # Anyone else.
    "bob": [
        no("list", PS, WORKFLOWS),
        no("list", PSS, WORKFLOWS),
        no("get", "configmaps", ARGOCD, INVENTORY),
        no("list", APPS, ARGOCD),
    ],
}


@dataclass
class Identities:
    namespaces: dict[str, str]
    usernames: dict[str, str]
    kubectls: dict[str, Kubectl]
    admin: Kubectl


@pytest.fixture(scope="module")
def identities(control_plane: DevCluster, kubectl: Kubectl) -> Iterator[Identities]:
    suffix = uuid.uuid4().hex[:6]
    namespaces = {role: f"m-{role.strip('<>')}-{suffix}" for role in (RELEASE, WORKFLOWS, ARGOCD, OTHER)}
    for name in namespaces.values():
        kubectl.ok("create", "namespace", name)
    documents = render(
        helm_binary(control_plane),
        namespaces[RELEASE],
        f"argocdNamespace={namespaces[ARGOCD]}",
        f"workflowNamespace={namespaces[WORKFLOWS]}",
        f"watchNamespaces={{{namespaces[WORKFLOWS]}}}",
    )
    isolate(documents, suffix)
    apply(kubectl, documents, kinds={"ServiceAccount", "Role", "RoleBinding", "ClusterRole"})
    edit_role = next(
        d["metadata"]["name"] for d in documents if d["metadata"]["name"].startswith(f"{FULLNAME}-edit")
    )
    kubectl.ok(
        "create",
        "rolebinding",
        "alice-edits-rollouts",
        f"--clusterrole={edit_role}",
        "--user=alice",
        "-n",
        namespaces[WORKFLOWS],
    )
    tools = control_plane.tools_dir / "kubectl"
    accounts = {
        "watcher": (namespaces[RELEASE], f"{FULLNAME}-watcher"),
        "steps": (namespaces[WORKFLOWS], "progressive-sync-steps"),
    }
    kubectls = {
        who: Kubectl(tools, service_account_kubeconfig(control_plane, kubectl, ns, sa))
        for who, (ns, sa) in accounts.items()
    }
    usernames = {who: f"system:serviceaccount:{ns}:{sa}" for who, (ns, sa) in accounts.items()}
    for user in ("alice", "bob"):
        kubectls[user] = Kubectl(tools, control_plane.mint_user(user))
        usernames[user] = user
    _create_probes(kubectl, namespaces)
    yield Identities(namespaces, usernames, kubectls, kubectl)
    for name in namespaces.values():
        kubectl.run("delete", "namespace", name, "--wait=false")


def _create_probes(kubectl: Kubectl, namespaces: dict[str, str]) -> None:
    """The objects the rows name (a patch of a missing object would stop at kubectl's own GET)."""
    probes = [
        (WORKFLOWS, PS, "probe", {"spec": {"appSetRef": {"name": "probe"}, "stages": [_STAGE]}}),
        (WORKFLOWS, PSS, "probe", {"spec": _RECORD_SPEC}),
        (WORKFLOWS, WFS, "probe", {"spec": {"entrypoint": "main", "templates": []}}),
        (WORKFLOWS, APPS, "probe", {"spec": _APP_SPEC}),
        (ARGOCD, APPS, "probe", {"spec": _APP_SPEC}),
        (OTHER, APPS, "probe", {"spec": _APP_SPEC}),
        (
            ARGOCD,
            APPSETS,
            "probe",
            {"spec": {"generators": [], "template": {"metadata": {}, "spec": _APP_SPEC}}},
        ),
        (ARGOCD, "configmaps", INVENTORY, {}),
        (ARGOCD, PROJECTS, "probe", {"spec": {}}),
        (OTHER, PROJECTS, "probe", {"spec": {}}),
        (ARGOCD, "configmaps", "argocd-cm", {}),
        (ARGOCD, "secrets", "cluster-eu-1", {}),
        (RELEASE, LEASES, LEASE, {}),
        (RELEASE, LEASES, "someone-elses-lease", {}),
    ]
    for role, resource, name, extra in probes:
        body = {**json.loads(_body(resource, name)), **extra}
        kubectl.ok("create", "-f", "-", "-n", namespaces[role], stdin=json.dumps(body))


_STAGE = {"name": "all", "targets": {"clusters": {"selector": {}}}}
_RECORD_SPEC = {"progressiveSync": "probe", "rolloutId": "r1", "stage": "all", "stageIndex": 0, "targets": []}
_APP_SPEC = {
    "project": "default",
    "source": {"repoURL": "https://git.example.test/r.git", "path": "."},
    "destination": {"server": "https://kubernetes.default.svc", "namespace": "default"},
}


def can_i(ids: Identities, who: str, row: Row) -> bool:
    resource, _, subresource = row.resource.partition("/")
    target = f"{resource}/{row.name}" if row.name else resource
    args = ["auth", "can-i", row.verb, target, "--as", ids.usernames[who]]
    if subresource:
        args.append(f"--subresource={subresource}")
    args += ["-n", ids.namespaces[row.namespace]] if row.namespace else []
    answer = ids.admin.run(*args).stdout.strip()
    assert answer in ("yes", "no"), answer
    return answer == "yes"


def _body(resource: str, name: str) -> str:
    plural, _, group = resource.partition(".")
    kinds = {
        "progressivesyncs": "ProgressiveSync",
        "progressivesyncstages": "ProgressiveSyncStage",
        "applications": "Application",
        "applicationsets": "ApplicationSet",
        "appprojects": "AppProject",
        "workflows": "Workflow",
        "leases": "Lease",
        "events": "Event",
        "configmaps": "ConfigMap",
        "pods": "Pod",
        "secrets": "Secret",
    }
    version = "v1alpha1" if group.endswith("argoproj.io") or group == "progressivesync.io" else "v1"
    api_version = f"{group}/{version}" if group else "v1"
    return json.dumps({"apiVersion": api_version, "kind": kinds[plural], "metadata": {"name": name}})


def real_request(ids: Identities, who: str, row: Row) -> bool:
    """Send the request as the identity (writes as a server-side dry run); True unless RBAC refused."""
    kubectl = ids.kubectls[who]
    resource, _, subresource = row.resource.partition("/")
    namespace = ["-n", ids.namespaces[row.namespace]] if row.namespace else []
    sub = [f"--subresource={subresource}"] if subresource else []
    name = row.name or "probe"
    if row.verb == "get":
        args = ["get", resource, name, *namespace, *sub]
    elif row.verb in ("list", "watch"):
        args = ["get", resource, *namespace]
        if row.verb == "watch":
            args += ["--watch-only", "--request-timeout=1s"]
    elif subresource == "finalizers":
        # kubectl knows only the status and scale subresources: PUT the object to it raw.
        current = _current(ids, resource, name, namespace)
        plural, _, group = resource.partition(".")
        uri = f"/apis/{group}/v1alpha1/namespaces/{ids.namespaces[row.namespace]}/{plural}/{name}/finalizers"
        result = kubectl.run("replace", "--raw", f"{uri}?dryRun=All", "-f", "-", stdin=current)
        return _authorized(result.stderr)
    elif row.verb == "create":
        args = ["create", "-f", "-", "--dry-run=server", *namespace]
        result = kubectl.run(*args, stdin=_body(resource, name))
        return _authorized(result.stderr)
    elif row.verb == "update":
        current = _current(ids, resource, name, namespace)
        result = kubectl.run("replace", "-f", "-", "--dry-run=server", *namespace, *sub, stdin=current)
        return _authorized(result.stderr)
    elif row.verb == "patch":
        args = ["patch", resource, name, "--type=merge", "-p", "{}", "--dry-run=server", *namespace, *sub]
    elif row.verb == "delete":
        args = ["delete", resource, name, "--dry-run=server", *namespace]
    else:
        raise AssertionError(f"no real request for verb {row.verb}")
    return _authorized(kubectl.run(*args).stderr)


def _current(ids: Identities, resource: str, name: str, namespace: list[str]) -> str:
    """The object as stored (to PUT it back), or a bare body where there is none."""
    found = ids.admin.run("get", resource, name, "-o", "json", *namespace)
    return found.stdout if found.returncode == 0 else _body(resource, name)


def _authorized(stderr: str) -> bool:
    # RBAC's refusal reads 'User "x" cannot VERB resource "r" ...'; anything after it (NotFound,
    # Invalid, a watch timing out) means the request got past authorization.
    return " cannot " not in stderr or "forbidden" not in stderr.lower()


@pytest.mark.parametrize("who", list(MATRIX))
def test_each_identity_can_do_its_job_and_nothing_else(identities: Identities, who: str) -> None:
    wrong = []
    for row in MATRIX[who]:
        answers = {"can-i": can_i(identities, who, row), "request": real_request(identities, who, row)}
        for how, answer in answers.items():
            if answer != row.allowed:
                expected = "allowed" if row.allowed else "refused"
                wrong.append(
                    f"{who} {row.describe(identities.namespaces)}: {how} says {answer}, expected {expected}"
                )
    assert wrong == [], "\n".join(wrong)
