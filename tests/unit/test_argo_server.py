"""Workflow submission through the Argo Server REST API (Hera's WorkflowsService), with requests-mock.

There is no Argo Server here: requests-mock answers the HTTP calls the way Argo Server's
`POST /api/v1/workflows/{namespace}` does.
"""

from __future__ import annotations

from typing import Any

import pytest
import requests
import requests_mock

from orchestrator.kube.argo_server import ArgoServerSubmitter
from orchestrator.kube.client import AlreadyExists, Forbidden, Invalid, KubeError, Retryable

URL = "https://argo.example.test:2746"
ENDPOINT = f"{URL}/api/v1/workflows/argocd"


def body() -> dict[str, Any]:
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {
            "name": "web-abc",
            "namespace": "argocd",
            "labels": {"progressivesync.io/name": "web"},
            "annotations": {"progressivesync.io/spec-hash": "h"},
        },
        "spec": {"entrypoint": "rollout", "templates": [{"name": "rollout", "suspend": {}}]},
    }


def test_create_posts_the_workflow_with_the_bearer_token_and_a_timeout() -> None:
    submitter = ArgoServerSubmitter(URL, "secret-token", timeout_seconds=7)
    with requests_mock.Mocker() as mock:
        mock.post(ENDPOINT, json={**body(), "metadata": {**body()["metadata"], "uid": "u-1"}})
        created = submitter.create("argocd", body())
    request = mock.last_request
    assert request.headers["Authorization"] == "Bearer secret-token"
    sent = request.json()["workflow"]
    assert sent["metadata"]["name"] == "web-abc"
    assert sent["metadata"]["annotations"] == {"progressivesync.io/spec-hash": "h"}
    assert sent["spec"]["entrypoint"] == "rollout"
    assert request.timeout == 7
    assert created["metadata"]["uid"] == "u-1"


def test_a_token_with_its_scheme_is_sent_as_is() -> None:
    submitter = ArgoServerSubmitter(URL, "Bearer already-prefixed")
    with requests_mock.Mocker() as mock:
        mock.post(ENDPOINT, json=body())
        submitter.create("argocd", body())
    assert mock.last_request.headers["Authorization"] == "Bearer already-prefixed"


@pytest.mark.parametrize(
    ("status", "error"),
    [
        pytest.param(409, AlreadyExists, id="409-is-already-exists"),
        pytest.param(500, Retryable, id="500-is-temporary"),
        pytest.param(503, Retryable, id="503-is-temporary"),
        pytest.param(401, Forbidden, id="401-is-forbidden"),
        pytest.param(403, Forbidden, id="403-is-forbidden"),
        pytest.param(400, Invalid, id="400-is-invalid"),
    ],
)
def test_error_statuses_map_to_the_adapter_errors(status: int, error: type[KubeError]) -> None:
    submitter = ArgoServerSubmitter(URL, "t")
    with requests_mock.Mocker() as mock:
        mock.post(ENDPOINT, status_code=status, json={"code": status, "message": f"status {status}"})
        with pytest.raises(error) as raised:
            submitter.create("argocd", body())
    assert "web-abc" in str(raised.value)


def test_connection_errors_are_temporary() -> None:
    submitter = ArgoServerSubmitter(URL, "t")
    with requests_mock.Mocker() as mock:
        mock.post(ENDPOINT, exc=requests.ConnectionError("refused"))
        with pytest.raises(Retryable):
            submitter.create("argocd", body())
        mock.post(ENDPOINT, exc=requests.Timeout("slow"))
        with pytest.raises(Retryable):
            submitter.create("argocd", body())
