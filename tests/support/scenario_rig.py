"""One Argo CD behaviour as an end-to-end scenario: a small simulated fleet, the fleet simulator with
the scenario's behaviours, the local executor and the watcher (both in this process), and one
ProgressiveSync whose rollout the scenario follows.

Real: the control plane, the watcher, the local executor running the real step programs, the
simulator playing Argo CD (docs/simulator.md). The fleet: clusters `cells-1-eua`, `cells-2-usa`,
`cells-3-eub`, ... (regions eu and us, zones eua, usa, eub...), one Application each, named
`web-<cluster>`, owned by ApplicationSet `web`. `CANARY_STAGE` takes cells-1-eua alone, so
simulator behaviour keyed on `*-eua` is the canary's. Waiting is `wait_for` with deadlines.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from orchestrator.kube.client import (
    APPLICATION_SETS,
    APPLICATIONS,
    PROGRESSIVE_SYNCS,
    SECRETS,
    Conflict,
    Kube,
)
from orchestrator.ops import actions as ops_actions
from orchestrator.simulator.events import read_events
from orchestrator.simulator.seed import publish_refs, seed_fleet
from tests.support.outcomes import status_with_outcomes
from tests.support.simulator_events import sync_starts
from tests.support.wait import wait_for
from tests.support.watcher_harness import Actors, in_process_watcher, running_actors

APP_SET = "web"
NAME = "web"
NEW = "4f1c2e9b7a3d5c8e1f0a2b4c6d8e0f1a3b5c7d9e"
OTHER = "7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a"
OLD = "0000000000000000000000000000000000000000"
FAST = "defaults: {syncSeconds: 0.3, healthSeconds: 0.3}"
ROLLOUT_TIMEOUT = 120.0
FINISHED = ("Succeeded", "Failed", "Cancelled")

CANARY_STAGE: dict[str, Any] = {
    "name": "canary",
    "targets": {"clusters": {"selector": {"matchLabels": {"zone": "eua"}}}},
    "maxTargets": 1,
}
REST_STAGE: dict[str, Any] = {"name": "rest", "targets": {"clusters": {"selector": {}}}, "maxParallel": 2}
ALL_AT_ONCE: dict[str, Any] = {"name": "all", "targets": {"clusters": {"selector": {}}}, "maxParallel": 10}


class ScenarioRig:
    """A fleet, its actors and one ProgressiveSync; `close()` stops what it started."""

    def __init__(self, kube: Kube, namespace: str, kubeconfig: Path, workdir: Path) -> None:
        self.kube = kube
        self.namespace = namespace
        self.kubeconfig = kubeconfig
        self.events_log = workdir / "simulator-events.jsonl"
        self.clusters: tuple[str, ...] = ()
        self.apps: tuple[str, ...] = ()
        self.actors: Actors | None = None
        self._stack = contextlib.ExitStack()

    # -- the world ----------------------------------------------------------------------------

    def seed(
        self,
        clusters: int = 2,
        *,
        revision: str = NEW,
        synced: bool = False,
        sync_policy: Mapping[str, Any] | None = None,
        refs: Mapping[str, str] | None = None,
        charts: Mapping[str, Mapping[str, Sequence[str]]] | None = None,
        source: Mapping[str, Any] | None = None,
        previous_revision: str = OLD,
    ) -> ScenarioRig:
        """Seed the fleet (Applications OutOfSync at `revision`, or Synced at it; last synced at
        `previous_revision`; of `source` instead of the seed's Git source) and the simulated
        repositories (Git `refs`, chart repositories' `charts`)."""
        if refs is not None or charts is not None:
            publish_refs(self.kube, self.namespace, refs or {}, charts)
        seeded = seed_fleet(
            self.kube,
            self.namespace,
            clusters=clusters,
            regions=["eu", "us"],
            revision=revision,
            previous_revision=previous_revision,
            app_set=APP_SET,
            synced=synced,
            sync_policy=sync_policy,
            source=source,
        )
        self.clusters = tuple(c.name for c in seeded.clusters)
        self.apps = tuple(seeded.applications)
        return self

    def start(self, simulator_config: str = FAST, *, steps_kubeconfig: Path | None = None) -> ScenarioRig:
        """Start the simulator, the local executor (its steps as `steps_kubeconfig`'s user, default the
        admin) and the watcher."""
        steps = steps_kubeconfig or self.kubeconfig
        self.actors = self._stack.enter_context(
            running_actors(self.kube, self.namespace, steps, self.events_log, simulator_config)
        )
        self._stack.enter_context(in_process_watcher(self.kube, self.namespace))
        return self

    def create(
        self, stages: Sequence[Mapping[str, Any]] = (CANARY_STAGE, REST_STAGE), **spec: Any
    ) -> ScenarioRig:
        """Create the ProgressiveSync (`spec` adds fields: progressDeadlineSeconds=..., ...)."""
        body = {
            "apiVersion": "progressivesync.io/v1alpha1",
            "kind": "ProgressiveSync",
            "metadata": {"name": NAME},
            "spec": {"appSetRef": {"name": APP_SET}, "stages": list(stages), **spec},
        }
        self.kube.create(PROGRESSIVE_SYNCS, self.namespace, body)
        return self

    def close(self) -> None:
        self._stack.close()

    # -- acting --------------------------------------------------------------------------------

    def edit_app(self, name: str, edit: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        """Read, edit, write with the resourceVersion; again on 409 (the simulator writes too)."""
        for _ in range(20):
            app = self.kube.get(APPLICATIONS, self.namespace, name)
            edit(app)
            try:
                return self.kube.replace(APPLICATIONS, self.namespace, app)
            except Conflict:
                continue
        raise AssertionError(f"{name} kept conflicting")

    def annotate_cluster(self, cluster: str, annotations: Mapping[str, str]) -> None:
        """Merge annotations into a cluster Secret (simulator overrides: docs/simulator.md)."""
        self.kube.patch(
            SECRETS, self.namespace, f"cluster-{cluster}", {"metadata": {"annotations": dict(annotations)}}
        )

    def edit_app_set(self, edit: Callable[[dict[str, Any]], None]) -> None:
        for _ in range(20):
            app_set = self.kube.get(APPLICATION_SETS, self.namespace, APP_SET)
            edit(app_set)
            try:
                self.kube.replace(APPLICATION_SETS, self.namespace, app_set)
                return
            except Conflict:
                continue

    def cancel(self) -> None:
        ops_actions.cancel(self.kube, ops_actions.Target(self.namespace, NAME))

    # -- reading -------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        return status_with_outcomes(self.kube, self.namespace, NAME)

    def status_text(self) -> str:
        """The whole status as JSON: where a reason or a notice must show."""
        return json.dumps(self.status())

    def phase(self) -> str:
        return str(self.status().get("phase") or "")

    def simulator_error(self) -> BaseException | None:
        """Why the simulator stopped by itself (a crashed thread, a write refused), if it did."""
        simulator = self.actors.simulator if self.actors is not None else None
        return simulator.error if simulator is not None else None

    def wait_phase(self, *phases: str, timeout: float = ROLLOUT_TIMEOUT) -> dict[str, Any]:
        """Wait until the rollout is in one of `phases` (default: finished); its status. Fails at once
        when the simulator stopped by itself (nothing would move any more), and on a timeout shows
        the status as it was then."""
        wanted = phases or FINISHED

        def reached() -> bool:
            if (error := self.simulator_error()) is not None:
                raise AssertionError(f"the simulator stopped: {error!r}") from error
            return self.phase() in wanted

        try:
            wait_for(reached, timeout=timeout, interval=0.2, what=f"the rollout to be {' or '.join(wanted)}")
        except AssertionError as exc:
            raise AssertionError(f"{exc} (status: {self.status_text()[:2000]})") from None
        return self.status()

    def wait_status_says(self, *words: str, timeout: float = 60.0) -> str:
        """Wait until the status mentions every word (case-insensitive); the status text."""

        def says() -> str | None:
            text = self.status_text()
            return text if all(word.lower() in text.lower() for word in words) else None

        said = wait_for(says, timeout=timeout, interval=0.2, what=f"the status to say {words}")
        assert said is not None
        return said

    def app(self, name: str) -> dict[str, Any]:
        return self.kube.get(APPLICATIONS, self.namespace, name)

    def app_of(self, cluster: str) -> str:
        return f"{APP_SET}-{cluster}"

    def operation_phase(self, name: str) -> str:
        return str((self.app(name).get("status", {}).get("operationState") or {}).get("phase") or "")

    def events(self, *kinds: str) -> list[dict[str, Any]]:
        events = read_events(self.events_log)
        return [e for e in events if not kinds or e["event"] in kinds]

    def sync_starts(self) -> dict[str, int]:
        """Operations the simulated Argo CD picked up, per Application."""
        return sync_starts(read_events(self.events_log))

    def wait_operations_ended(self, timeout: float = 30.0) -> None:
        """Every Application's operation has ended (nothing we started still runs)."""

        def ended() -> bool:
            return all(
                "operation" not in app
                and self.operation_phase(app["metadata"]["name"]) not in ("Running", "Terminating")
                for app in (self.app(name) for name in self.apps)
            )

        wait_for(ended, timeout=timeout, interval=0.2, what="every operation to end")


@contextlib.contextmanager
def scenario_rig(kube: Kube, namespace: str, kubeconfig: Path, workdir: Path) -> Iterator[ScenarioRig]:
    rig = ScenarioRig(kube, namespace, kubeconfig, workdir)
    try:
        yield rig
    finally:
        rig.close()
