"""Installing CRDs and waiting until the API server serves them.

`apply_crds` creates or updates CustomResourceDefinitions, then waits until each is `Established`
and its resource appears in discovery (only then do creates of that kind succeed reliably).
The CRDs: ours, generated from the models (`orchestrator.api.crdgen`), and the peers' (Argo CD's
Application/ApplicationSet, Argo Workflows' Workflow/WorkflowTemplate) that we write ourselves for
tests and the demo, shipped in `orchestrator/data/peer-crds/`.

Callers: the test fixtures, `dev-cluster up`, the demo.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from importlib import resources
from pathlib import Path
from typing import Any

from orchestrator.core import yamlio
from orchestrator.kube.client import CRDS, Kube, KubeError, NotFound


def peer_crd_documents() -> list[dict[str, Any]]:
    """The Argo CD and Argo Workflows CRDs we install where the real projects are absent."""
    folder = resources.files("orchestrator") / "data" / "peer-crds"
    documents = []
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".yaml"):
            documents.append(yamlio.safe_load(entry.read_text()))
    return documents


def all_crd_documents() -> list[dict[str, Any]]:
    """Our ProgressiveSync CRD (generated from the models) plus the peers' CRDs."""
    from orchestrator.api.crdgen import build_crd  # noqa: PLC0415 - crdgen imports the whole model tree

    return [build_crd(), *peer_crd_documents()]


def apply_crds(kube: Kube, documents: Iterable[dict[str, Any]], *, timeout: float = 60.0) -> None:
    """Create or update each CRD, then wait until all are Established and served by discovery."""
    documents = list(documents)
    for document in documents:
        name = document["metadata"]["name"]
        try:
            current = kube.get(CRDS, None, name)
        except NotFound:
            kube.create(CRDS, None, document)
            continue
        updated = dict(document)
        updated["metadata"] = {
            **document["metadata"],
            "resourceVersion": current["metadata"]["resourceVersion"],
        }
        kube.replace(CRDS, None, updated)
    deadline = time.monotonic() + timeout
    for document in documents:
        wait_until_served(kube, document, deadline=deadline)


def apply_all_crds(kubeconfig: str | Path) -> None:
    """`apply_crds` of every CRD progressive-sync needs, with the admin kubeconfig given."""
    kube = Kube.from_kubeconfig(str(kubeconfig))
    try:
        apply_crds(kube, all_crd_documents())
    finally:
        kube.close()


def wait_until_served(kube: Kube, document: dict[str, Any], *, deadline: float) -> None:
    """Wait until the CRD is Established and its plural appears in discovery for every version."""
    name = document["metadata"]["name"]
    spec = document["spec"]
    plural = spec["names"]["plural"]
    versions = [version["name"] for version in spec["versions"] if version.get("served", True)]
    last = "not Established yet"
    while time.monotonic() < deadline:
        crd = kube.get(CRDS, None, name)
        conditions = {c["type"]: c for c in (crd.get("status") or {}).get("conditions") or []}
        established = conditions.get("Established", {}).get("status") == "True"
        if established and all(
            _discovery_serves(kube, spec["group"], version, plural) for version in versions
        ):
            return
        if not established:
            last = conditions.get("Established", {}).get("message", "not Established yet")
        else:
            last = "Established but not yet in discovery"
        time.sleep(0.1)
    raise KubeError(f"CRD {name} is not served in time: {last}")


def _discovery_serves(kube: Kube, group: str, version: str, plural: str) -> bool:
    try:
        document = kube.discovery(group, version)
    except NotFound:
        return False
    return any(resource.get("name") == plural for resource in document.get("resources") or [])
