"""Submitting a Workflow through the Argo Server REST API, with Hera's `WorkflowsService`.

The watcher normally creates Workflow objects through the Kubernetes API. With `--argo-server URL`
it submits them to Argo Server instead (`POST /api/v1/workflows/{namespace}`), for installations
where the watcher has Argo Server credentials rather than RBAC on Workflows; it still *watches*
Workflows through the Kubernetes API.

Errors are mapped onto the adapter's types so the watcher handles both paths alike: 409 →
`AlreadyExists`; 5xx, timeouts and dropped connections → `Retryable`; 401/403 → `Forbidden`;
400/422 → `Invalid`. Argo Server does not always answer a duplicate name with 409 (older servers
answer 500 "could not be completed at this time"), so after a failed create the caller checks
whether the Workflow exists (see `orchestrator.watcher.act`): the deterministic name makes that safe.

Tested with requests-mock only (there is no Argo Server in the test environment).
"""

from __future__ import annotations

import logging
from typing import Any

import requests
from hera.exceptions import AlreadyExists as HeraAlreadyExists
from hera.exceptions import BadRequest, HeraException, NotFound, Unauthorized
from hera.exceptions import Forbidden as HeraForbidden
from hera.workflows.models import Workflow as WorkflowModel
from hera.workflows.models import WorkflowCreateRequest
from hera.workflows.service import WorkflowsService

from orchestrator.kube.client import AlreadyExists, Forbidden, Invalid, KubeError, Retryable
from orchestrator.kube.client import NotFound as KubeNotFound

log = logging.getLogger(__name__)


class ArgoServerSubmitter:
    """Creates Workflows through Argo Server; one `requests.Session`, a token, TLS verification."""

    def __init__(
        self,
        url: str,
        token: str | None,
        *,
        verify_tls: bool = True,
        timeout_seconds: float = 30.0,
    ) -> None:
        self.url = url.rstrip("/") + "/"
        self._session = _TimeoutSession(timeout_seconds)
        self._service = WorkflowsService(
            host=self.url, token=token, verify_ssl=verify_tls, session=self._session
        )

    def create(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        """Submit the Workflow object `body`; returns the created object as JSON."""
        name = body.get("metadata", {}).get("name", "")
        what = f"Argo Server create workflows/{name} in {namespace}"
        request = WorkflowCreateRequest(workflow=WorkflowModel.model_validate(body))
        try:
            created = self._service.create_workflow(request, namespace=namespace)
        except HeraAlreadyExists as exc:
            raise AlreadyExists(f"{what}: {exc}", status=409, reason="AlreadyExists") from exc
        except (Unauthorized, HeraForbidden) as exc:
            raise Forbidden(f"{what}: {exc}", status=403) from exc
        except BadRequest as exc:
            raise Invalid(f"{what}: {exc}", status=400) from exc
        except NotFound as exc:
            raise KubeNotFound(f"{what}: {exc}", status=404) from exc
        except HeraException as exc:
            # 5xx and codes Hera has no class for: temporary from where we stand.
            raise Retryable(f"{what}: {exc}") from exc
        except (requests.ConnectionError, requests.Timeout) as exc:
            raise Retryable(f"{what}: {exc}") from exc
        except requests.RequestException as exc:
            raise KubeError(f"{what}: {exc}") from exc
        log.info("submitted Workflow %s/%s through Argo Server %s", namespace, name, self.url)
        return created.model_dump(by_alias=True, exclude_none=True, mode="json")

    def close(self) -> None:
        """Release the HTTP session."""
        self._session.close()


class _TimeoutSession(requests.Session):
    """A session whose every request has a timeout (Hera's service sets none)."""

    def __init__(self, timeout_seconds: float) -> None:
        super().__init__()
        self._timeout_seconds = timeout_seconds

    def request(self, method: str | bytes, url: str | bytes, *args: Any, **kwargs: Any) -> requests.Response:  # type: ignore[override]
        """`Session.request` with our timeout unless the caller gave one."""
        kwargs.setdefault("timeout", self._timeout_seconds)
        return super().request(method, url, *args, **kwargs)
