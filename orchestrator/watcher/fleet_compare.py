"""Has Argo CD compared the whole fleet against a release? The watcher asks before sizing a Workflow.

The Workflow's shape is fixed when it is created: each stage's fan-out `parallelism` (Argo's
template `parallelism` is an integer, never an expression), whether a stage runs in batches, and
`activeDeadlineSeconds` come from the plan's target counts (`planner.planned_sizes`,
`builder.active_deadline_seconds`). Without Git webhooks Argo CD compares Applications one by one
over minutes, so a plan made on the first Application that turned OutOfSync sees the later stages
with few or no targets: a `maxParallel: "10%"` stage would get parallelism 1 and one deadline wave,
and at run time its `select` finds the whole fleet (issue 29, point 3). So before it creates the
Workflow, the watcher asks Argo CD to compare every owned Application not compared against the
release yet (`argocd.argoproj.io/refresh`, as `select` does) and waits, bounded, for the answers.

The rule, on revisions first (as `orchestrator.argocd.compare_request.compare_need`), then on the
time the wait began (`since`, kept in the ProgressiveSync status, so a restarted watcher goes on
with the same wait):

- compared against a release revision: known;
- a refresh is pending (the annotation is still there): awaited;
- compared against another revision, `status.reconciledAt` after `since`: answered (Argo CD compared
  it after we asked; it is not part of this release);
- otherwise: to ask (our refresh is asked for once more when an answer came in the very second the
  wait began: `reconciledAt` has whole seconds, so such an answer cannot be told from a comparison
  made before the wait, which is what issue 13 found on real Argo CD).

Pure. Callers: `orchestrator.watcher.decide` (the wait before `CreateWorkflow`); tests.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from orchestrator.api.release import Revisions
from orchestrator.argocd.compare_request import CompareNeed, compare_need
from orchestrator.argocd.fleet import AppView


@dataclass(frozen=True)
class FleetComparison:
    """Where Argo CD stands with the fleet's comparison against a release.

    `to_ask`: Applications compared against another revision before the wait began (ask for a
    refresh); `pending`: a refresh asked for and not answered; `owned`: how many Applications the
    ApplicationSet has. Names are sorted.
    """

    to_ask: tuple[str, ...] = ()
    pending: tuple[str, ...] = ()
    owned: int = 0

    @property
    def complete(self) -> bool:
        """True when Argo CD compared every owned Application since the release (or against it)."""
        return not self.to_ask and not self.pending

    @property
    def unanswered(self) -> tuple[str, ...]:
        """The Applications Argo CD has not compared yet, sorted."""
        return tuple(sorted((*self.to_ask, *self.pending)))


def fleet_comparison(
    apps: Iterable[AppView],
    *,
    app_set_name: str,
    app_set_uid: str,
    release: Sequence[Revisions],
    since: datetime,
) -> FleetComparison:
    """The comparison state of the ApplicationSet's Applications in `apps` (see the module)."""
    wanted = frozenset(tuple(revisions) for revisions in release)
    to_ask: list[str] = []
    pending: list[str] = []
    owned = 0
    for app in apps:
        if not app.is_owned_by(app_set_name, app_set_uid):
            continue
        owned += 1
        need = compare_need(app, owned=True, release=wanted, refresh_pending=app.refresh_pending)
        if need is CompareNeed.PENDING:
            pending.append(app.name)
        elif need is CompareNeed.ASK and not _compared_after(app, since):
            to_ask.append(app.name)
    return FleetComparison(to_ask=tuple(sorted(to_ask)), pending=tuple(sorted(pending)), owned=owned)


def _compared_after(app: AppView, since: datetime) -> bool:
    return app.reconciled_at is not None and app.reconciled_at > since
