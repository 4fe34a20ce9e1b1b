"""The real API server and the models agree on the ProgressiveSync API.

- Parity: every manifest in `tests/api/invalid/` is rejected by the API server (real `kubectl
  apply --dry-run=server`, so the CRD's schema and CEL rules decide) and by `progressive-sync
  validate`, and both messages name the field the file's `# field:` comment gives. Every
  ProgressiveSync in `examples/` and `tests/api/valid/` is accepted by both (created for real with
  `kubectl apply`), and the spec the API server stores equals the one the models read.
- Defaults the API server applies equal the defaults the models apply.
- Round trip: an object read back from the API server (spec, metadata and a status written through
  the status subresource) parses into the models and serializes back to exactly the same JSON.
"""

from __future__ import annotations

import contextlib
import copy
import re
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from orchestrator.api.models import KIND, ProgressiveSync, ProgressiveSyncStatus
from orchestrator.cli.main import main
from orchestrator.kube.client import NAMESPACES, PROGRESSIVE_SYNCS, Kube, NotFound
from tests.support.kubectl import Kubectl

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
CORPUS = sorted((REPO / "tests" / "api" / "invalid").glob("*.yaml"))
FIELD_COMMENT = re.compile(r"^# field: (\S+)$", re.MULTILINE)


def _valid_documents() -> list[Any]:
    params = []
    paths = sorted((REPO / "examples").glob("*.yaml")) + sorted(
        (REPO / "tests" / "api" / "valid").glob("*.yaml")
    )
    for path in paths:
        for index, document in enumerate(yaml.safe_load_all(path.read_text()), start=1):
            if isinstance(document, dict) and document.get("kind") == KIND:
                params.append(pytest.param(path, document, id=f"{path.stem}-{index}"))
    return params


VALID = _valid_documents()


@pytest.fixture(scope="module")
def dry_run_namespace(kube: Kube) -> Iterator[str]:
    """One namespace for the whole corpus: server-side dry runs store nothing."""
    name = f"t-api-parity-{uuid.uuid4().hex[:6]}"
    kube.create(NAMESPACES, None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name
    with contextlib.suppress(NotFound):
        kube.delete(NAMESPACES, None, name)


def test_corpus_is_large_enough() -> None:
    assert len(CORPUS) >= 30
    assert len(VALID) >= 4
    for path in CORPUS:
        assert FIELD_COMMENT.search(path.read_text()), f"{path.name} lacks a '# field: <path>' comment"


@pytest.mark.parametrize("manifest", [pytest.param(path, id=path.stem) for path in CORPUS])
def test_invalid_manifest_is_rejected_by_both(
    manifest: Path, kubectl: Kubectl, dry_run_namespace: str
) -> None:
    match = FIELD_COMMENT.search(manifest.read_text())
    assert match, f"{manifest.name} lacks a '# field: <path>' comment"
    field = match.group(1)

    server = kubectl.run("apply", "--dry-run=server", "-n", dry_run_namespace, "-f", str(manifest))
    offline = CliRunner().invoke(main, ["validate", "-f", str(manifest)])

    disagreements = []
    if server.returncode == 0:
        disagreements.append(f"the API server accepted it: {server.stdout.strip()}")
    elif field not in server.stderr:
        disagreements.append(f"the API server's message does not name {field}: {server.stderr.strip()}")
    if offline.exit_code != 1:
        disagreements.append(f"`validate` exited {offline.exit_code}: {offline.output.strip()}")
    elif field not in offline.output:
        disagreements.append(f"`validate` does not name {field}: {offline.output.strip()}")
    assert not disagreements, f"{manifest.name}:\n" + "\n".join(disagreements)


@pytest.mark.parametrize(("source", "document"), VALID)
def test_valid_manifest_is_accepted_by_both(
    source: Path, document: dict[str, Any], kubectl: Kubectl, kube: Kube, namespace: str
) -> None:
    offline = CliRunner().invoke(main, ["validate", "-f", str(source)])
    assert offline.exit_code == 0, offline.output

    document = copy.deepcopy(document)
    document["metadata"]["namespace"] = namespace
    applied = kubectl.run("apply", "-f", "-", stdin=yaml.safe_dump(document))
    assert applied.returncode == 0, applied.stderr

    stored = kube.get(PROGRESSIVE_SYNCS, namespace, document["metadata"]["name"])
    assert ProgressiveSync.model_validate(stored).to_api() == stored
    # Both read the manifest the same way: defaults, nulls and 2.0-for-2 included.
    assert stored["spec"] == ProgressiveSync.model_validate(document).to_api()["spec"]


def _minimal(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "progressivesync.io/v1alpha1",
        "kind": "ProgressiveSync",
        "metadata": {"name": name},
        "spec": {
            "appSetRef": {"name": "checkout"},
            "stages": [
                {"name": "canary", "targets": {"clusters": {"selector": {"matchLabels": {"region": "eu"}}}}},
                {
                    "name": "rest",
                    "targets": {
                        "clusters": {
                            "selector": {"matchExpressions": [{"key": "region", "operator": "Exists"}]}
                        }
                    },
                    "maxParallel": "50%",
                },
            ],
        },
    }


def test_api_server_defaults_equal_model_defaults(kube: Kube, namespace: str) -> None:
    minimal = _minimal("defaults")
    kube.create(PROGRESSIVE_SYNCS, namespace, minimal)
    stored = kube.get(PROGRESSIVE_SYNCS, namespace, "defaults")

    expected = ProgressiveSync.model_validate(minimal).to_api()["spec"]
    assert stored["spec"] == expected
    # Spelled out, so a change to a default shows here and not only as "both changed".
    assert stored["spec"]["stages"][0]["maxTargets"] == "100%"
    assert stored["spec"]["stages"][0]["maxParallel"] == 1
    assert stored["spec"]["stages"][0]["approval"] == "Automatic"
    assert stored["spec"]["progressDeadlineSeconds"] == 600
    assert stored["spec"]["failurePolicy"] == {"maxFailedClusters": 0}

    # Status defaults too: a stage entry with only a name is filled in the same way.
    kube.patch(
        PROGRESSIVE_SYNCS,
        namespace,
        "defaults",
        {"status": {"stages": [{"name": "canary"}]}},
        subresource="status",
    )
    stored = kube.get(PROGRESSIVE_SYNCS, namespace, "defaults")
    assert stored["status"] == ProgressiveSyncStatus.model_validate({"stages": [{"name": "canary"}]}).to_api()


def _populated_status(generation: int) -> ProgressiveSyncStatus:
    started = datetime(2026, 5, 1, 12, 0, 0, tzinfo=UTC)
    finished = datetime(2026, 5, 1, 12, 9, 30, tzinfo=UTC)
    return ProgressiveSyncStatus.model_validate(
        {
            "observedGeneration": generation,
            "phase": "Progressing",
            "message": "stage one per other region: 1 of 3 clusters updated",
            "progress": "2/12",
            "counts": {"targets": 24, "syncing": 21, "completed": 2, "failed": 1},
            "rollout": {
                "id": "7f3c2a1",
                "revision": "4f1c2e9",
                "workflow": "checkout-7f3c2a1",
                "attempt": 2,
                "startedAt": started,
            },
            "currentStage": "one per other region",
            "conditions": [
                {
                    "type": "Ready",
                    "status": "False",
                    "reason": "RolloutProgressing",
                    "message": "rolling out 4f1c2e9",
                    "lastTransitionTime": started,
                    "observedGeneration": generation,
                },
                {"type": "Valid", "status": "True", "reason": "SpecValid", "lastTransitionTime": started},
            ],
            "stages": [
                {
                    "name": "canary in eu-west-1",
                    "phase": "Succeeded",
                    "message": "1 of 1 clusters updated",
                    "counts": {"targets": 1, "completed": 1},
                    "records": ["checkout-7f3c2a1-0-0"],
                    "startedAt": started,
                    "finishedAt": finished,
                },
                {
                    "name": "one per other region",
                    "phase": "Progressing",
                    "counts": {"targets": 23, "syncing": 21, "completed": 1, "failed": 1},
                    "syncing": [f"cells-1-ap-southeast-1a-{i}" for i in range(20)],
                    "failed": [{"name": "cells-1-eu-central-1a-1", "reason": "Degraded after sync"}],
                    "notes": [{"name": "cells-1-ap-southeast-1a-1", "note": "sync window"}],
                    "more": {"syncing": 1},
                    "records": ["checkout-7f3c2a1-1-0"],
                    "startedAt": finished,
                },
                {"name": "everything else"},
            ],
        }
    )


def test_round_trip_keeps_every_field(kube: Kube, kubectl: Kubectl, namespace: str) -> None:
    document = yaml.safe_load((REPO / "examples" / "canary-regions-rest.yaml").read_text())
    document["metadata"]["namespace"] = namespace
    document["metadata"]["annotations"] = {"example.com/owner": "team-checkout"}
    kube.create(PROGRESSIVE_SYNCS, namespace, document)
    stored = kube.get(PROGRESSIVE_SYNCS, namespace, "checkout")
    assert ProgressiveSync.model_validate(stored).to_api() == stored

    status = _populated_status(stored["metadata"]["generation"])
    kube.patch(PROGRESSIVE_SYNCS, namespace, "checkout", {"status": status.to_api()}, subresource="status")
    stored = kube.get(PROGRESSIVE_SYNCS, namespace, "checkout")
    assert stored["status"] == status.to_api()
    parsed = ProgressiveSync.model_validate(stored)
    assert parsed.to_api() == stored
    assert parsed.status == status

    # The printer columns show what the status says; the short name and category resolve.
    table = kubectl.ok("get", "psync", "-n", namespace).splitlines()
    assert table[0].split() == ["NAME", "PHASE", "STAGE", "PROGRESS", "AGE"]
    assert "Progressing" in table[1] and "one per other region" in table[1] and "2/12" in table[1]
    assert "checkout" in kubectl.ok("get", "progressive-sync", "-n", namespace, "-o", "name")
