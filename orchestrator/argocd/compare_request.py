"""Which Applications to ask Argo CD to compare again before a stage is planned (refresh lag).

Argo CD compares Applications with Git one by one, so when a rollout starts some still read Synced
at the commit before the release and no stage would take them. The `select` step asks Argo CD to
compare those again (`argocd.argoproj.io/refresh`) and waits, bounded, for the answers.

The rule is on revisions, never on time. An owned Application is asked unless Argo CD already
compared it against one of the release's revisions, or a refresh of it is pending. Argo CD stamps
`status.reconciledAt` in whole seconds, and a comparison made in the second the rollout started can
be against the commit before the release (the comparison after a sync, queued before the push), so
"compared since the rollout started" is not proof of having seen the release: it left Applications
behind on real Argo CD (issue 13).

A refresh is answered when the annotation is gone: Argo CD v3.6.1's application controller removes it
after the comparison that began with the annotation in place (`handleRefreshAnnotation` on the
object it compared), and that comparison resolves the branch without the repo-server's revision
cache (`CompareWithLatestForceResolve`), so it sees every commit pushed before the request.

Pure: callers list the Applications and patch and wait (steps/select_stage.py).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence, Set
from typing import Any

from orchestrator.api.release import Revisions
from orchestrator.argocd.appsync import refresh_requested
from orchestrator.argocd.fleet import AppView


class CompareNeed(enum.Enum):
    """What `select` does about one Application before planning."""

    NOT_OWNED = "not the ApplicationSet's"
    NO_RELEASE = "no release to compare against (nothing is out of date)"
    AT_RELEASE = "compared against a release revision"
    PENDING = "a refresh is pending: wait for its answer"
    ASK = "compared against another revision: ask for a refresh and wait for its answer"

    @property
    def awaited(self) -> bool:
        """True when `select` waits for Argo CD's answer about this Application."""
        return self in (CompareNeed.ASK, CompareNeed.PENDING)


def compare_need(
    view: AppView, *, owned: bool, release: Set[Revisions], refresh_pending: bool
) -> CompareNeed:
    """The decision for one Application (see the module); `release` the release's revision sets.

    `view.reconciled_at` is deliberately not read: see the module docstring.
    """
    if not owned:
        return CompareNeed.NOT_OWNED
    if view.sync_revisions and tuple(view.sync_revisions) in release:
        return CompareNeed.AT_RELEASE
    if refresh_pending:
        return CompareNeed.PENDING
    if not release:
        return CompareNeed.NO_RELEASE
    return CompareNeed.ASK


def unanswered(items: Iterable[Mapping[str, Any]], names: Sequence[str]) -> tuple[str, ...]:
    """The names among `names` whose refresh is still pending in `items` (a deleted one is answered)."""
    pending = {str((item.get("metadata") or {}).get("name", "")) for item in items if refresh_requested(item)}
    return tuple(name for name in names if name in pending)
