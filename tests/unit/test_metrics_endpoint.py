"""The metrics endpoint the analysis tier and `dev-cluster up --argo-rollouts` serve: counters that
give back the error rate that was set, what a scrape reads, and the control API over HTTP.

Real: the endpoint's HTTP server on loopback (stdlib), read with urllib. The clock is passed in.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.devenv.metrics_endpoint import (
    ClusterSeries,
    MetricsControl,
    MetricsEndpoint,
    MetricsEndpointError,
    accrue,
    error_rate_query,
    exposition,
)
from orchestrator.devenv.prometheus import config


class Clock:
    """Seconds that move only when the test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@given(
    rate=st.floats(min_value=0.0, max_value=1.0),
    elapsed=st.floats(min_value=0.001, max_value=3600.0),
)
def test_the_counters_grow_in_the_proportion_of_the_error_rate(rate: float, elapsed: float) -> None:
    before = ClusterSeries(error_rate=rate, ok=10.0, errors=5.0, since=100.0)

    after = accrue(before, 100.0 + elapsed)

    served_ok, served_errors = after.ok - before.ok, after.errors - before.errors
    assert served_errors / (served_ok + served_errors) == pytest.approx(rate, abs=1e-9)
    assert after.since == 100.0 + elapsed


def test_a_clock_going_back_serves_nothing() -> None:
    before = ClusterSeries(error_rate=0.5, ok=10.0, errors=5.0, since=100.0)

    assert accrue(before, 90.0) == ClusterSeries(error_rate=0.5, ok=10.0, errors=5.0, since=90.0)


def test_a_scrape_reads_every_cluster_with_its_counters_and_latency() -> None:
    clock = Clock()
    endpoint = MetricsEndpoint(["eu-1"], clock=clock)
    endpoint.set_cluster("us-1", error_rate=0.25, latency_seconds=0.4)
    clock.now += 2.0  # 200 requests each

    text = endpoint.metrics_text()

    assert 'http_requests_total{cluster="eu-1",code="200"} 200.000' in text
    assert 'http_requests_total{cluster="eu-1",code="500"} 0.000' in text
    assert 'http_requests_total{cluster="us-1",code="200"} 150.000' in text
    assert 'http_requests_total{cluster="us-1",code="500"} 50.000' in text
    assert 'http_request_latency_seconds{cluster="us-1"} 0.4' in text
    assert "# TYPE http_requests_total counter" in text


def test_a_change_counts_the_time_before_it_at_the_old_rate() -> None:
    clock = Clock()
    endpoint = MetricsEndpoint(["eu-1"], clock=clock)
    clock.now += 1.0
    endpoint.set_error_rate("eu-1", 1.0)
    clock.now += 1.0

    assert 'code="200"} 100.000' in endpoint.metrics_text()
    assert 'code="500"} 100.000' in endpoint.metrics_text()


@pytest.mark.parametrize(
    ("cluster", "error_rate", "latency", "message"),
    [
        pytest.param("eu-1", 1.5, None, "between 0 and 1", id="rate-above-one"),
        pytest.param("eu-1", -0.1, None, "between 0 and 1", id="negative-rate"),
        pytest.param("eu-1", None, -1.0, "0 seconds or more", id="negative-latency"),
        pytest.param('eu"1', 0.1, None, "not a cluster name", id="quote-in-name"),
        pytest.param("", 0.1, None, "not a cluster name", id="empty-name"),
    ],
)
def test_bad_settings_are_refused(
    cluster: str, error_rate: float | None, latency: float | None, message: str
) -> None:
    with pytest.raises(MetricsEndpointError, match=message):
        MetricsEndpoint().set_cluster(cluster, error_rate=error_rate, latency_seconds=latency)


def test_the_error_rate_query_reads_the_share_of_5xx_over_its_window() -> None:
    assert error_rate_query("{{args.cluster}}", window="4s") == (
        'sum(rate(http_requests_total{cluster="{{args.cluster}}",code=~"5.."}[4s]))'
        ' / sum(rate(http_requests_total{cluster="{{args.cluster}}"}[4s]))'
    )


def test_prometheus_scrapes_and_evaluates_every_second() -> None:
    assert config(["127.0.0.1:9"]) == {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "1s"},
        "scrape_configs": [
            {"job_name": "progressive-sync-metrics", "static_configs": [{"targets": ["127.0.0.1:9"]}]}
        ],
    }


def test_the_control_api_sets_a_cluster_that_the_web_endpoint_and_the_scrape_then_show() -> None:
    with MetricsEndpoint(["eu-1"]) as endpoint:
        control = MetricsControl(endpoint.url)

        answered = control.set_error_rate("us-1", 0.5)
        control.set_latency("us-1", 2.0)

        assert answered == {"cluster": "us-1", "errorRate": 0.5, "latencySeconds": 0.05, "healthy": False}
        assert control.clusters() == {
            "eu-1": {"errorRate": 0.0, "latencySeconds": 0.05},
            "us-1": {"errorRate": 0.5, "latencySeconds": 2.0},
        }
        with urllib.request.urlopen(endpoint.cluster_url("eu-1"), timeout=5) as response:
            assert json.loads(response.read())["healthy"] is True
        with urllib.request.urlopen(f"{endpoint.url}/metrics", timeout=5) as response:
            assert b'http_request_latency_seconds{cluster="us-1"} 2' in response.read()


@pytest.mark.parametrize(
    ("method", "path", "body", "status"),
    [
        pytest.param("GET", "/clusters/nowhere", None, 404, id="unknown-cluster"),
        pytest.param("PUT", "/clusters/eu-1", b'{"errorRate": 2}', 400, id="rate-out-of-range"),
        pytest.param("PUT", "/clusters/eu-1", b"[1]", 400, id="body-not-an-object"),
        pytest.param("PUT", "/clusters/eu-1", b"{not json", 400, id="body-not-json"),
        pytest.param("PUT", "/metrics", b"{}", 404, id="put-elsewhere"),
    ],
)
def test_the_endpoint_refuses_what_it_cannot_do(
    method: str, path: str, body: bytes | None, status: int
) -> None:
    with MetricsEndpoint(["eu-1"]) as endpoint:
        request = urllib.request.Request(f"{endpoint.url}{path}", data=body, method=method)
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=5)
        assert refused.value.code == status
        assert "error" in json.loads(refused.value.read())


def test_a_scrape_text_ends_with_a_newline_and_sorts_clusters() -> None:
    text = exposition({"b": ClusterSeries(), "a": ClusterSeries()})

    assert text.endswith("\n")
    assert text.index('cluster="a"') < text.index('cluster="b"')
