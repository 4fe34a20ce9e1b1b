"""For the integration tests that run tiny Workflows of `python -c` steps on a session control plane
(tests/integration/test_local_executor*.py): the executor's settings (short resyncs, kill grace and
timeouts, so a test's waits stay short; `changes` for what a test is about), and `StepLog`, the
log those steps share."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from orchestrator.devenv.controlplane import DevCluster
from orchestrator.engine.executor_settings import ExecutorSettings


def tiny_executor_settings(
    control_plane: DevCluster, namespace: str, tmp_path: Path, **changes: Any
) -> ExecutorSettings:
    """Settings for one test's executor: its namespace, a work dir under its tmp_path."""
    settings = ExecutorSettings(
        kubeconfig=control_plane.kubeconfig,
        namespace=namespace,
        python=sys.executable,
        workdir=tmp_path / "executor",
        resync_seconds=0.5,
        kill_grace_seconds=2.0,
        step_timeout_seconds=60.0,
        watch_timeout_seconds=20,
    )
    return replace(settings, **changes)


class StepLog:
    """The steps' shared log, one `<what> <label> <epoch seconds>` line per event: who started and
    ended when."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def events(self) -> list[tuple[str, str, float]]:
        """(what, label, time) in the order they were written."""
        if not self.path.exists():
            return []
        rows = []
        for line in self.path.read_text().splitlines():
            what, label, when = line.rsplit(" ", 2)
            rows.append((what, label, float(when)))
        return rows

    def count(self, what: str, label: str) -> int:
        return sum(1 for w, lbl, _ in self.events() if w == what and lbl == label)

    def started(self) -> list[str]:
        """The labels of the steps that started, in the order they did."""
        return [label for what, label, _ in sorted(self.events(), key=lambda e: e[2]) if what == "start"]

    def max_concurrent(self, prefix: str = "") -> int:
        """The most steps whose label starts with `prefix` that ran at the same time."""
        current = best = 0
        for what, label, _ in sorted(self.events(), key=lambda e: e[2]):
            if label.startswith(prefix):
                current += 1 if what == "start" else -1
                best = max(best, current)
        return best
