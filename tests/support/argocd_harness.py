"""The real Argo CD for tests: one stack per session, one scenario (ApplicationSet + Git repo) per test.

What is real: a control plane (etcd + kube-apiserver) with our CRDs and Argo CD's own, Argo CD's
repo-server, application controller and ApplicationSet controller (built by `make tools`), redis,
`file://` Git repositories, two destination kube-apiservers behind four cluster Secrets, the
watcher and the steps. Argo Workflows is played by the local executor.

The stack runs with Argo CD's timed refresh off (`reconciliation_seconds=0`): an Application sees a
new commit only when asked (`Scenario.refresh`, what a Git webhook does), so a test decides which
Applications are behind and when, instead of racing Argo CD's timer.

`Scenario` gives each test its own repository, ApplicationSet (cluster generator over the
stack's cluster Secrets, so one Application per cluster) and ProgressiveSync names, with release 1
deployed everywhere before the test starts; closing it removes all of them. `rollout_actors` runs
the watcher (engine argo) and the local executor for one test.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.argocd.appsync import REFRESH_TIMESTAMP_ANNOTATION, refresh_requested
from orchestrator.devenv import starter_app, tools
from orchestrator.devenv.argocd import ArgoCDStack
from orchestrator.devenv.argocd_manifests import HEALTH_PROBES
from orchestrator.devenv.argocd_requests import request_sync
from orchestrator.devenv.argocd_settings import ClusterSpec
from orchestrator.devenv.gitrepo import ReleaseRepo
from orchestrator.devenv.helmrepo import HelmRepoServer
from orchestrator.engine.executor import LocalExecutor
from orchestrator.engine.executor_settings import ExecutorSettings
from orchestrator.kube.client import (
    APPLICATION_SETS,
    APPLICATIONS,
    PROGRESSIVE_SYNCS,
    Kube,
    KubeError,
    NotFound,
)
from orchestrator.watcher.loop import Watcher
from tests.support.outcomes import status_with_outcomes
from tests.support.steps_harness import steps_kubeconfig
from tests.support.wait import wait_for
from tests.support.watcher_harness import phase_of, watcher_settings

# Four Argo CD clusters on two API servers (eu-1 and us-1 on their own, eu-2 and us-2 are second
# names for the same two servers). eu-1 is the canary; `small` picks one cluster per server for the
# scenarios that need only two; `track` names the branch a cluster follows in the mixed-revision
# scenario.
STACK_CLUSTERS = (
    ClusterSpec("eu-1", {"region": "eu", "canary": "true", "small": "true", "track": "main"}),
    ClusterSpec("us-1", {"region": "us", "small": "true", "track": "stable"}),
    ClusterSpec("eu-2", {"region": "eu", "track": "main"}),
    ClusterSpec("us-2", {"region": "us", "track": "stable"}),
)
CANARY = "eu-1"
# The starter ConfigMap of every scenario (in each Application's own namespace).
SCENARIO_CONFIGMAP = "app"
SMALL = {"matchLabels": {"small": "true"}}
# For two clusters: the canary, then the other one.
CANARY_THEN_REST: list[dict[str, Any]] = [
    {
        "name": "canary",
        "targets": {"clusters": {"selector": {"matchLabels": {"canary": "true"}}}},
        "maxTargets": 1,
    },
    {"name": "the rest", "targets": {"clusters": {"selector": {}}}},
]
ROLLOUT_TIMEOUT = 240.0
CANARY_THEN_REGIONS: list[dict[str, Any]] = [
    {
        "name": "canary",
        "targets": {"clusters": {"selector": {"matchLabels": {"canary": "true"}}}},
        "maxTargets": 1,
    },
    {
        "name": "one per region",
        "targets": {"clusters": {"selector": {}}},
        "maxTargets": 2,
        "maxParallel": 2,
        "spreadBy": "region",
    },
    {"name": "the rest", "targets": {"clusters": {"selector": {}}}, "maxParallel": 1},
]


@dataclass
class Scenario:
    """One test's ApplicationSet over the stack's clusters, its Git repository and rollout objects."""

    stack: ArgoCDStack
    name: str
    repo: ReleaseRepo
    clusters: list[str]
    path: str = starter_app.APP_PATH
    configmap: str = SCENARIO_CONFIGMAP
    release_number: int = 1
    progressive_syncs: list[str] = field(default_factory=list)
    # Several Applications per cluster (a matrix of clusters x components), when set.
    components: tuple[str, ...] = ()

    @property
    def kube(self) -> Kube:
        return self.stack.kube

    @property
    def namespace(self) -> str:
        return self.stack.namespace

    def app(self, cluster: str, component: str = "") -> str:
        """The Application of `cluster` (and `component`, in a scenario with components)."""
        return starter_app.app_name(self.name, cluster, component)

    @property
    def apps(self) -> list[str]:
        if self.components:
            return [self.app(c, component) for c in self.clusters for component in self.components]
        return [self.app(cluster) for cluster in self.clusters]

    def destination_namespace(self, cluster: str, component: str = "") -> str:
        return starter_app.destination_namespace(self.name, cluster, component)

    # -- Git -------------------------------------------------------------------------------

    def commit(self, changes: Mapping[str, str | None], message: str, *, branch: str = "main") -> str:
        """Commit files under the app's path (keys are relative to it); the new SHA."""
        return self.repo.commit(
            {f"{self.path}/{name}": content for name, content in changes.items()}, message, branch=branch
        )

    def release(self, extra: Mapping[str, str | None] | None = None) -> str:
        """The next release: the ConfigMap names a new release number (plus `extra` files)."""
        self.release_number += 1
        files: dict[str, str | None] = {
            "configmap.yaml": starter_app.configmap_manifest(
                self.configmap, {"release": str(self.release_number)}
            )
        }
        files.update(extra or {})
        return self.commit(files, f"Release {self.release_number}")

    def refresh(self, clusters: Sequence[str] | None = None) -> None:
        """Ask Argo CD to compare these clusters' Applications with Git now (a Git webhook)."""
        self.stack.refresh([self.app(c) for c in (clusters or self.clusters)])

    # -- Applications ----------------------------------------------------------------------

    def application(self, cluster: str) -> dict[str, Any]:
        return self.kube.get(APPLICATIONS, self.namespace, self.app(cluster))

    def compared_revision(self, cluster: str) -> str:
        """The revision Argo CD compared `cluster`'s Application with."""
        return str(((self.application(cluster).get("status") or {}).get("sync") or {}).get("revision", ""))

    def revisions_of(self, app: str) -> list[str]:
        """What Argo CD compared Application `app` with: `status.sync.revisions` (one per source) of
        a multi-source Application, else `[status.sync.revision]` (a SHA, or a chart version)."""
        sync = (self.kube.get(APPLICATIONS, self.namespace, app).get("status") or {}).get("sync") or {}
        return compared_revisions(sync)

    def wait_first_comparison(self, timeout: float = 60) -> None:
        """Wait until every Application exists and Argo CD compared it (with any revision)."""

        def compared() -> bool:
            for app in self.stack.applications(self.apps).values():
                sync = ((app or {}).get("status") or {}).get("sync") or {}
                if sync.get("status") not in ("Synced", "OutOfSync") or not compared_revisions(sync):
                    return False
            return True

        wait_for(compared, timeout=timeout, interval=0.2, what=f"{self.apps} compared once")

    def wait_at_release(self, revisions: Sequence[str], timeout: float = 90) -> None:
        """Wait until every Application is Synced and Healthy at `revisions` (one per source), its
        operation over."""

        def at_release(app: Mapping[str, Any] | None) -> bool:
            status = (app or {}).get("status") or {}
            return (
                app is not None
                and compared_revisions(status.get("sync") or {}) == list(revisions)
                and (status.get("sync") or {}).get("status") == "Synced"
                and (status.get("health") or {}).get("status") == "Healthy"
                and not app.get("operation")
                and (status.get("operationState") or {}).get("phase") in (None, "Succeeded")
            )

        wait_for(
            lambda: all(at_release(app) for app in self.stack.applications(self.apps).values()),
            timeout=timeout,
            interval=0.3,
            what=f"{self.apps} Synced and Healthy at {list(revisions)} (Argo CD says {self.argocd_says()})",
        )

    def wait_compared_to_branches(self, timeout: float = 60) -> None:
        """Wait until every Application was compared with the head of the branch it follows."""

        def compared() -> bool:
            for cluster in self.clusters:
                try:
                    app = self.application(cluster)
                except NotFound:
                    return False
                branch = app["spec"]["source"]["targetRevision"]
                if self.compared_revision(cluster) != self.repo.head(branch):
                    return False
            return True

        wait_for(compared, timeout=timeout, interval=0.2, what=f"{self.apps} compared with Git")

    def wait_compared(
        self, revision: str, clusters: Sequence[str] | None = None, timeout: float = 60
    ) -> None:
        self.stack.wait_compared(
            [self.app(c) for c in (clusters or self.clusters)], revision, timeout=timeout
        )

    def wait_synced(self, revision: str, clusters: Sequence[str] | None = None, timeout: float = 90) -> None:
        self.stack.wait_synced([self.app(c) for c in (clusters or self.clusters)], revision, timeout=timeout)

    def wait_out_of_sync(
        self, revision: str, clusters: Sequence[str] | None = None, timeout: float = 60
    ) -> None:
        """Wait until these Applications are OutOfSync, compared with `revision`."""
        names = [self.app(c) for c in (clusters or self.clusters)]

        def behind() -> bool:
            for app in self.stack.applications(names).values():
                sync = ((app or {}).get("status") or {}).get("sync") or {}
                if sync.get("status") != "OutOfSync" or sync.get("revision") != revision:
                    return False
            return True

        wait_for(behind, timeout=timeout, interval=0.2, what=f"{names} OutOfSync at {revision[:12]}")

    # -- rollouts --------------------------------------------------------------------------

    def create_progressive_sync(
        self,
        stages: list[dict[str, Any]] | None = None,
        *,
        deadline_seconds: int = 120,
        **spec: Any,
    ) -> str:
        """Create a ProgressiveSync over this scenario's ApplicationSet; its name."""
        name = self.name
        body = {
            "apiVersion": "progressivesync.io/v1alpha1",
            "kind": "ProgressiveSync",
            "metadata": {"name": name},
            "spec": {
                "appSetRef": {"name": self.name},
                "stages": stages or CANARY_THEN_REGIONS,
                "progressDeadlineSeconds": deadline_seconds,
                **spec,
            },
        }
        self.kube.create(PROGRESSIVE_SYNCS, self.namespace, body)
        self.progressive_syncs.append(name)
        return name

    def status(self) -> dict[str, Any]:
        """The ProgressiveSync's status, every cluster of each stage listed from its
        ProgressiveSyncStage records (`targets`, `syncing`, `completed`, `failed`, `notes`)."""
        return status_with_outcomes(self.kube, self.namespace, self.name)

    def argocd_says(self) -> dict[str, dict[str, Any]]:
        """What Argo CD reports of each cluster's Application, for a failed assertion's message: the
        operation's phase and end, the last comparison's time, sync and health, and its conditions
        (a ComparisonError there leaves `reconciledAt` where it was)."""
        said: dict[str, dict[str, Any]] = {}
        for app in self.apps:
            try:
                application = self.kube.get(APPLICATIONS, self.namespace, app)
            except KubeError as exc:  # the message must not hide the failure it explains
                said[app] = {"unreadable": str(exc)}
                continue
            status = application.get("status") or {}
            operation = status.get("operationState") or {}
            said[app] = {
                "operation": [operation.get("phase"), operation.get("finishedAt")],
                "reconciledAt": status.get("reconciledAt"),
                "refreshPending": refresh_requested(application),
                # The stamp of the newest request (ours change it on each ask): a stamp that moved
                # while the request stayed pending means Argo CD heard the asks and did not answer.
                "refreshStamp": (application["metadata"].get("annotations") or {}).get(
                    REFRESH_TIMESTAMP_ANNOTATION
                ),
                "sync": (status.get("sync") or {}).get("status"),
                "revisions": compared_revisions(status.get("sync") or {}),
                "health": (status.get("health") or {}).get("status"),
                "conditions": [
                    [c.get("type"), str(c.get("message") or "")[:300]] for c in status.get("conditions") or []
                ],
            }
        return said

    def explain(self, log_lines: int = 40) -> str:
        """For a failed assertion, as text (pytest cuts a dict message at 240 characters): the
        ProgressiveSync's status with every cluster's reason, what Argo CD says of each Application,
        and the application controller's last log lines about them."""
        names = set(self.apps)
        log_path = self.stack.supervisor.log_path("argocd-application-controller")
        try:
            lines = log_path.read_text(errors="replace").splitlines()
        except OSError as exc:
            lines = [f"(no controller log: {exc})"]
        about = [line for line in lines if any(name in line for name in names)][-log_lines:]
        return "\n".join(
            [
                f"status: {json.dumps(self.status(), sort_keys=True)}",
                f"argocd: {json.dumps(self.argocd_says(), sort_keys=True)}",
                f"the application controller's last {len(about)} lines about {sorted(names)}:",
                *about,
            ]
        )

    def wait_rollout_ended(self, timeout: float = ROLLOUT_TIMEOUT) -> str:
        """Wait until a rollout was started and ended (Succeeded, Failed or Cancelled); its phase.
        Before any release the phase is Pending ("up to date"), so the phase alone says nothing."""

        def ended() -> str:
            status = self.status()
            phase = str(status.get("phase") or "")
            started = bool((status.get("rollout") or {}).get("id"))
            return phase if started and phase in ("Succeeded", "Failed", "Cancelled") else ""

        return str(wait_for(ended, timeout=timeout, interval=0.5, what=f"{self.name}'s rollout to end"))

    def wait_phase(self, *phases: str, timeout: float = ROLLOUT_TIMEOUT) -> str:
        """Wait until the ProgressiveSync's phase is one of `phases`; that phase."""
        return str(
            wait_for(
                lambda: phase if (phase := phase_of(self.kube, self.namespace, self.name)) in phases else "",
                timeout=timeout,
                interval=0.5,
                what=f"{self.name} in {phases} (status: {self.status()})",
            )
        )

    # -- clean-up --------------------------------------------------------------------------

    def close(self) -> None:
        """Delete the ProgressiveSyncs, the ApplicationSet and its Applications (no GC runs here)."""
        for name in self.progressive_syncs:
            _force_delete(self.kube, PROGRESSIVE_SYNCS, self.namespace, name)
        with contextlib.suppress(NotFound):
            self.kube.delete(APPLICATION_SETS, self.namespace, self.name)
        for app in self.apps:
            _force_delete(self.kube, APPLICATIONS, self.namespace, app)


def compared_revisions(sync: Mapping[str, Any]) -> list[str]:
    """`status.sync`'s revision(s) as a list: `revisions` (multi-source) or `[revision]`."""
    if sync.get("revisions"):
        return [str(revision) for revision in sync["revisions"]]
    return [str(sync["revision"])] if sync.get("revision") else []


def _force_delete(kube: Kube, resource: Any, namespace: str, name: str) -> None:
    """Delete an object, dropping its finalizers (the controller that owns them is gone by now)."""
    with contextlib.suppress(NotFound):
        obj = kube.get(resource, namespace, name)
        if (obj.get("metadata") or {}).get("finalizers"):
            kube.patch(resource, namespace, name, {"metadata": {"finalizers": None}})
        kube.delete(resource, namespace, name)


def new_scenario(
    stack: ArgoCDStack,
    *,
    selector: Mapping[str, Any] | None = None,
    files: Mapping[str, str] | None = None,
    branches: Sequence[str] = (),
    app_set_changes: Mapping[str, Any] | None = None,
    bootstrap: bool = True,
    prefix: str = "s",
    sources: Callable[[ReleaseRepo], Sequence[Mapping[str, Any]]] | None = None,
    components: Sequence[str] = (),
    name: str = "",
) -> Scenario:
    """A fresh repository and ApplicationSet over the clusters `selector` matches (all by default),
    whose Applications run release 1 (when `bootstrap`: each synced once, by `test-bootstrap`, to
    what Argo CD first compared it with). `files` replace the starter ConfigMap; `branches` are more
    branches starting at release 1; `sources(repo)` gives the Applications' sources instead of the
    repository's app folder (a Helm chart, a chart with values from the repository); `components`
    make one Application per cluster and component (`{{component}}` in the path names its folder).
    `name` is the ApplicationSet's (a fresh one by default)."""
    name = name or f"{prefix}-{uuid.uuid4().hex[:6]}"
    path = starter_app.APP_PATH
    initial = {f"{path}/{k}": v for k, v in (files or {}).items()} or starter_app.release_files(
        1, path=path, app=SCENARIO_CONFIGMAP
    )
    repo = ReleaseRepo.create(stack.workdir / "repos" / f"{name}.git", initial, message="Release 1")
    for branch in branches:
        repo.commit({}, f"Branch {branch}", branch=branch, base="main")
    labels = dict((selector or {}).get("matchLabels") or {})
    clusters = [c.name for c in stack.clusters if all(c.labels.get(k) == v for k, v in labels.items())]
    scenario = Scenario(stack, name, repo, clusters, path, components=tuple(components))
    app_set = starter_app.application_set(
        name,
        repo_url=repo.url,
        path=f"{path}/{starter_app.COMPONENT_PARAMETER}" if components else path,
        selector=selector,
        sources=sources(repo) if sources else (),
        components=components,
        **(app_set_changes or {}),
    )
    stack.create_app_set(app_set)
    try:
        if sources or components:
            scenario.wait_first_comparison()
            if bootstrap:
                first = {app: scenario.revisions_of(app) for app in scenario.apps}
                for app, revisions in first.items():
                    request_sync(
                        stack.kube, stack.namespace, app, revisions=revisions, username="test-bootstrap"
                    )
                for app, revisions in first.items():
                    stack.wait_synced([app], revisions)
            return scenario
        scenario.wait_compared_to_branches()
        if bootstrap:
            for cluster in scenario.clusters:
                revision = scenario.compared_revision(cluster)
                request_sync(
                    stack.kube,
                    stack.namespace,
                    scenario.app(cluster),
                    revision=revision,
                    username="test-bootstrap",
                )
            for cluster in scenario.clusters:
                scenario.wait_synced(scenario.compared_revision(cluster), [cluster])
    except BaseException:
        scenario.close()
        raise
    return scenario


@contextlib.contextmanager
def scenario_of(stack: ArgoCDStack, **kwargs: Any) -> Iterator[Scenario]:
    """`with scenario_of(stack) as scenario:` a new scenario, removed at the end."""
    scenario = new_scenario(stack, **kwargs)
    try:
        yield scenario
    finally:
        scenario.close()


@contextlib.contextmanager
def rollout_actors(stack: ArgoCDStack, workdir: Path, **watcher_changes: Any) -> Iterator[Watcher]:
    """The watcher (engine argo) and the local executor (playing Argo Workflows) for one test;
    `watcher_changes` change the watcher's settings (e.g. allow_prune=True)."""
    kubeconfig = steps_kubeconfig(stack.control_plane, stack.kube)
    executor = LocalExecutor(
        stack.kube,
        ExecutorSettings(
            kubeconfig=kubeconfig,
            namespace=stack.namespace,
            workdir=workdir / "executor",
            watch_timeout_seconds=30,
            kill_grace_seconds=3.0,
        ),
    ).start()
    try:
        watcher = Watcher(stack.kube, watcher_settings(stack.namespace, **watcher_changes)).start()
        try:
            yield watcher
        finally:
            watcher.stop(timeout=15)
    finally:
        executor.stop(timeout=15)


# --- a Helm chart repository -------------------------------------------------------------------------

CHART = "myservice"
# The chart's ConfigMap: the chart version, and the release its values name.
CHART_CONFIGMAP = f"""\
apiVersion: v1
kind: ConfigMap
metadata:
  name: {SCENARIO_CONFIGMAP}
data:
  chart: "{{{{ .Chart.Version }}}}"
  release: "{{{{ .Values.release }}}}"
"""


def publish_chart(repo: HelmRepoServer, version: str, *, probe: bool = False) -> None:
    """Publish chart `myservice` at `version` (its ConfigMap; a HealthProbe `probe` too when `probe`)."""
    templates = {"configmap.yaml": CHART_CONFIGMAP}
    if probe:
        templates["probe.yaml"] = starter_app.probe_manifest("probe")
    repo.publish(CHART, version, templates, values={"release": "chart-default"})


@contextlib.contextmanager
def chart_repository(workdir: Path, first: str = "1.2.3") -> Iterator[HelmRepoServer]:
    """A Helm chart repository on 127.0.0.1 holding chart `myservice` at version `first`."""
    try:
        helm = tools.binary("helm")
    except tools.ToolsMissing as exc:
        raise AssertionError(
            f"{exc}\n(`make test` builds the tools and sets PROGRESSIVE_SYNC_TOOLS_DIR.)"
        ) from exc
    with HelmRepoServer.start(workdir, helm=helm) as repo:
        publish_chart(repo, first)
        yield repo


# --- driving health on the destination clusters -----------------------------------------------------


class ProbeDriver:
    """Plays the workload behind each cluster's HealthProbe: once Argo CD created the probe, walk it
    through a script of (health, seconds) steps; the last step's health stays.

    `scripts` maps cluster -> steps, e.g. {"eu-1": [("Degraded", 5), ("Healthy", 0)]}; a step with
    seconds None holds until `release(cluster)` is called. Runs on its own thread; `stop()` ends it.
    """

    def __init__(
        self,
        scenario: Scenario,
        scripts: Mapping[str, Sequence[tuple[str, float | None]]],
        probe: str = "probe",
    ) -> None:
        self.scenario = scenario
        self.scripts = {cluster: list(steps) for cluster, steps in scripts.items()}
        self.probe = probe
        self.applied: dict[str, list[str]] = {cluster: [] for cluster in scripts}
        self._released: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="probe-driver", daemon=True)
        self.error: BaseException | None = None

    def __enter__(self) -> ProbeDriver:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(15)
        if self.error is not None and exc_info[0] is None:
            raise self.error

    def release(self, cluster: str) -> None:
        """End a step held with seconds None."""
        self._released.add(cluster)

    def _run(self) -> None:
        positions = dict.fromkeys(self.scripts, 0)
        step_started: dict[str, float] = {}
        try:
            while not self._stop.wait(0.2):
                for cluster, steps in self.scripts.items():
                    index = positions[cluster]
                    if index >= len(steps):
                        continue
                    health, seconds = steps[index]
                    if cluster not in step_started:
                        if not self._probe_exists(cluster):
                            continue
                        self._set(cluster, health)
                        step_started[cluster] = time.monotonic()
                        continue
                    held = time.monotonic() - step_started[cluster]
                    done = cluster in self._released if seconds is None else held >= seconds
                    if done and index + 1 < len(steps):
                        positions[cluster] = index + 1
                        self._released.discard(cluster)
                        self._set(cluster, steps[index + 1][0])
                        step_started[cluster] = time.monotonic()
        except BaseException as exc:
            self.error = exc

    def _probe_exists(self, cluster: str) -> bool:
        kube = self.scenario.stack.cluster_kube(cluster)
        try:
            kube.get(HEALTH_PROBES, self.scenario.destination_namespace(cluster), self.probe)
        except NotFound:
            return False
        return True

    def _set(self, cluster: str, health: str) -> None:
        self.scenario.stack.set_probe_health(
            cluster,
            self.scenario.destination_namespace(cluster),
            self.probe,
            health,
            f"set by the test: {health}",
        )
        self.applied[cluster].append(health)
