"""What we render is accepted by the real API server with Argo's own Workflow CRDs.

Real: kube-apiserver + etcd with Argo Workflows' CRDs as its module ships them, with full schemas
(Workflow, WorkflowTemplate: structural, so unknown fields would be pruned), our ProgressiveSync CRD,
and `kubectl`. The checks: the objects are created, nothing is pruned on the way in (what we read
back is what we sent, so every field we render is one Argo knows), the ownerReference names a real
ProgressiveSync by uid, a second create of the same rollout is AlreadyExists, and `kubectl get
workflows` prints them. Argo's own validation is `argo lint` (tests/integration/test_argo_lint.py).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from orchestrator.api.models import ProgressiveSync
from orchestrator.cli.main import main
from orchestrator.kube.client import PROGRESSIVE_SYNCS, WORKFLOW_TEMPLATES, WORKFLOWS, AlreadyExists, Kube
from tests.support.builders import make_release
from tests.support.kubectl import Kubectl
from workflow_templates import pieces, render
from workflow_templates.builder import assumed_sizes, build_workflow, workflow_object
from workflow_templates.settings import WorkflowSettings

pytestmark = pytest.mark.integration


def example_ps(namespace: str) -> dict[str, Any]:
    manifest = dict(yaml.safe_load(render.EXAMPLE_PS.read_text()))
    manifest["metadata"] = {"name": "myservice", "namespace": namespace}
    return manifest


def test_rendered_workflow_is_accepted_unchanged_and_owned_by_its_progressive_sync(
    kube: Kube, kubectl: Kubectl, namespace: str
) -> None:
    created_ps = kube.create(PROGRESSIVE_SYNCS, namespace, example_ps(namespace))
    ps = ProgressiveSync.model_validate(created_ps)
    assert ps.metadata.uid
    workflow = build_workflow(
        ps,
        release=make_release("7f3c2a1b9e", revisions=(("4f1c2e9",),)),
        plan=assumed_sizes(ps, 12),
        settings=WorkflowSettings(),
    )
    body = workflow_object(workflow)
    created = kube.create(WORKFLOWS, namespace, body)
    assert created["spec"] == body["spec"]
    assert created["metadata"]["labels"] == body["metadata"]["labels"]
    assert created["metadata"]["ownerReferences"][0]["uid"] == ps.metadata.uid
    with pytest.raises(AlreadyExists):
        kube.create(WORKFLOWS, namespace, body)
    listed = kubectl.ok(
        "get", "workflows", "-n", namespace, "-l", "progressivesync.io/name=myservice", "-o", "name"
    )
    assert listed.strip() == "workflow.argoproj.io/myservice-7f3c2a1b9e"


def test_render_output_goes_through_kubectl_create(kubectl: Kubectl, namespace: str, tmp_path: Any) -> None:
    manifest = tmp_path / "ps.yaml"
    manifest.write_text(yaml.safe_dump(example_ps(namespace)))
    result = CliRunner().invoke(main, ["render", "-f", str(manifest), "-o", "json"], catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    out = kubectl.ok("create", "-f", "-", "-o", "json", stdin=result.stdout)
    assert json.loads(out)["metadata"]["name"] == "myservice-render"


def test_committed_workflow_templates_are_accepted(kube: Kube, kubectl: Kubectl, namespace: str) -> None:
    for template in pieces.workflow_templates(WorkflowSettings()):
        path = render.HERE / f"{template.name}.yaml"
        kubectl.ok("apply", "-n", namespace, "-f", str(path))
        stored = kube.get(WORKFLOW_TEMPLATES, namespace, str(template.name))
        assert stored["spec"] == yaml.safe_load(path.read_text())["spec"]
