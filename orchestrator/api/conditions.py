"""The condition types of a ProgressiveSync's `status.conditions`, in one place.

Each is a metav1.Condition type; its reasons, with their meaning and fix, are in
`orchestrator.api.reasons` (which names the condition each reason goes with), and
docs/troubleshooting.md is generated from both.

Callers: the watcher's decision (`orchestrator.watcher.decide` and its rule modules), the status
functions (`orchestrator.api.rollout_status`), the CLI's status view; tests.
"""

from __future__ import annotations

from enum import StrEnum


class ConditionType(StrEnum):
    """A condition type, with what its True means (`meaning`) for the docs."""

    meaning: str

    def __new__(cls, value: str, meaning: str) -> ConditionType:
        """A member from its (value, meaning) tuple."""
        member = str.__new__(cls, value)
        member._value_ = value
        member.meaning = meaning
        return member

    READY = (
        "Ready",
        "True when the last rollout succeeded or every cluster is up to date; False while a rollout "
        "runs or after one failed or was cancelled.",
    )
    PROGRESSING = (
        "Progressing",
        "True while a rollout runs (or waits to start); False once it ended or nothing is due.",
    )
    PAUSED = (
        "Paused",
        "True while no new step starts: `spec.paused` is true, or someone suspended the Workflow.",
    )
    VALID = (
        "Valid",
        "False when no rollout may start: the spec, its ApplicationSet, the plan or the Workflow it "
        "would get is refused; the reason says which.",
    )
    FLEET_COMPARED = (
        "FleetCompared",
        "False while the watcher waits for Argo CD to compare every Application against a new "
        "release before it sizes the Workflow; True once it did (or the wait ended).",
    )
