"""`progressive-sync plan` and `render` with `spec.windows`: plan lists the windows and says, at the
time given (`--at`), whether a rollout may write syncs and when the windows open; render carries
them in the rollout contract and says so; without windows both read exactly as before. Real CLI
(click's runner), the example fleet; no API server.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from orchestrator.cli.main import main
from orchestrator.planning.contract import parse_contract

FLEET = Path("examples/fleets/checkout.yaml")
PS = Path("examples/canary-regions-rest.yaml")
WINDOWS = [
    {"kind": "allow", "schedule": "0 9 * * MON-FRI", "duration": "8h", "timeZone": "Europe/Paris"},
    {"kind": "deny", "schedule": "0 12 * * *", "duration": "1h", "timeZone": "Europe/Paris"},
]


def _with_windows(tmp_path: Path, windows: Any = WINDOWS) -> Path:
    documents = [d for d in yaml.safe_load_all(PS.read_text()) if d]
    documents[0]["spec"]["windows"] = windows
    path = tmp_path / "ps.yaml"
    path.write_text(yaml.safe_dump_all(documents))
    return path


def _plan(path: Path, *args: str) -> Any:
    return CliRunner().invoke(main, ["plan", "-f", str(path), "--fleet", str(FLEET), *args])


@pytest.mark.parametrize(
    ("at", "says"),
    [
        # A Wednesday in January: Paris is UTC+1.
        pytest.param(
            "2030-01-02T09:00:00Z", "open at 2030-01-02T09:00:00Z: a rollout may write syncs now", id="open"
        ),
        pytest.param(
            "2030-01-02T11:30:00Z",
            "closed at 2030-01-02T11:30:00Z: a rollout writes no sync until 2030-01-02T12:00:00Z",
            id="inside-the-deny",
        ),
        pytest.param(
            "2030-01-04T17:00:00Z",  # Friday 18:00 in Paris: closed for the weekend
            "closed at 2030-01-04T17:00:00Z: a rollout writes no sync until 2030-01-07T08:00:00Z",
            id="weekend",
        ),
    ],
)
def test_plan_says_whether_the_windows_are_open(tmp_path: Path, at: str, says: str) -> None:
    result = _plan(_with_windows(tmp_path), "--at", at)
    assert result.exit_code == 0, result.output
    assert 'allow "0 9 * * MON-FRI" for 8h (Europe/Paris)' in result.output
    assert 'deny "0 12 * * *" for 1h (Europe/Paris)' in result.output
    assert says in result.output


def test_plan_json_carries_the_windows(tmp_path: Path) -> None:
    result = _plan(_with_windows(tmp_path), "--at", "2030-01-02T11:30:00Z", "-o", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["windows"] == {
        "windows": WINDOWS,
        "evaluatedAt": "2030-01-02T11:30:00Z",
        "open": False,
        "opensAt": "2030-01-02T12:00:00Z",
    }


def test_without_windows_plan_says_nothing_of_them(tmp_path: Path) -> None:
    table = _plan(PS)
    assert table.exit_code == 0 and "window" not in table.output
    assert "windows" not in json.loads(_plan(PS, "-o", "json").output)


def _contract(rendered: str) -> Any:
    workflow = yaml.safe_load(rendered)
    arguments = workflow["spec"]["arguments"]["parameters"]
    return parse_contract(next(p["value"] for p in arguments if p["name"] == "contract"))


def test_render_carries_the_windows_in_the_contract(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["render", "-f", str(_with_windows(tmp_path)), "--fleet", str(FLEET)])
    assert result.exit_code == 0, result.output
    contract = _contract(result.stdout)
    assert contract.windows is not None
    assert [w.model_dump(by_alias=True, exclude_none=True) for w in contract.windows] == WINDOWS
    assert '# window: deny "0 12 * * *" for 1h (Europe/Paris): no sync is written' in result.stderr


def test_render_without_windows_has_none_in_the_contract() -> None:
    result = CliRunner().invoke(main, ["render", "-f", str(PS), "--fleet", str(FLEET)])
    assert result.exit_code == 0, result.output
    assert '"windows"' not in result.stdout
    assert _contract(result.stdout).windows is None
