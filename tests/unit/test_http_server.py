"""orchestrator.core.http_server: a client that hangs up is no error; another error is one log line,
never a traceback printed from the serving thread (CPython 3.11's traceback carets parse with `ast`,
which raced a test's own `ast.parse` in CI)."""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler

import pytest

from orchestrator.core.http_server import QuietThreadingHTTPServer


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path == "/gone":
            raise BrokenPipeError(32, "Broken pipe")
        raise ValueError("a broken handler")

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[QuietThreadingHTTPServer]:
    served = QuietThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=served.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield served
    served.shutdown()
    served.server_close()
    thread.join(timeout=5)


def _get(server: QuietThreadingHTTPServer, path: str) -> None:
    with socket.create_connection(server.server_address[:2], timeout=5) as conn:
        conn.sendall(f"GET {path} HTTP/1.0\r\n\r\n".encode())
        while conn.recv(4096):  # until the server closes the connection: the request is handled
            pass


@pytest.mark.parametrize(
    ("path", "logged"),
    [
        pytest.param("/gone", [], id="a-client-that-hung-up-is-not-reported"),
        pytest.param("/broken", ["HTTP request from"], id="another-error-is-one-log-line"),
    ],
)
def test_request_errors_print_no_traceback(
    server: QuietThreadingHTTPServer,
    path: str,
    logged: list[str],
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    with caplog.at_level(logging.WARNING, logger="orchestrator.core.http_server"):
        _get(server, path)
    assert [r.getMessage()[: len(p)] for r, p in zip(caplog.records, logged, strict=False)] == logged
    assert len(caplog.records) == len(logged)
    assert "Traceback" not in capfd.readouterr().err
