"""`progressive-sync convert`, as a person runs it (click's CliRunner): the ProgressiveSync on stdout,
ready for `kubectl apply -f -` and `plan -f -`, the notes and what was skipped on stderr; exit 1
naming the field, nothing on stdout, when a source cannot be converted.

Real: the CLI, the converter, the example pair (examples/rollingsync/storefront-applicationset.yaml
and what it converts to, examples/rollingsync-storefront.yaml) and `plan --fleet` over the converted
result. Not real: no API server (convert never calls one).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result

from orchestrator.cli.main import main
from orchestrator.devenv.starter_app import application_set

REPO = Path(__file__).resolve().parents[2]
SOURCE = REPO / "examples" / "rollingsync" / "storefront-applicationset.yaml"
CONVERTED = REPO / "examples" / "rollingsync-storefront.yaml"
FLEET = REPO / "examples" / "fleets" / "storefront.yaml"
MIGRATION = REPO / "docs" / "migration.md"


def run(*args: str | Path, stdin: str | None = None, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(main, [str(a) for a in args], input=stdin, env=env)


def rolling_sync(name: str = "web", namespace: str | None = "argocd", steps: Any = None) -> dict[str, Any]:
    document = application_set(
        name, repo_url="https://git.example/x.git", path="deploy", labels={"env": "{{metadata.labels.env}}"}
    )
    if namespace:
        document["metadata"]["namespace"] = namespace
    document["spec"]["strategy"] = {
        "type": "RollingSync",
        "rollingSync": {
            "steps": steps
            if steps is not None
            else [
                {"matchExpressions": [{"key": "env", "operator": "In", "values": ["staging"]}]},
                {
                    "matchExpressions": [{"key": "env", "operator": "In", "values": ["prod"]}],
                    "maxUpdate": "25%",
                },
            ]
        },
    }
    return document


def test_the_example_converts_to_its_pair_and_plans_against_its_fleet() -> None:
    result = run("convert", "--from-applicationset", SOURCE)
    assert result.exit_code == 0, result.output
    assert yaml.safe_load(result.stdout) == yaml.safe_load(CONVERTED.read_text())
    assert (
        "converted ApplicationSet argocd/storefront into ProgressiveSync argocd/storefront (3 stages)"
        in result.stderr
    )
    assert "spec.strategy: remove it" in result.stderr
    plan = run("plan", "-f", "-", "--fleet", FLEET, "-o", "json", stdin=result.stdout)
    assert plan.exit_code == 0, plan.output
    report = json.loads(plan.stdout)
    assert report["errors"] == [] and report["warnings"] == []
    assert [(s["name"], sorted(s["targets"])) for s in report["stages"]] == [
        ("staging", ["store-1", "store-2"]),
        ("prod eu-west-1", ["store-3", "store-5"]),
        ("prod", ["store-4", "store-6"]),
    ]


def test_stdin_and_json() -> None:
    result = run("convert", "--from-applicationset", "-", "-o", "json", stdin=yaml.safe_dump(rolling_sync()))
    assert result.exit_code == 0, result.output
    manifest = json.loads(result.stdout)
    assert manifest["kind"] == "ProgressiveSync"
    assert [s["maxParallel"] for s in manifest["spec"]["stages"]] == ["100%", "25%"]
    validated = run("validate", "-f", "-", stdin=result.stdout)
    assert validated.exit_code == 0, validated.output


def test_the_devenv_application_set_with_labels_converts() -> None:
    """The ApplicationSet the dev environment (and the real Argo CD tier) builds, given labels."""
    result = run("convert", "--from-applicationset", "-", stdin=yaml.safe_dump(rolling_sync()))
    assert result.exit_code == 0, result.output
    assert "keep env" in result.stderr and "no template of the ApplicationSet sets" not in result.stderr


def test_several_documents_each_converted_and_the_rest_said_skipped(tmp_path: Path) -> None:
    path = tmp_path / "all.yaml"
    path.write_text(
        yaml.safe_dump_all(
            [
                rolling_sync("web"),
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}},
                rolling_sync("api"),
                application_set("plain", repo_url="https://git.example/x.git", path="p"),
            ]
        )
    )
    result = run("convert", "--from-applicationset", path)
    assert result.exit_code == 0, result.output
    assert [d["metadata"]["name"] for d in yaml.safe_load_all(result.stdout)] == ["web", "api"]
    assert "skipped: document 2 (ConfigMap c): not an ApplicationSet" in result.stderr
    assert "skipped: document 4 (ApplicationSet plain): it has no spec.strategy" in result.stderr
    as_json = run("convert", "--from-applicationset", path, "-o", "json")
    assert json.loads(as_json.stdout)["kind"] == "List"
    one = run("convert", "--from-applicationset", path, "--name", "api")
    assert [d["metadata"]["name"] for d in yaml.safe_load_all(one.stdout)] == ["api"]


def test_a_kubectl_list_is_read_item_by_item() -> None:
    listed = {"apiVersion": "v1", "kind": "List", "items": [rolling_sync("web"), rolling_sync("api")]}
    result = run("convert", "--from-applicationset", "-", stdin=yaml.safe_dump(listed))
    assert result.exit_code == 0, result.output
    assert len(list(yaml.safe_load_all(result.stdout))) == 2


@pytest.mark.parametrize(
    ("stdin", "says"),
    [
        pytest.param(
            yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}),
            "no ApplicationSet with a RollingSync strategy to convert",
            id="not-an-application-set",
        ),
        pytest.param(
            yaml.safe_dump(application_set("plain", repo_url="https://git.example/x.git", path="p")),
            "it has no spec.strategy, not RollingSync",
            id="no-rolling-sync",
        ),
        pytest.param(
            yaml.safe_dump(rolling_sync(steps=[])), "spec.strategy.rollingSync.steps: empty", id="no-steps"
        ),
        pytest.param(
            yaml.safe_dump(
                rolling_sync(steps=[{"matchExpressions": [{"key": "env", "operator": "Exists"}]}])
            ),
            "steps[0].matchExpressions[0].operator: 'Exists'",
            id="malformed-step",
        ),
        pytest.param("a: [", "<stdin>: not YAML", id="not-yaml"),
    ],
)
def test_what_cannot_be_converted_exits_1_naming_the_field(stdin: str, says: str) -> None:
    result = run("convert", "--from-applicationset", "-", stdin=stdin)
    assert result.exit_code == 1, result.output
    assert says in result.stderr
    assert result.stdout == ""


def test_one_bad_application_set_among_good_ones_prints_nothing() -> None:
    text = yaml.safe_dump_all([rolling_sync("web"), rolling_sync("bad", steps=[])])
    result = run("convert", "--from-applicationset", "-", stdin=text)
    assert result.exit_code == 1
    assert result.stdout == ""
    assert "ApplicationSet argocd/bad" in result.stderr and "could not be converted" in result.stderr


@pytest.mark.parametrize(
    "args",
    [
        pytest.param([], id="neither"),
        pytest.param(["--from-applicationset", "-", "--from-skyscanner", "-"], id="both"),
    ],
)
def test_exactly_one_source(args: list[str]) -> None:
    result = run("convert", *args, stdin="")
    assert result.exit_code == 2
    assert "give one of --from-applicationset FILE and --from-skyscanner FILE" in result.output


def test_namespace_flag_and_fallback(tmp_path: Path) -> None:
    moved = run("convert", "--from-applicationset", "-", "-n", "ops", stdin=yaml.safe_dump(rolling_sync()))
    manifest = yaml.safe_load(moved.stdout)
    assert manifest["metadata"]["namespace"] == "ops"
    assert manifest["spec"]["appSetRef"] == {"name": "web", "namespace": "argocd"}
    env = {"KUBECONFIG": str(tmp_path / "none"), "PROGRESSIVE_SYNC_NAMESPACE": "team"}
    unplaced = run(
        "convert", "--from-applicationset", "-", stdin=yaml.safe_dump(rolling_sync(namespace=None)), env=env
    )
    assert yaml.safe_load(unplaced.stdout)["metadata"]["namespace"] == "team"


def test_skyscanner() -> None:
    document = {
        "apiVersion": "argoproj.skyscanner.net/v1alpha1",
        "kind": "ProgressiveSync",
        "metadata": {"name": "checkout", "namespace": "argocd"},
        "spec": {
            "appSetRef": {"name": "checkout"},
            "stages": [
                {"name": "one", "maxParallel": 1, "maxTargets": 1, "targets": {"clusters": {"selector": {}}}}
            ],
        },
    }
    result = run("convert", "--from-skyscanner", "-", stdin=yaml.safe_dump(document))
    assert result.exit_code == 0, result.output
    assert yaml.safe_load(result.stdout)["apiVersion"] == "progressivesync.io/v1alpha1"
    assert "spec.stages[0].maxTargets" in result.stderr
    ours = run("convert", "--from-skyscanner", CONVERTED)
    assert ours.exit_code == 1 and "no Skyscanner ProgressiveSync" in ours.stderr
    swapped = run("convert", "--from-applicationset", "-", stdin=yaml.safe_dump(document))
    assert swapped.exit_code == 1 and "(convert it with --from-skyscanner)" in swapped.stderr
    application_set_given = run("convert", "--from-skyscanner", SOURCE)
    assert "(convert it with --from-applicationset)" in application_set_given.stderr


def test_the_migration_guide_shows_the_commands_real_output() -> None:
    """docs/migration.md's worked example: its ApplicationSet, converted, prints its ProgressiveSync
    and its notes (regenerate both blocks from the command when this fails)."""
    text = MIGRATION.read_text()
    before = text.split("<!-- convert-example: input -->\n```yaml\n", 1)[1].split("```", 1)[0]
    after = text.split("<!-- convert-example: output -->\n```yaml\n", 1)[1].split("```", 1)[0]
    notes = text.split("<!-- convert-example: notes -->\n```text\n", 1)[1].split("```", 1)[0]
    result = run("convert", "--from-applicationset", "-", stdin=before)
    assert result.exit_code == 0, result.output
    assert result.stdout == after
    assert result.stderr == notes
