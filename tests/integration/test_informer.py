"""The informer against the real API server: resume, bookmarks, 410 re-list, dropped streams, stop.

Real: kube-apiserver + etcd (the session control plane, and for the 410 case a second one started
with `--watch-cache=false` so a watch from a compacted resourceVersion reaches etcd and gets 410).
ConfigMaps stand in for any resource: the loop does not care about the kind. Waiting on an operator
uses a throwaway CRD (installed, removed, reinstalled) and a minted user whose RoleBinding the test
creates, removes and restores.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from orchestrator.devenv import controlplane as devcluster
from orchestrator.kube.client import NAMESPACES, Kube, KubeSettings, NotFound, Resource
from orchestrator.kube.endpoint import Endpoint
from orchestrator.kube.informer import (
    Change,
    ChangeType,
    Informer,
    InformerFailed,
    InformerSettings,
    run_in_thread,
)
from orchestrator.kube.transport import Transport
from orchestrator.kube.watchloop import CRD_MISSING, FORBIDDEN, Blocked
from tests.support import etcd
from tests.support.wait import wait_for

pytestmark = pytest.mark.integration

CONFIG_MAPS = Resource("", "v1", "configmaps", "ConfigMap")

Slim = tuple[str, tuple[tuple[str, str], ...]]


def slim_config_map(obj: dict[str, Any]) -> Slim | None:
    """Name and data; ConfigMaps labelled ignore=yes are not cached (like unowned Applications)."""
    if (obj["metadata"].get("labels") or {}).get("ignore") == "yes":
        return None
    return obj["metadata"]["name"], tuple(sorted((obj.get("data") or {}).items()))


def config_map(name: str, value: str = "0", **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels},
        "data": {"value": value},
    }


class Recorder:
    """Collects changes on the informer thread; can hold the thread still to make the informer blind."""

    def __init__(self) -> None:
        self.changes: list[Change[Slim]] = []
        self.lock = threading.Lock()
        self.hold = threading.Event()
        self.released = threading.Event()
        self.released.set()

    def __call__(self, change: Change[Slim]) -> None:
        with self.lock:
            self.changes.append(change)
        if self.hold.is_set():
            self.hold.clear()
            self.released.clear()
            self.released.wait(60)

    def seen(self, kind: ChangeType | None = None) -> list[tuple[ChangeType, str, Slim | None]]:
        with self.lock:
            return [(c.type, c.key[1], c.new) for c in self.changes if kind is None or c.type == kind]


@pytest.fixture
def running() -> Iterator[list[tuple[Informer[Any], threading.Event, threading.Thread]]]:
    """Informers started by a test; stopped (and checked to stop promptly) afterwards."""
    started: list[tuple[Informer[Any], threading.Event, threading.Thread]] = []
    yield started
    for informer, stop, _ in started:
        stop.set()
        informer.stop_stream()
    for _, _, thread in started:
        thread.join(timeout=10)
        assert not thread.is_alive()


def start(
    started: list[tuple[Informer[Any], threading.Event, threading.Thread]],
    kube: Kube,
    namespace: str,
    recorder: Recorder,
    settings: InformerSettings,
) -> Informer[Slim]:
    informer: Informer[Slim] = Informer(
        kube, CONFIG_MAPS, namespace, slim=slim_config_map, handler=recorder, settings=settings
    )
    stop = threading.Event()
    failures: list[BaseException] = []
    thread = run_in_thread(informer, stop, failures.append)
    started.append((informer, stop, thread))
    return informer


def test_lists_then_follows_every_transition_across_server_closed_streams(
    kube: Kube, namespace: str, running: list[Any]
) -> None:
    kube.create(CONFIG_MAPS, namespace, config_map("a"))
    recorder = Recorder()
    # The server ends every stream after 1 s: the loop must resume from the last resourceVersion
    # many times, without a re-list, without losing or repeating an event.
    informer = start(running, kube, namespace, recorder, InformerSettings(watch_timeout_seconds=1))
    wait_for(informer.synced.is_set, what="the first list")
    deadline = time.monotonic() + 4
    value = 0
    while time.monotonic() < deadline:
        value += 1
        current = kube.get(CONFIG_MAPS, namespace, "a")
        current["data"]["value"] = str(value)
        kube.replace(CONFIG_MAPS, namespace, current)
        time.sleep(0.05)  # pacing the writer, not waiting for a result
    kube.create(CONFIG_MAPS, namespace, config_map("b"))
    kube.delete(CONFIG_MAPS, namespace, "b")
    wait_for(lambda: ("DELETED", "b") in [(t.value, n) for t, n, _ in recorder.seen()], what="b's deletion")

    modified = [new for kind, name, new in recorder.seen(ChangeType.MODIFIED) if name == "a"]
    assert [int(dict(item[1])["value"]) for item in modified if item] == list(range(1, value + 1))
    assert recorder.seen(ChangeType.ADDED) == [
        (ChangeType.ADDED, "a", ("a", (("value", "0"),))),
        (ChangeType.ADDED, "b", ("b", (("value", "0"),))),
    ]
    assert informer.stats.lists == 1, "a server-closed stream is resumed, never re-listed"
    assert informer.stats.watches >= 3
    assert informer.get((namespace, "a")) == ("a", (("value", str(value)),))
    assert informer.get((namespace, "b")) is None


def test_bookmarks_move_the_resume_point(kube: Kube, namespace: str, running: list[Any]) -> None:
    kube.create(CONFIG_MAPS, namespace, config_map("a"))
    recorder = Recorder()
    # The API server sends a bookmark about 2 s before a stream's timeout.
    informer = start(running, kube, namespace, recorder, InformerSettings(watch_timeout_seconds=4))
    wait_for(informer.synced.is_set, what="the first list")
    listed_at = int(informer.resource_version)
    # Writes elsewhere move the global resourceVersion; only a bookmark tells this informer.
    kube.create(CONFIG_MAPS, "default", config_map(f"elsewhere-{time.monotonic_ns()}"))
    wait_for(lambda: informer.stats.bookmarks >= 1, timeout=15, what="a bookmark")
    wait_for(lambda: int(informer.resource_version) > listed_at, timeout=15, what="the resume point to move")
    assert recorder.seen(ChangeType.MODIFIED) == []


def test_unrelated_objects_and_unchanged_slim_values_wake_nobody(
    kube: Kube, namespace: str, running: list[Any]
) -> None:
    recorder = Recorder()
    informer = start(running, kube, namespace, recorder, InformerSettings(watch_timeout_seconds=30))
    wait_for(informer.synced.is_set, what="the first list")
    kube.create(CONFIG_MAPS, namespace, config_map("ignored", ignore="yes"))
    kube.create(CONFIG_MAPS, namespace, config_map("a"))
    # A label change does not change the slim value: no MODIFIED.
    kube.patch(CONFIG_MAPS, namespace, "a", {"metadata": {"labels": {"unrelated": "x"}}})
    # Becoming ignored reads as a deletion, and back as an addition.
    kube.patch(CONFIG_MAPS, namespace, "a", {"metadata": {"labels": {"ignore": "yes"}}})
    kube.patch(CONFIG_MAPS, namespace, "a", {"metadata": {"labels": {"ignore": "no"}}})
    wait_for(lambda: len(recorder.seen()) >= 3, what="three changes")
    assert [(kind.value, name) for kind, name, _ in recorder.seen()] == [
        ("ADDED", "a"),
        ("DELETED", "a"),
        ("ADDED", "a"),
    ]
    assert len(informer) == 1


def test_resync_reports_every_cached_object_again(kube: Kube, namespace: str, running: list[Any]) -> None:
    for name in ("a", "b", "c"):
        kube.create(CONFIG_MAPS, namespace, config_map(name))
    recorder = Recorder()
    informer = start(running, kube, namespace, recorder, InformerSettings(watch_timeout_seconds=30))
    wait_for(informer.synced.is_set, what="the first list")
    assert informer.resync() == 3
    assert sorted(name for _, name, _ in recorder.seen(ChangeType.RESYNC)) == ["a", "b", "c"]


def test_a_dropped_connection_is_resumed_without_a_relist(
    kube: Kube, namespace: str, running: list[Any], caplog: pytest.LogCaptureFixture
) -> None:
    recorder = Recorder()
    informer = start(running, kube, namespace, recorder, InformerSettings(watch_timeout_seconds=60))
    wait_for(informer.synced.is_set, what="the first list")
    wait_for(lambda: informer._loop._close_stream is not None, what="the watch stream to open")
    informer.stop_stream()  # the connection dies under the loop (not a stop)
    # stop_stream is shutdown(SHUT_RD): on Linux data that reaches the socket before the loop's next
    # read is still returned, so an event written now may come on the old stream (seen at once,
    # before the loop notices the end and opens the next one) or on the resumed one. Either way it
    # must be seen exactly once.
    kube.create(CONFIG_MAPS, namespace, config_map("during-drop"))
    # The resumed stream: counted, and accepted by the server.
    wait_for(lambda: informer.stats.watches >= 2, what="the loop to resume after the drop")
    wait_for(lambda: informer._loop._close_stream is not None, what="the resumed stream to open")
    kube.create(CONFIG_MAPS, namespace, config_map("after-drop"))
    wait_for(lambda: informer.get((namespace, "after-drop")) is not None, what="the event after the drop")
    assert informer.get((namespace, "during-drop")) is not None
    assert informer.stats.lists == 1, "a dropped stream is resumed from its resourceVersion, never re-listed"
    assert [name for kind, name, _ in recorder.seen(ChangeType.ADDED)] == ["during-drop", "after-drop"]


def test_stop_ends_a_quiet_stream_at_once(kube: Kube, namespace: str) -> None:
    recorder = Recorder()
    informer: Informer[Slim] = Informer(
        kube,
        CONFIG_MAPS,
        namespace,
        slim=slim_config_map,
        handler=recorder,
        settings=InformerSettings(watch_timeout_seconds=300),
    )
    stop = threading.Event()
    thread = run_in_thread(informer, stop, lambda exc: None)
    wait_for(lambda: informer._loop._close_stream is not None, what="the watch stream to open")
    stop.set()
    informer.stop_stream()
    # The stream's own timeout is 300 s: ending within 30 s (generous for a loaded machine) can
    # only mean the stop closed the stream.
    thread.join(timeout=30)
    assert not thread.is_alive(), "a clean stop must not wait for the stream's timeout"


def test_failures_back_off_along_the_tuple_then_give_up(caplog: pytest.LogCaptureFixture) -> None:
    port = devcluster.free_port()  # nothing listens there
    kube = Kube(
        Transport(Endpoint(host=f"http://127.0.0.1:{port}")),
        KubeSettings(connect_timeout=0.5, retry_backoffs=()),
    )
    informer: Informer[Slim] = Informer(
        kube,
        CONFIG_MAPS,
        "nowhere",
        slim=slim_config_map,
        handler=Recorder(),
        settings=InformerSettings(backoffs=(0.01, 0.02, 0.03)),
    )
    with (
        caplog.at_level(logging.WARNING, logger="orchestrator.kube.watchloop"),
        pytest.raises(InformerFailed) as failed,
    ):
        informer.run(threading.Event())
    messages = [r.getMessage() for r in caplog.records if r.name == "orchestrator.kube.watchloop"]
    assert [m.split(" failed")[0] for m in messages] == [
        "configmaps@nowhere: attempt 1/4",
        "configmaps@nowhere: attempt 2/4",
        "configmaps@nowhere: attempt 3/4",
    ]
    assert "retrying in 0.0s" in messages[0]
    assert "attempt 4/4" in str(failed.value)
    kube.close()


# --- 410 Gone -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def uncached_cluster() -> Iterator[devcluster.DevCluster]:
    """A control plane whose watches go straight to etcd, so a compacted resourceVersion answers 410."""
    with devcluster.running(extra_apiserver_args=["--watch-cache=false"]) as cluster:
        yield cluster


def test_gone_relists_and_reports_what_changed_while_blind(
    uncached_cluster: devcluster.DevCluster, running: list[Any]
) -> None:
    kube = Kube.from_kubeconfig(str(uncached_cluster.kubeconfig))
    namespace = "gone"
    kube.create(NAMESPACES, None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    kube.create(CONFIG_MAPS, namespace, config_map("kept"))
    kube.create(CONFIG_MAPS, namespace, config_map("deleted-while-blind"))
    recorder = Recorder()
    recorder.hold.set()  # the first reported change holds the informer between its list and its watch
    informer = start(running, kube, namespace, recorder, InformerSettings(watch_timeout_seconds=30))
    wait_for(lambda: not recorder.released.is_set(), what="the informer to be held after its list")

    kept = kube.get(CONFIG_MAPS, namespace, "kept")
    kept["data"]["value"] = "changed-while-blind"
    kube.replace(CONFIG_MAPS, namespace, kept)
    kube.delete(CONFIG_MAPS, namespace, "deleted-while-blind")
    kube.create(CONFIG_MAPS, namespace, config_map("added-while-blind"))
    etcd.compact(uncached_cluster.etcd_url)
    recorder.released.set()

    wait_for(lambda: informer.stats.relists_after_gone >= 1, what="a 410 and a re-list")
    wait_for(lambda: informer.get((namespace, "added-while-blind")) is not None, what="the re-list's diff")
    after_gone = [(kind.value, name) for kind, name, _ in recorder.seen()][2:]
    assert sorted(after_gone) == [
        ("ADDED", "added-while-blind"),
        ("DELETED", "deleted-while-blind"),
        ("MODIFIED", "kept"),
    ]
    assert informer.get((namespace, "kept")) == ("kept", (("value", "changed-while-blind"),))
    assert informer.get((namespace, "deleted-while-blind")) is None

    # And the loop carries on watching from the re-list's resourceVersion.
    kube.create(CONFIG_MAPS, namespace, config_map("after"))
    wait_for(lambda: informer.get((namespace, "after")) is not None, what="an event after the re-list")
    assert informer.stats.lists == 2


# --- waiting on an operator: a missing CRD, a removed permission (issue 18) ----------------------

CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition")
ROLES = Resource("rbac.authorization.k8s.io", "v1", "roles", "Role")
ROLE_BINDINGS = Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding")
# Ordinary failures would give up after 4 attempts in a row (well under a second): the waits below
# outlast that many times over, so only the "wait and say so" rule keeps the informer alive.
IMPATIENT = InformerSettings(watch_timeout_seconds=2, backoffs=(0.05, 0.1, 0.2))


class BlockedLog:
    """What `on_blocked` said, in order (None: resumed)."""

    def __init__(self) -> None:
        self.said: list[str | None] = []

    def __call__(self, informer: Informer[Any], blocked: Blocked | None) -> None:
        self.said.append(None if blocked is None else blocked.reason)


def crd_body(group: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"widgets.{group}"},
        "spec": {
            "group": group,
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                    },
                }
            ],
        },
    }


def install_crd(kube: Kube, group: str) -> None:
    kube.create(CRDS, None, crd_body(group))

    def established() -> bool:
        conditions = (kube.get(CRDS, None, f"widgets.{group}").get("status") or {}).get("conditions") or []
        return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)

    wait_for(established, timeout=30, what=f"widgets.{group} to be established")


def remove_crd(kube: Kube, group: str) -> None:
    kube.delete(CRDS, None, f"widgets.{group}")

    def gone() -> bool:
        try:
            kube.get(CRDS, None, f"widgets.{group}")
        except NotFound:
            return True
        return False

    wait_for(gone, timeout=60, what=f"widgets.{group} to be removed")


def start_blockable(
    started: list[tuple[Informer[Any], threading.Event, threading.Thread]],
    kube: Kube,
    resource: Resource,
    namespace: str,
    said: BlockedLog,
) -> tuple[Informer[Slim], list[BaseException]]:
    informer: Informer[Slim] = Informer(
        kube,
        resource,
        namespace,
        slim=slim_config_map,
        handler=Recorder(),
        settings=IMPATIENT,
        on_blocked=said,
    )
    stop = threading.Event()
    failures: list[BaseException] = []
    started.append((informer, stop, run_in_thread(informer, stop, failures.append)))
    return informer, failures


def test_a_missing_crd_waits_says_so_and_resumes_when_installed_again(
    kube: Kube, namespace: str, running: list[Any], caplog: pytest.LogCaptureFixture
) -> None:
    group = f"{namespace}.faults.example.com"
    widgets = Resource(group, "v1", "widgets", "Widget")
    said = BlockedLog()
    with caplog.at_level(logging.WARNING, logger="orchestrator.kube.watchloop"):
        informer, failures = start_blockable(running, kube, widgets, namespace, said)
        wait_for(
            lambda: informer.stats.failures >= 12, timeout=60, what="a dozen attempts on the missing CRD"
        )
    assert not failures, "a missing CRD is waited for, not given up on"
    assert informer.blocked is not None and informer.blocked.reason == CRD_MISSING
    assert not informer.usable
    assert said.said == [CRD_MISSING], "said once, not once per attempt"
    said_lines = [r.getMessage() for r in caplog.records if CRD_MISSING in r.getMessage()]
    assert len(said_lines) == 1
    assert f"the CustomResourceDefinition widgets.{group} is not installed" in said_lines[0]

    try:
        install_crd(kube, group)
        wait_for(lambda: informer.usable, timeout=30, what="the informer to list once the CRD is there")
        kube.create(widgets, namespace, {**config_map("w1"), "apiVersion": f"{group}/v1", "kind": "Widget"})
        wait_for(lambda: informer.get((namespace, "w1")) is not None, timeout=30, what="w1 in the cache")
        assert said.said == [CRD_MISSING, None]

        # Removed at run time: the objects go with it, the informer waits again and says so.
        remove_crd(kube, group)
        wait_for(lambda: informer.blocked is not None, timeout=30, what="the informer to notice the removal")
        assert informer.get((namespace, "w1")) is None
        install_crd(kube, group)
        wait_for(lambda: informer.usable, timeout=30, what="the informer to resume after reinstall")
        assert not failures
        assert said.said == [CRD_MISSING, None, CRD_MISSING, None]
    finally:
        with contextlib.suppress(NotFound):
            kube.delete(CRDS, None, f"widgets.{group}")


def test_a_removed_permission_waits_says_so_and_resumes_when_granted_again(
    control_plane: devcluster.DevCluster, kube: Kube, namespace: str, running: list[Any]
) -> None:
    user = f"reader-{namespace}"[:60]
    as_user = Kube.from_kubeconfig(str(control_plane.mint_user(user)))
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "read-config-maps"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]}],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "read-config-maps"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "read-config-maps"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }
    kube.create(ROLES, namespace, role)
    kube.create(CONFIG_MAPS, namespace, config_map("a"))
    said = BlockedLog()
    try:
        informer, failures = start_blockable(running, as_user, CONFIG_MAPS, namespace, said)
        wait_for(lambda: informer.stats.failures >= 12, timeout=60, what="a dozen forbidden attempts")
        assert informer.blocked is not None and informer.blocked.reason == FORBIDDEN
        assert f"forbidden to list configmaps in namespace {namespace}" in informer.blocked.message

        kube.create(ROLE_BINDINGS, namespace, binding)
        wait_for(lambda: informer.usable, timeout=30, what="the informer to list once granted")
        assert informer.get((namespace, "a")) is not None

        # Removed mid-run: the open stream runs to its 2 s end, the next watch is refused.
        kube.delete(ROLE_BINDINGS, namespace, "read-config-maps")
        wait_for(lambda: informer.blocked is not None, timeout=30, what="the informer to meet the 403")
        assert informer.blocked is not None and informer.blocked.reason == FORBIDDEN
        assert informer.get((namespace, "a")) is not None, "the cache is kept (stale) while waiting"
        kube.create(ROLE_BINDINGS, namespace, binding)
        wait_for(lambda: informer.usable, timeout=30, what="the informer to resume once granted again")
        kube.create(CONFIG_MAPS, namespace, config_map("b"))
        wait_for(lambda: informer.get((namespace, "b")) is not None, timeout=30, what="b in the cache")
        assert not failures, "a 403 is waited for, not given up on"
        assert said.said == [FORBIDDEN, None, FORBIDDEN, None]
    finally:
        as_user.close()
