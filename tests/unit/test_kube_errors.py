"""The adapter maps API answers to the error types callers decide on."""

from __future__ import annotations

import json

import pytest

from orchestrator.kube import client as kube
from orchestrator.kube.cluster_secrets import ClusterSecret, cluster_secret_from_object


def status_body(reason: str = "", message: str = "boom") -> bytes:
    """An error answer's body as the API server writes it: a Status object."""
    return json.dumps({"kind": "Status", "reason": reason, "message": message}).encode()


@pytest.mark.parametrize(
    ("status", "reason", "expected"),
    [
        pytest.param(404, "NotFound", kube.NotFound, id="404-not-found"),
        pytest.param(409, "Conflict", kube.Conflict, id="409-stale-resource-version-is-conflict"),
        pytest.param(409, "AlreadyExists", kube.AlreadyExists, id="409-on-create-is-already-exists"),
        pytest.param(410, "Expired", kube.Gone, id="410-gone"),
        pytest.param(403, "Forbidden", kube.Forbidden, id="403-forbidden"),
        pytest.param(422, "Invalid", kube.Invalid, id="422-invalid"),
        pytest.param(400, "BadRequest", kube.Invalid, id="400-bad-request-is-permanent"),
        pytest.param(429, "TooManyRequests", kube.Retryable, id="429-is-temporary"),
        pytest.param(500, "InternalError", kube.Retryable, id="500-is-temporary"),
        pytest.param(503, "ServiceUnavailable", kube.Retryable, id="503-is-temporary"),
        pytest.param(401, "Unauthorized", kube.KubeError, id="401-is-a-plain-error"),
    ],
)
def test_status_codes_map_to_error_types(status: int, reason: str, expected: type[kube.KubeError]) -> None:
    error = kube.error_from_answer(status, status_body(reason, "the message"), {}, "GET /x")
    assert type(error) is expected
    assert error.status == status
    assert "GET /x: the message" in str(error)


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"<html>bad gateway</html>", id="a-proxys-page"),
        pytest.param(b"", id="no-body"),
        pytest.param(b"[1, 2]", id="json-that-is-not-a-status"),
    ],
)
def test_an_answer_that_is_not_a_status_keeps_its_http_status(body: bytes) -> None:
    error = kube.error_from_answer(502, body, {}, "GET /x")
    assert type(error) is kube.Retryable
    assert str(error) == "GET /x: HTTP 502"


def test_retrying_gives_up_after_the_configured_attempts(monkeypatch: pytest.MonkeyPatch) -> None:
    sleeps: list[float] = []
    monkeypatch.setattr(kube.time, "sleep", sleeps.append)
    adapter = kube.Kube.__new__(kube.Kube)
    adapter.settings = kube.KubeSettings(retry_backoffs=(0.1, 0.2))
    calls = []

    def always_fails() -> None:
        calls.append(1)
        raise kube.Retryable("down")

    with pytest.raises(kube.Retryable):
        adapter.retrying("probe", always_fails)
    assert len(calls) == 3
    assert sleeps == [0.1, 0.2]


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        pytest.param("3", 3.0, id="whole-seconds"),
        pytest.param("600", kube.MAX_RETRY_AFTER_SECONDS, id="capped"),
        pytest.param("Wed, 21 Oct 2015 07:28:00 GMT", None, id="http-date-ignored"),
        pytest.param(None, None, id="absent"),
    ],
)
def test_a_429_carries_the_servers_retry_after(header: str | None, expected: float | None) -> None:
    body = status_body("TooManyRequests", "too many requests, please try again later")
    headers = {"Retry-After": header} if header is not None else {}
    error = kube.error_from_answer(429, body, headers, "GET /x")
    assert isinstance(error, kube.Retryable)
    assert error.retry_after == expected


def test_retrying_waits_at_least_what_the_server_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    sleeps: list[float] = []
    monkeypatch.setattr(kube.time, "sleep", sleeps.append)
    adapter = kube.Kube.__new__(kube.Kube)
    adapter.settings = kube.KubeSettings(retry_backoffs=(0.1, 5.0))
    answers = iter([kube.Retryable("429", status=429, retry_after=2.0)] * 2)

    def throttled_twice() -> str:
        error = next(answers, None)
        if error is not None:
            raise error
        return "done"

    assert adapter.retrying("probe", throttled_twice) == "done"
    assert sleeps == [2.0, 5.0], "Retry-After when longer than the backoff, the backoff otherwise"


def test_retrying_does_not_retry_permanent_errors() -> None:
    adapter = kube.Kube.__new__(kube.Kube)
    adapter.settings = kube.KubeSettings(retry_backoffs=(0.0, 0.0))
    calls = []

    def forbidden() -> None:
        calls.append(1)
        raise kube.Forbidden("no")

    with pytest.raises(kube.Forbidden):
        adapter.retrying("probe", forbidden)
    assert calls == [1]


def test_cluster_secret_reads_name_and_server_never_config() -> None:
    secret = {
        "metadata": {"name": "cluster-eu-1", "labels": {"region": "eu"}},
        "data": {
            "name": "ZXUtMQ==",  # eu-1
            "server": "aHR0cHM6Ly9ldS0xLmV4YW1wbGU=",  # https://eu-1.example
            "config": "bm90LWJhc2U2NCEh",  # would decode to garbage; must never be touched
        },
    }
    assert cluster_secret_from_object(secret) == ClusterSecret(
        secret_name="cluster-eu-1", name="eu-1", server="https://eu-1.example", labels={"region": "eu"}
    )
    assert not hasattr(cluster_secret_from_object(secret), "config")
