"""The dev control plane's audit log reader follows kube-apiserver's rotation (lumberjack renames
`audit.log` to `audit-<timestamp>.log` at 100 MB and starts a new file): a mark taken before a
rotation still sees exactly the writes after it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.devenv.controlplane import DevCluster


def _cluster(workdir: Path) -> DevCluster:
    return DevCluster(workdir=workdir, tools_dir=workdir, api_url="", etcd_url="", kubeconfig=workdir / "kc")


def _write(path: Path, *names: str) -> None:
    with path.open("a") as handle:
        for name in names:
            event = {"verb": "create", "objectRef": {"resource": "workflows", "name": name}}
            handle.write(json.dumps(event) + "\n")


def _rotate(cluster: DevCluster, stamp: str) -> None:
    cluster.audit_log_path.rename(cluster.workdir / f"audit-{stamp}.log")


def _names(cluster: DevCluster, mark: int) -> list[str]:
    return [event.name for event in cluster.audit_events_since(mark)]


ROTATE = "rotate"


@pytest.mark.parametrize(
    "after_mark",
    [
        pytest.param(["b", "c", "d"], id="no-rotation"),
        pytest.param(["b", ROTATE, "c", "d"], id="rotated-once-after-the-mark"),
        pytest.param(["b", ROTATE, "c", ROTATE, "d"], id="rotated-twice-after-the-mark"),
        pytest.param([ROTATE, "b", "c", "d"], id="rotated-right-at-the-mark"),
    ],
)
def test_a_mark_sees_the_writes_after_it_across_rotations(tmp_path: Path, after_mark: list[str]) -> None:
    cluster = _cluster(tmp_path)
    _write(cluster.audit_log_path, "old")
    _rotate(cluster, "2026-12-03T10-00-00.000")
    _write(cluster.audit_log_path, "a")
    mark = cluster.audit_mark()
    for hour, action in enumerate(after_mark, start=11):
        if action == ROTATE:
            _rotate(cluster, f"2026-12-03T{hour}-00-00.000")
        else:
            _write(cluster.audit_log_path, action)

    written = [action for action in after_mark if action != ROTATE]
    assert _names(cluster, mark) == written
    assert [event.name for event in cluster.audit_events()] == ["old", "a", *written]


def test_a_line_still_being_written_is_not_read(tmp_path: Path) -> None:
    cluster = _cluster(tmp_path)
    _write(cluster.audit_log_path, "a")
    with cluster.audit_log_path.open("a") as handle:
        handle.write('{"verb": "cre')
    assert _names(cluster, 0) == ["a"]


def test_no_log_yet_reads_nothing(tmp_path: Path) -> None:
    cluster = _cluster(tmp_path)
    assert cluster.audit_mark() == 0
    assert cluster.audit_events() == []


def test_a_mark_taken_while_a_line_is_half_written_sees_that_line_whole(tmp_path: Path) -> None:
    """kube-apiserver writes a line in one write(), but the file's size can be seen mid-write (it
    grows a page at a time): the mark goes back to the line's start, so the line counts as later."""
    cluster = _cluster(tmp_path)
    _write(cluster.audit_log_path, "a")
    line = json.dumps({"verb": "create", "objectRef": {"resource": "workflows", "name": "b"}}) + "\n"
    with cluster.audit_log_path.open("a") as handle:
        handle.write(line[:20])
    mark = cluster.audit_mark()
    with cluster.audit_log_path.open("a") as handle:
        handle.write(line[20:])
    _write(cluster.audit_log_path, "c")
    assert _names(cluster, mark) == ["b", "c"]


def test_a_mark_on_a_log_of_one_unfinished_line_is_its_start(tmp_path: Path) -> None:
    cluster = _cluster(tmp_path)
    cluster.audit_log_path.write_text('{"verb": "cre')
    assert cluster.audit_mark() == 0
