"""Every cluster of a rollout stage as plain fields: the ProgressiveSyncStage API (issue 30).

The ProgressiveSync status is the summary people read first (phase, conditions, per-stage counts,
the clusters that matter now). Each cluster's own truth (state, reason, note, revisions, times)
lives in **ProgressiveSyncStage** objects (short name `psstage`), one per *part* of a stage of a
rollout, readable with `kubectl get psstage -l progressivesync.io/name=<name> -o yaml`:

- `metadata.name` is `<progressivesync>-<rollout id>-<stage index>-<part>` (`record_name`),
  labelled with the ProgressiveSync's name, the rollout id and the stage index (`record_labels`),
  owned by the ProgressiveSync (garbage collected with it, and with nothing else);
- `spec` is written once, by `select`, when it creates the object: which ProgressiveSync, rollout
  and stage it belongs to, which part of how many, `targets`, the part's clusters in rollout
  order, and `targetApps`, the Applications `select` planned for each of them (`planned_apps`;
  absent in records written before it existed): a cluster step reads those by name, one GET
  each, not every Application of the namespace (`steps.common.FleetLookup`). A stage of more
  than `RECORD_MAX_CLUSTERS` clusters spans several parts (`split_parts`), so no object comes
  near the API server's 1.5 MiB bound whatever the fleet (a part of 500 clusters with names like a
  real fleet's, every field set, and its managedFields is ~266 kB; with 253-character names, under
  1 MiB; `targetApps` adds at most `RECORD_TARGET_APPS_MAX_CHARS` characters of names);
- `status.clusters` maps a cluster's name to its `ClusterRecord`. The steps merge-patch it one or
  many clusters at a time: a JSON merge patch of a map key changes that key only, so the steps of
  a stage never conflict with one another and never write the ProgressiveSync for a cluster.
  The patch that records a cluster Failed also labels the object `progressivesync.io/failed:
  "true"` (`FAILED_LABEL`), so a step that checks a stage's failures before it starts a cluster
  lists only the labelled records (`record_selector(..., failed=True)`: usually none).

A record states an end result, never a delta, and `merge_record` keeps the order of states the
ledger before it kept: Failed wins over Completed, an end state never goes back to Syncing, so a
step run again, or a late write, never undoes an outcome. `summarize` turns a stage's records
into the summary the ProgressiveSync status shows (the same function for every writer, so the
same records always give the same summary).

Pure: models, names, the merge rule and the summary. Reads and writes are in
`orchestrator/kube/stage_records.py`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import Field, StrictInt, model_validator

from orchestrator.api.metadata import NAME_LABEL, ROLLOUT_ID_LABEL, bounded_name, label_value
from orchestrator.api.models import (
    OBJECT_NAME_MAX_LENGTH,
    STAGE_NAME_MAX_LENGTH,
    STATUS_LIST_CAP,
    ClusterFailure,
    ClusterNote,
    MicroTimestamp,
    ObjectMeta,
    SkippedCluster,
    StageCounts,
    _Model,
)

RECORD_KIND = "ProgressiveSyncStage"
RECORD_PLURAL = "progressivesyncstages"
RECORD_SINGULAR = "progressivesyncstage"
RECORD_SHORT_NAME = "psstage"
STAGE_INDEX_LABEL = "progressivesync.io/stage-index"
# Set ("true") on a record by the write that records one of its clusters Failed, and never removed
# (Failed wins: `merge_record`): a stage's failures are found by listing only the records with it.
FAILED_LABEL = "progressivesync.io/failed"

# Set on a stage's (only) record by the cluster step that closed the stage and selected the next one
# itself (the stage boundary, steps/chain.py): the cluster's name. Written only with the object's
# resourceVersion, so of two last clusters finishing at once only one closes the stage.
CLOSED_BY_ANNOTATION = "progressivesync.io/closed-by"

# The most clusters one ProgressiveSyncStage holds (see the module docstring for the bytes).
RECORD_MAX_CLUSTERS = 500
# A reason or a note is cut to this many characters in a record (and in the status's lists).
RECORD_TEXT_MAX_CHARS = 512
# `targetApps`: at most this many Application names for one cluster, and this many characters of
# cluster and Application names in one part. A cluster past either bound is left out of the map
# (`planned_apps`): its step lists the namespace, as for a record written before the field. 500
# clusters of 4 Applications with 63-character names fit; the bound keeps a part's object under
# the API server's 1.5 MiB whatever the names (the module docstring: under 1 MiB without it).
RECORD_MAX_APPS_PER_CLUSTER = 64
RECORD_TARGET_APPS_MAX_CHARS = 200_000
_HASH_LENGTH = 8


class ClusterState(StrEnum):
    """Where one cluster of a stage stands. A target without a record has not started."""

    SYNCING = "Syncing"
    """Its sync was requested (or adopted); not done or failed yet."""
    COMPLETED = "Completed"
    """Synced and Healthy at the release."""
    FAILED = "Failed"
    """Failed: `reason` says why."""
    SKIPPED = "Skipped"
    """Left out, never synced by this rollout (progressivesync.io/skip or spec.skip): `reason` says why."""


# Which state wins when two writes disagree: an outcome never goes back, Failed wins over Completed,
# and both over Skipped (a skip is decided before any write: an outcome after it is news).
_RANK = {ClusterState.SYNCING: 0, ClusterState.SKIPPED: 1, ClusterState.COMPLETED: 2, ClusterState.FAILED: 3}
END_STATES = frozenset({ClusterState.COMPLETED, ClusterState.FAILED, ClusterState.SKIPPED})


def cut_text(text: str) -> str:
    """`text` cut to `RECORD_TEXT_MAX_CHARS` characters (an ellipsis says it was cut)."""
    return text if len(text) <= RECORD_TEXT_MAX_CHARS else text[: RECORD_TEXT_MAX_CHARS - 1] + "\u2026"


def _no_default(schema: dict[str, Any]) -> None:
    schema.pop("default", None)


class RollbackState(StrEnum):
    """Where one cluster's rollback stands (`ClusterRecord.rollback`)."""

    ROLLING_BACK = "RollingBack"
    """Its rollback syncs were requested; not Healthy at the restored revisions yet."""
    ROLLED_BACK = "RolledBack"
    """Every Application this rollout synced is back at the revision it ran before, and Healthy."""
    FAILED = "Failed"
    """Not restored: `reason` says which Application and why."""
    LEFT_ALONE = "LeftAlone"
    """Nothing of ours to undo, or someone else synced it after us: untouched, `reason` says which."""


ROLLBACK_END_STATES = frozenset({RollbackState.ROLLED_BACK, RollbackState.FAILED, RollbackState.LEFT_ALONE})


class ClusterRollback(_Model):
    """One cluster's rollback: its state, why, what was restored, and when."""

    state: RollbackState
    """RollingBack, RolledBack, Failed or LeftAlone."""
    reason: Annotated[str, Field(max_length=RECORD_TEXT_MAX_CHARS, json_schema_extra=_no_default)] = ""
    """What was left alone or not restored, and why, for people."""
    revisions: list[str] | None = None
    """The revisions its Applications were restored to (one per source, each once)."""
    started_at: MicroTimestamp | None = None
    """When its rollback syncs were requested."""
    finished_at: MicroTimestamp | None = None
    """When it ended (RolledBack, Failed or LeftAlone)."""


def merge_rollback(current: ClusterRollback | None, proposed: ClusterRollback) -> ClusterRollback | None:
    """What to write for a cluster's rollback recorded as `current` when a step says `proposed`
    (None: nothing changes): an end state is never replaced (a rollback step run again, or a late
    write, never undoes an outcome); a start time, once recorded, stays."""
    if current is not None and current.state in ROLLBACK_END_STATES:
        return None
    if current is not None:
        proposed = proposed.model_copy(
            update={
                "started_at": current.started_at or proposed.started_at,
                "revisions": proposed.revisions or current.revisions,
            }
        )
    return None if proposed == current else proposed


class ClusterRecord(_Model):
    """One cluster of a stage: its state, why, and when."""

    state: ClusterState
    """Syncing, Completed or Failed."""
    # No defaults in the CRD: the API server would store "" in every record the steps leave empty.
    reason: Annotated[str, Field(max_length=RECORD_TEXT_MAX_CHARS, json_schema_extra=_no_default)] = ""
    """Why it failed (Failed only), for people."""
    note: Annotated[str, Field(max_length=RECORD_TEXT_MAX_CHARS, json_schema_extra=_no_default)] = ""
    """What holds it (a sync window, Suspended, Missing, Unknown, a retry), or what a done one left."""
    revisions: list[str] | None = None
    """The revisions its Applications were synced to (one per source, each once)."""
    started_at: MicroTimestamp | None = None
    """When its sync was requested (or adopted)."""
    finished_at: MicroTimestamp | None = None
    """When it completed or failed, to the microsecond (the stage lists failures first to fail first)."""
    # A failure and the stop of a sibling it caused often fall in one second.
    rollback: ClusterRollback | None = None
    """Its rollback, once the rollout rolled it back (`spec.rollback`); absent otherwise."""


class StageRecordSpec(_Model):
    """Which stage of which rollout the object records, and which clusters it holds (written once)."""

    progressive_sync: Annotated[str, Field(min_length=1, max_length=OBJECT_NAME_MAX_LENGTH)]
    """The ProgressiveSync's name (same namespace)."""
    rollout_id: Annotated[str, Field(min_length=1, max_length=32)]
    """The rollout (`status.rollout.id` of the ProgressiveSync)."""
    stage: Annotated[str, Field(min_length=1, max_length=STAGE_NAME_MAX_LENGTH)]
    """The stage's name."""
    stage_index: Annotated[StrictInt, Field(ge=0)]
    """The stage's position in `spec.stages` (0 for the first)."""
    part: Annotated[StrictInt, Field(ge=0)] = 0
    """Which part of the stage this object holds (0 for the first)."""
    parts: Annotated[StrictInt, Field(ge=1)] = 1
    """How many objects hold the stage's clusters."""
    targets: Annotated[
        list[Annotated[str, Field(max_length=OBJECT_NAME_MAX_LENGTH)]], Field(max_length=RECORD_MAX_CLUSTERS)
    ] = Field(default_factory=list)
    """This part's clusters, in rollout order."""
    target_apps: (
        Annotated[
            dict[
                str,  # a cluster name: its length is checked below (a CRD has no bound on map keys)
                Annotated[
                    list[Annotated[str, Field(min_length=1, max_length=OBJECT_NAME_MAX_LENGTH)]],
                    Field(min_length=1, max_length=RECORD_MAX_APPS_PER_CLUSTER),
                ],
            ],
            Field(max_length=RECORD_MAX_CLUSTERS),
        ]
        | None
    ) = None
    """Cluster name -> the Applications `select` planned for it, sorted (its step acts on these)."""
    # One the ApplicationSet generates for the cluster after the stage was selected is left to the
    # next rollout. A cluster absent here (records written before this field, a cluster past the
    # bounds: `planned_apps`) is looked up by listing the namespace (`steps.common.FleetLookup`).

    @model_validator(mode="after")
    def _bounded_apps(self) -> StageRecordSpec:
        if self.target_apps is None:
            return self
        if any(len(name) > OBJECT_NAME_MAX_LENGTH for name in self.target_apps):
            raise ValueError(f"targetApps: a cluster name is longer than {OBJECT_NAME_MAX_LENGTH} characters")
        if _names_chars(self.target_apps) > RECORD_TARGET_APPS_MAX_CHARS:
            raise ValueError(f"targetApps holds more than {RECORD_TARGET_APPS_MAX_CHARS} characters of names")
        return self


def _names_chars(apps: Mapping[str, Sequence[str]]) -> int:
    """Characters of cluster and Application names in a `targetApps` map."""
    return sum(len(cluster) + sum(len(name) for name in names) for cluster, names in apps.items())


def planned_apps(targets: Sequence[str], apps: Mapping[str, Sequence[str]]) -> dict[str, list[str]] | None:
    """The `targetApps` of a part holding `targets`: each target's planned Applications from
    `apps` (cluster -> names), sorted and each once, in rollout order until the part's character
    bound; a target without any, or with more than `RECORD_MAX_APPS_PER_CLUSTER`, or past the
    bound is left out (its step lists the namespace). None when no target is left."""
    planned: dict[str, list[str]] = {}
    chars = 0
    for target in targets:
        names = sorted(set(apps.get(target, ())))
        if not names or len(names) > RECORD_MAX_APPS_PER_CLUSTER:
            continue
        size = _names_chars({target: names})
        if chars + size > RECORD_TARGET_APPS_MAX_CHARS:
            break
        planned[target] = names
        chars += size
    return planned or None


class StageRecordStatus(_Model):
    """Each cluster's record, by cluster name (a target without one has not started)."""

    clusters: dict[str, ClusterRecord] = Field(default_factory=dict)
    """Cluster name -> its record."""


class ProgressiveSyncStage(_Model):
    """One part of one stage of one rollout, as `kubectl get psstage -o yaml` shows it."""

    api_version: Literal["progressivesync.io/v1alpha1"] = "progressivesync.io/v1alpha1"
    kind: Literal["ProgressiveSyncStage"] = "ProgressiveSyncStage"
    metadata: ObjectMeta
    spec: StageRecordSpec
    status: StageRecordStatus | None = None

    @property
    def clusters(self) -> Mapping[str, ClusterRecord]:
        """Each cluster's record ({} before any was written)."""
        return self.status.clusters if self.status else {}


# --- names -----------------------------------------------------------------------------------


def record_name(progressive_sync: str, rollout_id: str, stage_index: int, part: int) -> str:
    """`<progressivesync>-<rollout id>-<stage index>-<part>`; a name longer than an object name may
    be keeps its end and replaces the rest of the ProgressiveSync's name by a hash of it."""
    tail = f"-{rollout_id}-{stage_index}-{part}"
    return bounded_name(progressive_sync, tail, OBJECT_NAME_MAX_LENGTH, hash_length=_HASH_LENGTH)


def record_labels(progressive_sync: str, rollout_id: str, stage_index: int) -> dict[str, str]:
    """The labels every part of a stage carries (select them with `record_selector`)."""
    return {
        NAME_LABEL: label_value(progressive_sync),  # cut, with a hash, past 63 characters
        ROLLOUT_ID_LABEL: rollout_id,
        STAGE_INDEX_LABEL: str(stage_index),
    }


def record_selector(
    progressive_sync: str, rollout_id: str, stage_index: int | None = None, *, failed: bool = False
) -> str:
    """A label selector for a rollout's records (one stage's when `stage_index` is given; with
    `failed`, only those that hold a Failed cluster: `FAILED_LABEL`)."""
    labels = record_labels(progressive_sync, rollout_id, 0)
    if stage_index is None:
        del labels[STAGE_INDEX_LABEL]
    else:
        labels[STAGE_INDEX_LABEL] = str(stage_index)
    if failed:
        labels[FAILED_LABEL] = "true"
    return ",".join(f"{key}={value}" for key, value in labels.items())


def split_parts(targets: Sequence[str]) -> list[tuple[str, ...]]:
    """A stage's targets, in rollout order, cut into parts of at most `RECORD_MAX_CLUSTERS` (none
    for a stage without targets)."""
    return [tuple(targets[i : i + RECORD_MAX_CLUSTERS]) for i in range(0, len(targets), RECORD_MAX_CLUSTERS)]


def part_of(position: int) -> int:
    """The part holding the target at `position` (0-based, rollout order) of its stage."""
    return position // RECORD_MAX_CLUSTERS


def new_records(
    progressive_sync: str,
    rollout_id: str,
    stage: str,
    *,
    stage_index: int,
    targets: Sequence[str],
    namespace: str,
    apps: Mapping[str, Sequence[str]] | None = None,
) -> list[ProgressiveSyncStage]:
    """The objects `select` creates for a stage's targets, each part with its targets' planned
    Applications from `apps` (cluster -> names: `planned_apps`; none given, no `targetApps`).
    Owner references are added by the caller, which knows the ProgressiveSync's uid."""
    parts = split_parts(targets)
    return [
        ProgressiveSyncStage(
            metadata=ObjectMeta(
                name=record_name(progressive_sync, rollout_id, stage_index, index),
                namespace=namespace,
                labels=record_labels(progressive_sync, rollout_id, stage_index),
            ),
            spec=StageRecordSpec(
                progressive_sync=progressive_sync,
                rollout_id=rollout_id,
                stage=stage,
                stage_index=stage_index,
                part=index,
                parts=len(parts),
                targets=list(part),
                target_apps=planned_apps(part, apps) if apps else None,
            ),
        )
        for index, part in enumerate(parts)
    ]


# --- the merge rule --------------------------------------------------------------------------


def merge_record(current: ClusterRecord | None, proposed: ClusterRecord) -> ClusterRecord | None:
    """What to write for a cluster whose record is `current` when a step says `proposed`; None when
    nothing changes.

    Ordered rules: an end state never goes back to Syncing and Failed is never replaced by Completed
    (the state with the higher rank stays, with its reason and finish time); an empty note or
    revision list in `proposed` keeps the one recorded; a start time, once recorded, stays.
    """
    if current is None:
        return proposed
    if _RANK[proposed.state] < _RANK[current.state]:
        winner = current.model_copy(update={"note": proposed.note or current.note})
    elif _RANK[proposed.state] == _RANK[current.state] and current.state in END_STATES:
        winner = current.model_copy(
            update={
                "note": proposed.note or current.note,
                "revisions": current.revisions or proposed.revisions,
            }
        )
    else:
        winner = proposed.model_copy(
            update={
                "note": proposed.note or current.note,
                "revisions": proposed.revisions or current.revisions,
                "started_at": current.started_at or proposed.started_at,
            }
        )
    return None if winner == current else winner


def end_record(current: ClusterRecord | None, proposed: ClusterRecord) -> ClusterRecord | None:
    """`merge_record` for a step's end result (Completed or Failed): when it moves the cluster on,
    its note replaces the one recorded (a done cluster's remark, or none: what held the cluster
    while it waited is over, and a failure's reason says it all)."""
    merged = merge_record(current, proposed)
    if merged is None:
        return None
    if current is None or _RANK[proposed.state] > _RANK[current.state]:
        merged = merged.model_copy(update={"note": proposed.note})
    return None if merged == current else merged


def noted(current: ClusterRecord | None, note: str) -> ClusterRecord | None:
    """The record with what holds the cluster while a step waits (`note`; "" removes it); None when
    nothing changes. A cluster with an outcome keeps its own (the outcome says it); one without a
    record is recorded Syncing with the note (a step waits on it: it is in flight)."""
    note = cut_text(note)
    if current is None:
        return ClusterRecord(state=ClusterState.SYNCING, note=note) if note else None
    if current.state in END_STATES or current.note == note:
        return None
    return current.model_copy(update={"note": note})


def clusters_patch(records: Mapping[str, ClusterRecord]) -> dict[str, Any]:
    """The JSON merge patch of a ProgressiveSyncStage's status that writes these clusters' records
    whole (a field a record leaves empty is sent as null, which a merge patch removes). When one of
    them is Failed, the same patch sets `FAILED_LABEL` on the object: the label is never behind
    the failure it points to."""
    clusters: dict[str, Any] = {}
    for name, record in records.items():
        wire: dict[str, Any] = dict.fromkeys(_OPTIONAL_FIELDS)
        wire.update({key: value for key, value in record.to_api().items() if value != ""})
        clusters[name] = wire
    patch: dict[str, Any] = {"status": {"clusters": clusters}}
    if any(record.state == ClusterState.FAILED for record in records.values()):
        patch["metadata"] = {"labels": {FAILED_LABEL: "true"}}
    return patch


_OPTIONAL_FIELDS = ("reason", "note", "revisions", "startedAt", "finishedAt")


# --- a stage's records, read together --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StageOutcomes:
    """A stage's clusters as its records tell them: its targets in rollout order and each record."""

    stage: str
    targets: tuple[str, ...]
    clusters: Mapping[str, ClusterRecord]
    records: tuple[str, ...] = ()  # the objects' names, in part order
    # Target -> the Applications `select` planned for it (`targetApps`; {} for records without it).
    apps: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def in_state(self, state: ClusterState) -> tuple[str, ...]:
        """The clusters in `state`, targets first in rollout order, then any recorded without being one."""
        return tuple(name for name in self.ordered() if self.clusters[name].state == state)

    @property
    def completed(self) -> tuple[str, ...]:
        """Clusters Synced and Healthy at the release."""
        return self.in_state(ClusterState.COMPLETED)

    @property
    def syncing(self) -> tuple[str, ...]:
        """Clusters in flight."""
        return self.in_state(ClusterState.SYNCING)

    @property
    def failed(self) -> tuple[str, ...]:
        """Clusters that failed, the first to fail first."""
        failed = self.in_state(ClusterState.FAILED)
        order = {name: index for index, name in enumerate(failed)}
        return tuple(
            sorted(failed, key=lambda name: (_time_key(self.clusters[name].finished_at), order[name]))
        )

    @property
    def skipped(self) -> tuple[str, ...]:
        """Targets the `sync` step found skipped, in rollout order."""
        return self.in_state(ClusterState.SKIPPED)

    @property
    def not_started(self) -> tuple[str, ...]:
        """Targets without a record."""
        return tuple(name for name in self.targets if name not in self.clusters)

    def counts(self) -> StageCounts:
        """How many clusters the stage took, and where they stand."""
        states = [record.state for record in self.clusters.values()]
        return StageCounts(
            targets=len(self.targets),
            syncing=states.count(ClusterState.SYNCING),
            completed=states.count(ClusterState.COMPLETED),
            failed=states.count(ClusterState.FAILED),
            skipped=states.count(ClusterState.SKIPPED) or None,
        )

    def ordered(self) -> list[str]:
        """Every recorded cluster: targets in rollout order, then any recorded without being one."""
        known = set(self.targets)
        return [name for name in self.targets if name in self.clusters] + sorted(
            name for name in self.clusters if name not in known
        )


def merged_with(outcomes: StageOutcomes, fresher: Mapping[str, ClusterRecord]) -> StageOutcomes:
    """`outcomes` with records read or written since merged in by `merge_record` (an outcome never
    goes back, Failed wins), e.g. a batch's first read with its own writes and the stage's failures
    read again."""
    clusters = dict(outcomes.clusters)
    for name, record in fresher.items():
        clusters[name] = merge_record(clusters.get(name), record) or clusters[name]
    return StageOutcomes(outcomes.stage, outcomes.targets, clusters, outcomes.records, outcomes.apps)


def _time_key(value: datetime | None) -> str:
    return value.isoformat() if value else "~"  # unknown times sort last


def outcomes_of(stage: str, records: Iterable[ProgressiveSyncStage]) -> StageOutcomes:
    """One stage's records (its parts, in any order) read together."""
    parts = sorted(records, key=lambda record: record.spec.part)
    targets: list[str] = []
    clusters: dict[str, ClusterRecord] = {}
    apps: dict[str, tuple[str, ...]] = {}
    for record in parts:
        targets.extend(record.spec.targets)
        clusters.update(record.clusters)
        apps.update((name, tuple(names)) for name, names in (record.spec.target_apps or {}).items())
    return StageOutcomes(
        stage=stage,
        targets=tuple(dict.fromkeys(targets)),
        clusters=clusters,
        records=tuple(record.metadata.name for record in parts),
        apps=apps,
    )


# --- the summary the ProgressiveSync status shows --------------------------------------------


@dataclass(frozen=True, slots=True)
class StageSummary:
    """What the ProgressiveSync status shows of a stage's clusters: counts and the first few of each list."""

    counts: StageCounts
    syncing: tuple[str, ...]
    failed: tuple[ClusterFailure, ...]
    notes: tuple[ClusterNote, ...]
    more_syncing: int
    more_failed: int
    more_notes: int
    records: tuple[str, ...]
    skipped: tuple[SkippedCluster, ...] = ()
    more_skipped: int = 0


def summarize(outcomes: StageOutcomes, cap: int = STATUS_LIST_CAP) -> StageSummary:
    """The summary of a stage's records: counts, the first `cap` clusters in flight (rollout order),
    failed (the first to fail first, with reasons) and noted, and how many each list left out."""
    syncing = outcomes.syncing
    failed = outcomes.failed
    skipped = outcomes.skipped
    noted = [name for name in outcomes.ordered() if outcomes.clusters[name].note]
    reasons = {name: outcomes.clusters[name].reason for name in failed[:cap]}
    return StageSummary(
        counts=outcomes.counts(),
        syncing=syncing[:cap],
        failed=tuple(ClusterFailure(name=name, reason=reason) for name, reason in reasons.items()),
        notes=tuple(ClusterNote(name=name, note=outcomes.clusters[name].note) for name in noted[:cap]),
        more_syncing=max(0, len(syncing) - cap),
        more_failed=max(0, len(failed) - cap),
        more_notes=max(0, len(noted) - cap),
        records=outcomes.records,
        skipped=tuple(
            SkippedCluster(name=name, reason=outcomes.clusters[name].reason) for name in skipped[:cap]
        ),
        more_skipped=max(0, len(skipped) - cap),
    )


def summary_line(summary: StageSummary) -> str:
    """A stage's summary in one line: `2/4, syncing a, b, failed c (Degraded) and 3 more`
    (`-` before the stage took a cluster). `progressive-sync status --watch` prints it per stage,
    and a step that reports a stage's progress says it the same way."""
    counts = summary.counts
    if not counts.targets:
        return "-"
    text = f"{counts.completed + counts.failed + (counts.skipped or 0)}/{counts.targets}"
    if summary.syncing:
        more = f" and {summary.more_syncing} more" if summary.more_syncing else ""
        text += f", syncing {', '.join(summary.syncing)}{more}"
    if summary.failed:
        more = f" and {summary.more_failed} more" if summary.more_failed else ""
        text += ", failed " + ", ".join(
            f"{f.name} ({f.reason})" if f.reason else f.name for f in summary.failed
        )
        text += more
    if counts.skipped:
        text += f", {counts.skipped} skipped"
    return text
