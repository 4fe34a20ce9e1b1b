"""The services' metrics, per cluster, as a small HTTP server the test or the demo controls.

The analysis gates ask a real Prometheus how a release serves on each cluster; this endpoint plays
that service. Prometheus (`orchestrator.devenv.prometheus`) scrapes its `/metrics`:

    http_requests_total{cluster="c1",code="200"} 1234.0     counter
    http_requests_total{cluster="c1",code="500"} 5.0        counter
    http_request_latency_seconds{cluster="c1"} 0.05         gauge

Every cluster serves `REQUESTS_PER_SECOND`; the counters grow with the time that passed, split by
the error rate in effect meanwhile (`accrue`: pure, the clock is passed in), so Prometheus' `rate()`
over them gives back the error rate that was set (`error_rate_query`). A cluster is "bad" when a test
says so, at runtime: `MetricsEndpoint.set_error_rate(cluster, rate)` in the same process, or over
HTTP from another one (the demo, a shell), with `MetricsControl(url)` or plain curl:

    GET  /clusters              {"c1": {"errorRate": 0.0, "latencySeconds": 0.05}, ...}
    GET  /clusters/<name>       {"cluster": "c1", "errorRate": 0.0, "latencySeconds": 0.05,
                                 "healthy": true}   (404 for a cluster never set: the `web` provider
                                 target; `healthy` is errorRate < HEALTHY_BELOW)
    PUT  /clusters/<name>       body {"errorRate": 0.5} and/or {"latencySeconds": 2}: sets them (a
                                 new cluster starts good) and answers the new state

Plain HTTP on loopback (stdlib `http.server` in a daemon thread), no authentication: a dev and test
tool, never served beyond this machine.

Callers: `orchestrator.devenv.stack` (`dev-cluster up --argo-rollouts`), the analysis test tier
(tests/support/analysis.py).
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from typing import Any

from orchestrator.core.http_server import QuietThreadingHTTPServer

REQUESTS_PER_SECOND = 100.0
DEFAULT_LATENCY_SECONDS = 0.05
# What `GET /clusters/<name>` calls healthy (for a `web` metric's condition, or a person reading it).
HEALTHY_BELOW = 0.05
REQUESTS_METRIC = "http_requests_total"
LATENCY_METRIC = "http_request_latency_seconds"


class MetricsEndpointError(RuntimeError):
    """A control request was refused (bad value, unknown cluster); the message says why."""


@dataclass(frozen=True)
class ClusterSeries:
    """One cluster's counters and what it serves now; `since`: when the counters were last updated."""

    error_rate: float = 0.0
    latency_seconds: float = DEFAULT_LATENCY_SECONDS
    ok: float = 0.0
    errors: float = 0.0
    since: float = 0.0


def accrue(series: ClusterSeries, now: float) -> ClusterSeries:
    """The counters at `now`: the requests served since `series.since`, split by its error rate."""
    elapsed = max(0.0, now - series.since)
    served = elapsed * REQUESTS_PER_SECOND
    return replace(
        series,
        ok=series.ok + served * (1.0 - series.error_rate),
        errors=series.errors + served * series.error_rate,
        since=now,
    )


def check_error_rate(rate: float) -> float:
    """`rate` as a float in [0, 1], or MetricsEndpointError."""
    value = float(rate)
    if not 0.0 <= value <= 1.0:
        raise MetricsEndpointError(f"an error rate is a fraction between 0 and 1, not {rate!r}")
    return value


def check_latency(seconds: float) -> float:
    """`seconds` as a non-negative float, or MetricsEndpointError."""
    value = float(seconds)
    if value < 0.0:
        raise MetricsEndpointError(f"a latency is 0 seconds or more, not {seconds!r}")
    return value


def exposition(series: dict[str, ClusterSeries]) -> str:
    """The Prometheus text format of every cluster's series (sorted by cluster)."""
    lines = [
        f"# HELP {REQUESTS_METRIC} Requests served, by cluster and status code.",
        f"# TYPE {REQUESTS_METRIC} counter",
    ]
    for cluster in sorted(series):
        one = series[cluster]
        lines.append(f'{REQUESTS_METRIC}{{cluster="{cluster}",code="200"}} {one.ok:.3f}')
        lines.append(f'{REQUESTS_METRIC}{{cluster="{cluster}",code="500"}} {one.errors:.3f}')
    lines += [
        f"# HELP {LATENCY_METRIC} The latency each cluster serves with now.",
        f"# TYPE {LATENCY_METRIC} gauge",
    ]
    lines += [f'{LATENCY_METRIC}{{cluster="{c}"}} {series[c].latency_seconds:g}' for c in sorted(series)]
    return "\n".join(lines) + "\n"


def cluster_state(cluster: str, series: ClusterSeries) -> dict[str, Any]:
    """What `GET /clusters/<name>` answers."""
    return {
        "cluster": cluster,
        "errorRate": series.error_rate,
        "latencySeconds": series.latency_seconds,
        "healthy": series.error_rate < HEALTHY_BELOW,
    }


def error_rate_query(cluster: str, *, window: str = "3s") -> str:
    """PromQL for the share of 5xx responses of `cluster` over `window` (one sample, 0 to 1).

    `cluster` may be an AnalysisTemplate arg (`{{args.cluster}}`). The window needs two scrapes in
    it at least (the stack scrapes every second); the larger it is, the longer a cluster turned bad
    takes to show it: the query gives the new rate exactly once the whole window is after the change
    (the counters grow in proportion), ~`window` + 1 s later.
    """
    selector = f'cluster="{cluster}"'
    return (
        f'sum(rate({REQUESTS_METRIC}{{{selector},code=~"5.."}}[{window}]))'
        f" / sum(rate({REQUESTS_METRIC}{{{selector}}}[{window}]))"
    )


def latency_query(cluster: str) -> str:
    """PromQL for the latency `cluster` serves with (seconds)."""
    return f'{LATENCY_METRIC}{{cluster="{cluster}"}}'


class MetricsEndpoint:
    """The running endpoint; `start()`, then `stop()`. Thread-safe: the server's threads read what
    the test's thread sets."""

    def __init__(self, clusters: Iterable[str] = (), *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        now = clock()
        self._series = {cluster: ClusterSeries(since=now) for cluster in clusters}
        self._server: QuietThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- the Python API -------------------------------------------------------------------------

    def set_error_rate(self, cluster: str, rate: float) -> None:
        """From now on `cluster` answers `rate` (0 to 1) of its requests with a 500."""
        self.set_cluster(cluster, error_rate=rate)

    def set_latency(self, cluster: str, seconds: float) -> None:
        """From now on `cluster` serves with `seconds` of latency."""
        self.set_cluster(cluster, latency_seconds=seconds)

    def set_cluster(
        self, cluster: str, *, error_rate: float | None = None, latency_seconds: float | None = None
    ) -> dict[str, Any]:
        """Set what `cluster` serves (a new cluster starts good); its new state."""
        if not cluster or '"' in cluster or "/" in cluster:
            raise MetricsEndpointError(f"not a cluster name: {cluster!r}")
        rate = None if error_rate is None else check_error_rate(error_rate)
        latency = None if latency_seconds is None else check_latency(latency_seconds)
        with self._lock:
            now = self._clock()
            series = accrue(self._series.get(cluster, ClusterSeries(since=now)), now)
            if rate is not None:
                series = replace(series, error_rate=rate)
            if latency is not None:
                series = replace(series, latency_seconds=latency)
            self._series[cluster] = series
            return cluster_state(cluster, series)

    def clusters(self) -> dict[str, dict[str, float]]:
        """Every cluster's error rate and latency."""
        with self._lock:
            return {
                name: {"errorRate": one.error_rate, "latencySeconds": one.latency_seconds}
                for name, one in sorted(self._series.items())
            }

    def cluster(self, cluster: str) -> dict[str, Any] | None:
        """What `GET /clusters/<name>` answers (None: never set)."""
        with self._lock:
            one = self._series.get(cluster)
            return None if one is None else cluster_state(cluster, one)

    def metrics_text(self) -> str:
        """What a scrape reads now (the counters brought up to date first)."""
        with self._lock:
            now = self._clock()
            self._series = {name: accrue(one, now) for name, one in self._series.items()}
            return exposition(self._series)

    # -- the server -----------------------------------------------------------------------------

    def start(self, host: str = "127.0.0.1", port: int = 0) -> MetricsEndpoint:
        """Serve on `host`:`port` (0: a free port) from a daemon thread; returns self."""
        if self._server is not None:
            return self
        self._server = QuietThreadingHTTPServer((host, port), _handler_for(self))
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            name="metrics-endpoint",
            kwargs={"poll_interval": 0.2},
            daemon=True,
        )
        self._thread.start()
        return self

    @property
    def port(self) -> int:
        """The port it serves on."""
        if self._server is None:
            raise MetricsEndpointError("the metrics endpoint is not started")
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """Its base URL (`/metrics`, `/clusters` below it): the control URL other processes use."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def target(self) -> str:
        """`host:port`, as a Prometheus scrape config names it."""
        return f"127.0.0.1:{self.port}"

    def cluster_url(self, cluster: str) -> str:
        """The `web` provider's URL for `cluster`'s state."""
        return f"{self.url}/clusters/{cluster}"

    def stop(self) -> None:
        """Stop serving and close the socket."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
            self._thread = None

    def __enter__(self) -> MetricsEndpoint:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def _handler_for(endpoint: MetricsEndpoint) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/metrics":
                self._send(HTTPStatus.OK, endpoint.metrics_text(), "text/plain; version=0.0.4")
            elif self.path == "/clusters":
                self._json(HTTPStatus.OK, endpoint.clusters())
            elif self.path.startswith("/clusters/"):
                state = endpoint.cluster(self.path.removeprefix("/clusters/"))
                if state is None:
                    self._json(HTTPStatus.NOT_FOUND, {"error": "no such cluster: set it first"})
                else:
                    self._json(HTTPStatus.OK, state)
            else:
                self._json(HTTPStatus.NOT_FOUND, {"error": "GET /metrics, /clusters or /clusters/<name>"})

        def do_PUT(self) -> None:
            if not self.path.startswith("/clusters/"):
                self._json(HTTPStatus.NOT_FOUND, {"error": "PUT /clusters/<name>"})
                return
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                if not isinstance(body, dict):
                    raise MetricsEndpointError("the body is a JSON object")
                state = endpoint.set_cluster(
                    self.path.removeprefix("/clusters/"),
                    error_rate=body.get("errorRate"),
                    latency_seconds=body.get("latencySeconds"),
                )
            except (ValueError, TypeError, MetricsEndpointError) as exc:
                self._json(HTTPStatus.BAD_REQUEST, {"error": str(exc)})
                return
            self._json(HTTPStatus.OK, state)

        do_POST = do_PUT

        def _json(self, status: HTTPStatus, body: object) -> None:
            self._send(status, json.dumps(body, sort_keys=True) + "\n", "application/json")

        def _send(self, status: HTTPStatus, text: str, content_type: str) -> None:
            data = text.encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # one line per scrape every second: nothing anyone reads

    return Handler


@dataclass(frozen=True)
class MetricsControl:
    """The endpoint's control API from another process (the demo, a test driving a `dev-cluster`):
    `MetricsControl(os.environ["PROGRESSIVE_SYNC_METRICS_CONTROL_URL"]).set_error_rate("c1", 0.5)`."""

    url: str
    timeout: float = 5.0

    def set_error_rate(self, cluster: str, rate: float) -> dict[str, Any]:
        """Like `MetricsEndpoint.set_error_rate`; the cluster's new state."""
        return self._put(cluster, {"errorRate": check_error_rate(rate)})

    def set_latency(self, cluster: str, seconds: float) -> dict[str, Any]:
        """Like `MetricsEndpoint.set_latency`; the cluster's new state."""
        return self._put(cluster, {"latencySeconds": check_latency(seconds)})

    def clusters(self) -> dict[str, dict[str, float]]:
        """Every cluster's error rate and latency."""
        with urllib.request.urlopen(f"{self.url.rstrip('/')}/clusters", timeout=self.timeout) as response:
            result: dict[str, dict[str, float]] = json.loads(response.read())
            return result

    def _put(self, cluster: str, body: dict[str, float]) -> dict[str, Any]:
        request = urllib.request.Request(
            f"{self.url.rstrip('/')}/clusters/{cluster}",
            data=json.dumps(body).encode(),
            method="PUT",
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=self.timeout) as response:
            result: dict[str, Any] = json.loads(response.read())
            return result
