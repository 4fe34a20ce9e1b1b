"""The per-cluster ledger of a stage: every cluster's state in a few bytes per cluster (issue 15).

A stage of 10,000 clusters listed by name in `targets`, `completed` and `failed` made the
ProgressiveSync status ~480 kB, and every status write sent all of it to every watcher. The status
now carries counts and short lists for people (`models.StageStatus`), and this ledger for the steps:
the stage's cluster names once, in rollout order, packed (`pack_names`), and one state character
per cluster. It is what a step run again reads to know a cluster's outcome (exactly-once
recording), what `batch` reads to know its clusters, and what `progressive-sync status`
shows per cluster.

How names are packed (`codec`): "xz85", the names as a JSON list, LZMA2-compressed (raw, 1 MiB
dictionary) and base85-encoded with an alphabet that JSON and the API server's encoder write as is
(`<`, `>` and `&`, which Go's encoder writes as 6-byte escapes, are replaced). Measured on 10,000
names with a random 16-character suffix: 153 kB, where the first codec (no `codec` field: a JSON
list, zlib level 9, base64; still read) took 202 kB; 5.4 kB against 35 kB on names like
`cell-00001-region-01b`. A ledger that would still not fit is left out of the status by
`models.ProgressiveSyncStatus` (`clustersOmitted`); what the steps cannot do without, which clusters
the stage took, is then kept as a taken-set (`pack_taken`, issue 29 point 8: a later stage must
never take one of them again): an 8-byte BLAKE2b digest of each name, sorted, in the same base85
alphabet, 10 characters per cluster whatever the name's length (100 kB at 10,000 clusters).

Pure: encode and decode only. Caller: `orchestrator.api.models.StageStatus` (its wire form).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import lzma
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

CODEC = "xz85"
_LZMA_FILTERS = [{"id": lzma.FILTER_LZMA2, "preset": 6, "dict_size": 1 << 20}]
# base64.b85encode's alphabet with the three characters Go's JSON encoder escapes swapped for three
# it does not (none of them is in the alphabet, nor is `"` or `\`).
_TO_WIRE = bytes.maketrans(b"<>&", b".:,")
_FROM_WIRE = bytes.maketrans(b".:,", b"<>&")


@functools.lru_cache(maxsize=16)
def pack_names(names: tuple[str, ...]) -> str:
    """The names in the "xz85" codec (cached: a stage's names stay the same across its writes)."""
    text = json.dumps(list(names), separators=(",", ":"))
    packed = lzma.compress(text.encode(), format=lzma.FORMAT_RAW, filters=_LZMA_FILTERS)
    return base64.b85encode(packed).translate(_TO_WIRE).decode("ascii")


def unpack_names(text: str, codec: str) -> list[str]:
    """The names packed by `pack_names` ("xz85") or by the first codec ("": zlib JSON base64)."""
    if codec == CODEC:
        raw = lzma.decompress(
            base64.b85decode(text.encode("ascii").translate(_FROM_WIRE)),
            format=lzma.FORMAT_RAW,
            filters=_LZMA_FILTERS,
        )
    elif codec:
        raise ValueError(f"unknown codec {codec!r} (this version reads {CODEC!r})")
    else:
        raw = zlib.decompress(base64.b64decode(text, validate=True))
    names = json.loads(raw) if raw else []
    if not isinstance(names, list):
        raise ValueError("names is not a list")
    return names


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
        """The wire form: `{codec: "xz85", names: <packed>, states: "cs.f", targets: N}`."""
        return {
            "codec": CODEC,
            "names": pack_names(self.names),
            "states": "".join(state.value for state in self.states),
            "targets": self.targets,
        }

    @classmethod
    def decode(cls, wire: dict[str, object]) -> Ledger:
        """The ledger from its wire form; LedgerError when it does not hold together."""
        try:
            names = _names_of(str(wire.get("names") or ""), str(wire.get("codec") or ""))
            states = tuple(map(_STATE_OF.__getitem__, str(wire.get("states") or "")))
            targets = int(wire.get("targets", len(names)))  # type: ignore[call-overload]
        except LedgerError:
            raise
        except KeyError as exc:
            raise LedgerError(f"status.stages[].clusters cannot be read: {exc} is not a state") from exc
        except (ValueError, zlib.error, lzma.LZMAError, TypeError) as exc:
            raise LedgerError(f"status.stages[].clusters cannot be read: {exc}") from exc
        if len(states) != len(names) or not 0 <= targets <= len(names):
            raise LedgerError(
                f"status.stages[].clusters: {len(names)} names, {len(states)} states, {targets} targets "
                "do not match"
            )
        return cls(names, states, targets)


_STATE_OF = {state.value: state for state in ClusterState}


@functools.lru_cache(maxsize=16)
def _names_of(text: str, codec: str) -> tuple[str, ...]:
    """`unpack_names`, checked and cached: every read of the ProgressiveSync (a step reads it before
    each cluster it starts and while it waits) decodes every stage's ledger, and a stage's names stay
    the same across its writes (only its states change), so each is unpacked once per process."""
    names = unpack_names(text, codec)
    if not all(isinstance(name, str) for name in names):
        raise LedgerError("status.stages[].clusters.names is not a list of cluster names")
    return tuple(names)


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


# --- the taken-set: what is kept of a ledger left out of the status ---------------------------

TAKEN_CODEC = "b2b64-85"
_DIGEST_BYTES = 8


def name_digest(name: str) -> bytes:
    """The digest a taken-set keeps of a cluster name (BLAKE2b, 8 bytes: two names of a
    10,000-cluster fleet share one with a chance of about 1 in 10^11)."""
    return hashlib.blake2b(name.encode(), digest_size=_DIGEST_BYTES).digest()


@functools.lru_cache(maxsize=16)
def pack_taken(names: tuple[str, ...]) -> str:
    """The taken-set of `names` in the "b2b64-85" codec: their digests, sorted, base85 (cached)."""
    digests = b"".join(sorted({name_digest(name) for name in names}))
    return base64.b85encode(digests).translate(_TO_WIRE).decode("ascii")


@functools.lru_cache(maxsize=16)
def unpack_taken(text: str, codec: str) -> frozenset[bytes]:
    """The digests `pack_taken` packed; LedgerError when the text does not hold together."""
    if codec != TAKEN_CODEC:
        raise LedgerError(
            f"status.stages[].clustersTaken: unknown codec {codec!r} (this version reads {TAKEN_CODEC!r})"
        )
    try:
        raw = base64.b85decode(text.encode("ascii").translate(_FROM_WIRE))
    except ValueError as exc:
        raise LedgerError(f"status.stages[].clustersTaken cannot be read: {exc}") from exc
    if len(raw) % _DIGEST_BYTES:
        raise LedgerError(f"status.stages[].clustersTaken: {len(raw)} bytes is not a whole number of digests")
    return frozenset(raw[i : i + _DIGEST_BYTES] for i in range(0, len(raw), _DIGEST_BYTES))
