"""A step, a CLI command or a watcher does not import the `kubernetes` package (~0.45 s of CPU).

The steps and the CLI reach the API server through `orchestrator.kube`, which reads a pod's service
account and a kubeconfig of certificates or tokens itself, and imports `kubernetes` only for a
kubeconfig it does not read (exec plugins and the like). A fresh interpreter does what a step
pod, a forked local step and a CLI command do, and says which of the slow packages it loaded.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SLOW = "{'kubernetes', 'requests'}"

KUBECONFIG = """
apiVersion: v1
kind: Config
current-context: here
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443", certificate-authority: ca.crt}}]
users: [{name: u, user: {client-certificate: u.crt, client-key: u.key}}]
contexts: [{name: here, context: {cluster: c, user: u}}]
"""


def loaded_after(code: str, cwd: Path) -> list[str]:
    report = f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & {SLOW})))"
    probe = f"import json, sys; {code}; {report}"
    run = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )
    assert run.returncode == 0, run.stderr
    return list(json.loads(run.stdout))


@pytest.mark.parametrize(
    "code",
    [
        pytest.param("import steps.cli", id="the-step-program"),
        pytest.param(
            "import orchestrator.cli.main; from orchestrator.kube.client import Kube; "
            "Kube.from_kubeconfig('config').close()",
            id="a-cli-command-with-a-certificate-kubeconfig",
        ),
    ],
)
def test_no_slow_package_is_imported(tmp_path: Path, code: str) -> None:
    (tmp_path / "config").write_text(KUBECONFIG)
    assert loaded_after(code, tmp_path) == [], "these would be paid at every start"
