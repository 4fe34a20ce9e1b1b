"""The per-cluster ledger of a stage: every cluster's state in a few bytes per cluster (issue 15).

A stage of 10,000 clusters listed by name in `targets`, `completed` and `failed` made the
ProgressiveSync status ~480 kB, and every status write sent all of it to every watcher. The status
now carries counts and short lists for people (`models.StageStatus`), and this ledger for the steps:
the stage's cluster names once, in rollout order, zlib-compressed and base64-encoded, and one state
character per cluster. It is what a step run again reads to know a cluster's outcome (exactly-once
recording), what `batch` reads to know its clusters, and what `progressive-sync status --clusters`
shows per cluster.

Pure: encode and decode only. Caller: `orchestrator.api.models.StageStatus` (its wire form).
"""

from __future__ import annotations

import base64
import json
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum


class LedgerError(ValueError):
    """A ledger that cannot be decoded (edited by hand, cut short)."""


class ClusterState(StrEnum):
    """One character per cluster in `clusters.states`."""

    PENDING = "."  # taken by the stage, not started (or not started yet)
    SYNCING = "s"  # sync requested, not done or failed yet
    COMPLETED = "c"  # Synced and Healthy at the release
    FAILED = "f"  # failed (the reason is kept for the first few: `StageStatus.failed`)


@dataclass(frozen=True)
class Ledger:
    """The stage's clusters in rollout order with their states; the first `targets` are its targets
    (any after them were recorded without being targets: a step run by hand for another cluster)."""

    names: tuple[str, ...]
    states: tuple[ClusterState, ...]
    targets: int

    def encode(self) -> dict[str, object]:
        """The wire form: `{names: <base64 zlib JSON list>, states: "cs.f", targets: N}`."""
        packed = zlib.compress(json.dumps(list(self.names), separators=(",", ":")).encode(), 9)
        return {
            "names": base64.b64encode(packed).decode("ascii"),
            "states": "".join(state.value for state in self.states),
            "targets": self.targets,
        }

    @classmethod
    def decode(cls, wire: dict[str, object]) -> Ledger:
        """The ledger from its wire form; LedgerError when it does not hold together."""
        try:
            raw = zlib.decompress(base64.b64decode(str(wire.get("names") or ""), validate=True))
            names = json.loads(raw) if raw else []
            states = tuple(ClusterState(char) for char in str(wire.get("states") or ""))
            targets = int(wire.get("targets", len(names)))  # type: ignore[call-overload]
        except (ValueError, zlib.error, TypeError) as exc:
            raise LedgerError(f"status.stages[].clusters cannot be read: {exc}") from exc
        if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
            raise LedgerError("status.stages[].clusters.names is not a list of cluster names")
        if len(states) != len(names) or not 0 <= targets <= len(names):
            raise LedgerError(
                f"status.stages[].clusters: {len(names)} names, {len(states)} states, {targets} targets "
                "do not match"
            )
        return cls(tuple(names), states, targets)


def build_ledger(
    targets: Sequence[str], *, syncing: Sequence[str], completed: Sequence[str], failed: Sequence[str]
) -> Ledger:
    """The ledger of a stage from its lists (a cluster in several: failed, then completed, then syncing)."""
    state: dict[str, ClusterState] = dict.fromkeys(targets, ClusterState.PENDING)
    target_count = len(state)
    for names, value in (
        (syncing, ClusterState.SYNCING),
        (completed, ClusterState.COMPLETED),
        (failed, ClusterState.FAILED),
    ):
        for name in names:
            state[name] = value
    return Ledger(tuple(state), tuple(state.values()), target_count)
