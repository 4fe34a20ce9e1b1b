"""The local control plane is the real thing: schema validation, RBAC, conflicts, watches, teardown."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from typing import Any

import psutil
import pytest

from orchestrator.devenv import controlplane as devcluster
from orchestrator.kube.client import (
    NAMESPACES,
    Conflict,
    Forbidden,
    Invalid,
    Kube,
    Resource,
    WatchEvent,
)
from orchestrator.kube.crds import apply_crds
from tests.support.apiserver_memory import TEST_APISERVER_MEMORY_LIMIT
from tests.support.wait import wait_for

pytestmark = pytest.mark.integration

WIDGETS = Resource("test.progressivesync.io", "v1", "widgets", "Widget")
WIDGET_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.test.progressivesync.io"},
    "spec": {
        "group": "test.progressivesync.io",
        "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "listKind": "WidgetList"},
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "required": ["size"],
                                "properties": {"size": {"type": "integer", "minimum": 1}},
                            }
                        },
                    }
                },
            }
        ],
    },
}


def widget(name: str, size: Any = 1) -> dict[str, Any]:
    return {
        "apiVersion": "test.progressivesync.io/v1",
        "kind": "Widget",
        "metadata": {"name": name},
        "spec": {"size": size},
    }


@pytest.fixture(scope="module")
def widgets(kube: Kube) -> Resource:
    apply_crds(kube, [WIDGET_CRD])
    return WIDGETS


def test_schema_violation_is_rejected_with_the_field_named(
    kube: Kube, widgets: Resource, namespace: str
) -> None:
    with pytest.raises(Invalid) as caught:
        kube.create(widgets, namespace, widget("too-small", size=0))
    assert caught.value.status == 422
    assert "spec.size" in str(caught.value)


def test_rbac_denies_and_allows_a_restricted_user(
    control_plane: devcluster.DevCluster, kube: Kube, widgets: Resource, namespace: str
) -> None:
    kube.create(
        Resource("rbac.authorization.k8s.io", "v1", "roles", "Role"),
        namespace,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "widget-reader"},
            "rules": [
                {"apiGroups": ["test.progressivesync.io"], "resources": ["widgets"], "verbs": ["get", "list"]}
            ],
        },
    )
    kube.create(
        Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding"),
        namespace,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "widget-reader"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "widget-reader"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "reader"}],
        },
    )
    kube.create(widgets, namespace, widget("visible"))
    reader = Kube.from_kubeconfig(str(control_plane.mint_user("reader", ["readers"])))
    try:
        # RoleBindings take effect through the authorizer's informer: wait until the grant is seen.
        wait_for(
            lambda: _can_get(reader, widgets, namespace, "visible"), what="reader allowed to get widgets"
        )
        assert reader.get(widgets, namespace, "visible")["spec"]["size"] == 1
        with pytest.raises(Forbidden):
            reader.create(widgets, namespace, widget("not-allowed"))
        with pytest.raises(Forbidden):
            reader.list(NAMESPACES, None)
    finally:
        reader.close()


def _can_get(client: Kube, resource: Resource, namespace: str, name: str) -> bool:
    try:
        client.get(resource, namespace, name)
    except Forbidden:
        return False
    return True


def test_update_with_stale_resource_version_conflicts(kube: Kube, widgets: Resource, namespace: str) -> None:
    created = kube.create(widgets, namespace, widget("contended"))
    first = dict(created, spec={"size": 2})
    kube.replace(widgets, namespace, first)
    stale = dict(created, spec={"size": 3})  # still carries the original resourceVersion
    with pytest.raises(Conflict):
        kube.replace(widgets, namespace, stale)
    assert kube.get(widgets, namespace, "contended")["spec"]["size"] == 2


def test_watch_delivers_added_modified_deleted_in_order(
    kube: Kube, widgets: Resource, namespace: str
) -> None:
    _, list_rv = kube.list(widgets, namespace)
    seen: list[WatchEvent] = []
    done = threading.Event()

    def follow() -> None:
        for event in kube.watch(widgets, namespace, resource_version=list_rv, timeout_seconds=30):
            if event.type == "BOOKMARK":
                continue
            seen.append(event)
            if event.type == "DELETED":
                done.set()
                return

    watcher = threading.Thread(target=follow, daemon=True)
    watcher.start()
    created = kube.create(widgets, namespace, widget("watched"))
    kube.replace(widgets, namespace, dict(created, spec={"size": 5}))
    kube.delete(widgets, namespace, "watched")
    assert done.wait(30), f"no DELETED event; saw {[e.type for e in seen]}"
    assert [event.type for event in seen] == ["ADDED", "MODIFIED", "DELETED"]
    assert [event.object["metadata"]["name"] for event in seen] == ["watched"] * 3
    assert seen[1].object["spec"]["size"] == 5


def test_stopping_leaves_no_process_and_no_temp_dir() -> None:
    cluster = devcluster.DevCluster.start()
    pids = cluster.pids
    workdir = cluster.workdir
    children = [child.pid for pid in pids for child in psutil.Process(pid).children(recursive=True)]
    assert len(pids) == 2
    cluster.stop()
    for pid in [*pids, *children]:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, pid
    assert not workdir.exists()


def test_the_api_server_runs_with_the_dev_stacks_gc_settings(control_plane: devcluster.DevCluster) -> None:
    """The session's API server (started like every dev-stack one) got the GC settings of
    `APISERVER_GO_ENVIRONMENT` with the session planes' memory limit, or the caller's own where this
    process sets them."""
    processes = [psutil.Process(pid) for pid in control_plane.pids]
    [apiserver] = [process for process in processes if process.name() == "kube-apiserver"]
    environment = apiserver.environ()
    assert control_plane.apiserver_memory_limit == TEST_APISERVER_MEMORY_LIMIT
    expected = {**devcluster.APISERVER_GO_ENVIRONMENT, "GOMEMLIMIT": control_plane.apiserver_memory_limit}
    for name, value in expected.items():
        assert environment.get(name) == os.environ.get(name, value), name


def test_an_api_server_port_taken_before_it_listens_is_traded_for_another(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """CI saw kube-apiserver exit with "bind: address already in use": another process took the port
    `free_port` had found free before the API server listened on it. It is started again on another
    port, and the kubeconfig names the port it serves on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as thief:
        thief.bind(("127.0.0.1", 0))
        thief.listen()
        taken = thief.getsockname()[1]
        choices = iter([taken])
        real_free_port = devcluster.free_port
        monkeypatch.setattr(devcluster, "free_port", lambda: next(choices, None) or real_free_port())
        cluster = devcluster.DevCluster.start()
    try:
        assert cluster.api_port != taken
        assert "address already in use" in (cluster.workdir / "kube-apiserver.log").read_text()
        assert len(cluster.pids) == 2, "the API server that lost its port is not kept"
        kube = Kube.from_kubeconfig(str(cluster.kubeconfig))
        assert kube.get(NAMESPACES, None, "default")["metadata"]["name"] == "default"
    finally:
        cluster.stop()


def test_missing_tools_are_reported_with_the_fix(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(tmp_path))
    monkeypatch.setenv("PROGRESSIVE_SYNC_TOOLS_DIR", str(tmp_path / "not-built"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(devcluster.ControlPlaneError, match="make tools"):
        devcluster.find_tools_dir()


def test_dev_cluster_up_serves_until_down(tmp_path: Any) -> None:
    state = tmp_path / "state"
    env = {**os.environ, "PROGRESSIVE_SYNC_DEV_CLUSTER_DIR": str(state)}
    cli = [sys.executable, "-m", "orchestrator.cli.main", "dev-cluster"]
    up = subprocess.Popen([*cli, "up"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert up.stdout is not None
        lines = []
        for line in up.stdout:  # bounded: `up` prints the export line, or exits on failure
            lines.append(line)
            if line.startswith("export KUBECONFIG="):
                break
        assert lines and lines[-1].startswith("export KUBECONFIG="), (lines, up.stderr and up.stderr.read())
        kubeconfig = lines[-1].strip().split("=", 1)[1]
        client = Kube.from_kubeconfig(kubeconfig)
        try:
            served = client.discovery("progressivesync.io", "v1alpha1")
            assert any(r["name"] == "progressivesyncs" for r in served["resources"])
        finally:
            client.close()
        children = [child.pid for child in psutil.Process(up.pid).children(recursive=True)]
        assert len(children) >= 2  # etcd and kube-apiserver

        down = subprocess.run(
            [*cli, "down"], capture_output=True, text=True, env=env, timeout=30, check=False
        )
        assert down.returncode == 0, down.stderr
        assert up.wait(timeout=60) == 0
        for pid in children:
            assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, pid
    finally:
        if up.poll() is None:
            up.kill()
            up.wait(timeout=30)
