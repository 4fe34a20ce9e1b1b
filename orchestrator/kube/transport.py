"""HTTP to the API server: one urllib3 connection pool per `Endpoint`, JSON in, raw answers out.

`Transport.request` sends one request with its credentials and timeouts and returns the answer,
whatever its status: what a status means is decided by the adapter (`orchestrator.kube.client`).
No request is retried here but urllib3's own retries of a connection that failed before any byte
was answered (see `CONNECTION_RETRIES`).
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlencode

import urllib3

from orchestrator.kube.endpoint import Endpoint

# Several threads (watch loops, workers) share one adapter: room for them in the pool.
POOL_SIZE = 32

# urllib3's default (Retry(3)) also retries a 429 (or 503) carrying Retry-After by itself,
# sleeping what the server asked up to three times inside one call: invisible to our retry loop,
# its budget and its logs (found by the fault suite's API Priority and Fairness row, whose 429s
# never reached us). Its retries of failed connections stay; every answer comes to the adapter,
# whose `retrying` and watch loops honour Retry-After and say so.
CONNECTION_RETRIES = urllib3.Retry(total=3, respect_retry_after_header=False)

USER_AGENT = "progressive-sync"


class Transport:
    """Requests to one API server. Thread-safe: urllib3's pool is."""

    def __init__(self, endpoint: Endpoint, *, pool_size: int = POOL_SIZE) -> None:
        self.endpoint = endpoint
        options: dict[str, Any] = {
            "cert_reqs": ssl.CERT_REQUIRED if endpoint.verify else ssl.CERT_NONE,
            "retries": CONNECTION_RETRIES,
        }
        if endpoint.ca_file:
            options["ca_certs"] = endpoint.ca_file
        if endpoint.cert_file:
            options["cert_file"] = endpoint.cert_file
            options["key_file"] = endpoint.key_file
        if endpoint.server_name:
            options["server_hostname"] = endpoint.server_name
        if not endpoint.verify:
            options["assert_hostname"] = False
        self._pool = urllib3.PoolManager(num_pools=4, maxsize=pool_size, **options)

    @property
    def host(self) -> str:
        """The API server's URL."""
        return self.endpoint.host

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, Any]] = (),
        headers: Mapping[str, str] | None = None,
        body: Any = None,
        timeout: tuple[float, float],
        stream: bool = False,
    ) -> urllib3.BaseHTTPResponse:
        """Send one request; the answer of any status. `stream`: the body is left unread.

        Raises urllib3's HTTPError (or OSError) when no answer came.
        """
        url = self.endpoint.host.rstrip("/") + path
        if query:
            url += "?" + urlencode([(key, _query_value(value)) for key, value in query])
        sent = {"User-Agent": USER_AGENT, **(headers or {})}
        authorization = self.endpoint.authorization()
        if authorization:
            sent["Authorization"] = authorization
        return self._pool.request(
            method,
            url,
            body=None if body is None else json.dumps(body),
            headers=sent,
            timeout=urllib3.Timeout(connect=timeout[0], read=timeout[1]),
            preload_content=not stream,
            redirect=False,
        )

    def close(self) -> None:
        """Close every pooled connection."""
        self._pool.clear()


def _query_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
