"""The objects the dev stack's Argo CD is installed with, as values: `argocd-cm`,
`argocd-cmd-params-cm`, `argocd-secret`, the `default` AppProject, a destination's cluster Secret,
and the admission policy that makes a destination refuse a release. Pure: nothing here talks to a
cluster.

Callers: `orchestrator.devenv.argocd` (ArgoCDStack installs them), tests/support/argocd_harness
(`HEALTH_PROBES`), the real-Argo-CD tests (the resource types, `default_project`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from orchestrator.devenv import starter_app
from orchestrator.devenv.argocd_settings import DestinationCluster
from orchestrator.kube.client import Resource

CONFIG_MAPS = Resource("", "v1", "configmaps", "ConfigMap")
APP_PROJECTS = Resource("argoproj.io", "v1alpha1", "appprojects", "AppProject")
HEALTH_PROBES = Resource(
    starter_app.PROBE_GROUP, starter_app.PROBE_VERSION, starter_app.PROBE_PLURAL, starter_app.PROBE_KIND
)
VALIDATING_POLICIES = Resource(
    "admissionregistration.k8s.io", "v1", "validatingadmissionpolicies", "ValidatingAdmissionPolicy"
)
VALIDATING_POLICY_BINDINGS = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "validatingadmissionpolicybindings",
    "ValidatingAdmissionPolicyBinding",
)
PART_OF_ARGOCD = {"app.kubernetes.io/part-of": "argocd"}


def _object(api_version: str, kind: str, metadata: Mapping[str, Any], **fields: Any) -> dict[str, Any]:
    """A Kubernetes object: its type, its metadata, then the rest (`spec`, `data`, ...)."""
    return {"apiVersion": api_version, "kind": kind, "metadata": dict(metadata), **fields}


def argocd_cm(reconciliation_seconds: int, extra: Mapping[str, str]) -> dict[str, Any]:
    """`argocd-cm`: no in-cluster destination, the reconciliation timer, the HealthProbe health check."""
    data = {
        # Destinations are the cluster Secrets only.
        "cluster.inClusterEnabled": "false",
        # Read by the processes from ARGOCD_RECONCILIATION_TIMEOUT (set to the same value).
        "timeout.reconciliation": f"{reconciliation_seconds}s",
        starter_app.PROBE_HEALTH_KEY: starter_app.PROBE_HEALTH_LUA,
        **extra,
    }
    return _object("v1", "ConfigMap", {"name": "argocd-cm", "labels": PART_OF_ARGOCD}, data=data)


def argocd_cmd_params_cm() -> dict[str, Any]:
    """`argocd-cmd-params-cm`: what the processes are started with, for people reading the cluster."""
    data = {
        "repo.server.disable.tls": "true",
        "controller.repo.server.plaintext": "true",
        "applicationsetcontroller.enable.leader.election": "false",
    }
    return _object("v1", "ConfigMap", {"name": "argocd-cmd-params-cm", "labels": PART_OF_ARGOCD}, data=data)


def argocd_secret(server_secret_key: str) -> dict[str, Any]:
    """`argocd-secret` with the given `server.secretkey`."""
    return _object(
        "v1",
        "Secret",
        {"name": "argocd-secret", "labels": PART_OF_ARGOCD},
        type="Opaque",
        stringData={"server.secretkey": server_secret_key},
    )


def default_project() -> dict[str, Any]:
    """The `default` AppProject (what Argo CD's API server creates on first start): anything goes."""
    spec = {
        "sourceRepos": ["*"],
        "destinations": [{"server": "*", "namespace": "*"}],
        "clusterResourceWhitelist": [{"group": "*", "kind": "*"}],
    }
    return _object("argoproj.io/v1alpha1", "AppProject", {"name": "default"}, spec=spec)


def cluster_secret(cluster: DestinationCluster, tls_client_config: Mapping[str, Any]) -> dict[str, Any]:
    """The cluster Secret Argo CD reads a destination from: name, URL, labels (what stage selectors
    match) and the client certificate it connects with."""
    labels = {"argocd.argoproj.io/secret-type": "cluster", **cluster.labels}
    config = {"tlsClientConfig": dict(tls_client_config)}
    return _object(
        "v1",
        "Secret",
        {"name": cluster.secret_name, "labels": labels},
        type="Opaque",
        stringData={"name": cluster.name, "server": cluster.server, "config": json.dumps(config)},
    )


def refusal_policy(name: str, namespace: str, message: str) -> dict[str, Any]:
    """A ValidatingAdmissionPolicy refusing every ConfigMap create or update in `namespace`."""
    configmap_writes = {
        "apiGroups": [""],
        "apiVersions": ["v1"],
        "operations": ["CREATE", "UPDATE"],
        "resources": ["configmaps"],
    }
    spec = {
        "failurePolicy": "Fail",
        "matchConstraints": {"resourceRules": [configmap_writes]},
        "validations": [{"expression": f"object.metadata.namespace != '{namespace}'", "message": message}],
    }
    return _object("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy", {"name": name}, spec=spec)


def refusal_policy_binding(name: str) -> dict[str, Any]:
    """The binding that makes the policy `name` deny."""
    spec = {"policyName": name, "validationActions": ["Deny"]}
    return _object(
        "admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding", {"name": name}, spec=spec
    )
