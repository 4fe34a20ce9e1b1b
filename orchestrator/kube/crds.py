"""Installing CRDs and waiting until the API server serves them.

`apply_crds` creates or updates CustomResourceDefinitions, then waits until each is `Established`
and its resource appears in discovery (only then do creates of that kind succeed reliably).
The CRDs: ours, generated from the models (`orchestrator.api.crdgen`), and the peers' own, as the
Argo Workflows and Argo CD modules ship them (Workflow, WorkflowTemplate, ... with full schemas;
Application, ApplicationSet, AppProject): `make tools` puts them in folders of the tool cache, which
callers pass in (`orchestrator.devenv.tools.peer_crd_dirs()`). Some are megabytes: they are created
or replaced whole (never client-side applied, whose annotation could not hold them), and read from
the JSON copy the build writes next to each YAML file when it is there.

Callers: the test fixtures, `dev-cluster up`, the demo, the benchmarks.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from orchestrator.core import yamlio
from orchestrator.kube.client import CRDS, Kube, KubeError, NotFound


def crd_documents_in(folder: Path) -> list[dict[str, Any]]:
    """Every CustomResourceDefinition in a folder's `*.yaml` files, read from the JSON twin if any."""
    documents: list[dict[str, Any]] = []
    for path in sorted(folder.glob("*.yaml")):
        twin = path.with_suffix(".json")
        if twin.is_file():
            loaded = [json.loads(twin.read_text())]
        else:
            loaded = list(yamlio.safe_load_all(path.read_text()))
        documents.extend(
            d for d in loaded if isinstance(d, dict) and d.get("kind") == "CustomResourceDefinition"
        )
    if not documents:
        raise KubeError(f"no CustomResourceDefinition in {folder}/*.yaml")
    return documents


def all_crd_documents(
    peer_crd_dirs: Iterable[Path], *, workflow_crd_dir: Path | None = None
) -> list[dict[str, Any]]:
    """Our CRDs (ProgressiveSync, ProgressiveSyncStage: generated from the models) plus every CRD in
    the peers' folders.

    `workflow_crd_dir`: a folder whose CRDs replace those of the same name, for Argo's minimal
    Workflow CRD (`tools.minimal_workflow_crd_dir()`: what Argo's install manifests apply; spec and
    status are kept as written). The full one validates every field of every Workflow write, which
    the local-engine tiers want (a malformed Workflow is refused there); it costs the API server
    twice the CPU to install (26.6 against 13.0 CPU-s with every CRD, docs/design/dev-stack.md) and more on
    every write, which the real Argo controller makes all along.
    """
    from orchestrator.api.crdgen import all_crds  # noqa: PLC0415 - crdgen imports the whole model tree

    documents = [*all_crds(), *(d for folder in peer_crd_dirs for d in crd_documents_in(folder))]
    if workflow_crd_dir is None:
        return documents
    instead = {d["metadata"]["name"]: d for d in crd_documents_in(workflow_crd_dir)}
    return [instead.get(d["metadata"]["name"], d) for d in documents]


def apply_crds(kube: Kube, documents: Iterable[dict[str, Any]], *, timeout: float = 300.0) -> None:
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


def apply_all_crds(kubeconfig: str | Path, peer_crd_dirs: Iterable[Path]) -> None:
    """`apply_crds` of ours and the peers' CRDs, with the admin kubeconfig given."""
    kube = Kube.from_kubeconfig(str(kubeconfig))
    try:
        apply_crds(kube, all_crd_documents(peer_crd_dirs))
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
