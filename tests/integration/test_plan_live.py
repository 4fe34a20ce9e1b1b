"""`progressive-sync plan` live, against the real API server: the adapter's listing, real uids.

The ApplicationSet, Applications (the peer CRD keeps `status` in the main resource, like Argo CD's)
and cluster Secrets are created through the API; the command reads them through `Kube` only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from orchestrator.cli.main import main
from orchestrator.devenv import controlplane as devcluster
from orchestrator.kube.client import APPLICATION_SETS, APPLICATIONS, SECRETS, Kube
from tests.support.builders import make_application, make_cluster_secret

pytestmark = pytest.mark.integration

MARKER = "LIVE-CREDENTIAL-MARKER-93c1"


def _in(namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
    obj["metadata"]["namespace"] = namespace
    obj["metadata"].pop("uid", None)
    return obj


def test_live_plan_reads_the_fleet_through_the_adapter(
    kube: Kube, namespace: str, control_plane: devcluster.DevCluster, tmp_path: Path
) -> None:
    app_set = kube.create(
        APPLICATION_SETS,
        namespace,
        {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "ApplicationSet",
            "metadata": {"name": "myservice", "namespace": namespace},
            "spec": {
                "generators": [],
                # Argo CD's CRD requires the template's project and destination.
                "template": {"metadata": {}, "spec": {"project": "default", "destination": {}}},
            },
        },
    )
    uid = app_set["metadata"]["uid"]
    clusters = [("eu-1", "eu"), ("eu-2", "eu"), ("us-1", "us"), ("us-2", "us")]
    for name, region in clusters:
        secret = make_cluster_secret(
            name, labels={"region": region}, config=json.dumps({"bearerToken": MARKER})
        )
        kube.create(SECRETS, namespace, _in(namespace, secret))
        kube.create(APPLICATIONS, namespace, _in(namespace, make_application(cluster=name, owner_uid=uid)))
    # Same owner name, another uid: an older ApplicationSet's Application, not ours.
    stray = make_application("stray", cluster="eu-1", owner_uid="5d0c4a36-0000-4000-8000-000000000000")
    kube.create(APPLICATIONS, namespace, _in(namespace, stray))

    ps_file = tmp_path / "ps.yaml"
    ps_file.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "progressivesync.io/v1alpha1",
                "kind": "ProgressiveSync",
                "metadata": {"name": "myservice", "namespace": namespace},
                "spec": {
                    "appSetRef": {"name": "myservice"},
                    "stages": [
                        {
                            "name": "canary",
                            "targets": {"clusters": {"selector": {"matchLabels": {"region": "eu"}}}},
                            "maxTargets": 1,
                        },
                        {"name": "rest", "targets": {"clusters": {"selector": {}}}, "maxParallel": "50%"},
                    ],
                },
            }
        )
    )
    result = CliRunner().invoke(
        main, ["plan", "-f", str(ps_file), "--kubeconfig", str(control_plane.kubeconfig), "-o", "json"]
    )
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    assert plan["summary"] == {
        "clusters": 4,
        "outOfDate": 4,
        "uncovered": [],
        "ignoredApplications": 1,
        "skipped": [],
    }
    canary, rest = plan["stages"]
    assert len(canary["targets"]) == 1 and canary["targets"][0].startswith("eu-")
    assert sorted(canary["targets"] + rest["targets"]) == ["eu-1", "eu-2", "us-1", "us-2"]
    assert rest["maxParallel"] == 1  # 50% of 3 targets
    assert plan["warnings"] == [] and plan["errors"] == []
    assert MARKER not in result.output
