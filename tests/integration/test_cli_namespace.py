"""The CLI's conventions against the real API server: the kubeconfig context's namespace as the
default, a live plan without its ApplicationSet, and an API server that does not answer.

Real: kube-apiserver + etcd with our CRDs, the kubeconfig files the commands read (the admin's,
copied with a namespace set on its context), click as a person runs it. Not real: nothing runs
rollouts; the ProgressiveSync is created with a status, as tests/integration/test_ops_commands.py does.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result

from orchestrator.cli.main import main
from orchestrator.devenv import controlplane as devcluster
from orchestrator.kube.client import PROGRESSIVE_SYNCS, Kube
from tests.support.builders import OPERATOR_STAGES, PS_NAME, make_ps

pytestmark = pytest.mark.integration


def with_context_namespace(
    source: Path, target: Path, namespace: str | None, server: str | None = None
) -> str:
    """A copy of the kubeconfig `source` whose current context is in `namespace` (and, with
    `server`, whose cluster is at that URL)."""
    config: dict[str, Any] = yaml.safe_load(source.read_text())
    current = config["current-context"]
    for entry in config["contexts"]:
        if entry["name"] == current and namespace:
            entry["context"]["namespace"] = namespace
    if server:
        for cluster in config["clusters"]:
            cluster["cluster"]["server"] = server
    target.write_text(yaml.safe_dump(config))
    return str(target)


def invoke(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(main, list(args), env={"PROGRESSIVE_SYNC_NAMESPACE": None, **(env or {})})


def test_status_without_n_reads_the_contexts_namespace(
    kube: Kube, namespace: str, control_plane: devcluster.DevCluster, tmp_path: Path
) -> None:
    obj = make_ps(namespace=namespace, stages=OPERATOR_STAGES, phase="Progressing")
    obj.pop("status", None)
    kube.create(PROGRESSIVE_SYNCS, namespace, obj)
    config = with_context_namespace(control_plane.kubeconfig, tmp_path / "kubeconfig", namespace)

    by_flag = invoke("status", PS_NAME, "--kubeconfig", config, "-o", "name")
    assert by_flag.exit_code == 0, by_flag.output
    assert by_flag.stdout == f"progressivesync.progressivesync.io/{PS_NAME}\n"
    # The adapter's client reads $KUBECONFIG when it is imported: a process of its own, as a person runs it.
    environ = {k: v for k, v in os.environ.items() if not k.startswith("PROGRESSIVE_SYNC_")}
    by_variable = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli.main", "status", PS_NAME, "-o", "json"],
        env={**environ, "KUBECONFIG": config},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert by_variable.returncode == 0, by_variable.stderr
    assert f'"namespace": "{namespace}"' in by_variable.stdout

    # Without a namespace in the context, $PROGRESSIVE_SYNC_NAMESPACE, then argocd (where it is not).
    bare = str(control_plane.kubeconfig)
    assert (
        invoke(
            "status", PS_NAME, "--kubeconfig", bare, env={"PROGRESSIVE_SYNC_NAMESPACE": namespace}
        ).exit_code
        == 0
    )
    elsewhere = invoke("status", PS_NAME, "--kubeconfig", bare)
    assert elsewhere.exit_code == 1
    assert f"ProgressiveSync argocd/{PS_NAME} not found" in elsewhere.stderr


def test_unpause_without_n_acts_in_the_contexts_namespace(
    kube: Kube, namespace: str, control_plane: devcluster.DevCluster, tmp_path: Path
) -> None:
    obj = make_ps(namespace=namespace, stages=OPERATOR_STAGES, phase="Progressing")
    obj.pop("status", None)
    obj["spec"]["paused"] = True
    kube.create(PROGRESSIVE_SYNCS, namespace, obj)
    config = with_context_namespace(control_plane.kubeconfig, tmp_path / "kubeconfig", namespace)
    result = invoke("unpause", PS_NAME, "--kubeconfig", config)
    assert result.exit_code == 0, result.output
    assert f"unpaused ProgressiveSync {namespace}/{PS_NAME}" in result.stdout
    assert kube.get(PROGRESSIVE_SYNCS, namespace, PS_NAME)["spec"]["paused"] is False


def test_live_plan_without_its_application_set_exits_1_saying_so(
    namespace: str, control_plane: devcluster.DevCluster, tmp_path: Path
) -> None:
    manifest = make_ps(namespace=namespace, stages=OPERATOR_STAGES)
    manifest.pop("status", None)
    manifest["metadata"].pop("namespace")  # placed by -n
    ps_file = tmp_path / "ps.yaml"
    ps_file.write_text(yaml.safe_dump(manifest))
    app_set = manifest["spec"]["appSetRef"]["name"]
    result = invoke(
        "plan", "-f", str(ps_file), "-n", namespace, "--kubeconfig", str(control_plane.kubeconfig)
    )
    assert result.exit_code == 1, result.output
    assert f"[AppSetNotFound] ApplicationSet {namespace}/{app_set} was not found" in result.stdout
    assert "AppSetNotGiven" not in result.stdout


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.parametrize("command", ["status", "plan"])
def test_an_unreachable_api_server_is_one_line(
    control_plane: devcluster.DevCluster, tmp_path: Path, command: str
) -> None:
    server = f"https://127.0.0.1:{_closed_port()}"
    config = with_context_namespace(control_plane.kubeconfig, tmp_path / "kubeconfig", "team", server=server)
    args = ["-f", "examples/canary-regions-rest.yaml"] if command == "plan" else [PS_NAME]
    result = invoke(command, *args, "--kubeconfig", config)
    assert result.exit_code == 1, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert f"cannot reach the API server at {server} (kubeconfig {config})" in lines[0]
    assert "Traceback" not in result.output and "attempt" not in result.output

    verbose = invoke(command, *args, "--kubeconfig", config, "-v")
    assert verbose.exit_code == 1
    assert "attempt 2/" in verbose.stderr and "Traceback" in verbose.stderr
