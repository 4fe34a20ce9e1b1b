"""`progressive-sync convert` between real `kubectl` commands, against the real API server.

An ApplicationSet as the dev environment builds it (orchestrator.devenv.starter_app, the one the
real Argo CD tier deploys), given an `env` label from its clusters and a RollingSync strategy, is
created under Argo CD's own ApplicationSet CRD (so the strategy's fields are Argo CD's), read back
with `kubectl get -o yaml` (status, managedFields and all), converted, applied with `kubectl apply
-f -` under our CRD (its CEL rules included), and planned live: each stage takes the clusters
whose Applications the matching step selected. Needs etcd and kube-apiserver only (no Argo CD
controllers).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from orchestrator.cli.main import main
from orchestrator.devenv import controlplane as devcluster
from orchestrator.devenv.starter_app import application_set
from orchestrator.kube.client import APPLICATION_SETS, APPLICATIONS, SECRETS, Kube
from tests.support.builders import make_application, make_cluster_secret
from tests.support.kubectl import Kubectl

pytestmark = pytest.mark.integration

CLUSTERS = {"dev-1": "dev", "qa-1": "qa", "prod-1": "prod", "prod-2": "prod", "prod-3": "prod"}


def _in(namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
    obj["metadata"]["namespace"] = namespace
    obj["metadata"].pop("uid", None)
    return obj


def test_convert_a_live_application_set_apply_it_and_plan_it(
    kube: Kube, kubectl: Kubectl, namespace: str, control_plane: devcluster.DevCluster
) -> None:
    document = application_set(
        "web",
        repo_url="https://git.example/web.git",
        path="deploy",
        labels={"env": "{{metadata.labels.env}}"},
    )
    document["metadata"]["namespace"] = namespace
    document["spec"]["strategy"] = {
        "type": "RollingSync",
        "rollingSync": {
            "steps": [
                {"matchExpressions": [{"key": "env", "operator": "In", "values": ["dev"]}]},
                {"matchExpressions": [{"key": "env", "operator": "In", "values": ["qa"]}], "maxUpdate": 0},
                {
                    "matchExpressions": [{"key": "env", "operator": "In", "values": ["prod"]}],
                    "maxUpdate": "50%",
                },
            ]
        },
    }
    created = kube.create(APPLICATION_SETS, namespace, document)
    assert (
        created["spec"]["strategy"]["rollingSync"]["steps"][2]["maxUpdate"] == "50%"
    )  # Argo CD's schema kept it

    live = kubectl.ok("get", "applicationset", "web", "-n", namespace, "-o", "yaml")
    converted = CliRunner().invoke(main, ["convert", "--from-applicationset", "-"], input=live)
    assert converted.exit_code == 0, converted.output
    assert "spec.strategy: remove it" in converted.stderr

    # What the notes say to do: the strategy goes (apply the ProgressiveSync first, as they say).
    applied = kubectl.ok("apply", "-f", "-", stdin=converted.stdout)
    assert "progressivesync.progressivesync.io/web created" in applied
    kube.patch(APPLICATION_SETS, namespace, "web", {"spec": {"strategy": None}})

    uid = created["metadata"]["uid"]
    for cluster, env in CLUSTERS.items():
        kube.create(SECRETS, namespace, _in(namespace, make_cluster_secret(cluster, labels={"env": env})))
        app = make_application(
            f"web-{cluster}", cluster=cluster, owner="web", owner_uid=uid, labels={"env": env}
        )
        kube.create(APPLICATIONS, namespace, _in(namespace, app))

    stored = yaml.safe_load(
        kubectl.ok("get", "progressivesyncs.progressivesync.io", "web", "-n", namespace, "-o", "yaml")
    )
    ps_file = yaml.safe_dump(stored)
    planned = CliRunner().invoke(
        main, ["plan", "-f", "-", "--kubeconfig", str(control_plane.kubeconfig), "-o", "json"], input=ps_file
    )
    assert planned.exit_code == 0, planned.output
    plan = json.loads(planned.stdout)
    assert plan["errors"] == [] and plan["warnings"] == []
    assert [(s["name"], sorted(s["targets"]), s["maxParallel"]) for s in plan["stages"]] == [
        ("dev", ["dev-1"], 1),
        ("qa", ["qa-1"], 1),
        ("prod", ["prod-1", "prod-2", "prod-3"], 1),
    ]
    assert stored["spec"]["stages"][1]["approval"] == "Manual"
