"""The operator commands against the real API server: what each writes, prints and exits with.

Real: kube-apiserver + etcd with our CRD (schema, CEL, status subresource) and the Workflow CRD,
the CLI as a person runs it (click, and for `status --watch` the console entrypoint in a
subprocess), the audit log to count writes. Not real: nobody runs the Workflows here; each test
writes the ProgressiveSync status and the Workflow's node map the way the steps and the executor
would, so every state (a gate waiting, a rollout finished, failed, cancelled) is set up exactly.
The end-to-end tests drive the same commands against a rollout the watcher and executor run.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result

from orchestrator.api.metadata import RETRY_ANNOTATION, workflow_name
from orchestrator.api.models import ObjectMeta, ProgressiveSyncStatus
from orchestrator.api.rollout_status import start_rollout, start_stage
from orchestrator.api.stage_records import ClusterRecord, ClusterState, new_records, outcomes_of, summarize
from orchestrator.cli.main import main
from orchestrator.core.clock import format_time
from orchestrator.devenv import controlplane as devcluster
from orchestrator.kube.client import PROGRESSIVE_SYNCS, WORKFLOWS, Kube
from orchestrator.kube.stage_records import create_records, patch_clusters
from tests.support.builders import (
    OPERATOR_STAGES,
    PS_NAME,
    ROLLOUT_ID,
    T0,
    make_gate_node,
    make_ps,
    make_stage_status,
    make_workflow,
)
from tests.support.kubectl import Kubectl
from tests.support.wait import wait_for

pytestmark = pytest.mark.integration

WF = workflow_name(PS_NAME, "7f3c2a1")


@pytest.fixture
def cli(control_plane: devcluster.DevCluster, namespace: str) -> Iterator[Any]:
    """Run `progressive-sync ARGS -n <test namespace> --kubeconfig <admin>` in-process."""
    runner = CliRunner()

    def run(*args: str) -> Result:
        return runner.invoke(main, [*args, "-n", namespace, "--kubeconfig", str(control_plane.kubeconfig)])

    yield run


def create_ps(kube: Kube, namespace: str, **kwargs: Any) -> dict[str, Any]:
    """Create the ProgressiveSync of `make_ps(**kwargs)`, then write its status through /status."""
    obj = make_ps(namespace=namespace, stages=OPERATOR_STAGES, **kwargs)
    status = obj.pop("status", None)
    created = kube.create(PROGRESSIVE_SYNCS, namespace, obj)
    if status is not None:
        status.setdefault("observedGeneration", created["metadata"]["generation"])
        created = kube.patch(
            PROGRESSIVE_SYNCS, namespace, obj["metadata"]["name"], {"status": status}, subresource="status"
        )
    return created


def create_workflow(kube: Kube, namespace: str, **kwargs: Any) -> dict[str, Any]:
    return kube.create(WORKFLOWS, namespace, make_workflow(namespace=namespace, **kwargs))


def error_of(result: Result) -> str:
    """What the command wrote to stderr (click keeps it apart from stdout)."""
    return result.stderr


# --- usage -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(("status",), id="status-without-name"),
        pytest.param(("approve",), id="approve-without-name"),
        pytest.param(("status", "x", "-o", "wide"), id="unknown-output-format"),
        pytest.param(("cancel", "x", "--kubeconfig", "/nonexistent/kubeconfig"), id="unloadable-kubeconfig"),
    ],
)
def test_usage_errors_exit_2(args: tuple[str, ...]) -> None:
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 2, result.output


@pytest.mark.parametrize("command", ["status", "cancel", "pause", "unpause", "resume", "approve", "retry"])
def test_missing_object_exits_1_naming_it(cli: Any, namespace: str, command: str) -> None:
    result = cli(command, "nope")
    assert result.exit_code == 1
    assert f"ProgressiveSync {namespace}/nope not found" in error_of(result)
    assert "-n" in error_of(result)


# --- status ------------------------------------------------------------------------------------


def running_rollout(kube: Kube, namespace: str, *, gate: bool = False) -> None:
    stages = [
        make_stage_status(
            "canary",
            phase="Succeeded",
            targets=("eu-1",),
            completed=("eu-1",),
            started_at="2026-11-29T10:00:00Z",
            finished_at="2026-11-29T10:00:07Z",
        ),
        make_stage_status(
            "one per region",
            phase="Succeeded" if gate else "Progressing",
            targets=("us-1", "ap-1"),
            completed=("us-1", "ap-1") if gate else ("us-1",),
            syncing=() if gate else ("ap-1",),
            started_at="2026-11-29T10:00:08Z",
            finished_at="2026-11-29T10:00:20Z" if gate else None,
        ),
        make_stage_status("everything else"),
    ]
    create_ps(kube, namespace, phase="Progressing", stage_status=stages, message="rollout 7f3c2a1 started")
    create_workflow(kube, namespace, nodes=[make_gate_node(WF, "everything else")] if gate else [])


def test_status_table(cli: Any, kube: Kube, namespace: str) -> None:
    running_rollout(kube, namespace, gate=True)
    result = cli("status", PS_NAME)
    assert result.exit_code == 0, result.output
    assert f"ProgressiveSync {namespace}/{PS_NAME}" in result.output
    assert "Progressing (waiting for approval)" in result.output
    assert f"workflow:  {WF} (Running)" in result.output
    assert "everything else  WaitingApproval" in result.output
    assert "canary           Succeeded        1/1" in result.output
    assert f"progressive-sync approve {PS_NAME} --stage 'everything else'" in result.output


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_status_for_scripts(cli: Any, kube: Kube, namespace: str, fmt: str) -> None:
    running_rollout(kube, namespace)
    result = cli("status", PS_NAME, "-o", fmt)
    assert result.exit_code == 0, result.output
    data = json.loads(result.output) if fmt == "json" else yaml.safe_load(result.output)
    assert data["phase"] == "Progressing"
    assert data["rollout"]["workflow"] == WF
    assert [stage["phase"] for stage in data["stages"]] == ["Succeeded", "Progressing", "Pending"]
    assert data["stages"][0]["durationSeconds"] == 7.0
    assert data["stages"][1]["syncing"] == ["ap-1"]


class Follower:
    """`progressive-sync status NAME --watch` as a subprocess, its stdout collected line by line."""

    def __init__(self, kubeconfig: Path, namespace: str, *extra: str) -> None:
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "orchestrator.cli.main",
                "status",
                PS_NAME,
                "--watch",
                "-n",
                namespace,
                "--kubeconfig",
                str(kubeconfig),
                *extra,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    def saw(self, text: str) -> bool:
        return any(text in line for line in list(self.lines))

    def finish(self, timeout: float = 30.0) -> tuple[int, str]:
        code = self.process.wait(timeout=timeout)
        self._reader.join(timeout=5)
        assert self.process.stderr is not None
        return code, self.process.stderr.read()


@pytest.mark.parametrize(
    ("end_phase", "exit_code"),
    [
        pytest.param("Succeeded", 0, id="succeeded-exits-0"),
        pytest.param("Failed", 1, id="failed-exits-1"),
        pytest.param("Cancelled", 3, id="cancelled-exits-3"),
    ],
)
def test_status_watch_follows_until_finished(
    control_plane: devcluster.DevCluster, kube: Kube, namespace: str, end_phase: str, exit_code: int
) -> None:
    running_rollout(kube, namespace)
    follower = Follower(control_plane.kubeconfig, namespace)
    try:
        wait_for(
            lambda: follower.saw("stage 'one per region': Progressing 1/2, syncing ap-1"),
            timeout=30,
            what="the first plain lines",
        )
        stages = [
            make_stage_status("canary", phase="Succeeded", targets=("eu-1",), completed=("eu-1",)),
            make_stage_status(
                "one per region",
                phase=end_phase,
                targets=("us-1", "ap-1"),
                completed=("us-1", "ap-1") if end_phase == "Succeeded" else ("us-1",),
                failed={"ap-1": "Degraded after the sync"} if end_phase == "Failed" else None,
            ),
            make_stage_status(
                "everything else", phase="Succeeded" if end_phase == "Succeeded" else "Cancelled"
            ),
        ]
        kube.patch(
            PROGRESSIVE_SYNCS,
            namespace,
            PS_NAME,
            {
                "status": {
                    "phase": end_phase,
                    "stages": [stage.to_api() for stage in stages],
                    "rollout": {"id": "7f3c2a1", "finishedAt": "2026-11-29T10:05:00Z"},
                }
            },
            subresource="status",
        )
        # The exit handler writes the rollout's end a moment before the Workflow itself ends.
        workflow = kube.get(WORKFLOWS, namespace, WF)
        workflow["status"]["phase"] = "Succeeded" if end_phase == "Succeeded" else "Failed"
        kube.replace(WORKFLOWS, namespace, workflow)
        code, stderr = follower.finish()
    finally:
        follower.process.kill()
    assert code == exit_code, stderr
    assert follower.saw(f"{namespace}/{PS_NAME}: rollout 7f3c2a1 {end_phase}")
    assert follower.saw("STAGE")  # the final table
    assert not any("\x1b[" in line for line in follower.lines)  # no cursor codes off a terminal


def test_status_watch_gives_up_at_the_timeout(
    control_plane: devcluster.DevCluster, kube: Kube, namespace: str
) -> None:
    running_rollout(kube, namespace)
    follower = Follower(control_plane.kubeconfig, namespace, "--timeout", "1")
    try:
        code, stderr = follower.finish()
    finally:
        follower.process.kill()
    assert code == 4
    assert f"ProgressiveSync {namespace}/{PS_NAME} did not finish within 1s" in stderr
    assert "raise --timeout" in stderr


# --- cancel ------------------------------------------------------------------------------------


def test_cancel_stops_the_workflow_once(
    cli: Any, kube: Kube, namespace: str, control_plane: devcluster.DevCluster
) -> None:
    running_rollout(kube, namespace)
    result = cli("cancel", PS_NAME)
    assert result.exit_code == 0, result.output
    assert f"stopped Workflow {WF}" in result.output
    assert kube.get(WORKFLOWS, namespace, WF)["spec"]["shutdown"] == "Stop"
    mark = control_plane.audit_mark()
    again = cli("cancel", PS_NAME, "-o", "json")
    assert again.exit_code == 0
    assert json.loads(again.output)["changed"] is False
    assert "already being stopped" in json.loads(again.output)["message"]
    assert [e for e in control_plane.audit_events_since(mark) if e.namespace == namespace] == []


@pytest.mark.parametrize(
    ("setup", "expected"),
    [
        pytest.param("workflow-succeeded", "already finished (Succeeded", id="already-finished"),
        pytest.param(
            "rollout-failed", "already finished (Failed at 2026-11-29T10:05:00Z)", id="already-failed"
        ),
        pytest.param("no-rollout", "has no rollout to cancel", id="no-rollout"),
        pytest.param("workflow-gone", f"the Workflow {{ns}}/{WF} of ProgressiveSync", id="workflow-deleted"),
    ],
)
def test_cancel_refusals_exit_1(cli: Any, kube: Kube, namespace: str, setup: str, expected: str) -> None:
    if setup == "workflow-succeeded":
        create_ps(kube, namespace, phase="Progressing")
        create_workflow(kube, namespace, phase="Succeeded")
    elif setup == "rollout-failed":
        create_ps(kube, namespace, phase="Failed", finished_at="2026-11-29T10:05:00Z")
        create_workflow(kube, namespace, phase="Failed")
    elif setup == "no-rollout":
        create_ps(kube, namespace)
    else:
        create_ps(kube, namespace, phase="Progressing")
    result = cli("cancel", PS_NAME)
    assert result.exit_code == 1, result.output
    assert expected.format(ns=namespace) in error_of(result)
    assert f"{namespace}/{PS_NAME}" in error_of(result)


# --- pause and resume --------------------------------------------------------------------------


def test_pause_and_unpause_flip_spec_paused(
    cli: Any, kube: Kube, namespace: str, control_plane: devcluster.DevCluster
) -> None:
    create_ps(kube, namespace, phase="Progressing")
    paused = cli("pause", PS_NAME)
    assert paused.exit_code == 0, paused.output
    assert f"paused ProgressiveSync {namespace}/{PS_NAME}" in paused.output
    assert kube.get(PROGRESSIVE_SYNCS, namespace, PS_NAME)["spec"]["paused"] is True

    mark = control_plane.audit_mark()
    again = cli("pause", PS_NAME)
    assert again.exit_code == 0
    assert "already paused; nothing changed" in again.output
    assert [e for e in control_plane.audit_events_since(mark) if e.namespace == namespace] == []

    unpaused = cli("unpause", PS_NAME, "-o", "yaml")
    assert unpaused.exit_code == 0, unpaused.output
    assert yaml.safe_load(unpaused.stdout)["changed"] is True
    assert kube.get(PROGRESSIVE_SYNCS, namespace, PS_NAME)["spec"]["paused"] is False
    not_paused = cli("unpause", PS_NAME)
    assert not_paused.exit_code == 0
    assert "not paused; nothing changed" in not_paused.output
    # `resume`, unpause's old name, still works and says it was renamed.
    assert cli("pause", PS_NAME).exit_code == 0
    resumed = cli("resume", PS_NAME)
    assert resumed.exit_code == 0, resumed.output
    assert "is now `progressive-sync unpause`" in resumed.stderr
    assert f"unpaused ProgressiveSync {namespace}/{PS_NAME}" in resumed.stdout
    assert kube.get(PROGRESSIVE_SYNCS, namespace, PS_NAME)["spec"]["paused"] is False


# --- approve -----------------------------------------------------------------------------------


def test_approve_opens_the_waiting_gate(cli: Any, kube: Kube, namespace: str) -> None:
    running_rollout(kube, namespace, gate=True)
    result = cli("approve", PS_NAME, "--stage", "everything else")
    assert result.exit_code == 0, result.output
    assert f"approved stage 'everything else' of ProgressiveSync {namespace}/{PS_NAME}" in result.output
    node = kube.get(WORKFLOWS, namespace, WF)["status"]["nodes"][f"{WF}-gate-everything-else"]
    assert node["phase"] == "Succeeded"
    assert node["finishedAt"]
    again = cli("approve", PS_NAME)
    assert again.exit_code == 1
    assert "nothing to approve" in error_of(again)


@pytest.mark.parametrize(
    ("args", "gate", "workflow_phase", "expected", "code"),
    [
        pytest.param((), False, "Running", "nothing to approve: no approval gate", 1, id="no-gate-waits"),
        pytest.param(
            ("--stage", "canary"), False, "Running", "has no manual approval gate", 1, id="automatic-stage"
        ),
        pytest.param(("--stage", "nope"), True, "Running", "has no stage 'nope'", 2, id="unknown-stage"),
        pytest.param((), True, "Failed", "already finished", 1, id="already-finished"),
    ],
)
def test_approve_refusals(
    *,
    cli: Any,
    kube: Kube,
    namespace: str,
    args: tuple[str, ...],
    gate: bool,
    workflow_phase: str,
    expected: str,
    code: int,
) -> None:
    create_ps(kube, namespace, phase="Progressing")
    create_workflow(
        kube, namespace, phase=workflow_phase, nodes=[make_gate_node(WF, "everything else")] if gate else []
    )
    result = cli("approve", PS_NAME, *args)
    assert result.exit_code == code, result.output
    assert expected in error_of(result)


def test_approve_while_paused_says_when_the_stage_starts(cli: Any, kube: Kube, namespace: str) -> None:
    create_ps(kube, namespace, phase="Paused", paused=True)
    create_workflow(kube, namespace, suspend=True, nodes=[make_gate_node(WF, "everything else")])
    result = cli("approve", PS_NAME)
    assert result.exit_code == 0, result.output
    assert "starts after progressive-sync unpause" in result.output
    assert kube.get(WORKFLOWS, namespace, WF)["spec"]["suspend"] is True


# --- retry -------------------------------------------------------------------------------------


def test_retry_sets_a_fresh_token_after_a_failure(cli: Any, kube: Kube, namespace: str) -> None:
    create_ps(kube, namespace, phase="Failed", finished_at="2026-11-29T10:05:00Z")
    first = cli("retry", PS_NAME, "-o", "json")
    assert first.exit_code == 0, first.output
    token = kube.get(PROGRESSIVE_SYNCS, namespace, PS_NAME)["metadata"]["annotations"][RETRY_ANNOTATION]
    assert json.loads(first.output)["token"] == token
    assert json.loads(first.output)["attempt"] == 2
    second = cli("retry", PS_NAME)
    assert second.exit_code == 0
    assert (
        kube.get(PROGRESSIVE_SYNCS, namespace, PS_NAME)["metadata"]["annotations"][RETRY_ANNOTATION] != token
    )


@pytest.mark.parametrize(
    ("phase", "expected"),
    [
        pytest.param("Succeeded", "did not fail: it succeeded", id="succeeded"),
        pytest.param("Progressing", "still running (Progressing)", id="running"),
    ],
)
def test_retry_refuses_unless_failed(cli: Any, kube: Kube, namespace: str, phase: str, expected: str) -> None:
    create_ps(kube, namespace, phase=phase)
    result = cli("retry", PS_NAME)
    assert result.exit_code == 1
    assert expected in error_of(result)
    assert RETRY_ANNOTATION not in (
        kube.get(PROGRESSIVE_SYNCS, namespace, PS_NAME)["metadata"].get("annotations") or {}
    )


IN_FLIGHT = [f"c{i:02d}" for i in range(31)]
RECORDED_TARGETS = ["eu-1", "eu-2", *IN_FLIGHT, "eu-4"]


def running_canary_with_records(kube: Kube, namespace: str) -> str:
    """A running canary that took 34 clusters: one updated, one failed, 31 in flight (more than the
    summary lists), one not started yet; and a record of an older rollout that is not this one's.
    Written as `select` and the cluster steps would. Returns the current record's name."""
    created = kube.create(PROGRESSIVE_SYNCS, namespace, make_ps(namespace=namespace, stages=OPERATOR_STAGES))
    owner = ObjectMeta.model_validate(created["metadata"])
    targets, in_flight = RECORDED_TARGETS, IN_FLIGHT
    (part,) = create_records(
        kube,
        owner,
        new_records(PS_NAME, ROLLOUT_ID, "canary", stage_index=0, targets=targets, namespace=namespace),
    )
    create_records(
        kube,
        owner,
        new_records(PS_NAME, "0ld1d", "canary", stage_index=0, targets=["old-1"], namespace=namespace),
    )
    clusters = {
        "eu-1": ClusterRecord(
            state=ClusterState.COMPLETED, revisions=["4f1c2e9b7a3d" * 3], started_at=T0, finished_at=T0
        ),
        "eu-2": ClusterRecord(
            state=ClusterState.FAILED, reason="Degraded for 120s after the sync", finished_at=T0
        ),
        **{name: ClusterRecord(state=ClusterState.SYNCING, started_at=T0) for name in in_flight},
    }
    stored = patch_clusters(kube, namespace, part.metadata.name, clusters)
    status = start_rollout(
        ProgressiveSyncStatus(),
        rollout_id=ROLLOUT_ID,
        stage_names=[s["name"] for s in OPERATOR_STAGES],
        now=T0,
    )
    status = start_stage(
        status, stage="canary", summary=summarize(outcomes_of("canary", [stored])), message="", now=T0
    )
    kube.patch(PROGRESSIVE_SYNCS, namespace, PS_NAME, {"status": status.to_api()}, subresource="status")
    return part.metadata.name


def canary_rows(output: str) -> set[str]:
    """The clusters the status table lists in the canary stage.

    Rows, not substrings: the namespace's random suffix in the header can hold a name like "c20".
    """
    return {line.split()[0] for line in output.splitlines() if re.match(r"\S+\s+canary\s+\S", line)}


def test_status_lists_every_cluster_from_the_records_and_the_summary_by_default(
    cli: Any, kube: Kube, namespace: str
) -> None:
    record = running_canary_with_records(kube, namespace)
    targets = RECORDED_TARGETS

    # The table: the summary the ProgressiveSync holds (failed, the first 20 in flight, how many more).
    table = cli("status", PS_NAME)
    assert table.exit_code == 0, table.output
    assert re.search(r"canary\s+Progressing\s+2/34\s+1\s", table.output), table.output
    assert re.search(r"eu-2\s+canary\s+failed: Degraded for 120s after the sync", table.output)
    listed = canary_rows(table.output)
    assert len(listed) == 21 and "c19" in listed and "c20" not in listed and "eu-4" not in listed, (
        table.output
    )
    assert "stage 'canary': 11 more in flight not listed" in table.output
    assert f"progressive-sync status {PS_NAME} -n {namespace} --clusters" in table.output

    # --clusters and -o wide: every cluster of the rollout, from its records.
    for args in (("--clusters",), ("-o", "wide")):
        wide = cli("status", PS_NAME, *args)
        assert wide.exit_code == 0, wide.output
        assert re.search(
            r"eu-1\s+canary\s+Completed\s+4f1c2e9b7a3d\s+" + re.escape(format_time(T0)), wide.output
        )
        assert re.search(r"eu-4\s+canary\s+NotStarted", wide.output)  # a target without a record
        assert "c30" in canary_rows(wide.output) and "old-1" not in wide.output

    # -o json: the summary per stage, and every cluster.
    result = cli("status", PS_NAME, "-o", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    canary = data["stages"][0]
    assert canary["counts"] == {"targets": 34, "syncing": 31, "completed": 1, "failed": 1}
    assert canary["more"] == {"syncing": 11, "failed": 0, "notes": 0, "skipped": 0}
    assert canary["records"] == [record]
    shown = {c["name"]: c for c in data["clusters"]}
    assert list(shown) == targets
    assert (
        shown["eu-2"]["state"] == "Failed" and shown["eu-2"]["reason"] == "Degraded for 120s after the sync"
    )
    assert shown["eu-4"]["state"] == "NotStarted"
    assert shown["eu-1"]["revisions"] == ["4f1c2e9b7a3d" * 3]


def test_the_documented_kubectl_recipes_answer_from_the_records(
    kube: Kube, kubectl: Kubectl, namespace: str
) -> None:
    # docs/status.md, "Recipes": run as a person would, against the real API server.
    record = running_canary_with_records(kube, namespace)
    selector = f"progressivesync.io/name={PS_NAME},progressivesync.io/rollout-id={ROLLOUT_ID}"
    listed = kubectl.ok("get", "psstage", "-n", namespace, "-l", selector)
    assert record in listed and "canary" in listed and ROLLOUT_ID in listed
    assert "0ld1d" not in listed
    state = kubectl.ok(
        "get", "psstage", record, "-n", namespace, "-o", "jsonpath={.status.clusters.eu-2.state}"
    )
    assert state == "Failed"
    failed = kubectl.ok(
        "get",
        "psync",
        PS_NAME,
        "-n",
        namespace,
        "-o",
        'jsonpath={range .status.stages[*]}{range .failed[*]}{.name}{"\\t"}{.reason}{"\\n"}{end}{end}',
    )
    assert failed == "eu-2\tDegraded for 120s after the sync\n"
    jq = shutil.which("jq")
    if jq is None:
        return
    items = kubectl.ok("get", "psstage", "-n", namespace, "-l", selector, "-o", "json")

    def run_jq(*args: str) -> str:
        return subprocess.run([jq, *args], input=items, capture_output=True, text=True, check=True).stdout

    assert (
        run_jq(
            "-r",
            ".items[] | .spec.stage as $s | .status.clusters // {} | to_entries[] "
            '| select(.value.state == "Failed") | [.key, $s, .value.reason] | @tsv',
        )
        == "eu-2\tcanary\tDegraded for 120s after the sync\n"
    )
    assert (
        run_jq(
            "-r",
            '.items[] | .status.clusters // {} | to_entries[] | select(.value.state == "Syncing") | .key',
        ).split()
        == IN_FLIGHT
    )
    assert run_jq(
        "-r", ".items[] | (.status.clusters // {}) as $c | .spec.targets[] | select($c[.] == null)"
    ) == ("eu-4\n")
    took = run_jq(
        "-c",
        "--arg",
        "c",
        "eu-1",
        ".items[] | select(.spec.targets | index($c))"
        " | {stage: .spec.stage, state: .status.clusters[$c].state}",
    )
    assert json.loads(took) == {"stage": "canary", "state": "Completed"}
