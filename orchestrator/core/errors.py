"""Temporary or permanent: what an error says about trying again, as a type, not a guess.

A step (or anything else) that cannot do its job raises one of these, or lets an adapter error
through that its adapter maps to one (`orchestrator.kube.client.temporary_or_permanent`, the one
place that says which API errors a retry may cure). The steps' entrypoint maps the two types to exit
codes in one place (`steps.cli`): a `TemporaryError` exits 75, the only code the Workflow's
retryStrategy retries; a `PermanentError` exits 2 (bad usage or configuration, an RBAC refusal, an
object the API server rejects), and its message lands in the stage's status.

Callers: `orchestrator.kube.client`, the steps (`steps.common.UsageProblem`, `steps.batch`),
`steps.cli`; tests.
"""

from __future__ import annotations


class TemporaryError(Exception):
    """Trying again later may work (the API server unreachable, a race lost too often, a pause that
    outlived the step's hold). `delay`: the seconds to wait first, when known (a `Retry-After`)."""

    def __init__(self, reason: str, *, delay: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.delay = delay


class PermanentError(Exception):
    """Trying again cannot help until a person changes something (an option, a permission, an object)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
