"""The CLI's kubectl conventions, command by command: `-n`, `-o`, `--kubeconfig`, `--context`, the
kubeconfig context's namespace as the default, `-f`, `--help`'s environment and exit codes, the
`resume` -> `unpause` rename, completion, and the one-line unreachable API server.

Real: click (CliRunner), the commands' option parsing, a kubeconfig file on disk, the namespace
decision. Not real: no API server. Where a command would connect, the test replaces the one
function it calls to connect (`ops_cmd._connect`, `plan_cmd.read_live_fleet`) by one that records
what the command resolved and stops it; tests/integration/test_cli_namespace.py runs the same
commands against a real kube-apiserver.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
import yaml
from click.testing import CliRunner, Result
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.cli import conventions, help_catalog, ops_cmd, plan_cmd, watch_cmd
from orchestrator.cli.main import COMMANDS, HIDDEN, main
from orchestrator.cli.namespaces import (
    NamespaceSource,
    context_namespace,
    kubeconfig_paths,
    namespace_for,
    resolve_namespace,
)
from orchestrator.kube.client import KubeError, Retryable
from orchestrator.ops.view import WatchExit

REFERENCE_PAGE = Path("docs/cli-reference.md")
OPERATOR_COMMANDS = ("status", "approve", "pause", "unpause", "cancel", "retry", "rollback")
STOPPED = 97  # the exit code of a command stopped where it would have connected


def kubeconfig(*contexts: tuple[str, str | None], current: str | None = None) -> dict[str, Any]:
    """A kubeconfig with these (name, namespace) contexts; the first is current unless `current`."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [
            {"name": name, "context": {"cluster": "c", "user": "u", **({"namespace": ns} if ns else {})}}
            for name, ns in contexts
        ],
        "current-context": current if current is not None else contexts[0][0],
    }


def write_kubeconfig(path: Path, config: dict[str, Any]) -> str:
    path.write_text(yaml.safe_dump(config))
    return str(path)


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No variable of the person running the tests leaks in; HOME has no ~/.kube/config."""
    for name in (
        "KUBECONFIG",
        "PROGRESSIVE_SYNC_NAMESPACE",
        "PROGRESSIVE_SYNC_KUBECONFIG",
        "PROGRESSIVE_SYNC_CONTEXT",
        "PROGRESSIVE_SYNC_WORKFLOW_NAMESPACE",
        "PROGRESSIVE_SYNC_ARGOCD_NAMESPACE",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


@pytest.fixture
def team_kubeconfig(tmp_path: Path) -> str:
    """Current context `a` in namespace team-a; context `b` in team-b; context `bare` in none."""
    config = kubeconfig(("a", "team-a"), ("b", "team-b"), ("bare", None))
    return write_kubeconfig(tmp_path / "team.kubeconfig", config)


@pytest.fixture
def bare_kubeconfig(tmp_path: Path) -> str:
    """A kubeconfig whose current context names no namespace."""
    return write_kubeconfig(tmp_path / "bare.kubeconfig", kubeconfig(("bare", None)))


# --- the decision, pure ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flag", "context", "environment", "expected", "source"),
    [
        pytest.param("x", "team-a", "env", "x", NamespaceSource.FLAG, id="flag-wins"),
        pytest.param(None, "team-a", "env", "team-a", NamespaceSource.CONTEXT, id="context-over-environment"),
        pytest.param(None, None, "env", "env", NamespaceSource.ENVIRONMENT, id="environment-when-no-context"),
        pytest.param(None, None, None, "argocd", NamespaceSource.DEFAULT, id="argocd-last"),
        pytest.param("", "", "", "argocd", NamespaceSource.DEFAULT, id="empty-values-count-as-unset"),
        pytest.param(
            None, "", "env", "env", NamespaceSource.ENVIRONMENT, id="empty-context-namespace-skipped"
        ),
    ],
)
def test_resolve_namespace(
    flag: str | None, context: str | None, environment: str | None, expected: str, source: NamespaceSource
) -> None:
    resolved = resolve_namespace(flag, context, environment)
    assert (resolved.namespace, resolved.source) == (expected, source)


maybe_namespace = st.one_of(st.none(), st.just(""), st.text(alphabet="abc-", min_size=1, max_size=4))


@given(flag=maybe_namespace, context=maybe_namespace, environment=maybe_namespace)
def test_the_first_namespace_set_wins_in_order(
    flag: str | None, context: str | None, environment: str | None
) -> None:
    resolved = resolve_namespace(flag, context, environment)
    assert resolved.namespace == next((v for v in (flag, context, environment) if v), "argocd")
    assert resolved.namespace  # never empty


@pytest.mark.parametrize(
    ("configs", "context", "expected"),
    [
        pytest.param([kubeconfig(("a", "team-a"))], None, "team-a", id="current-context"),
        pytest.param([kubeconfig(("a", "team-a"), ("b", "team-b"))], "b", "team-b", id="context-flag"),
        pytest.param([kubeconfig(("a", None))], None, None, id="context-without-namespace"),
        pytest.param([kubeconfig(("a", "team-a"))], "missing", None, id="unknown-context"),
        pytest.param([kubeconfig(("a", "team-a"), current="")], None, None, id="no-current-context"),
        pytest.param(
            [kubeconfig(("a", "first"), current=""), kubeconfig(("a", "second"))],
            None,
            "first",
            id="merged-first-file-defines-the-context",
        ),
        pytest.param(
            [kubeconfig(("a", "team-a"), ("b", "team-b"), current="b"), kubeconfig(("a", "x"))],
            None,
            "team-b",
            id="merged-first-current-context-wins",
        ),
        pytest.param([None, "not a mapping", kubeconfig(("a", "team-a"))], None, "team-a", id="junk-skipped"),
    ],
)
def test_context_namespace(configs: list[Any], context: str | None, expected: str | None) -> None:
    assert context_namespace(configs, context) == expected


@pytest.mark.parametrize(
    ("flag", "environ", "expected"),
    [
        pytest.param("/k", {"KUBECONFIG": "/a:/b"}, ("/k",), id="flag-wins"),
        pytest.param(None, {"KUBECONFIG": "/a:/b"}, ("/a", "/b"), id="kubeconfig-list"),
        pytest.param(None, {"KUBECONFIG": ":/a:"}, ("/a",), id="empty-entries-skipped"),
        pytest.param(None, {}, ("/home/me/.kube/config",), id="home-config"),
    ],
)
def test_kubeconfig_paths(flag: str | None, environ: dict[str, str], expected: tuple[str, ...]) -> None:
    assert kubeconfig_paths(flag, environ, Path("/home/me")) == tuple(Path(p) for p in expected)


def test_namespace_for_reads_only_what_exists(tmp_path: Path, team_kubeconfig: str) -> None:
    environ = {"KUBECONFIG": f"{tmp_path}/missing:{team_kubeconfig}", "PROGRESSIVE_SYNC_NAMESPACE": "env"}
    assert namespace_for(None, kubeconfig=None, context=None, environ=environ).namespace == "team-a"
    (tmp_path / "broken").write_text("{not yaml")
    broken = namespace_for(None, kubeconfig=str(tmp_path / "broken"), context=None, environ=environ)
    assert broken.namespace == "env"


# --- every operator command x -n / --kubeconfig / --context / the context's namespace ----------


@pytest.fixture
def connected(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[ops_cmd.OpsSettings]]:
    """Each operator command's settings at the moment it would connect; the command stops there."""
    seen: list[ops_cmd.OpsSettings] = []

    def record(settings: ops_cmd.OpsSettings) -> Any:
        seen.append(settings)
        raise click.exceptions.Exit(STOPPED)

    monkeypatch.setattr(ops_cmd, "_connect", record)
    yield seen


def run(*args: str, env: dict[str, str] | None = None, stdin: str | None = None) -> Result:
    return CliRunner().invoke(main, list(args), env=env, input=stdin)


NAMESPACE_CASES = [
    pytest.param(("-n", "given"), {}, "team", "given", id="n-flag"),
    pytest.param(("--namespace", "given"), {}, "team", "given", id="namespace-flag"),
    pytest.param((), {}, "team", "team-a", id="context-namespace-default"),
    pytest.param(("--context", "b"), {}, "team", "team-b", id="context-flag"),
    pytest.param((), {"PROGRESSIVE_SYNC_CONTEXT": "b"}, "team", "team-b", id="context-variable"),
    pytest.param((), {"PROGRESSIVE_SYNC_NAMESPACE": "env"}, "team", "team-a", id="context-over-variable"),
    pytest.param(
        (), {"PROGRESSIVE_SYNC_NAMESPACE": "env"}, "bare", "env", id="variable-when-context-has-none"
    ),
    pytest.param((), {}, "bare", "argocd", id="argocd-last"),
    pytest.param(("-n", "given"), {"PROGRESSIVE_SYNC_NAMESPACE": "env"}, "team", "given", id="flag-over-all"),
]


@pytest.mark.parametrize("command", [*OPERATOR_COMMANDS, "resume"])
@pytest.mark.parametrize(("args", "env", "which", "namespace"), NAMESPACE_CASES)
@pytest.mark.parametrize("how", ["--kubeconfig", "KUBECONFIG", "PROGRESSIVE_SYNC_KUBECONFIG"])
def test_operator_commands_resolve_namespace_and_kubeconfig(
    *,
    connected: list[ops_cmd.OpsSettings],
    team_kubeconfig: str,
    bare_kubeconfig: str,
    command: str,
    args: tuple[str, ...],
    env: dict[str, str],
    which: str,
    namespace: str,
    how: str,
) -> None:
    path = team_kubeconfig if which == "team" else bare_kubeconfig
    flags = ("--kubeconfig", path) if how == "--kubeconfig" else ()
    result = run(command, "myservice", *args, *flags, env={**env, **({how: path} if not flags else {})})
    assert result.exit_code == STOPPED, result.output
    (settings,) = connected
    assert settings.namespace == namespace
    # $KUBECONFIG is the adapter's to read (as kubectl's); the flag and our variable are passed on.
    assert settings.kubeconfig == (None if how == "KUBECONFIG" else path)


@pytest.mark.parametrize("command", OPERATOR_COMMANDS)
@pytest.mark.parametrize("output", ["table", "json", "yaml"])
def test_operator_commands_take_the_output_vocabulary(
    connected: list[ops_cmd.OpsSettings], bare_kubeconfig: str, command: str, output: str
) -> None:
    result = run(command, "myservice", "-o", output, "--kubeconfig", bare_kubeconfig)
    assert result.exit_code == STOPPED, result.output
    assert connected[0].output.value == output


@pytest.mark.parametrize("command", [*OPERATOR_COMMANDS, "plan", "render", "validate"])
def test_an_unknown_output_is_a_usage_error_naming_the_choices(command: str) -> None:
    result = run(command, *(() if command in ("plan", "render", "validate") else ("x",)), "-o", "xml")
    assert result.exit_code == 2
    assert "'xml' is not one of" in result.output and "'json'" in result.output and "'yaml'" in result.output


def _output_choices(name: str) -> tuple[list[str], Any]:
    command = main.get_command(click.Context(main), name)
    assert command is not None
    (option,) = [p for p in command.params if p.name == "output"]
    assert isinstance(option.type, click.Choice)
    return list(option.type.choices), option.default


@pytest.mark.parametrize(
    ("name", "extra"),
    [
        *(
            pytest.param(c, {"wide", "name"}, id=c)
            for c in ("status", "approve", "pause", "unpause", "cancel")
        ),
        pytest.param("retry", {"wide", "name"}, id="retry"),
        pytest.param("rollback", {"wide"}, id="rollback"),
        pytest.param("plan", {"name", "mermaid"}, id="plan"),
        pytest.param("validate", set(), id="validate"),
    ],
)
def test_one_output_vocabulary_with_table_the_default(name: str, extra: set[str]) -> None:
    choices, default = _output_choices(name)
    assert choices[:3] == ["table", "json", "yaml"] and set(choices[3:]) == extra
    assert default == "table"


def test_render_prints_a_manifest_so_yaml_is_its_default() -> None:
    assert _output_choices("render") == (["json", "yaml"], "yaml")


def test_validate_still_takes_text_saying_it_is_now_table(tmp_path: Path) -> None:
    result = run("validate", "-f", "examples/minimal.yaml", "-o", "text")
    assert result.exit_code == 0, result.output
    assert "note: -o text is now -o table" in result.stderr
    assert ": OK" in result.stdout


# --- plan and render: -n, the context's namespace ----------------------------------------------


@pytest.fixture
def unplaced_ps(tmp_path: Path) -> str:
    """examples/canary-regions-rest.yaml without its namespace."""
    manifest = yaml.safe_load(Path("examples/canary-regions-rest.yaml").read_text())
    manifest["metadata"].pop("namespace")
    path = tmp_path / "ps.yaml"
    path.write_text(yaml.safe_dump(manifest))
    return str(path)


@pytest.mark.parametrize(("args", "env", "which", "namespace"), NAMESPACE_CASES)
def test_live_plan_resolves_namespace_and_kubeconfig(
    *,
    monkeypatch: pytest.MonkeyPatch,
    team_kubeconfig: str,
    bare_kubeconfig: str,
    unplaced_ps: str,
    args: tuple[str, ...],
    env: dict[str, str],
    which: str,
    namespace: str,
) -> None:
    seen: list[tuple[plan_cmd.PlanSettings, tuple[str, str]]] = []

    def record(settings: plan_cmd.PlanSettings, ps: Any) -> Any:
        seen.append((settings, plan_cmd.live_namespaces(settings, ps)))
        raise click.exceptions.Exit(STOPPED)

    monkeypatch.setattr(plan_cmd, "read_live_fleet", record)
    path = team_kubeconfig if which == "team" else bare_kubeconfig
    result = run("plan", "-f", unplaced_ps, *args, "--kubeconfig", path, env=env)
    assert result.exit_code == STOPPED, result.output
    ((settings, namespaces),) = seen
    assert namespaces == (namespace, namespace)
    assert settings.kubeconfig == path


def test_live_plan_keeps_the_manifests_namespace_and_refuses_another_n(
    monkeypatch: pytest.MonkeyPatch, team_kubeconfig: str
) -> None:
    seen: list[tuple[str, str]] = []

    def record(settings: plan_cmd.PlanSettings, ps: Any) -> Any:
        seen.append(plan_cmd.live_namespaces(settings, ps))
        raise click.exceptions.Exit(STOPPED)

    monkeypatch.setattr(plan_cmd, "read_live_fleet", record)
    ps = "examples/canary-regions-rest.yaml"  # namespace argocd
    assert run("plan", "-f", ps, "--kubeconfig", team_kubeconfig).exit_code == STOPPED
    assert seen == [("argocd", "argocd")]
    assert run("plan", "-f", ps, "-n", "argocd", "--argocd-namespace", "cd").exit_code == STOPPED
    assert seen[-1] == ("argocd", "cd")
    refused = run("plan", "-f", ps, "-n", "elsewhere")
    assert refused.exit_code == 2
    assert "the manifest's namespace 'argocd' is not -n 'elsewhere'" in refused.output


@pytest.mark.parametrize(
    ("args", "env", "namespace"),
    [
        pytest.param(("-n", "given"), {}, "given", id="n-flag"),
        pytest.param((), {"KUBECONFIG": "team"}, "team-a", id="kubeconfig-context"),
        pytest.param((), {"PROGRESSIVE_SYNC_NAMESPACE": "env"}, "env", id="variable"),
        pytest.param((), {}, "argocd", id="argocd-last"),
    ],
)
def test_render_places_a_manifest_without_namespace_where_kubectl_would(
    team_kubeconfig: str, unplaced_ps: str, args: tuple[str, ...], env: dict[str, str], namespace: str
) -> None:
    env = {k: team_kubeconfig if v == "team" else v for k, v in env.items()}
    result = run("render", "-f", unplaced_ps, *args, "-o", "json", env=env)
    assert result.exit_code == 0, result.output
    assert f"assumed: namespace {namespace} (the manifest has none" in result.stderr
    assert f'"namespace": "{namespace}"' in result.stdout


@pytest.mark.parametrize(
    ("args", "env", "which", "namespaces"),
    [
        pytest.param((), {}, "team", ("team-a",), id="context-namespace-default"),
        pytest.param(("--context", "b"), {}, "team", ("team-b",), id="context-flag"),
        pytest.param((), {}, "bare", ("argocd",), id="argocd-last"),
        pytest.param(("-n", "x", "-n", "y"), {}, "team", ("x", "y"), id="n-flags"),
        pytest.param(
            (), {"PROGRESSIVE_SYNC_NAMESPACE": "p q"}, "team", ("p", "q"), id="variable-is-the-flag"
        ),
        pytest.param(("-A",), {}, "team", (), id="all-namespaces"),
    ],
)
def test_watch_defaults_to_the_contexts_namespace(
    *,
    monkeypatch: pytest.MonkeyPatch,
    team_kubeconfig: str,
    bare_kubeconfig: str,
    args: tuple[str, ...],
    env: dict[str, str],
    which: str,
    namespaces: tuple[str, ...],
) -> None:
    built: list[Any] = []
    real = watch_cmd.build_settings

    def record(environ: Any, **flags: Any) -> Any:
        built.append(real(environ, **flags))
        raise click.exceptions.Exit(STOPPED)

    monkeypatch.setattr(watch_cmd, "build_settings", record)
    path = team_kubeconfig if which == "team" else bare_kubeconfig
    result = run("watch", *args, "--kubeconfig", path, env=env)
    assert result.exit_code == STOPPED, result.output
    assert built[0].namespaces == namespaces


# --- -f: a directory, stdin, once --------------------------------------------------------------


def test_f_takes_a_directory_sorted_and_stdin(tmp_path: Path) -> None:
    manifest = Path("examples/minimal.yaml").read_text()
    (tmp_path / "b.yml").write_text(manifest)
    (tmp_path / "a.yaml").write_text(manifest)
    (tmp_path / "notes.txt").write_text("not a manifest")
    result = run("validate", "-f", str(tmp_path), "-f", "-", stdin=manifest)
    assert result.exit_code == 0, result.output
    assert [line.split(":")[0] for line in result.stdout.splitlines() if line.endswith("OK")] == [
        f"{tmp_path}/a.yaml",
        f"{tmp_path}/b.yml",
        "<stdin>",
    ]


def test_f_refuses_a_directory_without_manifests(tmp_path: Path) -> None:
    result = run("validate", "-f", str(tmp_path))
    assert result.exit_code == 2
    assert "is a directory without a .yaml, .yml or .json file" in result.output


@pytest.mark.parametrize("command", ["plan", "render"])
def test_a_repeated_f_that_would_be_ignored_is_refused(command: str) -> None:
    result = run(
        command, "-f", "examples/minimal.yaml", "-f", "examples/demo.yaml", "--fleet", "examples/fleet.yaml"
    )
    assert result.exit_code == 2
    assert f"-f was given 2 times, but {command} reads one ProgressiveSync" in result.output


def test_plan_reads_stdin_and_a_directory_with_name(tmp_path: Path) -> None:
    text = Path("examples/canary-regions-rest.yaml").read_text()
    piped = run("plan", "-f", "-", "--fleet", "examples/fleet.yaml", "-o", "name", stdin=text)
    assert piped.exit_code == 0, piped.output
    (tmp_path / "ps.yaml").write_text(text)
    (tmp_path / "other.json").write_text('{"kind": "ConfigMap", "metadata": {"name": "x"}}')
    listed = run(
        "plan", "-f", str(tmp_path), "--name", "checkout", "--fleet", "examples/fleet.yaml", "-o", "name"
    )
    assert listed.exit_code == 0, listed.output
    assert listed.stdout == piped.stdout and len(piped.stdout.splitlines()) == 12


@pytest.mark.parametrize(
    ("text", "shown", "raw"),
    [
        pytest.param(
            "apiVersion: progressivesync.io/v1alpha1\nkind: ProgressiveSync\nmetadata: {name: x\n",
            "unparseable YAML: invalid, 1 error\n  line ",
            "while parsing",
            id="yaml",
        ),
        pytest.param(
            "apiVersion: progressivesync.io/v1alpha1\nkind: ProgressiveSync\nmetadata: {name: x}\n"
            "spec: {appSetRef: {name: x}, stages: [{name: a, maxTargets: 0}]}\n",
            "ProgressiveSync x: invalid, 2 errors\n  spec.stages[0].",
            "validation error",
            id="model",
        ),
    ],
)
@pytest.mark.parametrize("command", ["plan", "render"])
def test_manifest_errors_are_printed_as_validate_prints_them(
    tmp_path: Path, command: str, text: str, shown: str, raw: str
) -> None:
    path = tmp_path / "ps.yaml"
    path.write_text(text)
    result = run(command, "-f", str(path), "--fleet", "examples/fleet.yaml")
    assert result.exit_code == 1, result.output
    assert f"Error: {path}: {shown}" in result.stderr
    assert raw not in result.output and "pydantic" not in result.output


# --- --help: environment and exit codes --------------------------------------------------------


@pytest.mark.parametrize("name", sorted(set(COMMANDS) - HIDDEN))
def test_help_lists_the_environment_and_the_exit_codes(name: str) -> None:
    result = run(name, "--help")
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "Environment:" in text and "Exit codes:" in text
    for code, meaning in help_catalog.EXIT_CODES[name]:
        assert f"{code} {' '.join(meaning.split())}" in text
    command = main.get_command(click.Context(main), name)
    assert command is not None
    commands = [command, *getattr(command, "commands", {}).values()]
    read = {
        variable
        for each in commands
        for param in each.params
        if isinstance(param, click.Option) and param.envvar
        for variable in ([param.envvar] if isinstance(param.envvar, str) else param.envvar)
    }
    listed = {variable for variable, _ in help_catalog.ENVIRONMENT[name]}
    assert read <= listed, f"{name} reads {sorted(read - listed)} but its --help does not say so"


def test_status_exit_codes_are_the_watch_exits() -> None:
    codes = dict(help_catalog.EXIT_CODES["status"])
    assert {int(code) for code in WatchExit} <= set(codes)
    assert "Cancelled" in codes[int(WatchExit.CANCELLED)] and "--timeout" in codes[int(WatchExit.TIMEOUT)]


def test_the_markdown_reference_has_every_command() -> None:
    text = help_catalog.markdown()
    assert all(f"## progressive-sync {name}" in text for name in help_catalog.EXIT_CODES)
    assert set(help_catalog.EXIT_CODES) == set(help_catalog.ENVIRONMENT) == set(COMMANDS) - HIDDEN


def test_the_reference_page_is_generated_from_the_catalog() -> None:
    if os.environ.get("REGENERATE") == "1":
        REFERENCE_PAGE.write_text(help_catalog.markdown())
    assert REFERENCE_PAGE.read_text() == help_catalog.markdown(), (
        f"{REFERENCE_PAGE} differs from orchestrator/cli/help_catalog.py: run `make docs` "
        f"(or REGENERATE=1 pytest {__file__})"
    )


# --- resume -> unpause, completion -------------------------------------------------------------


def test_resume_still_unpauses_and_says_it_was_renamed(
    connected: list[ops_cmd.OpsSettings], bare_kubeconfig: str
) -> None:
    result = run("resume", "myservice", "--kubeconfig", bare_kubeconfig)
    assert result.exit_code == STOPPED
    assert "`progressive-sync resume` is now `progressive-sync unpause`" in result.stderr
    assert "`progressive-sync approve`" in result.stderr and "`argo resume`" in result.stderr
    assert "resume" not in run("--help").output.replace("argo resume", "")


@pytest.mark.parametrize(
    ("shell", "marker"),
    [
        pytest.param("bash", "_PROGRESSIVE_SYNC_COMPLETE=bash_complete", id="bash"),
        pytest.param("zsh", "_PROGRESSIVE_SYNC_COMPLETE=zsh_complete", id="zsh"),
        pytest.param("fish", "_PROGRESSIVE_SYNC_COMPLETE=fish_complete", id="fish"),
    ],
)
def test_completion_prints_clicks_script(shell: str, marker: str) -> None:
    result = run("completion", shell)
    assert result.exit_code == 0, result.output
    assert marker in result.stdout and "progressive-sync" in result.stdout


def test_completion_completes_lazy_subcommands() -> None:
    env = {
        "_PROGRESSIVE_SYNC_COMPLETE": "bash_complete",
        "COMP_WORDS": "progressive-sync unp",
        "COMP_CWORD": "1",
    }
    result = CliRunner().invoke(main, [], env=env, prog_name="progressive-sync")
    assert "plain,unpause" in result.stdout


# --- an unreachable API server -----------------------------------------------------------------


def _raised(exc: KubeError) -> KubeError:
    try:
        raise exc from ConnectionRefusedError(111, "Connection refused")
    except KubeError as caught:
        return caught


def test_an_unanswered_call_is_one_line_naming_the_server() -> None:
    exc = _raised(Retryable("GET /apis/...: HTTPSConnectionPool(...): Max retries exceeded"))
    message = conventions.api_failure(
        exc, what="argocd/x", host="https://10.0.0.1:6443", kubeconfig="/k", context="prod", verbose=False
    )
    assert message == (
        "cannot reach the API server at https://10.0.0.1:6443 (kubeconfig /k, context prod): check that "
        "the cluster is up and that --kubeconfig/--context point at it (-v shows details)"
    )
    verbose = conventions.api_failure(
        exc, what="argocd/x", host="https://10.0.0.1:6443", kubeconfig="/k", context=None, verbose=True
    )
    assert verbose.splitlines()[0].startswith("cannot reach the API server at https://10.0.0.1:6443")
    assert "Traceback" in verbose and "Max retries exceeded" in verbose


def test_an_answer_the_server_refused_says_what_it_answered() -> None:
    exc = KubeError("GET ...: 500 Internal Server Error", status=500)
    message = conventions.api_failure(
        exc, what="argocd/x", host="h", kubeconfig=None, context=None, verbose=False
    )
    assert message == "argocd/x: the API server refused: GET ...: 500 Internal Server Error"
