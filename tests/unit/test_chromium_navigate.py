"""The UI tests' browser (tests/support/chromium.py) opens a page again when Chromium aborted the
load because the machine's network changed under it (the real node adds pod veths: CI saw
`net::ERR_NETWORK_CHANGED`), a bounded number of times; any other error fails at once."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest

from tests.support import chromium
from tests.support.chromium import NAVIGATE_ATTEMPTS, BrowserError, Chromium


class ScriptedPage:
    """Answers Page.navigate with the queued errors (then success) and every evaluation with True."""

    def __init__(self, errors: list[str]) -> None:
        self.errors = list(errors)
        self.navigations = 0

    def call(self, method: str, params: dict[str, Any] | None = None, timeout: float = 0.0) -> dict[str, Any]:
        if method == "Page.navigate":
            self.navigations += 1
            return {"errorText": self.errors.pop(0)} if self.errors else {"frameId": "1"}
        return {"result": {"value": True}}


def browser(page: ScriptedPage) -> Chromium:
    return Chromium(
        process=cast(Any, None), profile=Path("/nonexistent"), page=cast(Any, page), width=1, height=1
    )


@pytest.fixture
def pauses(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    taken: list[float] = []
    monkeypatch.setattr(chromium.time, "sleep", taken.append)
    return taken


@pytest.mark.parametrize(
    ("errors", "navigations"),
    [
        pytest.param([], 1, id="loads-at-once"),
        pytest.param(["net::ERR_NETWORK_CHANGED"], 2, id="network-changed-once-then-loads"),
        pytest.param(
            ["net::ERR_NETWORK_CHANGED"] * (NAVIGATE_ATTEMPTS - 1), NAVIGATE_ATTEMPTS, id="last-try-loads"
        ),
    ],
)
def test_a_load_aborted_by_a_network_change_is_tried_again(
    errors: list[str], navigations: int, pauses: list[float]
) -> None:
    page = ScriptedPage(errors)
    browser(page).navigate("http://127.0.0.1:1/x")
    assert page.navigations == navigations
    assert pauses == [0.5 * 2**i for i in range(navigations - 1)]  # a growing pause between tries


@pytest.mark.parametrize(
    ("errors", "navigations"),
    [
        pytest.param(["net::ERR_CONNECTION_REFUSED"], 1, id="another-error-fails-at-once"),
        pytest.param(["net::ERR_NETWORK_CHANGED"] * NAVIGATE_ATTEMPTS, NAVIGATE_ATTEMPTS, id="bounded"),
    ],
)
def test_other_errors_and_too_many_changes_fail_naming_the_error(
    errors: list[str], navigations: int, pauses: list[float]
) -> None:
    page = ScriptedPage(errors)
    with pytest.raises(BrowserError, match=errors[-1]):
        browser(page).navigate("http://127.0.0.1:1/x")
    assert page.navigations == navigations
