"""Which clusters a rollout leaves out, and why: the `progressivesync.io/skip` mark and `spec.skip`.

A person holds one cluster back from a release (argoproj/argo-cd#22001: exclude one Application
temporarily) in one of three ways; the cluster is the unit, as everywhere in the planner, so a
mark on any of its Applications holds the whole cluster:

- the annotation `progressivesync.io/skip` on an Application (its value: why, or "true");
- `spec.skip.applications.selector`: Applications by their labels;
- `spec.skip.clusters.selector`: Argo CD cluster Secrets by their labels.

`skip_reason` says why a cluster is skipped (None: it is not). The planner leaves a skipped
cluster out of every stage it has not selected yet (not a target, not uncovered); the `sync` step
asks again right before it writes, so a mark added after `select` is honoured too. Removing the
mark makes the cluster an ordinary out-of-date one: a stage not selected yet takes it, and one
already selected leaves it to `progressive-sync retry` (`LateClusters`, docs/design/planner.md).

Pure functions; callers: `orchestrator.planning.planner` and `steps.sync`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from orchestrator.api.metadata import SKIP_ANNOTATION
from orchestrator.api.models import SkipSpec
from orchestrator.argocd.fleet import AppView, Cluster

# The values of the annotation that say only "skip", not why.
_NO_REASON_GIVEN = frozenset({"", "true"})


def app_skip_reason(skip: SkipSpec | None, app: AppView) -> str | None:
    """Why this Application holds its cluster back, or None when it does not."""
    if app.skip_mark is not None:
        said = "" if app.skip_mark.lower() in _NO_REASON_GIVEN else f": {app.skip_mark}"
        return f"Application {app.name} is annotated {SKIP_ANNOTATION}{said}"
    if (
        skip is not None
        and skip.applications is not None
        and skip.applications.selector.matches(dict(app.labels))
    ):
        return f"Application {app.name} matches spec.skip.applications.selector"
    return None


def skip_reason(skip: SkipSpec | None, cluster: Cluster, apps: Iterable[AppView]) -> str | None:
    """Why the cluster is left out of the rollout, or None when it is not (the first reason found:
    the cluster Secret's labels, then its Applications in name order)."""
    if (
        skip is not None
        and skip.clusters is not None
        and skip.clusters.selector.matches(dict(cluster.labels))
    ):
        return f"cluster {cluster.name} matches spec.skip.clusters.selector"
    for app in sorted(apps, key=lambda a: a.name):
        reason = app_skip_reason(skip, app)
        if reason is not None:
            return reason
    return None


def skipped_clusters(
    skip: SkipSpec | None, clusters: Mapping[str, Cluster], apps_by_cluster: Mapping[str, Iterable[AppView]]
) -> dict[str, str]:
    """The skipped clusters among `clusters`, by name (sorted), each with why."""
    found: dict[str, str] = {}
    for name in sorted(clusters):
        reason = skip_reason(skip, clusters[name], apps_by_cluster.get(name, ()))
        if reason is not None:
            found[name] = reason
    return found
