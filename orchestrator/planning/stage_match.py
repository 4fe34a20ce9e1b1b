"""Which of the fleet's clusters a stage's targets match: the one place that decides it.

A stage names its clusters by up to two label selectors (`orchestrator.api.selectors.StageTargets`):

- `targets.clusters.selector` over the labels of the cluster's Argo CD cluster Secret;
- `targets.applications.selector` over the labels of the ApplicationSet's Applications on the
  cluster (Argo CD RollingSync's `steps[].matchExpressions`): the cluster matches when at least one
  of its Applications does.

Given both, a cluster must match both; a selector not given does not narrow. `stage_matches` says
it for one cluster; `StageMatcher.matching` answers the same for a whole fleet at once (it is what
the planner calls, for the stages, the uncovered and the late clusters alike), and
tests/unit/test_stage_match.py checks that the two agree.

Pure; callers: `orchestrator.planning.planner`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

from orchestrator.api.models import LabelSelector, StageTargets
from orchestrator.argocd.fleet import AppView, Cluster

Labels = Mapping[str, str]


def stage_matches(targets: StageTargets, cluster_labels: Labels, app_labels: Iterable[Labels]) -> bool:
    """True when a cluster with these labels, whose Applications carry `app_labels`, is one of
    the stage's: its cluster selector (if any) matches the cluster, and its Application selector
    (if any) matches one of the Applications."""
    if targets.clusters is not None and not targets.clusters.selector.matches(dict(cluster_labels)):
        return False
    if targets.applications is None:
        return True
    return any(targets.applications.selector.matches(dict(labels)) for labels in app_labels)


# Names grouped by their values of some label keys (None where the labels lack the key). A name
# is in several groups when it has several Applications with different values.
_Partition = dict[tuple[str | None, ...], list[str]]
_CLUSTERS, _APPLICATIONS = "clusters", "applications"


class StageMatcher:
    """`stage_matches` over every cluster of one fleet, computed per distinct label combination.

    A selector reads only the label keys it names, so its answer is the same for every cluster (or
    Application) with the same values, or absence, of those keys: it is asked once per distinct
    combination, not once per object (5,000 clusters x 10 stages). The grouping per key set is kept
    for the next stage that reads the same keys; the Applications are only read when a stage has
    an Application selector.
    """

    def __init__(
        self, clusters: Mapping[str, Cluster], apps_by_cluster: Mapping[str, Sequence[AppView]]
    ) -> None:
        self._clusters = clusters
        self._apps_by_cluster = apps_by_cluster
        self._partitions: dict[tuple[str, tuple[str, ...]], _Partition] = {}

    def matching(self, targets: StageTargets) -> set[str]:
        """The names of the clusters `stage_matches` takes for these targets."""
        if targets.clusters is None and targets.applications is None:  # the API refuses it
            return set(self._clusters)
        matched: set[str] | None = None
        if targets.clusters is not None:
            matched = self._selected(_CLUSTERS, targets.clusters.selector)
        if targets.applications is not None:
            by_apps = self._selected(_APPLICATIONS, targets.applications.selector)
            matched = by_apps if matched is None else matched & by_apps
        assert matched is not None
        return matched

    def _group(self, kind: str, keys: tuple[str, ...]) -> _Partition:
        """Cluster names by the values of `keys` on each cluster, or on each of its Applications."""
        groups: _Partition = defaultdict(list)
        if kind == _CLUSTERS:
            for name, cluster in self._clusters.items():
                groups[tuple(map(cluster.labels.get, keys))].append(name)
            return groups
        for name in self._clusters:
            for app in self._apps_by_cluster.get(name, ()):
                groups[tuple(map(app.labels.get, keys))].append(name)
        return groups

    def _selected(self, kind: str, selector: LabelSelector) -> set[str]:
        """The cluster names with labels (of the cluster, or of any of its Applications) that
        `selector` matches."""
        expressions = selector.match_expressions or []
        keys = tuple(sorted({*(selector.match_labels or {}), *(r.key for r in expressions)}))
        if not keys:  # the empty selector matches every object
            if kind == _CLUSTERS:
                return set(self._clusters)
            return {name for name in self._clusters if self._apps_by_cluster.get(name)}
        groups = self._partitions.get((kind, keys))
        if groups is None:
            groups = self._partitions[(kind, keys)] = self._group(kind, keys)
        matched: set[str] = set()
        for values, names in groups.items():
            present = {key: value for key, value in zip(keys, values, strict=True) if value is not None}
            if selector.matches(present):
                matched.update(names)
        return matched
