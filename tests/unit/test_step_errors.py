"""Temporary or permanent as a type (orchestrator/core/errors.py): the adapter maps API errors to one
of the two in one place (`temporary_or_permanent`), the steps' entrypoint maps the two to exit codes
in one place (`steps.cli.EXIT_CODES`). Pure: errors are built, nothing is called."""

from __future__ import annotations

import pytest

from orchestrator.core.errors import PermanentError, TemporaryError
from orchestrator.kube.client import (
    AlreadyExists,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    KubeError,
    NotFound,
    Retryable,
    temporary_or_permanent,
)
from orchestrator.kube.status_writer import ConflictsExhausted
from steps.batch import PausedTooLong
from steps.cli import EXIT_TEMPORARY, EXIT_USAGE, exit_code, step_error
from steps.common import Superseded, UsageProblem


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        pytest.param(Forbidden("rbac", status=403), PermanentError, id="403-rbac-is-permanent"),
        pytest.param(Invalid("schema", status=422), PermanentError, id="422-invalid-is-permanent"),
        pytest.param(NotFound("crd or object", status=404), PermanentError, id="404-is-permanent"),
        pytest.param(Retryable("5xx", status=503), TemporaryError, id="503-is-temporary"),
        pytest.param(Retryable("timeout"), TemporaryError, id="timeout-is-temporary"),
        pytest.param(Conflict("stale", status=409), TemporaryError, id="409-conflict-is-temporary"),
        pytest.param(ConflictsExhausted("lost every race"), TemporaryError, id="conflicts-exhausted"),
        pytest.param(AlreadyExists("exists", status=409), TemporaryError, id="409-already-exists"),
        pytest.param(Gone("compacted", status=410), TemporaryError, id="410-gone-is-temporary"),
        pytest.param(KubeError("401", status=401), TemporaryError, id="unexpected-status-is-temporary"),
    ],
)
def test_the_adapter_says_which_api_errors_a_retry_may_cure(error: KubeError, kind: type) -> None:
    mapped = temporary_or_permanent(error)
    assert isinstance(mapped, kind)
    assert str(mapped) == str(error) == mapped.reason


def test_a_temporary_api_error_keeps_the_servers_wait() -> None:
    mapped = temporary_or_permanent(Retryable("429", status=429, retry_after=7.0))
    assert isinstance(mapped, TemporaryError) and mapped.delay == 7.0


@pytest.mark.parametrize(
    ("error", "code"),
    [
        pytest.param(UsageProblem("--stage: no such stage"), EXIT_USAGE, id="usage-problem-exits-2"),
        pytest.param(PermanentError("a person must act"), EXIT_USAGE, id="permanent-exits-2"),
        pytest.param(Forbidden("rbac", status=403), EXIT_USAGE, id="rbac-exits-2"),
        pytest.param(TemporaryError("inventory not published yet"), EXIT_TEMPORARY, id="temporary-exits-75"),
        pytest.param(PausedTooLong("paused for a week"), EXIT_TEMPORARY, id="paused-too-long-exits-75"),
        pytest.param(Retryable("timeout"), EXIT_TEMPORARY, id="api-timeout-exits-75"),
    ],
)
def test_the_exit_code_follows_from_the_type_alone(error: Exception, code: int) -> None:
    kind = step_error(error)
    assert kind is not None
    assert exit_code(kind) == code


@pytest.mark.parametrize(
    "error",
    [
        pytest.param(ValueError("a bug"), id="a-bug-is-neither"),
        pytest.param(Superseded("another rollout"), id="superseded-is-a-verdict-not-an-error"),
    ],
)
def test_other_exceptions_are_neither(error: Exception) -> None:
    assert step_error(error) is None
