"""The Helm chart renders, lints, is accepted by the real API server, and its RBAC grants what the
watcher and the steps need (checked with `kubectl auth can-i` as the chart's service accounts)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

from orchestrator.api.models import ProgressiveSync
from orchestrator.cli.watch_cmd import build_settings, watch
from orchestrator.devenv.controlplane import DevCluster
from orchestrator.watcher.settings import Engine, Settings
from tests.support.builders import make_release, make_stage
from tests.support.chart import CHART, TEST_IMAGE_REPOSITORY, helm_binary, isolate, render
from tests.support.kubectl import Kubectl
from workflow_templates.builder import assumed_sizes, build_workflow
from workflow_templates.pieces import ROLLOUTS_INSTANCE_ID_ENV
from workflow_templates.settings import StepResources

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def helm(control_plane: DevCluster) -> Path:
    return helm_binary(control_plane)


def test_helm_lint_passes(helm: Path) -> None:
    result = subprocess.run(
        [str(helm), "lint", str(CHART)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 chart(s) failed" in result.stdout


def test_the_crd_ships_in_the_chart(helm: Path) -> None:
    crd_files = sorted((CHART / "crds").glob("*.yaml"))
    assert [path.name for path in crd_files] == [
        "progressivesync.io_progressivesyncs.yaml",
        "progressivesync.io_progressivesyncstages.yaml",
    ]


# What each component's code does against the API, as (verb, resource) pairs.
WATCHER_NEEDS = [
    ("watch", "progressivesyncs.progressivesync.io"),
    ("update", "progressivesyncs.progressivesync.io/status"),
    ("update", "progressivesyncs.progressivesync.io/finalizers"),
    ("watch", "progressivesyncstages.progressivesync.io"),
    ("delete", "progressivesyncstages.progressivesync.io"),  # rollout history
    ("list", "applications.argoproj.io"),
    ("patch", "applications.argoproj.io"),
    ("update", "applications.argoproj.io"),  # only to end a sync we started (the admission policy)
    ("watch", "applicationsets.argoproj.io"),
    ("create", "workflows.argoproj.io"),
    ("patch", "workflows.argoproj.io"),
    ("list", "secrets"),
    ("create", "configmaps"),
    ("update", "configmaps#progressive-sync-clusters"),
    ("create", "events"),
    ("create", "leases.coordination.k8s.io"),
    ("get", "analysistemplates.argoproj.io"),  # Valid=False before a release's analysis starts
]
WATCHER_MUST_NOT = [
    ("list", "analysistemplates.argoproj.io"),
    ("create", "analysisruns.argoproj.io"),
    ("get", "clusteranalysistemplates.argoproj.io"),  # only with analysis.clusterTemplates
]
STEPS_NEED = [
    ("get", "progressivesyncs.progressivesync.io"),
    ("update", "progressivesyncs.progressivesync.io/status"),
    ("create", "progressivesyncstages.progressivesync.io"),
    ("list", "progressivesyncstages.progressivesync.io"),
    ("patch", "progressivesyncstages.progressivesync.io"),
    ("update", "applications.argoproj.io"),
    ("watch", "applications.argoproj.io"),
    ("get", "configmaps#progressive-sync-clusters"),
    ("get", "appprojects.argoproj.io"),  # the sync windows (steps/window_gate.py)
    ("get", "workflows.argoproj.io"),
    # Analysis gates (analysis.enabled, on by default).
    ("create", "analysisruns.argoproj.io"),
    ("get", "analysisruns.argoproj.io"),
    ("watch", "analysisruns.argoproj.io"),  # follows its runs (list → watch), ends them
    ("patch", "analysisruns.argoproj.io"),
    ("get", "analysistemplates.argoproj.io"),
]
STEPS_MUST_NOT = [
    ("delete", "analysisruns.argoproj.io"),
    ("create", "analysistemplates.argoproj.io"),
    ("delete", "applications.argoproj.io"),
    ("create", "workflows.argoproj.io"),
    ("update", "progressivesyncs.progressivesync.io"),
    ("update", "secrets"),
    ("update", "progressivesyncs.progressivesync.io/finalizers"),
    ("delete", "progressivesyncstages.progressivesync.io"),
    ("list", "secrets"),
    ("get", "secrets"),
    ("get", "configmaps"),
    ("list", "appprojects.argoproj.io"),
    ("update", "appprojects.argoproj.io"),
]


def can_i(kubectl: Kubectl, user: str, verb: str, resource: str, namespace: str) -> bool:
    # "type/sub" is a subresource (kubectl wants --subresource); "type#name" one object by name.
    resource, _, name = resource.partition("#")
    resource, _, subresource = resource.partition("/")
    target = f"{resource}/{name}" if name else resource
    extra = [f"--subresource={subresource}"] if subresource else []
    result = kubectl.run("auth", "can-i", verb, target, *extra, "--as", user, "-n", namespace)
    return result.stdout.strip() == "yes"


def test_rendered_chart_applies_and_rbac_fits_the_code(
    helm: Path, kubectl: Kubectl, namespace: str, rollouts_crds: None
) -> None:
    documents = render(helm, namespace, f"argocdNamespace={namespace}", f"workflowNamespace={namespace}")
    kinds = sorted({doc["kind"] for doc in documents})
    assert {"Deployment", "ServiceAccount", "Role", "RoleBinding", "WorkflowTemplate"} <= set(kinds)
    assert {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} <= set(kinds)
    # No ClusterRoleBinding: neither service account holds a right outside the chart's namespaces.
    assert "ClusterRoleBinding" not in kinds
    # Cluster-scoped names must not collide across tests: give them the namespace as a suffix.
    kubectl.ok("apply", "-f", "-", stdin=yaml.safe_dump_all(isolate(documents, namespace)))

    watcher = f"system:serviceaccount:{namespace}:psync-progressive-sync-watcher"
    steps = f"system:serviceaccount:{namespace}:progressive-sync-steps"
    missing = [
        (verb, res) for verb, res in WATCHER_NEEDS if not can_i(kubectl, watcher, verb, res, namespace)
    ]
    assert missing == [], f"watcher lacks {missing}"
    missing = [(verb, res) for verb, res in STEPS_NEED if not can_i(kubectl, steps, verb, res, namespace)]
    assert missing == [], f"steps lack {missing}"
    too_much = [(verb, res) for verb, res in STEPS_MUST_NOT if can_i(kubectl, steps, verb, res, namespace)]
    assert too_much == [], f"steps may do more than they need: {too_much}"
    too_much = [
        (verb, res) for verb, res in WATCHER_MUST_NOT if can_i(kubectl, watcher, verb, res, namespace)
    ]
    assert too_much == [], f"the watcher may do more than it needs: {too_much}"


@pytest.mark.parametrize(
    ("values", "analysis_roles", "cluster_role"),
    [
        pytest.param((), 1, False, id="default-analysis-in-the-namespace-only"),
        pytest.param(("analysis.enabled=false",), 0, False, id="analysis-off-no-right"),
        pytest.param(("analysis.clusterTemplates=true",), 1, True, id="cluster-templates-one-cluster-role"),
    ],
)
def test_analysis_rights_follow_the_chart_values(
    helm: Path, values: tuple[str, ...], analysis_roles: int, cluster_role: bool
) -> None:
    documents = render(helm, "argocd", *values)
    roles = [
        doc
        for doc in documents
        if doc["kind"] == "Role" and any("analysisruns" in rule["resources"] for rule in doc["rules"])
    ]
    assert len(roles) == analysis_roles
    bindings = [doc for doc in documents if doc["kind"] == "ClusterRoleBinding"]
    assert [b["roleRef"]["name"] for b in bindings] == (
        ["psync-progressive-sync-steps-cluster-analysis-templates"] if cluster_role else []
    )
    granted = [
        doc
        for doc in documents
        if doc["kind"] == "ClusterRole" and doc["metadata"]["name"].endswith("templates")
    ]
    assert [rule for doc in granted for rule in doc["rules"]] == (
        [{"apiGroups": ["argoproj.io"], "resources": ["clusteranalysistemplates"], "verbs": ["get"]}]
        if cluster_role
        else []
    )


def test_workflow_templates_follow_the_chart_values(helm: Path) -> None:
    documents = render(
        helm,
        "argocd",
        "image.tag=1.2.3",
        "workflowNamespace=rollouts",
        "watchNamespaces={rollouts}",
        "steps.serviceAccountName=rollout-steps",
    )
    templates = [doc for doc in documents if doc["kind"] == "WorkflowTemplate"]
    assert sorted(t["metadata"]["name"] for t in templates) == [
        "progressive-sync-cluster",
        "progressive-sync-steps",
    ]
    for template in templates:
        assert template["metadata"]["namespace"] == "rollouts"
        assert template["spec"]["serviceAccountName"] == "rollout-steps"
        images = {t["container"]["image"] for t in template["spec"]["templates"] if "container" in t}
        assert images <= {f"{TEST_IMAGE_REPOSITORY}:1.2.3"}


# Every value that configures the watcher or its steps, set to something other than its default.
NON_DEFAULT_VALUES = (
    "image.repository=registry.example/ps",
    "image.tag=2.0.0",
    "image.pullPolicy=Never",
    "argocdNamespace=cd",
    "workflowNamespace=rollouts",
    "watchNamespaces={rollouts}",
    "watcher.engine=local",
    "watcher.logLevel=DEBUG",
    "steps.serviceAccountName=custom-steps",
    "steps.resources.requests.cpu=30m",
    "steps.resources.limits.memory=128Mi",
    "steps.follower=false",
    "policy.allowPrune=true",
    "policy.allowedSyncOptions={Replace=true,Validate=false}",
    "watcher.httpPort=9090",
    "watcher.shutdownTimeoutSeconds=25",
    "watcher.rolloutHistory=0",
    "watcher.terminationGracePeriodSeconds=40",
    "watcher.leaderElection.leaseDurationSeconds=30",
    "watcher.leaderElection.renewDeadlineSeconds=20",
    "watcher.leaderElection.retryPeriodSeconds=4",
    "analysis.rolloutsInstanceId=blue",
)


def watch_settings_from(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Settings:
    """What `progressive-sync watch` makes of this environment: click parses it as the container would."""
    for key in list(os.environ):
        if key.startswith("PROGRESSIVE_SYNC_"):
            monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    context = watch.make_context("watch", [])
    return build_settings(os.environ, **context.params)


def test_every_chart_value_reaches_the_watcher_and_the_step_pods(
    helm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    documents = render(helm, "argocd", *NON_DEFAULT_VALUES)
    [deployment] = [doc for doc in documents if doc["kind"] == "Deployment"]
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    env = {item["name"]: item["value"] for item in container["env"] if "value" in item}
    settings = watch_settings_from(env, monkeypatch)

    assert settings.namespaces == ("rollouts",)
    assert (settings.argocd_namespace, settings.workflow_namespace) == ("cd", "rollouts")
    assert (settings.engine, settings.log_level) == (Engine.LOCAL, "DEBUG")
    assert (settings.allow_prune, settings.allowed_sync_options) == (True, ("Replace=true", "Validate=false"))
    assert (settings.http_port, settings.shutdown_timeout_seconds) == (9090, 25.0)
    assert settings.rollout_history == 0
    lease = settings.leader_election
    assert lease is not None
    assert (lease.namespace, lease.name, lease.identity) == (
        "argocd",
        "psync-progressive-sync-watcher",
        "$(POD_NAME)",
    )
    assert (lease.lease_seconds, lease.renew_deadline_seconds, lease.retry_seconds) == (30.0, 20.0, 4.0)
    pod = deployment["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == 40
    assert container["ports"] == [{"name": "http", "containerPort": 9090, "protocol": "TCP"}]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    steps = settings.workflow
    assert (steps.image, steps.image_pull_policy) == ("registry.example/ps:2.0.0", "Never")
    assert steps.service_account == "custom-steps"
    assert steps.rollouts_instance_id == "blue"
    assert steps.follower is False
    assert steps.resources == StepResources(
        cpu_request="30m", memory_request="64Mi", cpu_limit="", memory_limit="128Mi"
    )
    # The service account the step pods run as is the one the chart creates and binds.
    accounts = {
        (d["metadata"]["namespace"], d["metadata"]["name"])
        for d in documents
        if d["kind"] == "ServiceAccount"
    }
    assert ("rollouts", "custom-steps") in accounts

    # A rollout Workflow the watcher builds with these settings, and the chart's WorkflowTemplates,
    # run the same containers: image, pull policy and resources as the values say.
    ps = ProgressiveSync.model_validate(
        {
            "metadata": {"name": "svc", "namespace": "rollouts"},
            "spec": {"appSetRef": {"name": "svc"}, "stages": [make_stage("all")]},
        }
    )
    workflow = build_workflow(
        ps, release=make_release("r1", revisions=(("abc",),)), plan=assumed_sizes(ps, 3), settings=steps
    ).to_dict()
    assert workflow["spec"]["serviceAccountName"] == "custom-steps"
    expected = {
        "image": "registry.example/ps:2.0.0",
        "imagePullPolicy": "Never",
        "resources": {"requests": {"cpu": "30m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}},
    }
    chart_templates = [doc for doc in documents if doc["kind"] == "WorkflowTemplate"]
    for source in [workflow, *chart_templates]:
        containers = [t["container"] for t in source["spec"]["templates"] if "container" in t]
        for step in containers:
            assert {key: step.get(key) for key in expected} == expected, source["metadata"]["name"]
            env = {item["name"]: item.get("value") for item in step.get("env") or []}
            assert env.get(ROLLOUTS_INSTANCE_ID_ENV) == "blue", source["metadata"]["name"]


def test_the_image_repository_is_required_and_the_message_says_what_to_set(helm: Path) -> None:
    # No registry publishes the image: the chart has no default that would pull from nowhere.
    result = subprocess.run(
        [str(helm), "template", "psync", str(CHART)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode != 0
    assert "image.repository is required" in result.stderr
    assert "set image.repository to where you pushed `make image`'s output" in result.stderr
    with_a_tag = subprocess.run(
        [str(helm), "template", "psync", str(CHART), "--set", "image.repository=registry.example/ps:1.2.3"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert with_a_tag.returncode != 0
    assert "/image/repository" in with_a_tag.stderr


def test_watching_other_namespaces_than_the_workflow_namespace_is_refused(helm: Path) -> None:
    args = [str(helm), "template", "psync", str(CHART), "--set", "watchNamespaces={a,b}"]
    args += ["--set", f"image.repository={TEST_IMAGE_REPOSITORY}"]
    result = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode != 0
    assert "can only watch that namespace" in result.stderr


# What users set, as values files: each must lint and render.
USER_VALUES = {
    "defaults": {},
    "high-availability": {"watcher": {"replicas": 2, "resources": {"requests": {"cpu": "100m"}}}},
    "own-namespaces": {
        "argocdNamespace": "argocd",
        "workflowNamespace": "rollouts",
        "watchNamespaces": ["rollouts"],
        "steps": {"serviceAccountName": "rollout-steps"},
    },
    "a-private-registry": {
        "image": {"repository": "registry.example/ps", "tag": "1.2.3", "pullPolicy": "Always"}
    },
    "a-looser-policy": {"policy": {"allowPrune": True, "allowedSyncOptions": ["*"]}},
    "slower-leader-election": {
        "watcher": {
            "leaderElection": {
                "leaseDurationSeconds": 60,
                "renewDeadlineSeconds": 40,
                "retryPeriodSeconds": 5,
            },
            "shutdownTimeoutSeconds": 50,
            "terminationGracePeriodSeconds": 60,
        }
    },
    "no-templates-no-aggregation": {
        "installWorkflowTemplates": False,
        "rbac": {"aggregateToDefaultRoles": False},
    },
}


@pytest.mark.parametrize("name", list(USER_VALUES))
def test_lint_and_template_accept_the_values_users_set(helm: Path, tmp_path: Path, name: str) -> None:
    values = tmp_path / f"{name}.yaml"
    values.write_text(yaml.safe_dump(USER_VALUES[name]))
    linted = subprocess.run(
        [str(helm), "lint", str(CHART), "--values", str(values)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert linted.returncode == 0, linted.stdout + linted.stderr
    documents = render(helm, "ps-system", values_file=values)
    kinds = {doc["kind"] for doc in documents}
    assert {"Deployment", "Role", "RoleBinding", "ValidatingAdmissionPolicy"} <= kinds


@pytest.mark.parametrize(
    ("values", "message"),
    [
        pytest.param({"watcher": {"replica": 2}}, "additional properties 'replica' not allowed", id="a-typo"),
        pytest.param({"image": {"pullPolicy": "Sometimes"}}, "/image/pullPolicy", id="a-pull-policy"),
        pytest.param({"argocdNamespace": "Argo_CD"}, "/argocdNamespace", id="a-namespace-name"),
        pytest.param(
            {"policy": {"allowedSyncOptions": ["Replace"]}}, "allowedSyncOptions/0", id="a-sync-option"
        ),
        pytest.param(
            {"steps": {"resources": {"requests": {"cpu": "lots"}}}}, "/steps/resources", id="a-quantity"
        ),
        pytest.param(
            {"analysis": {"rolloutsInstanceId": "blue team"}},
            "/analysis/rolloutsInstanceId",
            id="an-instance-id-that-is-no-label-value",
        ),
        pytest.param(
            {"watcher": {"shutdownTimeoutSeconds": 40}},
            "must be below watcher.terminationGracePeriodSeconds",
            id="a-drain-longer-than-the-grace-period",
        ),
    ],
)
def test_mistakes_are_refused_naming_the_key(helm: Path, tmp_path: Path, values: dict, message: str) -> None:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    result = subprocess.run(
        [
            str(helm),
            "template",
            "psync",
            str(CHART),
            "--values",
            str(path),
            "--set",
            f"image.repository={TEST_IMAGE_REPOSITORY}",
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert message in result.stderr, result.stderr
