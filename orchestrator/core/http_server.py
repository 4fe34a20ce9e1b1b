"""The threading HTTP server our in-process endpoints serve from (the watcher's probes and metrics,
the development stack's metrics endpoint and chart repository).

A client that hangs up before its answer is written (a scraper at its timeout, a probe cancelled)
is not an error and is not reported. Any other error in a request is one log line. The standard
server prints a traceback from the serving thread instead, and on CPython 3.11 formatting a
traceback parses source with `ast` (the `^^^` under the failing expression), which is not safe
while another thread of the process parses too: a test beside such a thread failed with
"SystemError: AST constructor recursion depth mismatch".
"""

from __future__ import annotations

import logging
import sys
from http.server import ThreadingHTTPServer
from typing import Any

log = logging.getLogger(__name__)

CLIENT_GONE = (BrokenPipeError, ConnectionResetError)


class QuietThreadingHTTPServer(ThreadingHTTPServer):
    """`ThreadingHTTPServer` whose serving threads are daemons and report errors as one log line."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Nothing for a client that hung up; one log line, no traceback, for anything else."""
        exc = sys.exc_info()[1]
        if isinstance(exc, CLIENT_GONE):
            return
        log.warning("HTTP request from %s failed: %r", client_address, exc)
