"""`progressive-sync watch` flags and environment → `Settings`; JSON logs; the Workflow view.

Pure: no API server. The command itself is only run for usage errors (exit 2) and `--help`.
"""

from __future__ import annotations

import base64
import gzip
import io
import json
import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from orchestrator.api.release import attempt_of, release_of, rollout_id_for
from orchestrator.cli.logsetup import JsonFormatter, configure_logging
from orchestrator.cli.main import main
from orchestrator.cli.watch_cmd import build_settings, watch
from orchestrator.watcher.settings import Engine, LogFormat, Settings, SettingsError
from orchestrator.workflows.view import workflow_view_from_object


def flags(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "namespace": (),
        "all_namespaces": False,
        "argocd_namespace": None,
        "workflow_namespace": None,
        "kubeconfig": None,
        "context": None,
        "engine": "argo",
        "step_image": None,
        "step_service_account": None,
        "argo_server": None,
        "argo_token_file": None,
        "argo_insecure_skip_verify": False,
        "log_level": "info",
        "log_format": "json",
        "workers": 4,
        "resync_period": 300.0,
        "watch_timeout": 300,
        "request_timeout": 30.0,
        "finalize_grace": 30.0,
        "deletion_grace": 30.0,
    }
    base.update(overrides)
    return base


def test_defaults_watch_argocd_with_the_argo_engine() -> None:
    settings = build_settings({}, **flags())
    assert settings.namespaces == ("argocd",)
    assert settings.engine is Engine.ARGO
    assert settings.log_format is LogFormat.JSON
    assert settings.log_level == "INFO"
    assert settings.argocd_namespace_for("team-a") == "team-a"


def test_flags_reach_the_derived_settings() -> None:
    settings = build_settings(
        {"PROGRESSIVE_SYNC_WORKFLOW_RETRY_LIMIT": "7"},
        **flags(
            namespace=("a", "b"),
            argocd_namespace="argocd",
            engine="local",
            step_image="registry.example/ps:1",
            step_service_account="steps",
            log_level="debug",
            request_timeout=12.0,
            watch_timeout=60,
            finalize_grace=5.0,
        ),
    )
    assert settings.namespaces == ("a", "b")
    assert settings.engine is Engine.LOCAL
    assert (settings.workflow.image, settings.workflow.service_account) == ("registry.example/ps:1", "steps")
    assert settings.workflow.argocd_namespace == "argocd"
    assert settings.workflow.retry_limit == 7
    assert settings.kube.read_timeout == 12.0
    assert settings.informer.watch_timeout_seconds == 60
    assert settings.policy.finalize_grace_seconds == 5.0
    assert settings.argocd_namespace_for("a") == "argocd"


@pytest.mark.parametrize(
    ("given", "namespace", "bound"),
    [
        pytest.param({"namespace": ("a",)}, "a", 64, id="one-namespace-the-default-bound"),
        pytest.param(
            {"namespace": ("a", "b"), "max_step_processes": 5}, None, 5, id="several-namespaces-a-bound"
        ),
        pytest.param({"all_namespaces": True, "max_step_processes": 0}, None, 0, id="everywhere-no-bound"),
    ],
)
def test_the_local_engine_gets_the_namespace_and_the_bound_on_step_processes(
    given: dict[str, Any], namespace: str | None, bound: int
) -> None:
    settings = build_settings({}, **flags(engine="local", kubeconfig="/k/config", **given))
    executor = settings.local_executor_settings()
    assert (executor.namespace, executor.max_step_processes) == (namespace, bound)
    assert executor.kubeconfig == Path("/k/config")


def test_all_namespaces_watches_everywhere() -> None:
    assert build_settings({}, **flags(all_namespaces=True, namespace=("x",))).namespaces == ()


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        pytest.param({"env": " tok-env \n"}, "tok-env", id="token-from-the-environment"),
        pytest.param({"file": "tok-file\n"}, "tok-file", id="token-from-a-file"),
        pytest.param({"env": "tok-env", "file": "tok-file"}, "tok-env", id="environment-wins"),
        pytest.param({}, None, id="no-token"),
    ],
)
def test_argo_server_token(tmp_path: Path, source: dict[str, str], expected: str | None) -> None:
    token_file = None
    if "file" in source:
        token_file = tmp_path / "token"
        token_file.write_text(source["file"])
    environ = {"PROGRESSIVE_SYNC_ARGO_TOKEN": source["env"]} if "env" in source else {}
    settings = build_settings(
        environ, **flags(argo_server="https://argo.example", argo_token_file=token_file)
    )
    assert settings.argo_token == expected
    assert "tok" not in repr(settings), "the token never shows in logs of the settings"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        pytest.param(
            {"engine": "local", "argo_server": "https://argo"}, "needs --engine argo", id="server-needs-argo"
        ),
        pytest.param({"argo_server": "argo:2746"}, "http(s) URL", id="server-needs-a-url"),
        pytest.param(
            {"namespace": ("a", "b"), "workflow_namespace": "a"},
            "one watched namespace",
            id="workflow-namespace",
        ),
        pytest.param(
            {"argo_token_file": Path("/nonexistent/token"), "argo_server": "https://a"},
            "cannot read",
            id="unreadable-token-file",
        ),
    ],
)
def test_contradicting_settings_are_refused(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(SettingsError) as refused:
        build_settings({}, **flags(**overrides))
    assert message in str(refused.value)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        pytest.param("{requests: 1}", "--step-resources is not JSON", id="not-json"),
        pytest.param('{"request": {}}', "unknown key 'request'", id="misspelt-requests"),
        pytest.param('{"limits": {"nvidia.com/gpu": 1}}', "limits.nvidia.com/gpu is not supported", id="gpu"),
        pytest.param('{"limits": {"memory": "lots"}}', "'lots' is not a Kubernetes quantity", id="quantity"),
    ],
)
def test_step_resources_that_are_wrong_name_the_flag_and_the_key(value: str, message: str) -> None:
    with pytest.raises(ValueError, match="--step-resources") as refused:
        build_settings({}, **flags(step_resources=value))
    assert message in str(refused.value)
    result = CliRunner().invoke(main, ["watch"], env={"PROGRESSIVE_SYNC_STEP_RESOURCES": value})
    assert result.exit_code == 2 and message in result.output


def test_the_rollouts_instance_id_reaches_the_steps_or_is_refused_naming_the_flag() -> None:
    settings = build_settings({}, **flags(rollouts_instance_id="blue"))
    assert settings.workflow.rollouts_instance_id == "blue"
    result = CliRunner().invoke(main, ["watch"], env={"PROGRESSIVE_SYNC_ROLLOUTS_INSTANCE_ID": "blue team"})
    assert result.exit_code == 2, result.output
    assert "--rollouts-instance-id" in result.output and "is not a label value" in result.output


def test_bad_flags_exit_2_with_the_reason() -> None:
    result = CliRunner().invoke(main, ["watch", "--engine", "local", "--argo-server", "https://argo"])
    assert result.exit_code == 2
    assert "needs --engine argo" in result.output


def test_environment_variables_are_read_by_the_command() -> None:
    result = CliRunner().invoke(
        main,
        ["watch"],
        env={"PROGRESSIVE_SYNC_ENGINE": "local", "PROGRESSIVE_SYNC_ARGO_SERVER": "https://argo"},
    )
    assert result.exit_code == 2
    assert "needs --engine argo" in result.output


def test_settings_validate_themselves() -> None:
    with pytest.raises(SettingsError):
        Settings(workers=0)
    assert replace(Settings(), workers=2).workers == 2
    with pytest.raises(SettingsError):
        replace(Settings(), workers=0)
    with pytest.raises(SettingsError, match="--rollout-history"):
        Settings(rollout_history=-1)
    assert Settings().rollout_history == 2 and Settings(rollout_history=0).rollout_history == 0
    with pytest.raises(SettingsError, match="--max-step-processes"):
        Settings(max_step_processes=-1)


def test_a_negative_bound_on_step_processes_is_refused_naming_the_flag() -> None:
    result = CliRunner().invoke(main, ["watch", "--engine", "local", "--max-step-processes", "-1"])
    assert result.exit_code == 2
    assert "--max-step-processes" in result.output and "-1" in result.output
    result = CliRunner().invoke(main, ["executor", "--max-step-processes", "-1"])
    assert result.exit_code == 2
    assert "--max-step-processes" in result.output and "-1" in result.output


# --- logs -------------------------------------------------------------------------------------


def test_json_logs_carry_level_logger_message_and_extra_fields() -> None:
    stream = io.StringIO()
    configure_logging("DEBUG", "json", stream=stream)
    try:
        logging.getLogger("orchestrator.watcher.loop").info(
            "created %s", "wf-1", extra={"ps": "argocd/web", "step": "create"}
        )
    finally:
        configure_logging("WARNING", "text")
    entry = json.loads(stream.getvalue().splitlines()[-1])
    assert entry["level"] == "INFO"
    assert entry["logger"] == "orchestrator.watcher.loop"
    assert entry["message"] == "created wf-1"
    assert (entry["ps"], entry["step"]) == ("argocd/web", "create")
    assert entry["time"].endswith("+00:00")


def test_json_logs_render_exceptions() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.LogRecord(
            "x", logging.ERROR, __file__, 1, "failed", (), __import__("sys").exc_info()
        )
    assert "ValueError: boom" in json.loads(JsonFormatter().format(record))["exception"]


# --- the Workflow view ---------------------------------------------------------------------------


def workflow(nodes: dict[str, Any] | None = None, *, compressed: bool = False, **spec: Any) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": "Running", "startedAt": "2026-11-30T11:00:00Z"}
    if nodes is not None:
        if compressed:
            status["compressedNodes"] = base64.b64encode(gzip.compress(json.dumps(nodes).encode())).decode()
        else:
            status["nodes"] = nodes
    return {
        "metadata": {
            "name": "web-abc-2",
            "namespace": "argocd",
            "labels": {"progressivesync.io/name": "web", "progressivesync.io/rollout-id": "abc-2"},
            "annotations": {"progressivesync.io/spec-hash": "h", "progressivesync.io/generation": "3"},
        },
        "spec": spec,
        "status": status,
    }


STAGE_NODES = {
    "web-1": {
        "templateName": "stage-canary",
        "type": "DAG",
        "phase": "Succeeded",
        "startedAt": "2026-11-30T11:00:01Z",
        "inputs": {"parameters": [{"name": "stage", "value": "canary in eu"}]},
    },
    "web-2": {
        "templateName": "stage-rest",
        "type": "DAG",
        "phase": "Running",
        "startedAt": "2026-11-30T11:05:00Z",
        "inputs": {"parameters": [{"name": "stage", "value": "everything else"}]},
    },
    "web-3": {"templateName": "approval", "type": "Suspend", "phase": "Running", "boundaryID": "web-2"},
}


@pytest.mark.parametrize(
    "compressed", [pytest.param(False, id="nodes"), pytest.param(True, id="compressed-nodes")]
)
def test_workflow_view_reads_the_running_stage_and_its_wait(compressed: bool) -> None:
    view = workflow_view_from_object(workflow(STAGE_NODES, compressed=compressed, suspend=True))
    assert (view.current_stage, view.waiting) == ("everything else", "approval")
    assert (view.rollout_id, view.release_id, view.attempt, view.generation) == ("abc-2", "abc", 2, 3)
    assert view.suspended and not view.suspended_by_us
    assert view.is_live and not view.is_finished
    assert view.ps_name == "web"


def test_workflow_view_names_the_next_stage_while_the_step_closing_this_one_selects_it() -> None:
    closing = {
        "templateName": "record-and-select",
        "type": "Pod",
        "phase": "Running",
        "boundaryID": "web-2",
        "inputs": {
            "parameters": [
                {"name": "stage", "value": "everything else"},
                {"name": "next-stage", "value": "last"},
            ]
        },
    }
    nodes = {key: node for key, node in STAGE_NODES.items() if key != "web-3"}
    view = workflow_view_from_object(workflow({**nodes, "web-4": closing}))
    assert (view.current_stage, view.waiting) == ("last", "")
    view = workflow_view_from_object(workflow({**nodes, "web-4": {**closing, "phase": "Succeeded"}}))
    assert view.current_stage == "everything else"


def test_workflow_view_of_a_bare_object_is_empty_not_an_error() -> None:
    view = workflow_view_from_object(
        {"metadata": {"name": "x"}, "status": {"compressedNodes": "not base64!"}}
    )
    assert (view.phase, view.current_stage, view.is_live) == ("", "", True)


@pytest.mark.parametrize(
    ("release", "attempt", "rollout_id"),
    [pytest.param("abc", 1, "abc", id="first-attempt"), pytest.param("abc", 3, "abc-3", id="third-attempt")],
)
def test_rollout_ids_round_trip(release: str, attempt: int, rollout_id: str) -> None:
    assert rollout_id_for(release, attempt) == rollout_id
    assert (release_of(rollout_id), attempt_of(rollout_id)) == (release, attempt)


def test_every_flag_reads_the_variable_the_chart_and_docs_name() -> None:
    """Declared once with auto_envvar_prefix: pin the names, so renaming a flag cannot move one."""
    context = watch.make_context("watch", [])
    read = {
        option.opts[-1]: option.get_help_extra(context).get("envvars")
        for option in watch.params
        if isinstance(option, click.Option) and option.opts[-1] != "--help"
    }
    assert read == {
        "--namespace": ("PROGRESSIVE_SYNC_NAMESPACE",),
        "--all-namespaces": ("PROGRESSIVE_SYNC_ALL_NAMESPACES",),
        "--argocd-namespace": ("PROGRESSIVE_SYNC_ARGOCD_NAMESPACE",),
        "--workflow-namespace": ("PROGRESSIVE_SYNC_WORKFLOW_NAMESPACE",),
        "--kubeconfig": ("PROGRESSIVE_SYNC_KUBECONFIG", "KUBECONFIG"),
        "--context": ("PROGRESSIVE_SYNC_CONTEXT",),
        "--engine": ("PROGRESSIVE_SYNC_ENGINE",),
        "--max-step-processes": ("PROGRESSIVE_SYNC_MAX_STEP_PROCESSES",),
        "--step-image": ("PROGRESSIVE_SYNC_STEP_IMAGE",),
        "--step-image-pull-policy": ("PROGRESSIVE_SYNC_STEP_IMAGE_PULL_POLICY",),
        "--service-account": ("PROGRESSIVE_SYNC_STEP_SERVICE_ACCOUNT",),
        "--step-resources": ("PROGRESSIVE_SYNC_STEP_RESOURCES",),
        "--rollouts-instance-id": ("PROGRESSIVE_SYNC_ROLLOUTS_INSTANCE_ID",),
        "--follower": ("PROGRESSIVE_SYNC_FOLLOWER",),
        "--pods-at-once-limit": ("PROGRESSIVE_SYNC_PODS_AT_ONCE_LIMIT",),
        "--argo-server": ("PROGRESSIVE_SYNC_ARGO_SERVER",),
        "--argo-token-file": ("PROGRESSIVE_SYNC_ARGO_TOKEN_FILE",),
        "--argo-insecure-skip-verify": ("PROGRESSIVE_SYNC_ARGO_INSECURE_SKIP_VERIFY",),
        "--log-level": ("PROGRESSIVE_SYNC_LOG_LEVEL",),
        "--log-format": ("PROGRESSIVE_SYNC_LOG_FORMAT",),
        "--workers": ("PROGRESSIVE_SYNC_WORKERS",),
        "--resync-period": ("PROGRESSIVE_SYNC_RESYNC_PERIOD",),
        "--summary-interval": ("PROGRESSIVE_SYNC_SUMMARY_INTERVAL",),
        "--rollout-history": ("PROGRESSIVE_SYNC_ROLLOUT_HISTORY",),
        "--watch-timeout": ("PROGRESSIVE_SYNC_WATCH_TIMEOUT",),
        "--request-timeout": ("PROGRESSIVE_SYNC_REQUEST_TIMEOUT",),
        "--finalize-grace": ("PROGRESSIVE_SYNC_FINALIZE_GRACE",),
        "--deletion-grace": ("PROGRESSIVE_SYNC_DELETION_GRACE",),
        "--fleet-compare-wait": ("PROGRESSIVE_SYNC_FLEET_COMPARE_WAIT",),
        "--allow-prune": ("PROGRESSIVE_SYNC_ALLOW_PRUNE",),
        "--allowed-sync-option": ("PROGRESSIVE_SYNC_ALLOWED_SYNC_OPTIONS",),
        "--leader-elect": ("PROGRESSIVE_SYNC_LEADER_ELECT",),
        "--leader-elect-namespace": ("PROGRESSIVE_SYNC_LEADER_ELECT_NAMESPACE",),
        "--leader-elect-name": ("PROGRESSIVE_SYNC_LEADER_ELECT_NAME",),
        "--leader-elect-identity": ("PROGRESSIVE_SYNC_LEADER_ELECT_IDENTITY",),
        "--lease-duration": ("PROGRESSIVE_SYNC_LEASE_DURATION",),
        "--renew-deadline": ("PROGRESSIVE_SYNC_RENEW_DEADLINE",),
        "--retry-period": ("PROGRESSIVE_SYNC_RETRY_PERIOD",),
        "--http-port": ("PROGRESSIVE_SYNC_HTTP_PORT",),
        "--http-address": ("PROGRESSIVE_SYNC_HTTP_ADDRESS",),
        "--shutdown-timeout": ("PROGRESSIVE_SYNC_SHUTDOWN_TIMEOUT",),
    }


@pytest.mark.parametrize(
    ("variable", "value", "field", "expected"),
    [
        pytest.param(
            "PROGRESSIVE_SYNC_NAMESPACE", "a b", "namespaces", ("a", "b"), id="namespaces-space-separated"
        ),
        pytest.param("PROGRESSIVE_SYNC_ALL_NAMESPACES", "true", "namespaces", (), id="all-namespaces"),
        pytest.param("PROGRESSIVE_SYNC_RESYNC_PERIOD", "12", "resync_seconds", 12.0, id="resync-period"),
        pytest.param(
            "PROGRESSIVE_SYNC_SUMMARY_INTERVAL", "2.5", "summary_interval_seconds", 2.5, id="summary-interval"
        ),
        pytest.param(
            "PROGRESSIVE_SYNC_ROLLOUT_HISTORY", "0", "rollout_history", 0, id="rollout-history-zero"
        ),
        pytest.param("PROGRESSIVE_SYNC_ALLOW_PRUNE", "true", "allow_prune", True, id="allow-prune"),
        pytest.param(
            "PROGRESSIVE_SYNC_MAX_STEP_PROCESSES",
            "0",
            "max_step_processes",
            0,
            id="max-step-processes-unbound",
        ),
        pytest.param(
            "PROGRESSIVE_SYNC_ALLOWED_SYNC_OPTIONS",
            "Replace=true Validate=false",
            "allowed_sync_options",
            ("Replace=true", "Validate=false"),
            id="allowed-sync-options-space-separated",
        ),
        pytest.param(
            "PROGRESSIVE_SYNC_STEP_SERVICE_ACCOUNT", "sa", "workflow", "sa", id="step-service-account"
        ),
        pytest.param(
            "PROGRESSIVE_SYNC_ARGO_INSECURE_SKIP_VERIFY", "1", "argo_verify_tls", False, id="skip-verify"
        ),
    ],
)
def test_a_variable_reaches_its_settings_field(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, field: str, expected: Any
) -> None:
    monkeypatch.setenv(variable, value)
    settings = build_settings({}, **watch.make_context("watch", []).params)
    got = getattr(settings, field)
    assert (got.service_account if field == "workflow" else got) == expected
