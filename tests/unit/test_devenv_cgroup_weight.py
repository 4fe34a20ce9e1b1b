"""The dev node's cgroup root and its CPU weight (orchestrator/devenv/host.py `make_cgroup_root`),
on a folder laid out as the cgroup file system: a v1 cpu hierarchy, a v1 cpuset one, a v2 root."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.devenv import host


def _mount(tmp_path: Path, *, root_left_at: int | None = None) -> Path:
    """cpu (v1), cpuset (v1, needs its values copied), unified (v2 with the cpu controller)."""
    mount = tmp_path / "cgroup"
    for hierarchy, files in {
        "cpu": {"cgroup.procs": "", "cpu.shares": "1024\n"},
        "cpuset": {"cgroup.procs": "", "cpuset.cpus": "0-1\n", "cpuset.mems": "0\n"},
        "unified": {"cgroup.procs": "", "cpu.weight": "100\n"},
    }.items():
        (mount / hierarchy).mkdir(parents=True)
        for name, text in files.items():
            (mount / hierarchy / name).write_text(text)
        # What the kernel shows in a new cgroup folder: the same files, at their defaults.
        ours = mount / hierarchy / host.CGROUP_ROOT
        ours.mkdir()
        for name in files:
            if name != "cgroup.procs":
                default = {"cpu.shares": "1024\n", "cpu.weight": "100\n"}.get(name, "\n")
                (ours / name).write_text(default)
    if root_left_at is not None:
        (mount / "cpu" / host.CGROUP_ROOT / "cpu.shares").write_text(f"{root_left_at}\n")
    return mount


def _read(mount: Path, hierarchy: str, name: str) -> str:
    return (mount / hierarchy / host.CGROUP_ROOT / name).read_text().strip()


@pytest.mark.parametrize(
    ("asked", "left_at", "shares", "weight"),
    [
        pytest.param(None, None, "1024", "100", id="the-default-is-the-kernels"),
        pytest.param(16384, None, "16384", "625", id="a-larger-weight-for-the-suites-node"),
        pytest.param(None, 16384, "1024", "100", id="a-root-left-by-a-suites-node-gets-the-default-again"),
    ],
)
def test_the_node_root_gets_its_cpu_weight_in_every_hierarchy(
    tmp_path: Path, asked: int | None, left_at: int | None, shares: str, weight: str
) -> None:
    mount = _mount(tmp_path, root_left_at=left_at)
    if asked is None:
        host.make_cgroup_root(mount=mount)
    else:
        host.make_cgroup_root(cpu_shares=asked, mount=mount)

    assert _read(mount, "cpu", "cpu.shares") == shares
    assert _read(mount, "unified", "cpu.weight") == weight
    assert (_read(mount, "cpuset", "cpuset.cpus"), _read(mount, "cpuset", "cpuset.mems")) == ("0-1", "0")


@pytest.mark.parametrize(
    ("shares", "weight"),
    [
        pytest.param(2, 1, id="the-least-shares-the-least-weight"),
        pytest.param(1024, 39, id="the-default-shares"),
        pytest.param(262144, 10000, id="the-most-shares-the-most-weight"),
        pytest.param(1, 1, id="below-the-range-is-the-least"),
        pytest.param(10**6, 10000, id="above-the-range-is-the-most"),
    ],
)
def test_v1_shares_map_to_v2_weight_as_the_kubelet_maps_them(shares: int, weight: int) -> None:
    assert host.cpu_weight(shares) == weight
