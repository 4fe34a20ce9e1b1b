"""The rollout planner: which clusters each stage takes, in which order, and how many at once.

`plan_rollout(spec, ps_name=..., appset=..., clusters=..., apps=..., progress=...)` is a pure
function of its arguments: no client, no clock, no environment, no globals. Everything that runs a
rollout executes its decisions: `progressive-sync plan` prints it, the `select` step takes one
stage's targets from it, the watcher reads the release revisions and id from it to decide whether a
rollout is due. `docs/design/planner.md` explains the rules with examples; the summary:

- **Ownership**: an Application counts when an ownerReference names the ApplicationSet (kind
  `ApplicationSet`, its name, and its uid when both sides know it). Others are ignored (counted).
- **Clusters**: an Application belongs to the cluster whose Secret has its `destination.server`,
  else its `destination.name`. Only clusters with at least one counted Application take part: the
  fleet of this ApplicationSet, not every cluster Argo CD knows. The cluster is the unit: it is out
  of date when any of its Applications is, and a stage takes it with all its Applications.
- **Out of date**: see `out_of_date_reason`.
- **Stages** run in spec order. A stage's *available* clusters are those its selectors match (its
  cluster Secret's labels, its Applications' labels: `orchestrator.planning.stage_match`) that
  no earlier stage took; its *candidates* are the out-of-date ones among them, ordered (see
  `order_clusters`); it takes the first `maxTargets` of them. `maxTargets` "N%" is N% of the
  available clusters, `maxParallel` "N%" is N% of the stage's targets; both round down, minimum 1
  (the one sizing rule, `orchestrator.planning.sizing`, which the Workflow builder uses too).
- **A running rollout** (`progress`): a stage that rollout already selected keeps exactly the
  targets it recorded, and they count as taken, so later stages get the answer the plan gave at the
  start (unless the fleet itself changed). A stage whose list of clusters the status left out
  (issue 29 point 8) is known by its taken-set, the digests of its targets' names: its targets are
  the fleet's clusters with those digests, and no later stage takes them (nor counts a failure of
  one against its own `maxFailedClusters`). A stage of which the status kept neither, and which
  has clusters not updated, is an error: a later stage could take them again.

The planning package by job: this module holds the selection rules and `plan_rollout`; the plan's
data and its `-o json` form are `orchestrator.planning.plan`; reading what a running rollout
recorded is `orchestrator.planning.progress`; every size is `orchestrator.planning.sizing`; the
rollout contract a Workflow runs is `orchestrator.planning.contract`. The names callers import
from here (`__all__`) stay importable from here.
"""

from __future__ import annotations

import hashlib
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from orchestrator.api.models import NO_GROUP_VALUE, ProgressiveSyncSpec, Stage
from orchestrator.api.release import Revisions, normalize_revisions, release_id
from orchestrator.argocd.fleet import (
    AppSetView,
    AppView,
    Cluster,
    ClusterIndex,
    Fleet,
    HealthStatus,
    SyncStatus,
    index_clusters,
    normalize_server,
)
from orchestrator.planning.plan import (
    ClusterPlan,
    IssueCode,
    PlanIssue,
    RolloutPlan,
    StagePlan,
    StageState,
    group_stage_name,
)
from orchestrator.planning.plan import Issues as _Issues
from orchestrator.planning.plan import names_in_message as _names
from orchestrator.planning.progress import RolloutProgress, StageProgress, progress_from_status
from orchestrator.planning.progress import recorded_state as _recorded_state
from orchestrator.planning.progress import rollout_name as _rollout_name
from orchestrator.planning.sizing import StageSize, resolve_max_targets, stage_size
from orchestrator.planning.skip import skipped_clusters
from orchestrator.planning.stage_match import StageMatcher

# What callers import from here; the plan's types live in `plan`, the progress reading in `progress`.
__all__ = [
    "ClusterPlan",
    "IssueCode",
    "PlanIssue",
    "RolloutPlan",
    "RolloutProgress",
    "StagePlan",
    "StageProgress",
    "StageState",
    "cluster_order_key",
    "group_clusters",
    "new_desired_state",
    "order_clusters",
    "out_of_date_reason",
    "plan_fleet",
    "plan_rollout",
    "planned_sizes",
    "progress_from_status",
    "release_id",
    "release_of_fleet",
]

# --- the rules -------------------------------------------------------------------------------


def out_of_date_reason(app: AppView) -> str | None:
    """Why an Application still needs this release, or None when it is up to date.

    Up to date means all of: no operation in flight, sync status Synced at a known revision (that
    revision is the Application's release revision: Argo CD compared against it), health Healthy,
    and that health observed no earlier than the last operation finished (a Healthy older than the
    sync may describe the previous revision). Anything else is out of date, checked in this order.
    """
    if app.operation_in_progress:
        return "an operation is in progress"
    if app.sync_status is not SyncStatus.SYNCED:
        return f"sync status is {app.sync_status.value}"
    if not app.sync_revisions:
        return "Synced, but Argo CD reports no revision"
    if app.health_status is not HealthStatus.HEALTHY:
        return f"health is {app.health_status.value}"
    if app.health_is_stale:
        return "Healthy was observed before the last sync finished"
    return None


def cluster_order_key(ps_name: str, cluster_name: str) -> str:
    """Where a cluster comes in the rollouts of one ProgressiveSync: sha256 of both names.

    The order is stable (same service, same canary, every time) and differs between services, so
    one cluster is not every service's canary.
    """
    return hashlib.sha256(f"{ps_name}\x00{cluster_name}".encode()).hexdigest()


def order_clusters(ps_name: str, clusters: Sequence[Cluster], spread_by: str | None = None) -> list[Cluster]:
    """Clusters in rollout order: by `cluster_order_key`, then round-robin over `spread_by` values.

    With `spread_by`, clusters are grouped by the value of that label; the groups take turns, one
    cluster each, in the order of their first cluster, so the hash order still picks the first
    target and each group keeps its own hash order. Clusters without the label come after every
    labelled one (they could be anywhere, so they do not count as a spread of their own).
    """
    return _spread(_by_hash(ps_name, clusters), spread_by)


def _by_hash(ps_name: str, clusters: Iterable[Cluster]) -> list[Cluster]:
    return sorted(clusters, key=lambda c: (cluster_order_key(ps_name, c.name), c.name))


def _spread(ordered: list[Cluster], spread_by: str | None) -> list[Cluster]:
    """Round-robin over the values of label `spread_by`, keeping `ordered` within each value."""
    if not spread_by:
        return ordered
    groups: dict[str, list[Cluster]] = {}
    unlabelled: list[Cluster] = []
    for cluster in ordered:
        value = cluster.labels.get(spread_by)
        if value is None:
            unlabelled.append(cluster)
        else:
            groups.setdefault(value, []).append(cluster)
    # dicts keep insertion order: groups are in the order of their first (hash-earliest) cluster.
    interleaved: list[Cluster] = []
    for round_index in range(max((len(g) for g in groups.values()), default=0)):
        interleaved.extend(group[round_index] for group in groups.values() if round_index < len(group))
    return interleaved + unlabelled


def plan_rollout(
    spec: ProgressiveSyncSpec,
    *,
    ps_name: str,
    appset: AppSetView | None,
    clusters: Iterable[Cluster],
    apps: Iterable[AppView],
    progress: RolloutProgress | None = None,
    release: Iterable[Sequence[str]] | None = None,
) -> RolloutPlan:
    """Plan one rollout of `spec` over the fleet; see the module docstring and docs/design/planner.md.

    `release` are the revisions of the release being rolled out (a step passes the Workflow's); None
    derives them from the fleet (`release_of_fleet`: the revisions Argo CD compared Applications
    against that they do not run yet).

    `appset` is the ApplicationSet the spec names (None when not at hand: ownership is then
    decided by name alone, with a warning). `progress` is what the rollout under way recorded;
    leave it None to plan a new rollout. The result does not depend on the order of `clusters` or
    `apps`.
    """
    issues = _Issues()
    app_set_name = spec.app_set_ref.name
    app_set_uid = _check_app_set(issues, app_set_name, appset)

    index = _index_clusters(issues, clusters)
    owned, ignored = _owned_apps(apps, app_set_name, app_set_uid)
    if not owned:
        issues.warn(
            IssueCode.NO_APPLICATIONS,
            f"no Application is owned by ApplicationSet {app_set_name!r}: there is nothing to roll out",
        )
    apps_by_cluster, homeless = _assign_apps(issues, owned, index)
    given = normalize_revisions(release) if release is not None else None
    revisions = (
        given
        if given is not None
        else release_of_fleet(app for apps in apps_by_cluster.values() for app in apps)
    )
    fleet, outside = _fleet_clusters(apps_by_cluster, frozenset(revisions))
    _report_release(issues, owned, fleet, outside)
    _report_automated_sync(issues, owned)
    _report_homeless(issues, homeless, spec.allow_partial_rollout)

    fleet_clusters = {name: index.by_name[name] for name in fleet}
    # Only an out-of-date cluster is held back: an up-to-date one has nothing to skip.
    skipped = skipped_clusters(
        spec.skip,
        {name: fleet_clusters[name] for name, cluster in fleet.items() if cluster.is_out_of_date},
        apps_by_cluster,
    )
    _report_skipped(issues, skipped)
    # Which clusters each stage's selectors match (its cluster Secrets' and its Applications' labels).
    matcher = StageMatcher(fleet_clusters, apps_by_cluster)
    # One pass of the stages over the whole fleet, or one per group (spec.groupBy, docs/groups.md).
    groups: dict[str | None, tuple[str, ...] | None] = {None: None}
    if spec.group_by:
        groups = {
            group: members
            for group, members in group_clusters(spec.group_by, fleet_clusters.values()).items()
        }
    if spec.group_by:
        _report_group_gaps(issues, spec.group_by, groups)
    stage_names = _known_stage_names(spec, groups)
    recorded = _recorded_stages(issues, progress, stage_names)
    # Clusters a recorded stage holds are never candidates of another stage, even an earlier one.
    held = {name for s in recorded.values() for name in s.targets}
    stages = tuple(
        plan
        for group, members in groups.items()
        for plan in _plan_stages(
            issues,
            spec,
            ps_name=ps_name,
            clusters=fleet_clusters,
            fleet=fleet,
            progress=progress,
            recorded=recorded,
            held=held,
            skipped=skipped,
            matcher=matcher,
            group=group,
            within=frozenset(members) if members is not None else None,
        )
    )
    named_groups = {
        group: members for group, members in groups.items() if group is not None and members is not None
    }
    uncovered = _report_uncovered(issues, spec, matcher, fleet, stages, skipped=skipped, groups=named_groups)
    return RolloutPlan(
        ps_name=ps_name,
        app_set=app_set_name,
        stages=stages,
        clusters=MappingProxyType(fleet),
        revisions=revisions,
        uncovered=uncovered,
        homeless=tuple(sorted(app.name for app in homeless if out_of_date_reason(app) is not None)),
        warnings=tuple(issues.warnings),
        errors=tuple(issues.errors),
        ignored_apps=ignored,
        skipped=MappingProxyType(skipped),
        group_by=spec.group_by,
        groups=MappingProxyType(named_groups),
        max_parallel_groups=spec.max_parallel_groups,
    )


def group_clusters(label: str, clusters: Iterable[Cluster]) -> dict[str, tuple[str, ...]]:
    """The groups of spec.groupBy: each value of cluster label `label` with its clusters (sorted by
    name), values in sorted order, then `NO_GROUP_VALUE` for the clusters without the label."""
    members: dict[str, list[str]] = defaultdict(list)
    for cluster in clusters:
        members[cluster.labels.get(label, NO_GROUP_VALUE)].append(cluster.name)
    values = sorted(value for value in members if value != NO_GROUP_VALUE)
    if NO_GROUP_VALUE in members:
        values.append(NO_GROUP_VALUE)
    return {value: tuple(sorted(members[value])) for value in values}


def plan_fleet(spec: ProgressiveSyncSpec, fleet: Fleet, *, ps_name: str) -> RolloutPlan:
    """`plan_rollout` over a whole `Fleet` (a fleet file, or a live listing read into one): the
    ApplicationSet the spec names, if the fleet holds it, and every cluster and Application."""
    return plan_rollout(
        spec,
        ps_name=ps_name,
        appset=fleet.app_set(spec.app_set_ref.name),
        clusters=fleet.clusters,
        apps=fleet.apps,
    )


def planned_sizes(spec: ProgressiveSyncSpec, plan: RolloutPlan) -> dict[str, StageSize]:
    """Each stage's planned target count and its maxParallel (>= 1), by the one sizing rule; with
    groups, each group's stages by their "<group>/<stage>" names.

    KeyError with the stage's name when the plan has no stage the spec names (it was made for
    another spec).
    """
    sizes: dict[str, StageSize] = {}
    by_name = {stage.name: stage for stage in spec.stages}
    for group in plan.groups or (None,):
        for stage in spec.stages:
            name = stage.name if group is None else group_stage_name(group, stage.name)
            try:
                planned = plan.stage(name)
            except KeyError:
                raise KeyError(name) from None
            sizes[name] = stage_size(
                by_name[stage.name], available=planned.available, targets=len(planned.targets)
            )
    return sizes


# --- plan_rollout, step by step --------------------------------------------------------------


def _check_app_set(issues: _Issues, name: str, appset: AppSetView | None) -> str:
    """The ApplicationSet uid to check ownerReferences against ("" when unknown)."""
    if appset is None:
        issues.warn(
            IssueCode.APP_SET_NOT_GIVEN,
            f"ApplicationSet {name!r} was not given: Applications are matched to it by owner name only",
            [name],
        )
        return ""
    if appset.name != name:
        issues.error(
            IssueCode.APP_SET_MISMATCH,
            f"the spec names ApplicationSet {name!r} but {appset.name!r} was given",
            [appset.name],
        )
        return ""
    return appset.uid


def _index_clusters(issues: _Issues, clusters: Iterable[Cluster]) -> ClusterIndex:
    """Clusters by name and by server (`fleet.index_clusters`); the duplicates it passed over, reported."""
    # The same Secret given twice (a fleet file listing it twice) counts once: the smallest copy,
    # so the choice does not depend on input order.
    secrets: dict[tuple[str, str], Cluster] = {}
    for cluster in clusters:
        key = (cluster.secret_name, cluster.name)
        if key not in secrets or _copy_order(cluster) < _copy_order(secrets[key]):
            secrets[key] = cluster
    index = index_clusters(secrets.values())
    by_name, by_server = index.by_name, index.by_server
    duplicates: dict[str, list[str]] = defaultdict(list)
    for key in sorted(secrets):
        cluster = secrets[key]
        if by_name[cluster.name] is not cluster:
            duplicates[cluster.name].append(cluster.secret_name)
    for name, losers in duplicates.items():
        winner = by_name[name].secret_name
        issues.error(
            IssueCode.DUPLICATE_CLUSTER_NAME,
            f"cluster Secrets {_names([winner, *losers])} all name cluster {name!r}; cluster names must "
            f"be unique (this plan used Secret {winner!r})",
            [winner, *losers],
        )

    sharing: dict[str, list[str]] = defaultdict(list)
    for cluster in by_name.values():  # in Secret-name order: the first Secret owns the server
        server = normalize_server(cluster.server)
        if server and by_server[server] is not cluster:
            sharing[server].append(cluster.name)
    for server, others in sharing.items():
        winner = by_server[server].name
        issues.warn(
            IssueCode.SHARED_SERVER,
            f"clusters {_names([winner, *others])} share server {server}: Applications that name this "
            f"server go to {winner!r} (its Secret name sorts first); Applications that name "
            f"{_names(others)} by destination.name go there",
            [winner, *others],
        )
    return index


def _copy_order(cluster: Cluster) -> tuple[Any, ...]:
    return (cluster.server, sorted(cluster.labels.items()))


def _owned_apps(apps: Iterable[AppView], app_set_name: str, app_set_uid: str) -> tuple[list[AppView], int]:
    """The Applications of the ApplicationSet, sorted and without duplicates; and how many others."""
    owned: dict[tuple[str, str], AppView] = {}
    ignored = 0
    for app in sorted(apps, key=lambda a: (a.namespace, a.name, a.uid)):
        if not app.is_owned_by(app_set_name, app_set_uid):
            ignored += 1
            continue
        owned.setdefault((app.namespace, app.name), app)
    return list(owned.values()), ignored


def _assign_apps(
    issues: _Issues, owned: list[AppView], index: ClusterIndex
) -> tuple[dict[str, list[AppView]], list[AppView]]:
    """Each Application's cluster (`ClusterIndex.cluster_of`); a destination naming two, reported."""
    apps_by_cluster: dict[str, list[AppView]] = defaultdict(list)
    homeless: list[AppView] = []
    conflicts: list[str] = []
    for app in owned:
        via_server, via_name = index.destinations_of(app)
        if via_server and via_name and via_server is not via_name:
            conflicts.append(app.name)
        cluster = index.cluster_of(app)
        if cluster is None:
            homeless.append(app)
            continue
        apps_by_cluster[cluster.name].append(app)
    if conflicts:
        issues.warn(
            IssueCode.DESTINATION_CONFLICT,
            f"Applications {_names(conflicts)} set destination.server and destination.name to different "
            "clusters; the plan follows destination.server",
            conflicts,
        )
    return apps_by_cluster, homeless


def new_desired_state(app: AppView) -> Revisions | None:
    """The revisions Argo CD compared the Application against when that is a state it does not run
    yet (sync status OutOfSync at a known revision), else None.

    Only this makes a release revision. An Application Synced at its revision but not Healthy (or
    with a sync of its current revision still running) describes the commit it already runs: that
    is a health question, and taking its revision as a release would make every Application still
    compared against that old commit count as "at the release" (issue 29, finding 2).
    """
    if app.sync_status is SyncStatus.OUT_OF_SYNC and app.sync_revisions:
        return app.sync_revisions
    return None


def release_of_fleet(apps: Iterable[AppView]) -> tuple[Revisions, ...]:
    """The release the fleet asks for: the distinct new desired states (`new_desired_state`), sorted."""
    return normalize_revisions(rev for app in apps if (rev := new_desired_state(app)) is not None)


def _needs_release(app: AppView, reason: str | None, release: frozenset[Revisions]) -> bool:
    """True when the out-of-date Application (`reason` not None) is a target of `release`: it is not
    Synced (OutOfSync, or Argo CD could not compare it), Argo CD reports no revision for it yet, or
    the revision it is Synced at is one of the release's (it still has to become Healthy: adopted)."""
    if reason is None:
        return False
    return app.sync_status is not SyncStatus.SYNCED or not app.sync_revisions or app.sync_revisions in release


def _fleet_clusters(
    apps_by_cluster: Mapping[str, list[AppView]], release: frozenset[Revisions]
) -> tuple[dict[str, ClusterPlan], list[str]]:
    """The ApplicationSet's clusters (those with at least one of its Applications), by name, and the
    Applications that are not settled at a revision outside `release` ("name: reason"): not targets."""
    fleet: dict[str, ClusterPlan] = {}
    outside: list[str] = []
    for name in sorted(apps_by_cluster):
        apps = apps_by_cluster[name]
        stale: list[tuple[AppView, str]] = []
        for app in apps:
            reason = out_of_date_reason(app)
            if _needs_release(app, reason, release):
                stale.append((app, str(reason)))
            elif reason is not None:
                outside.append(f"{app.name} ({reason} at {app.sync_revision})")
        if not stale:
            fleet[name] = ClusterPlan(name=name, apps=tuple(app.name for app in apps))
            continue
        revisions = {rev for app, _ in stale if (rev := new_desired_state(app)) is not None}
        fleet[name] = ClusterPlan(
            name=name,
            apps=tuple(app.name for app in apps),
            stale_apps=tuple(app.name for app, _ in stale),
            reasons=tuple(f"{app.name}: {reason}" for app, reason in stale),
            revisions=tuple(sorted(revisions)),
        )
    return fleet, outside


def _report_release(
    issues: _Issues, owned: list[AppView], fleet: Mapping[str, ClusterPlan], outside: list[str]
) -> None:
    """Mixed revisions, unknown ones, and unsettled Applications that are not part of the release."""
    stale_names = {app for cluster in fleet.values() for app in cluster.stale_apps}
    # Every Application with a revision, out of date or not: one that is Synced at another
    # revision than the rest is as worth a look as two releases in flight.
    by_revision: dict[str, list[str]] = defaultdict(list)
    for app in owned:
        if app.sync_revisions:
            by_revision[app.sync_revision].append(app.name)
    if len(by_revision) > 1:
        parts = [f"{rev} ({len(names)}: {_names(names, 3)})" for rev, names in sorted(by_revision.items())]
        issues.warn(
            IssueCode.MIXED_REVISIONS,
            f"the Applications are at {len(by_revision)} different revisions: {'; '.join(parts)}; each is "
            "synced to its own revision",
            sorted(by_revision),
        )
    unknown = [app.name for app in owned if app.name in stale_names and not app.sync_revisions]
    if unknown:
        issues.warn(
            IssueCode.UNKNOWN_REVISION,
            f"Argo CD reports no revision yet for {_names(unknown)}: they are targets, but their sync "
            "cannot be pinned until Argo CD has compared them",
            unknown,
        )
    if outside:
        issues.warn(
            IssueCode.NOT_A_RELEASE,
            f"{_names(outside)} are Synced at the revision they run but not settled: a health question, "
            "not a release; no rollout syncs them for it (Argo CD reports why; a new commit or "
            "`argocd app sync` changes them)",
            [entry.split(" ", 1)[0] for entry in outside],
        )


def _report_automated_sync(issues: _Issues, owned: list[AppView]) -> None:
    automated = [app.name for app in owned if app.automated_sync]
    if automated:
        issues.warn(
            IssueCode.AUTOMATED_SYNC,
            f"automated sync is on for {_names(automated)}: Argo CD syncs them by itself, outside the "
            "stages; turn it off (spec.syncPolicy.automated) in the ApplicationSet template",
            automated,
        )


def _report_skipped(issues: _Issues, skipped: Mapping[str, str]) -> None:
    if skipped:
        issues.warn(
            IssueCode.SKIPPED_CLUSTERS,
            f"{len(skipped)} out-of-date cluster(s) are skipped and get no sync from this rollout: "
            f"{_names([f'{name} ({why})' for name, why in skipped.items()])}",
            tuple(skipped),
        )


def _report_homeless(issues: _Issues, homeless: list[AppView], allow_partial: bool) -> None:
    """Applications whose cluster has no Secret: no stage can select them."""
    if not homeless:
        return
    stale = [app.name for app in homeless if out_of_date_reason(app) is not None]
    where = [
        f"{app.name} -> {app.destination_server or app.destination_name or '(no destination)'}"
        for app in homeless
    ]
    message = f"no cluster Secret for the destination of {_names(where)}: these Applications are in no stage"
    subjects = [app.name for app in homeless]
    if stale and not allow_partial:
        # Like an uncovered cluster: the release would silently not reach them.
        issues.error(
            IssueCode.MISSING_CLUSTER_SECRET,
            f"{message}, and {_names(stale)} are out of date (allowPartialRollout is false)",
            subjects,
        )
        return
    issues.warn(IssueCode.MISSING_CLUSTER_SECRET, message, subjects)


def _report_group_gaps(issues: _Issues, label: str, groups: Mapping[str | None, Any]) -> None:
    unlabelled = groups.get(NO_GROUP_VALUE)
    if unlabelled:
        issues.warn(
            IssueCode.GROUP_LABEL_MISSING,
            f"groupBy is {label!r}, but clusters {_names(unlabelled)} have no such label: they form the "
            f"group {NO_GROUP_VALUE}, rolled out on its own like any other; label their cluster Secrets "
            "to put them in a group",
            unlabelled,
        )


def _known_stage_names(spec: ProgressiveSyncSpec, groups: Mapping[str | None, Any]) -> set[str]:
    """Every stage name the plan has: the spec's, or each group's "<group>/<stage>"."""
    return {
        stage.name if group is None else group_stage_name(group, stage.name)
        for group in groups
        for stage in spec.stages
    }


def _recorded_stages(
    issues: _Issues, progress: RolloutProgress | None, stage_names: set[str]
) -> dict[str, StageProgress]:
    """The stages the running rollout selected that the plan still has; the others, reported."""
    recorded = {s.name: s for s in (progress.stages if progress else ()) if s.is_selected}
    strangers = sorted(name for name in recorded if name not in stage_names)
    if strangers:
        issues.warn(
            IssueCode.UNKNOWN_PROGRESS_STAGE,
            f"the running rollout recorded stages the spec no longer has: {_names(strangers)}; ignored",
            strangers,
        )
    return {name: stage for name, stage in recorded.items() if name in stage_names}


def _plan_stages(
    issues: _Issues,
    spec: ProgressiveSyncSpec,
    *,
    ps_name: str,
    clusters: Mapping[str, Cluster],
    fleet: Mapping[str, ClusterPlan],
    progress: RolloutProgress | None,
    recorded: Mapping[str, StageProgress],
    held: set[str],
    skipped: Mapping[str, str],
    matcher: StageMatcher,
    group: str | None = None,
    within: frozenset[str] | None = None,
) -> tuple[StagePlan, ...]:
    """The stages of one pass: over the whole fleet, or (`group`) over the clusters `within` it."""
    # Work done once for all stages, with set operations per stage (5,000 clusters x 10 stages):
    # the hash rank of every cluster, the out-of-date ones, the clusters grouped by label values
    # (in `matcher`).
    scope = clusters if within is None else {name: clusters[name] for name in within}
    rank = {c.name: i for i, c in enumerate(_by_hash(ps_name, scope.values()))}
    # A skipped cluster is no candidate; the first stage not selected yet that could take it says so.
    stale = {name for name in scope if fleet[name].is_out_of_date and name not in skipped}
    unclaimed_skips = (set(skipped) & set(scope)) - held
    taken: set[str] = set()
    plans: list[StagePlan] = []
    for stage in spec.stages:
        name = stage.name if group is None else group_stage_name(group, stage.name)
        matched = matcher.matching(stage.targets)
        if within is not None:
            matched &= within
        available = matched - taken
        max_targets = resolve_max_targets(stage, len(available))
        if name in recorded:
            progress_of_stage = recorded[name]
            targets = progress_of_stage.targets
            state, reason = _recorded_state(progress_of_stage, _rollout_name(progress))
            skipped_here: tuple[str, ...] = ()
        else:
            skipped_here = tuple(sorted((available & unclaimed_skips), key=rank.__getitem__))
            unclaimed_skips.difference_update(skipped_here)
            eligible = sorted((available & stale) - held, key=rank.__getitem__)
            candidates = _spread([clusters[c] for c in eligible], stage.spread_by)
            chosen = candidates[:max_targets]
            if stage.spread_by:
                _report_spread_gaps(issues, name, stage.spread_by, chosen)
                _report_spread_values(issues, stage, candidates, chosen, name=name)
            targets = tuple(c.name for c in chosen)
            state, reason = _computed_state(
                app_set=spec.app_set_ref.name,
                fleet_size=len(scope),
                matched=len(matched),
                available=len(available),
                candidates=len(candidates),
                targets=len(targets),
                skipped=len(skipped_here),
                group=None if group is None else f"{spec.group_by}={group}",
            )
        plans.append(
            StagePlan(
                name=name,
                state=state,
                reason=reason,
                targets=targets,
                apps=MappingProxyType({t: fleet[t].apps if t in fleet else () for t in targets}),
                max_targets=max_targets,
                # "N%" of maxParallel scales against the stage's own targets; 0: nothing to size.
                max_parallel=(
                    stage_size(stage, available=len(available), targets=len(targets)).max_parallel
                    if targets
                    else 0
                ),
                matched=len(matched),
                available=len(available),
                from_progress=name in recorded,
                skipped=MappingProxyType({c: skipped[c] for c in skipped_here}),
                group=group,
            )
        )
        taken.update(targets)
    return tuple(plans)


def _computed_state(
    *,
    app_set: str,
    fleet_size: int,
    matched: int,
    available: int,
    candidates: int,
    targets: int,
    skipped: int = 0,
    group: str | None = None,
) -> tuple[StageState, str]:
    """The state of a stage the rollout has not selected yet, and why (`skipped`: how many of its
    out-of-date clusters are held back by a skip mark or spec.skip; `group`: "label=value" of the
    group it plans, whose clusters `fleet_size` counts)."""
    if not matched:
        of = f"group {group}" if group is not None else f"ApplicationSet {app_set!r}"
        return StageState.SKIPPED, f"its selector matches none of the {fleet_size} clusters of {of}"
    if not available:
        return StageState.SKIPPED, f"earlier stages took all {matched} clusters its selector matches"
    held_back = f"{skipped} out-of-date cluster(s) skipped (progressivesync.io/skip or spec.skip)"
    if not candidates and skipped:
        return StageState.SKIPPED, f"nothing to take: {held_back}"
    if not candidates:
        return StageState.DONE, f"all {available} clusters it can take are up to date"
    reason = f"takes {targets} of {candidates} out-of-date clusters ({available} available)"
    if candidates > targets:
        reason += f"; {candidates - targets} left for later stages"
    if skipped:
        reason += f"; {held_back}"
    return StageState.PLANNED, reason


def _report_spread_gaps(issues: _Issues, stage: str, label: str, targets: Sequence[Cluster]) -> None:
    unlabelled = [c.name for c in targets if label not in c.labels]
    if unlabelled:
        issues.warn(
            IssueCode.SPREAD_LABEL_MISSING,
            f"stage {stage!r} spreads by {label!r}, but its targets {_names(unlabelled)} have no such "
            "label; they come after the labelled clusters",
            unlabelled,
        )


def _report_spread_values(
    issues: _Issues,
    stage: Stage,
    candidates: Sequence[Cluster],
    chosen: Sequence[Cluster],
    *,
    name: str | None = None,
) -> None:
    """A count `maxTargets` above the number of values `spreadBy` has among the stage's candidates:
    some value gets more than one target, which "one per region" rarely means. A percentage takes a
    share of the fleet and is left alone."""
    label = stage.spread_by
    if not label or not isinstance(stage.max_targets, int):
        return
    values = sorted({c.labels[label] for c in candidates if label in c.labels})
    if not values or stage.max_targets <= len(values) or len(chosen) <= len(values):
        return
    taken = Counter(c.labels.get(label, "(no label)") for c in chosen)
    shares = ", ".join(f"{count} in {value}" for value, count in sorted(taken.items()))
    issues.warn(
        IssueCode.SPREAD_VALUES_FEWER_THAN_TARGETS,
        f"stage {name or stage.name!r} spreads by {label!r}, which has {len(values)} value(s) among the "
        f"clusters it can take ({', '.join(values)}), but maxTargets is {stage.max_targets}: it will "
        f"take {len(chosen)} clusters, {shares}; set maxTargets: {len(values)} for one per {label}",
        tuple(c.name for c in chosen),
    )


def _report_uncovered(
    issues: _Issues,
    spec: ProgressiveSyncSpec,
    matcher: StageMatcher,
    fleet: Mapping[str, ClusterPlan],
    stages: tuple[StagePlan, ...],
    *,
    skipped: Mapping[str, str],
    groups: Mapping[str, tuple[str, ...]] | None = None,
) -> tuple[str, ...]:
    """Out-of-date clusters that no stage takes and no skip holds back: an error unless
    allowPartialRollout (`groups`: spec.groupBy's, each group's stages matching only its clusters)."""
    in_a_stage = {target for stage in stages for target in stage.targets}
    uncovered = tuple(
        name
        for name, c in fleet.items()
        if c.is_out_of_date and name not in in_a_stage and name not in skipped
    )
    if not uncovered:
        return ()
    uncovered = _report_late(issues, spec, matcher, stages, uncovered, groups=groups)
    if not uncovered:
        return ()
    in_some_stage = {name for stage in spec.stages for name in matcher.matching(stage.targets)}
    unmatched = [n for n in uncovered if n not in in_some_stage]
    left_over = [n for n in uncovered if n not in set(unmatched)]
    why = []
    if unmatched:
        why.append(f"no stage selector matches {_names(unmatched)}")
    if left_over:
        why.append(f"the stages' maxTargets leave out {_names(left_over)}")
    message = f"{len(uncovered)} out-of-date clusters are in no stage: {'; '.join(why)}"
    if spec.allow_partial_rollout:
        issues.warn(IssueCode.UNCOVERED_CLUSTERS, f"{message} (allowPartialRollout is true)", uncovered)
    else:
        issues.error(
            IssueCode.UNCOVERED_CLUSTERS,
            f"{message}; add a stage that takes them, or set allowPartialRollout: true",
            uncovered,
        )
    return uncovered


def _report_late(
    issues: _Issues,
    spec: ProgressiveSyncSpec,
    matcher: StageMatcher,
    stages: tuple[StagePlan, ...],
    uncovered: tuple[str, ...],
    *,
    groups: Mapping[str, tuple[str, ...]] | None = None,
) -> tuple[str, ...]:
    """Split off the clusters a running rollout learned of late; the uncovered ones left.

    Argo CD turns Applications OutOfSync one by one (refresh lag): a cluster that did so after every
    stage that would take it was selected is not a mistake in the spec. It is a warning
    (`LateClusters`), never an error that would fail the stage being selected; the next rollout
    (`progressive-sync retry`) takes it.
    """
    open_stages: set[str] = set()
    recorded_stages: set[str] = set()
    by_name = {stage.name: stage for stage in spec.stages}
    for planned in stages:
        matched = matcher.matching(by_name[planned.stage_name].targets)
        if planned.group is not None and groups:
            matched &= set(groups.get(planned.group, ()))
        (recorded_stages if planned.from_progress else open_stages).update(matched)
    late = [name for name in uncovered if name not in open_stages and name in recorded_stages]
    if not late:
        return uncovered
    issues.warn(
        IssueCode.LATE_CLUSTERS,
        f"{len(late)} cluster(s) turned out of date after the stages that take them were selected "
        f"(Argo CD compares Applications one by one): {_names(late)}; not updated by this rollout: "
        "`progressive-sync retry` starts one that takes them",
        tuple(late),
    )
    return tuple(name for name in uncovered if name not in set(late))
