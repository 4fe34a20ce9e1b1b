"""The pure parts of the dev stack's real node: image documents, configurations, the ledger.

The node itself runs in the realstack tier (tests/realstack/); these pin what it is told.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.devenv import host, images, machine, networking, node
from orchestrator.devenv.stack import shell_exports


def image(tmp_path: Path, data: bytes = b"layer") -> images.Image:
    layer = tmp_path / "layer.tar"
    layer.write_bytes(data)
    return images.Image(
        "progressive-sync.local/steps:abc123",
        layer,
        images._file_digest(layer),
        images.ImageConfig(entrypoint=("/pause",), env=("A=1",), user="65532:65532"),
    )


def test_the_oci_archive_names_the_image_and_links_config_manifest_and_layer(tmp_path: Path) -> None:
    built = image(tmp_path)
    archive = tmp_path / "archive.tar"
    with archive.open("wb") as out:
        images.write_oci_archive(built, out)
    with tarfile.open(archive) as tar:
        files = {member.name: tar.extractfile(member).read() for member in tar.getmembers()}  # type: ignore[union-attr]
    assert json.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    index = json.loads(files["index.json"])
    (entry,) = index["manifests"]
    assert entry["annotations"]["io.containerd.image.name"] == "progressive-sync.local/steps:abc123"
    manifest = json.loads(files["blobs/sha256/" + entry["digest"].split(":")[1]])
    config = json.loads(files["blobs/sha256/" + manifest["config"]["digest"].split(":")[1]])
    (layer,) = manifest["layers"]
    assert files["blobs/sha256/" + layer["digest"].split(":")[1]] == b"layer"
    assert layer["size"] == 5
    assert config["rootfs"]["diff_ids"] == [built.layer_digest]  # uncompressed: diff id = digest
    assert config["config"] == {
        "Entrypoint": ["/pause"],
        "Env": ["A=1"],
        "User": "65532:65532",
        "WorkingDir": "/",
    }


def test_a_single_binary_layer_holds_the_binary_and_its_folders(tmp_path: Path) -> None:
    binary = tmp_path / "argoexec"
    binary.write_bytes(b"\x7fELF")
    out = tmp_path / "layer.tar"
    images.single_binary_layer(binary, "bin/argoexec", out, extra_dirs=("tmp",))
    with tarfile.open(out) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert sorted(members) == ["bin", "bin/argoexec", "tmp"]
    assert members["bin/argoexec"].mode == 0o755 and members["tmp"].isdir()


def test_the_step_image_carries_the_runtime_distributions_and_not_the_dev_ones() -> None:
    names = {d.metadata["Name"].lower().replace("_", "-") for d in images.runtime_distributions()}
    assert {"hera", "kubernetes", "pydantic", "click", "pyyaml"} <= names
    assert {"pydantic-core", "urllib3"} <= names  # requirements of requirements
    assert not names & {"pytest", "ruff", "mypy", "hypothesis", "requests-mock", "psutil"}


def test_the_containerd_config_keeps_everything_under_the_node_root(tmp_path: Path) -> None:
    import tomllib

    text = node.containerd_config(
        tmp_path / "containerd",
        sandbox_image="progressive-sync.local/pause:1",
        cni_bin_dir=Path("/usr/lib/cni"),
        cni_conf_dir=tmp_path / "net.d",
        runc_root=tmp_path / "runc",
    )
    config = tomllib.loads(text)
    cri = config["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["restrict_oom_score_adj"] is True
    assert cri["sandbox_image"] == "progressive-sync.local/pause:1"
    assert cri["netns_mounts_under_state_dir"] is True
    assert cri["containerd"]["runtimes"]["runc"]["options"] == {
        "SystemdCgroup": False,
        "Root": str(tmp_path / "runc"),
    }
    for path in (config["root"], config["state"], config["grpc"]["address"], config["ttrpc"]["address"]):
        assert path.startswith(str(tmp_path))


def test_the_kubelet_config_is_what_this_machine_needs(tmp_path: Path) -> None:
    config = node.kubelet_config(
        node_ip="10.217.0.1",
        port=1,
        healthz_port=2,
        client_ca=tmp_path / "ca.crt",
        serving_cert=tmp_path / "k.crt",
        serving_key=tmp_path / "k.key",
        containerd_socket=tmp_path / "c.sock",
        root=tmp_path,
    )
    expected: dict[str, Any] = {
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "failSwapOn": False,
        "makeIPTablesUtilChains": False,
        "cgroupRoot": "/progressive-sync-node",
        "address": "10.217.0.1",
        "readOnlyPort": 0,
        "imageGCHighThresholdPercent": 100,
    }
    assert {key: config[key] for key in expected} == expected
    assert config["authentication"]["anonymous"] == {"enabled": False}
    assert config["authentication"]["x509"] == {"clientCAFile": str(tmp_path / "ca.crt")}
    yaml.safe_dump(config)  # serializable as the kubelet reads it


def test_pods_route_through_the_bridge_address_without_turning_on_ip_forward(tmp_path: Path) -> None:
    config = networking.cni_config(ipam_dir=tmp_path)
    (bridge,) = config["plugins"]
    assert bridge["bridge"] == host.BRIDGE
    assert bridge["isGateway"] is False and bridge["ipMasq"] is False  # no machine-wide changes
    assert bridge["ipam"]["routes"] == [{"dst": "0.0.0.0/0", "gw": networking.NODE_IP}]
    assert bridge["ipam"]["dataDir"] == str(tmp_path)
    assert networking.dnat_rule(6443)[-2:] == ["--to-destination", "127.0.0.1:6443"]


@pytest.mark.parametrize(
    ("node_object", "ready"),
    [
        pytest.param(None, False, id="not-registered"),
        pytest.param(
            {"status": {"conditions": [{"type": "Ready", "status": "False"}]}}, False, id="not-ready"
        ),
        pytest.param(
            {
                "spec": {"taints": [{"key": node.NOT_READY_TAINT, "effect": "NoSchedule"}]},
                "status": {"conditions": [{"type": "Ready", "status": "True"}]},
            },
            False,
            id="ready-but-still-tainted",
        ),
        pytest.param({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}, True, id="ready"),
    ],
)
def test_a_node_is_ready_once_the_not_ready_taint_is_gone(
    node_object: dict[str, Any] | None, ready: bool
) -> None:
    assert node.node_is_ready(node_object) is ready


def test_the_ledger_keeps_the_first_old_value_of_a_sysctl(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    values = {"kernel.panic": "1"}
    monkeypatch.setattr(host, "read_sysctl", values.__getitem__)
    monkeypatch.setattr(host, "write_sysctl", values.__setitem__)
    ledger = machine.Ledger(tmp_path / "ledger.json")
    ledger.set_sysctl("kernel.panic", "10")
    ledger.set_sysctl("kernel.panic", "20")
    ledger.mark(bridge=True)
    again = machine.Ledger.load(tmp_path / "ledger.json")
    assert again.sysctls == {"kernel.panic": "1"}
    assert again.bridge is True and again.iptables is False
    assert values["kernel.panic"] == "20"
    assert machine.Ledger.load(tmp_path / "missing.json").sysctls == {}


def test_the_ledger_keeps_the_owners_folders_once_each(tmp_path: Path) -> None:
    ledger = machine.Ledger(tmp_path / "ledger.json")
    ledger.remember_owned_folders([Path("/tmp/progressive-sync-devcluster-a")])
    ledger.remember_owned_folders([Path("/tmp/progressive-sync-devcluster-a")])
    again = machine.Ledger.load(tmp_path / "ledger.json")
    assert again.owned == ["/tmp/progressive-sync-devcluster-a"]
    assert machine.Ledger.load(tmp_path / "missing.json").owned == []


@pytest.mark.parametrize(
    ("printed", "path"),
    [
        pytest.param("/var/lib/a", "/var/lib/a", id="plain"),
        pytest.param(r"/var/lib/with\040space", "/var/lib/with space", id="space"),
        pytest.param(r"/x\134y", "/x\\y", id="backslash"),
    ],
)
def test_mount_points_are_read_as_the_kernel_escapes_them(printed: str, path: str) -> None:
    assert host.unescape_mount_path(printed) == path


def test_the_node_lock_is_taken_once(tmp_path: Path) -> None:
    first = machine.NodeLock(tmp_path / "lock")
    first.acquire()
    try:
        with pytest.raises(machine.NodeBusy, match=r"already running on this machine \(pid \d+"):
            machine.NodeLock(tmp_path / "lock").acquire()
    finally:
        first.release()
    second = machine.NodeLock(tmp_path / "lock")
    second.acquire()  # free again once released
    second.release()


def test_export_lines_quote_values_and_let_the_shell_expand_path() -> None:
    lines = shell_exports([("KUBECONFIG", "/tmp/a b/admin.kubeconfig"), ("PATH", "/tools:$PATH")])
    assert lines == ["export KUBECONFIG='/tmp/a b/admin.kubeconfig'", 'export PATH="/tools:$PATH"']


def test_old_step_layers_are_pruned_but_not_those_another_checkout_used_lately(tmp_path: Path) -> None:
    import os
    import time

    now = time.time()
    ages = {"steps-a": 10, "steps-b": 7200, "steps-c": 9000, "steps-d": 100, "steps-current": 99999}
    for stem, age in ages.items():
        (tmp_path / f"{stem}.tar").write_bytes(b"x")
        (tmp_path / f"{stem}.tar.sha256").write_text("sha256:x")
        os.utime(tmp_path / f"{stem}.tar", (now - age, now - age))
    images._prune(tmp_path, "steps-", keep=2, current=tmp_path / "steps-current.tar")
    left = sorted(p.name for p in tmp_path.glob("*.tar"))
    # kept: the current one and the most recent; steps-d is beyond `keep` but used a minute ago.
    assert left == ["steps-a.tar", "steps-current.tar", "steps-d.tar"]
    assert not (tmp_path / "steps-b.tar.sha256").exists()


def _hold(path: Path, seconds: float) -> subprocess.Popen[bytes]:
    """Another process holding `path` locked for `seconds` (started and holding when this returns)."""
    holder = subprocess.Popen(
        ["flock", "--close", str(path), "sh", "-c", f"echo held; sleep {seconds}"], stdout=subprocess.PIPE
    )
    assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
    return holder


def test_the_node_queue_waits_for_its_turn_and_gives_up_at_its_deadline(tmp_path: Path) -> None:
    queue = tmp_path / "queue.lock"
    holder = _hold(queue, 30)
    told: list[str] = []
    try:
        with (
            pytest.raises(machine.NodeBusy, match=r"waited 0\.3s for the node queue"),
            machine.queue_turn(queue, timeout=0.3, say=told.append),
        ):
            pass
        assert told == [f"waiting for the node queue {queue} (another run uses this machine's node)"]
    finally:
        holder.kill()
        holder.wait()
    with machine.queue_turn(queue, timeout=5):  # free once the holder is gone
        again = subprocess.run(["flock", "-n", str(queue), "true"], check=False)
        assert again.returncode == 1  # and held by us meanwhile


@pytest.mark.parametrize(
    ("held_for", "timeout", "outcome"),
    [
        pytest.param(30, 0.5, "NodeBusy", id="gives-up-at-its-deadline"),
        pytest.param(1, 30, "turn", id="gets-the-turn-when-the-holder-lets-go"),
    ],
)
def test_a_main_thread_waits_for_the_queue_in_the_kernel(
    tmp_path: Path, held_for: float, timeout: float, outcome: str
) -> None:
    queue = tmp_path / "queue.lock"
    holder = _hold(queue, held_for)
    waiter = (
        "import sys\n"
        "from pathlib import Path\n"
        "from orchestrator.devenv import machine\n"
        "try:\n"
        f"    with machine.queue_turn(Path({str(queue)!r}), timeout={timeout}):\n"
        "        print('turn')\n"
        "except machine.NodeBusy:\n"
        "    print('NodeBusy')\n"
    )
    try:
        result = subprocess.run(
            [sys.executable, "-c", waiter], capture_output=True, text=True, timeout=60, check=False
        )
    finally:
        holder.kill()
        holder.wait()
    assert result.stdout.strip() == outcome, result.stderr


def test_a_process_whose_ancestor_flock_holds_the_queue_gets_its_turn_without_the_inherited_file(
    tmp_path: Path,
) -> None:
    """`flock FILE make test` runs pytest-xdist workers, which execnet starts with the inherited
    files closed: the worker must see that its ancestor holds the queue, not wait for it for ever."""
    queue = tmp_path / "queue.lock"
    waiter = (
        "from pathlib import Path\n"
        "from orchestrator.devenv import machine\n"
        "try:\n"
        f"    with machine.queue_turn(Path({str(queue)!r}), timeout=1):\n"
        "        print('turn')\n"
        "except machine.NodeBusy:\n"
        "    print('NodeBusy')\n"
    )
    # The child's child closes every inherited file before it asks (as execnet does).
    spawn = (
        "import subprocess, sys\n"
        f"sys.exit(subprocess.run([sys.executable, '-c', {waiter!r}], close_fds=True).returncode)\n"
    )
    held = subprocess.run(
        ["flock", str(queue), "sh", "-c", f'{sys.executable} -c "$0"', spawn],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert held.stdout.strip() == "turn", held.stderr
    other = _hold(queue, 30)  # someone else's holder is not an ancestor: still waited for
    try:
        alone = subprocess.run(
            [sys.executable, "-c", waiter], capture_output=True, text=True, timeout=60, check=False
        )
    finally:
        other.kill()
        other.wait()
    assert alone.stdout.strip() == "NodeBusy", alone.stderr
