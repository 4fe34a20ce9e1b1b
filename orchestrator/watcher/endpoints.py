"""The watcher's HTTP endpoints: `/metrics` (Prometheus), `/healthz` (liveness), `/readyz` (readiness).

- `/healthz` is 200 while the process works: no watch loop gave up and, with leader election, the
  Lease loop is alive. A failing liveness probe restarts the pod.
- `/readyz` is 200 when the process does its part: the leader once its caches are filled, a
  standby replica while it stands by (it is ready to take over; being ready is not being leader).
- `/metrics` is `WatcherMetrics.exposition()`.

The answers come from `probe()` callables, so this module knows nothing of the watcher; the server
is the standard library's threading HTTP server on its own daemon thread, stopped by `close()`.
Callers: `orchestrator.watcher.process`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler

from orchestrator.core.http_server import QuietThreadingHTTPServer

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Probe:
    """An answer: healthy/ready or not, and one line saying why."""

    ok: bool
    reason: str


class Endpoints:
    """A small HTTP server; `port` 0 picks a free one (see `.port` after start)."""

    def __init__(
        self,
        address: str,
        port: int,
        *,
        metrics: Callable[[], bytes],
        healthz: Callable[[], Probe],
        readyz: Callable[[], Probe],
    ) -> None:
        routes: dict[str, Callable[[], tuple[int, str, bytes]]] = {
            "/metrics": lambda: (200, "text/plain; version=0.0.4; charset=utf-8", metrics()),
            "/healthz": lambda: _probe(healthz()),
            "/readyz": lambda: _probe(readyz()),
        }

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                route = routes.get(self.path.split("?", 1)[0])
                if route is None:
                    status, content_type, body = 404, "text/plain", b"not found\n"
                else:
                    try:
                        status, content_type, body = route()
                    except Exception as exc:  # a broken probe must not kill the server
                        log.exception("%s failed", self.path)
                        status, content_type, body = 500, "text/plain", f"{exc}\n".encode()
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                log.debug("http: " + format, *args)

        self._server = QuietThreadingHTTPServer((address, port), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="endpoints", daemon=True)

    @property
    def port(self) -> int:
        """The port it listens on."""
        return int(self._server.server_address[1])

    def start(self) -> Endpoints:
        """Serve on a daemon thread."""
        self._thread.start()
        log.info("serving /metrics, /healthz and /readyz on port %d", self.port)
        return self

    def close(self) -> None:
        """Stop serving and free the port."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def _probe(answer: Probe) -> tuple[int, str, bytes]:
    status = HTTPStatus.OK if answer.ok else HTTPStatus.SERVICE_UNAVAILABLE
    return int(status), "text/plain", f"{'ok' if answer.ok else 'not ok'}: {answer.reason}\n".encode()
