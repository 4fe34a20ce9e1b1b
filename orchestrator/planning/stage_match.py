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
from collections.abc import Iterable, Mapping

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


# Names grouped by their values of some label keys (None where the labels lack the key).
_Partition = dict[tuple[str | None, ...], set[str]]


class StageMatcher:
    """`stage_matches` over every cluster of one fleet, computed per distinct label combination.

    A selector reads only the label keys it names, so its answer is the same for every cluster (or
    Application) with the same values, or absence, of those keys: it is asked once per distinct
    combination, not once per object (5,000 clusters x 10 stages). The grouping per key set is kept
    for the next stage that reads the same keys.
    """

    def __init__(
        self, clusters: Mapping[str, Cluster], apps_by_cluster: Mapping[str, Iterable[AppView]]
    ) -> None:
        self._everything = frozenset(clusters)
        # (cluster name, labels) of each cluster, and of each of its Applications.
        self._cluster_labels = [(name, cluster.labels) for name, cluster in clusters.items()]
        self._app_labels = [(name, app.labels) for name in clusters for app in apps_by_cluster.get(name, ())]
        self._partitions: dict[tuple[str, tuple[str, ...]], _Partition] = {}

    def matching(self, targets: StageTargets) -> set[str]:
        """The names of the clusters `stage_matches` takes for these targets."""
        matched = set(self._everything)
        if targets.clusters is not None:
            matched &= self._selected("clusters", targets.clusters.selector, self._cluster_labels)
        if targets.applications is not None:
            matched &= self._selected("applications", targets.applications.selector, self._app_labels)
        return matched

    def _selected(self, kind: str, selector: LabelSelector, labelled: list[tuple[str, Labels]]) -> set[str]:
        """The names whose labels (any of them, for a name given several times) `selector` matches."""
        expressions = selector.match_expressions or []
        keys = tuple(sorted({*(selector.match_labels or {}), *(r.key for r in expressions)}))
        if not keys:
            return {name for name, _ in labelled}  # the empty selector matches every object
        groups = self._partitions.get((kind, keys))
        if groups is None:
            groups = self._partitions[(kind, keys)] = defaultdict(set)
            for name, labels in labelled:
                groups[tuple(map(labels.get, keys))].add(name)
        matched: set[str] = set()
        for values, names in groups.items():
            present = {key: value for key, value in zip(keys, values, strict=True) if value is not None}
            if selector.matches(present):
                matched |= names
        return matched
