"""The planner's answer as data: stage states, warnings and errors, and the plan of a rollout.

`orchestrator.planning.planner.plan_rollout` returns a `RolloutPlan`: one `StagePlan` per stage in
spec order, one `ClusterPlan` per cluster of the ApplicationSet's fleet, the release's revisions,
and the `PlanIssue`s (warnings, errors) the rules found, each with a stable `IssueCode`. `to_dict`
is the stable `-o json` shape of `progressive-sync plan` (docs/design/planner.md). `Issues` collects the
issues while a plan is made; `names_in_message` is how every message lists names.

Pure values; callers: the planner, the watcher (release and sizes), the `select` step, `plan` and
`render`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any

# Importable from here too: a stage of one group is "<group>/<stage>" (orchestrator.api.groups).
from orchestrator.api.groups import GROUP_SEPARATOR, group_stage_name, split_stage_name  # noqa: F401
from orchestrator.api.release import Revisions, release_id, revision_key

# How many names a message lists before "and N more"; `PlanIssue.subjects` always has them all.
NAMES_IN_MESSAGE = 8


class StageState(StrEnum):
    """What the plan says about a stage."""

    PLANNED = "planned"  # it has targets to update
    SKIPPED = "skipped"  # it matches no cluster, or only clusters earlier stages took
    DONE = "done"  # nothing left to do: its clusters are up to date, or the rollout updated them


class IssueCode(StrEnum):
    """What a plan warning or error is about; stable, for scripts reading `-o json`."""

    APP_SET_MISMATCH = "AppSetMismatch"
    APP_SET_NOT_GIVEN = "AppSetNotGiven"
    APP_SET_NOT_FOUND = "AppSetNotFound"  # the live plan: the cluster has no such ApplicationSet
    NO_APPLICATIONS = "NoApplications"
    DUPLICATE_CLUSTER_NAME = "DuplicateClusterName"
    SHARED_SERVER = "SharedServer"
    MISSING_CLUSTER_SECRET = "MissingClusterSecret"
    DESTINATION_CONFLICT = "DestinationConflict"
    AUTOMATED_SYNC = "AutomatedSync"
    MIXED_REVISIONS = "MixedRevisions"
    UNKNOWN_REVISION = "UnknownRevision"
    UNCOVERED_CLUSTERS = "UncoveredClusters"
    SPREAD_LABEL_MISSING = "SpreadLabelMissing"
    SPREAD_VALUES_FEWER_THAN_TARGETS = "SpreadValuesFewerThanTargets"
    UNKNOWN_PROGRESS_STAGE = "UnknownProgressStage"
    LATE_CLUSTERS = "LateClusters"
    SKIPPED_CLUSTERS = "SkippedClusters"
    NOT_A_RELEASE = "NotARelease"
    GROUP_LABEL_MISSING = "GroupLabelMissing"


@dataclass(frozen=True, slots=True)
class PlanIssue:
    """One warning or error: a code, a sentence for people, and every object it is about."""

    code: IssueCode
    message: str
    subjects: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The `-o json` form."""
        return {"code": self.code.value, "message": self.message, "subjects": list(self.subjects)}


# --- the plan ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClusterPlan:
    """One cluster of the ApplicationSet's fleet and what it needs.

    `apps` are all its counted Applications (they move together); `stale_apps` the out-of-date
    ones, each with why in `reasons`; `revisions` the distinct release revisions of `stale_apps`
    (one tuple per distinct set, one entry per source). The cluster is out of date when
    `stale_apps` is not empty.
    """

    name: str
    apps: tuple[str, ...]
    stale_apps: tuple[str, ...] = ()
    reasons: tuple[str, ...] = ()
    revisions: tuple[Revisions, ...] = ()

    @property
    def is_out_of_date(self) -> bool:
        """True when at least one of its Applications is out of date."""
        return bool(self.stale_apps)


@dataclass(frozen=True, slots=True)
class StagePlan:
    """One stage of the plan.

    `targets` are cluster names in rollout order; `apps` maps each target to all its counted
    Applications. `matched` counts the fleet's clusters the selector matches; `available` those of
    them no earlier stage took (what "N%" of `maxTargets` scales against). `max_targets` and
    `max_parallel` are resolved to numbers; both are 0 when the stage has nothing to size.
    `from_progress` is True when the targets are the ones a running rollout recorded. With
    spec.groupBy, `group` is the group's label value (or "(none)") and `name` is
    "<group>/<stage>" (`group_stage_name`); `matched` and `available` count the group's clusters.
    """

    name: str
    state: StageState
    reason: str
    targets: tuple[str, ...] = ()
    apps: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: MappingProxyType({}))
    max_targets: int = 0
    max_parallel: int = 0
    matched: int = 0
    available: int = 0
    from_progress: bool = False
    # Out-of-date clusters this stage could have taken that a skip holds back, each with why.
    skipped: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    group: str | None = None

    @property
    def stage_name(self) -> str:
        """The spec's name of this stage (`name` without its group)."""
        return split_stage_name(self.name)[1] if self.group is not None else self.name

    def to_dict(self) -> dict[str, Any]:
        """The `-o json` form of one stage (see docs/design/planner.md)."""
        grouped = {"group": self.group, "stage": self.stage_name} if self.group is not None else {}
        return {
            "name": self.name,
            **grouped,
            "state": self.state.value,
            "reason": self.reason,
            "targets": list(self.targets),
            "maxTargets": self.max_targets,
            "maxParallel": self.max_parallel,
            "matched": self.matched,
            "available": self.available,
            "fromProgress": self.from_progress,
            "applications": {cluster: list(self.apps.get(cluster, ())) for cluster in self.targets},
            "skipped": skipped_list(self.skipped),
        }


@dataclass(frozen=True, slots=True)
class RolloutPlan:
    """The whole plan: stages in spec order, the fleet's clusters, the release, warnings, errors.

    `revisions` are the distinct release revisions of the out-of-date Applications, sorted (empty
    when nothing is out of date); `release_id(generation)` turns them into the rollout id.
    `uncovered` are out-of-date clusters no stage takes; `homeless` the out-of-date Applications
    whose destination is no known cluster (no cluster Secret, or, for the steps, one the cluster
    inventory does not list yet: `select` waits for it). A plan with `errors` must not be run.
    With spec.groupBy, `group_by` is the label and `groups` maps each group (label value, "(none)"
    last) to its clusters; `stages` are then every group's stages, group after group.
    """

    ps_name: str
    app_set: str
    stages: tuple[StagePlan, ...]
    clusters: Mapping[str, ClusterPlan]
    revisions: tuple[Revisions, ...] = ()
    uncovered: tuple[str, ...] = ()
    homeless: tuple[str, ...] = ()
    warnings: tuple[PlanIssue, ...] = ()
    errors: tuple[PlanIssue, ...] = ()
    ignored_apps: int = 0
    # Out-of-date clusters left out of the rollout (orchestrator.planning.skip), each with why.
    skipped: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    group_by: str | None = None
    groups: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: MappingProxyType({}))
    max_parallel_groups: int | None = None

    @property
    def has_errors(self) -> bool:
        """True when the plan must not be run."""
        return bool(self.errors)

    @property
    def out_of_date(self) -> tuple[str, ...]:
        """Names of the fleet's out-of-date clusters, sorted."""
        return tuple(name for name, cluster in self.clusters.items() if cluster.is_out_of_date)

    def stage(self, name: str) -> StagePlan:
        """The plan of the stage of that name; KeyError when the spec has no such stage."""
        for stage in self.stages:
            if stage.name == name:
                return stage
        raise KeyError(f"no stage named {name!r} in the plan")

    def stages_of_group(self, group: str | None) -> tuple[StagePlan, ...]:
        """The stages of one group, in spec order (every stage when the plan has no groups)."""
        return tuple(stage for stage in self.stages if stage.group == group)

    def release_id(self, generation: int) -> str:
        """The id of this plan's release for a spec generation (see `release_id`)."""
        return release_id(generation, self.revisions)

    def to_dict(self, *, generation: int | None = None) -> dict[str, Any]:
        """The stable `-o json` shape (docs/design/planner.md); with a generation it carries the
        release id."""
        # `revisions` keeps its documented string form (a multi-source set joined by ","), for
        # people and old scripts; `revisionSets` is the same as data, one list per set.
        release: dict[str, Any] = {
            "revisions": [revision_key(r) for r in self.revisions],
            "revisionSets": [list(r) for r in self.revisions],
        }
        if generation is not None:
            release["generation"] = generation
            release["id"] = self.release_id(generation) if self.revisions else ""
        grouped: dict[str, Any] = {}
        if self.group_by is not None:
            grouped = {
                "groupBy": self.group_by,
                "maxParallelGroups": self.max_parallel_groups or len(self.groups),
                "groups": [
                    {
                        "name": group,
                        "clusters": list(clusters),
                        "stages": [stage.name for stage in self.stages_of_group(group)],
                    }
                    for group, clusters in self.groups.items()
                ],
            }
        return {
            "progressiveSync": self.ps_name,
            "appSet": self.app_set,
            "release": release,
            "summary": {
                "clusters": len(self.clusters),
                "outOfDate": len(self.out_of_date),
                "uncovered": list(self.uncovered),
                "ignoredApplications": self.ignored_apps,
                "skipped": skipped_list(self.skipped),
            },
            **grouped,
            "stages": [stage.to_dict() for stage in self.stages],
            "warnings": [issue.to_dict() for issue in self.warnings],
            "errors": [issue.to_dict() for issue in self.errors],
        }


def skipped_list(skipped: Mapping[str, str]) -> list[dict[str, str]]:
    """The `-o json` form of skipped clusters: `[{"cluster": ..., "reason": ...}]`."""
    return [{"cluster": name, "reason": reason} for name, reason in skipped.items()]


# --- collecting issues ------------------------------------------------------------------------


class Issues:
    """Collects warnings and errors in the order the rules find them."""

    def __init__(self) -> None:
        self.warnings: list[PlanIssue] = []
        self.errors: list[PlanIssue] = []

    def warn(self, code: IssueCode, message: str, subjects: Iterable[str] = ()) -> None:
        """A warning: the plan may run."""
        self.warnings.append(PlanIssue(code, message, tuple(subjects)))

    def error(self, code: IssueCode, message: str, subjects: Iterable[str] = ()) -> None:
        """An error: the plan must not run."""
        self.errors.append(PlanIssue(code, message, tuple(subjects)))


def names_in_message(names: Sequence[str], limit: int = NAMES_IN_MESSAGE) -> str:
    """'a, b, c' or 'a, b, c and 5 more', for messages people read."""
    shown = ", ".join(names[:limit])
    return f"{shown} and {len(names) - limit} more" if len(names) > limit else shown
