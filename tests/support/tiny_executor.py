"""The local executor's settings for the integration tests that run tiny Workflows of `python -c`
steps on a session control plane (tests/integration/test_local_executor*.py): short resyncs, kill
grace and timeouts, so a test's waits stay short; `changes` for what a test is about."""

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
