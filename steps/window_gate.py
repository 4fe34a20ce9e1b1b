"""The window gate: no sync is written while a window is closed (issue 35, point 3; docs/windows.md).

Two sets of windows decide whether a cluster's sync may be written now (`orchestrator.core.windows`,
one evaluator for both):

- the ProgressiveSync's own `spec.windows`, as the rollout contract carries them (the windows of
  the spec the rollout was built from; orchestrator.planning.contract);
- the `spec.syncWindows` of each Application's AppProject that match that Application, as Argo CD
  evaluates them for an automated sync (`initiatedBy.automated`, which our syncs carry): a sync
  written while one of them is closed would be held Running by Argo CD ("blocked by sync window")
  and keep a `maxParallel` slot with it (argoproj/argo-cd#29307).

`window_state` is the pure decision (open, or closed until when and why); `wait_for_window` is the
effect: before the cluster's first sync write, while closed, it notes on the cluster's record
"waiting for window: opens at <RFC3339>" (status.stages[].notes) and waits, reading the
AppProjects again and the stage's state every `Tuning.window_recheck_seconds`, until the windows
open; then it clears the note. A stage that failed meanwhile stops the wait: `sync` records the
cluster (recorded waiting) failed, as after any other of its waits, and writes nothing. The
cluster's progress deadline starts after the wait (the `sync` step's waits count from there,
`wait-healthy` from the operation's start), so the wait does not use it up. Nothing bounds the
wait but the Workflow's `activeDeadlineSeconds` (and the local
engine's run): a window that never opens holds the wave until then.

An AppProject that cannot be read (none by that name, no permission) or whose windows do not parse
is left to Argo CD (logged): it holds the sync itself, and `wait-healthy` notes `SyncWindow`.

`open_first` orders a stage's targets when `select` records them: the clusters closed then go last,
so the slots go first to the clusters that may sync (`closed_clusters` says which are closed).
`select` reads the targets' AppProjects once (`read_cluster_project_windows`) for both that order
and its first wave, which evaluates them again at the moment it writes.

Callers: `steps.sync.sync_cluster` (every cluster, in a pod of its own or in a batch),
`steps.first_wave` (which leaves a closed cluster to its own step) and `steps.select_stage` (the
order of the targets).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from orchestrator.core.clock import Clock, format_time
from orchestrator.core.windows import Window, WindowError, is_open, next_open, windows_of
from orchestrator.kube.client import APP_PROJECTS, Kube, KubeError
from steps.common import RolloutRef, Tuning

log = logging.getLogger(__name__)

# The note's opening words: what `status.stages[].notes` says while a cluster waits for a window
# (the catalog's `WaitingForWindow` notice, docs/troubleshooting.md).
WAITING_FOR_WINDOW = "waiting for window"


@dataclass(frozen=True)
class WindowState:
    """Whether a cluster's sync may be written now; when not, until when and what closes it."""

    open: bool
    opens_at: datetime | None = None  # when every window opens (None: open now, or not within a year)
    closed_by: tuple[str, ...] = ()  # the sets closed now: "spec.windows", "AppProject p (Application a)"

    @property
    def note(self) -> str:
        """The cluster's note while it waits ("" when open)."""
        if self.open:
            return ""
        when = (
            f"opens at {format_time(self.opens_at)}"
            if self.opens_at is not None
            else "does not open within a year"
        )
        return f"{WAITING_FOR_WINDOW}: {when} (closed: {', '.join(self.closed_by)})"


@dataclass(frozen=True)
class Waited:
    """How the wait for the windows ended."""

    waited: bool  # False: they were open at once
    stopped: str = ""  # why no sync may be written (the stage failed meanwhile); "" when it may


def window_state(
    rollout_windows: Sequence[Window],
    project_windows: Mapping[str, Sequence[Window]],
    apps: Sequence[Mapping[str, Any]],
    now: datetime,
) -> WindowState:
    """Pure: the rollout's windows and, for each Application, its AppProject's windows that match it
    (`project_windows` by project name; a project not there has none we know of)."""
    sets: list[tuple[str, Sequence[Window]]] = [("spec.windows", rollout_windows)]
    for app in apps:
        project = _project_of(app)
        matching = [window for window in project_windows.get(project, ()) if window.matches(app)]
        name = str((app.get("metadata") or {}).get("name") or "")
        sets.append((f"AppProject {project} (Application {name})", matching))
    closed = tuple(label for label, windows in sets if windows and not is_open(windows, now))
    if not closed:
        return WindowState(open=True)
    return WindowState(open=False, opens_at=next_open([w for _, w in sets], now), closed_by=closed)


def read_project_windows(
    kube: Kube,
    rollout: RolloutRef,
    apps: Sequence[Mapping[str, Any]],
    known: Mapping[str, tuple[Window, ...]] | None = None,
) -> dict[str, tuple[Window, ...]]:
    """The sync windows of the Applications' AppProjects (in Argo CD's namespace), by project name;
    a project that cannot be read or whose windows do not parse is left out (see the module). The
    projects in `known` (read a moment ago by the same step) are taken from there, not read again."""
    found: dict[str, tuple[Window, ...]] = dict(known or {})
    for project in sorted({_project_of(app) for app in apps} - set(found)):
        try:
            obj = kube.get(APP_PROJECTS, rollout.argocd_namespace, project)
        except KubeError as exc:
            log.info("AppProject %s: not read (%s); its sync windows are left to Argo CD", project, exc)
            continue
        try:
            found[project] = windows_of(obj)
        except WindowError as exc:
            log.warning("AppProject %s: its sync windows do not parse (%s); left to Argo CD", project, exc)
    return found


def read_cluster_project_windows(
    kube: Kube,
    rollout: RolloutRef,
    *,
    by_cluster: Mapping[str, Sequence[Mapping[str, Any]]],
    clusters: Sequence[str],
    known: Mapping[str, tuple[Window, ...]] | None = None,
) -> dict[str, tuple[Window, ...]]:
    """`read_project_windows` for the Applications of `clusters` (`by_cluster`: a cluster's
    Applications): one GET per AppProject not in `known`."""
    apps = [app for cluster in clusters for app in by_cluster.get(cluster, ())]
    return read_project_windows(kube, rollout, apps, known)


def closed_clusters(
    rollout_windows: Sequence[Window],
    project_windows: Mapping[str, Sequence[Window]],
    *,
    by_cluster: Mapping[str, Sequence[Mapping[str, Any]]],
    clusters: Sequence[str],
    now: datetime,
) -> dict[str, str]:
    """Pure: the clusters among `clusters` whose windows are closed at `now`, each with its note
    (`project_windows` as `read_cluster_project_windows` read them; `by_cluster`: a cluster's
    Applications)."""
    states = {
        cluster: window_state(rollout_windows, project_windows, by_cluster.get(cluster, ()), now)
        for cluster in clusters
    }
    return {cluster: state.note for cluster, state in states.items() if not state.open}


def open_first(targets: Sequence[str], closed: Collection[str]) -> tuple[str, ...]:
    """Pure: `targets` with the clusters in `closed` moved behind the others, each part in its own
    order. A stage's fan-out, its first wave and the chained hand-off take targets in this order,
    so while only some clusters' windows are closed (an AppProject window for some Applications) a
    `maxParallel` slot goes to a cluster that may sync now, not to a step that would wait."""
    return tuple(t for t in targets if t not in closed) + tuple(t for t in targets if t in closed)


def wait_for_window(
    kube: Kube,
    rollout: RolloutRef,
    rollout_windows: Sequence[Window],
    apps: Sequence[Mapping[str, Any]],
    *,
    clock: Clock,
    tuning: Tuning,
    note: Callable[[str], None],
    stage_check: Callable[[], str],
) -> Waited:
    """Wait until the windows let the cluster's sync be written, or the stage failed meanwhile (then
    no sync is written: `Waited.stopped` says why)."""
    noted = ""
    while True:
        state = window_state(rollout_windows, read_project_windows(kube, rollout, apps), apps, clock.now())
        if state.open:
            if noted:
                log.info("windows open: writing the sync")
                note("")
            return Waited(waited=bool(noted))
        if state.note != noted:
            log.info("%s", state.note)
            note(state.note)
            noted = state.note
        left = (
            (state.opens_at - clock.now()).total_seconds()
            if state.opens_at
            else tuning.window_recheck_seconds
        )
        clock.sleep(max(0.0, min(tuning.window_recheck_seconds, left)))
        stopped = stage_check()
        if stopped:
            return Waited(waited=True, stopped=stopped)


def _project_of(app: Mapping[str, Any]) -> str:
    return str((app.get("spec") or {}).get("project") or "default")
