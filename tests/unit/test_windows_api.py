"""`spec.windows` (orchestrator/api/windows.py): what is accepted, and the error, naming
`spec.windows[i].<field>` and the fix, for what is not. The API server's twin of the form checks
runs on a real one in tests/integration/test_api_parity.py (tests/api/invalid/windows-*.yaml). Pure.
"""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.api.validation import describe_spec, validate_object
from orchestrator.api.windows import describe_windows, evaluated_windows
from tests.support.builders import make_ps, make_spec, make_stage


def _manifest(windows: Any) -> dict[str, Any]:
    manifest = make_ps()
    manifest["spec"]["windows"] = windows
    return manifest


def test_valid_windows_are_accepted_and_described() -> None:
    windows = [
        {"kind": "allow", "schedule": "0 9 * * MON-FRI", "duration": "8h", "timeZone": "Europe/Paris"},
        {"kind": "deny", "schedule": "@daily", "duration": "90s"},
    ]
    assert validate_object(_manifest(windows)) == []
    spec = make_spec(make_stage("all"), windows=windows)
    assert spec.model_dump(by_alias=True, exclude_none=True)["windows"] == windows
    assert [w.kind for w in evaluated_windows(spec.windows)] == ["allow", "deny"]
    assert describe_windows(spec.windows) == (
        'allow "0 9 * * MON-FRI" for 8h (Europe/Paris)',
        'deny "@daily" for 1m30s (UTC)',
    )
    assert describe_spec(spec) == tuple(f"window: {line}" for line in describe_windows(spec.windows))


def test_absent_windows_stay_absent() -> None:
    spec = make_spec(make_stage("all"))
    assert spec.windows is None
    assert "windows" not in spec.model_dump(by_alias=True, exclude_none=True)
    assert evaluated_windows(spec.windows) == ()


@pytest.mark.parametrize(
    ("window", "path", "says"),
    [
        pytest.param({"kind": "sometimes"}, "spec.windows[0].kind", "use allow or deny", id="kind"),
        pytest.param({"schedule": "0 22 * *"}, "spec.windows[0].schedule", "five fields", id="four-fields"),
        pytest.param({"schedule": "61 * * * *"}, "spec.windows[0].schedule", "out of range", id="minute-61"),
        pytest.param({"schedule": "0 9 * * FUNDAY"}, "spec.windows[0].schedule", "FUNDAY", id="day-name"),
        pytest.param({"duration": "1d"}, "spec.windows[0].duration", "Go duration", id="days"),
        pytest.param({"duration": "0s"}, "spec.windows[0].duration", "positive", id="zero"),
        pytest.param({"timeZone": "Mars/Olympus"}, "spec.windows[0].timeZone", "IANA", id="zone"),
        pytest.param({"schedule": None}, "spec.windows[0].schedule", "missing", id="schedule-null"),
        pytest.param({"every": "day"}, "spec.windows[0].every", "unknown field", id="unknown-field"),
    ],
)
def test_a_bad_window_names_its_field(window: dict[str, Any], path: str, says: str) -> None:
    full = {"kind": "deny", "schedule": "0 22 * * *", "duration": "8h", **window}
    errors = validate_object(_manifest([full]))
    assert [error.path for error in errors] == [path]
    assert says in str(errors[0])


def test_the_second_window_is_named_by_its_index() -> None:
    good = {"kind": "allow", "schedule": "0 9 * * *", "duration": "8h"}
    errors = validate_object(_manifest([good, {**good, "duration": "forever"}]))
    assert [error.path for error in errors] == ["spec.windows[1].duration"]
