"""kube-apiserver's Go runtime settings in the dev stack: added to the environment, never overriding it."""

from __future__ import annotations

import pytest

from orchestrator.devenv.controlplane import APISERVER_GO_ENVIRONMENT, apiserver_environment


@pytest.mark.parametrize(
    ("base", "memory_limit", "expected"),
    [
        pytest.param(
            {"PATH": "/usr/bin"},
            None,
            {"PATH": "/usr/bin", "GOGC": "400", "GOMEMLIMIT": "1200MiB"},
            id="the-gc-settings-are-added-to-what-is-there",
        ),
        pytest.param(
            {"GOGC": "100"},
            None,
            {"GOGC": "100", "GOMEMLIMIT": "1200MiB"},
            id="a-gogc-of-the-caller-wins",
        ),
        pytest.param(
            {"GOGC": "off", "GOMEMLIMIT": "4GiB"},
            None,
            {"GOGC": "off", "GOMEMLIMIT": "4GiB"},
            id="both-set-by-the-caller-are-kept",
        ),
        pytest.param(
            {"PATH": "/usr/bin"},
            "3000MiB",
            {"PATH": "/usr/bin", "GOGC": "400", "GOMEMLIMIT": "3000MiB"},
            id="the-limit-replaces-the-default-one",
        ),
        pytest.param(
            {"GOMEMLIMIT": "4GiB"},
            "3000MiB",
            {"GOGC": "400", "GOMEMLIMIT": "4GiB"},
            id="a-gomemlimit-of-the-caller-still-wins",
        ),
    ],
)
def test_the_apiserver_environment(
    base: dict[str, str], memory_limit: str | None, expected: dict[str, str]
) -> None:
    assert apiserver_environment(base, memory_limit=memory_limit) == expected


def test_the_base_is_not_changed() -> None:
    base = {"PATH": "/usr/bin"}
    apiserver_environment(base)
    assert base == {"PATH": "/usr/bin"}


def test_without_a_base_this_process_environment_is_the_base(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROGRESSIVE_SYNC_PROBE", "1")
    monkeypatch.delenv("GOGC", raising=False)
    environment = apiserver_environment()
    assert environment["PROGRESSIVE_SYNC_PROBE"] == "1"
    assert environment["GOGC"] == APISERVER_GO_ENVIRONMENT["GOGC"]
