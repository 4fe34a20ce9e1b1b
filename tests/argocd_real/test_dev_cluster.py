"""`progressive-sync dev-cluster up --argocd`, `release`, `down`, end to end, as a person runs them.

Real: the CLI as a subprocess, everything it starts (control plane, redis, the three Argo CD
components, two destination kube-apiservers, the Git repository), Argo CD comparing the new
commit. Checked: what `up` prints, the starter Applications Synced and Healthy at release 1, a
release made OutOfSync, and nothing left running or on disk after `down`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from orchestrator.devenv.argocd_requests import app_set_applications
from orchestrator.kube.client import APPLICATIONS, Kube
from tests.support.wait import wait_for

pytestmark = pytest.mark.argocd

CLI = [sys.executable, "-m", "orchestrator.cli.main", "dev-cluster"]


def _sync_of(kube: Kube, names: list[str]) -> dict[str, tuple[str, str, str]]:
    found = {}
    for name in names:
        status = kube.get(APPLICATIONS, "argocd", name).get("status") or {}
        found[name] = (
            str((status.get("sync") or {}).get("status", "")),
            str((status.get("sync") or {}).get("revision", "")),
            str((status.get("health") or {}).get("status", "")),
        )
    return found


@pytest.mark.timeout(600)
def test_up_with_argocd_runs_a_fleet_a_release_goes_out_of_sync_and_down_removes_everything(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    env = {**os.environ, "PROGRESSIVE_SYNC_DEV_CLUSTER_DIR": str(state)}
    started = time.monotonic()
    up = subprocess.Popen(
        [*CLI, "up", "--argocd", "--argocd-refresh-seconds", "10"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert up.stdout is not None
        lines = []
        for line in up.stdout:  # bounded: `up` prints the export line, or exits on failure
            lines.append(line)
            if line.startswith("export KUBECONFIG="):
                break
        assert lines and lines[-1].startswith("export KUBECONFIG="), (lines, up.stderr and up.stderr.read())
        print(f"dev-cluster up --argocd ready in {time.monotonic() - started:.1f}s")
        output = "".join(lines)
        assert "ApplicationSet myservice: 4 Applications, release 1" in output
        assert "releases: file://" in output and "progressive-sync dev-cluster release" in output
        for cluster in ("eu-1", "us-1", "eu-2", "us-2"):
            assert f"# cluster {cluster}: https://" in output

        kube = Kube.from_kubeconfig(lines[-1].strip().split("=", 1)[1])
        try:
            names = sorted(app_set_applications(kube, "argocd", "myservice"))
            assert names == ["myservice-eu-1", "myservice-eu-2", "myservice-us-1", "myservice-us-2"]
            first = {sync[1] for sync in _sync_of(kube, names).values()}
            assert len(first) == 1
            assert all(sync == ("Synced", *first, "Healthy") for sync in _sync_of(kube, names).values())

            released = time.monotonic()
            release = subprocess.run(
                [*CLI, "release"], capture_output=True, text=True, env=env, timeout=60, check=False
            )
            assert release.returncode == 0, release.stderr
            assert release.stdout.startswith("release 2: ")
            revision = release.stdout.split()[-1]
            # Argo CD's own timed comparison (every 10 s here) notices the commit: no refresh asked.
            wait_for(
                lambda: all(s[:2] == ("OutOfSync", revision) for s in _sync_of(kube, names).values()),
                timeout=60,
                interval=0.5,
                what=f"every Application OutOfSync at {revision[:12]}",
            )
            print(f"commit -> all OutOfSync (timed refresh, 10 s): {time.monotonic() - released:.1f}s")
        finally:
            kube.close()

        children = [child.pid for child in psutil.Process(up.pid).children(recursive=True)]
        assert len(children) >= 9  # 3 x (etcd, kube-apiserver), redis, 3 Argo CD components
        down = subprocess.run(
            [*CLI, "down"], capture_output=True, text=True, env=env, timeout=30, check=False
        )
        assert down.returncode == 0, down.stderr
        assert up.wait(timeout=90) == 0
        for pid in children:
            assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, pid
        assert not (state / "argocd").exists()
    finally:
        if up.poll() is None:
            up.kill()
            up.wait(timeout=30)
