"""Offline validation: human messages, API-server style paths, documents, and the validate command."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from orchestrator.api.selectors import NO_STAGE_SELECTOR
from orchestrator.api.validation import Verdict, format_path, validate_object, validate_text
from orchestrator.cli.main import main

REPO = Path(__file__).resolve().parents[2]

VALID = """\
apiVersion: progressivesync.io/v1alpha1
kind: ProgressiveSync
metadata: {name: checkout}
spec:
  appSetRef: {name: checkout}
  stages:
    - name: canary
      targets: {clusters: {selector: {}}}
"""


def make_object(**spec_fields: Any) -> dict[str, Any]:
    spec = {
        "appSetRef": {"name": "checkout"},
        "stages": [{"name": "a", "targets": {"clusters": {"selector": {}}}}],
    }
    return {
        "apiVersion": "progressivesync.io/v1alpha1",
        "kind": "ProgressiveSync",
        "metadata": {"name": "checkout"},
        "spec": spec | spec_fields,
    }


def with_stage(**stage_fields: Any) -> dict[str, Any]:
    return make_object(stages=[{"name": "a", "targets": {"clusters": {"selector": {}}}} | stage_fields])


@pytest.mark.parametrize(
    ("loc", "path"),
    [
        pytest.param(("spec", "stages", 1, "maxTargets"), "spec.stages[1].maxTargets", id="list-index"),
        pytest.param(("metadata", "name"), "metadata.name", id="plain"),
        pytest.param((), "(document)", id="root"),
    ],
)
def test_format_path(loc: tuple[int | str, ...], path: str) -> None:
    assert format_path(loc) == path


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        pytest.param(
            with_stage(maxTargets="0%"),
            'spec.stages[0].maxTargets: "0%" is not a size (use a whole number >= 1',
            id="zero-percent",
        ),
        pytest.param(
            with_stage(maxTargets="5"),
            'spec.stages[0].maxTargets: "5" is a number in quotes (write 5 without quotes',
            id="number-in-quotes",
        ),
        pytest.param(
            make_object(progressDeadlineSeconds="600"),
            'spec.progressDeadlineSeconds: "600" is a number in quotes (write 600 without quotes)',
            id="int-in-quotes",
        ),
        pytest.param(
            make_object(progressDeadlineSeconds=-5),
            "spec.progressDeadlineSeconds: -5 is below the minimum 1 (use 1 or more)",
            id="below-minimum",
        ),
        pytest.param(
            with_stage(approval="manual"),
            'spec.stages[0].approval: "manual" is not allowed (use Automatic or Manual)',
            id="enum",
        ),
        pytest.param(
            with_stage(maxTarget=1),
            "spec.stages[0].maxTarget: unknown field (did you mean maxTargets?)",
            id="typo",
        ),
        pytest.param(
            make_object(stages=[]), "spec.stages: has 0 items, needs at least 1 (add at least 1)", id="empty"
        ),
        pytest.param(
            make_object(paused="yes"),
            'spec.paused: expected true or false, got the string "yes" (write true or false without quotes)',
            id="bool",
        ),
        pytest.param(
            with_stage(targets={"clusters": {"selector": {"matchLabels": {"team name": "x"}}}}),
            "spec.stages[0].targets.clusters.selector.matchLabels:"
            ' key "team name" is not valid (use a label key',
            id="map-key",
        ),
        pytest.param(
            make_object(appSetRef=None),
            "spec.appSetRef: required field is missing (add appSetRef)",
            id="null-is-missing",
        ),
    ],
)
def test_messages_say_path_problem_and_fix(obj: dict[str, Any], expected: str) -> None:
    messages = [str(error) for error in validate_object(obj)]
    assert any(message.startswith(expected) for message in messages), messages


def test_no_pydantic_noise() -> None:
    obj = with_stage(maxTargets="abc", bakeSeconds="10m", approval=3, spreadBy="a b")
    obj["spec"]["stages"].append({"name": "a", "targets": "all"})
    obj["spec"]["unknown"] = True
    errors = validate_object(obj)
    assert len(errors) >= 5
    for error in errors:
        text = str(error)
        for noise in ("pydantic", "https://", "input_type", "input_value", "Value error,", "type="):
            assert noise not in text, text


def test_valid_object_has_no_errors() -> None:
    assert validate_object(make_object()) == []


def test_documents_are_validated_one_by_one() -> None:
    text = "\n---\n".join(
        [
            VALID,
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\n",
            VALID.replace("name: canary", "name: canary/eu"),
            "apiVersion: progressivesync.io/v1alpha1\nkind: ProgresiveSync\nmetadata: {name: typo}\n",
            "",
        ]
    )
    results = validate_text(text)
    assert [r.verdict for r in results] == [Verdict.VALID, Verdict.SKIPPED, Verdict.INVALID, Verdict.INVALID]
    assert results[1].description == "v1/ConfigMap settings"
    assert str(results[2].errors[0]).startswith("spec.stages[0].name:")
    assert str(results[3].errors[0]).startswith('kind: "ProgresiveSync" is not allowed (use ProgressiveSync)')


def test_lists_are_expanded() -> None:
    item = json.dumps(make_object(progressDeadlineSeconds=0))
    results = validate_text(f'{{"apiVersion": "v1", "kind": "List", "items": [{item}]}}')
    assert [r.position for r in results] == ["document 1, item 1"]
    assert results[0].verdict is Verdict.INVALID


def test_broken_yaml_says_where() -> None:
    (result,) = validate_text("spec: [unclosed\n")
    assert result.verdict is Verdict.INVALID
    assert str(result.errors[0]).startswith("line ")


# --- the command -----------------------------------------------------------------------------


def test_cli_valid_examples_exit_0() -> None:
    result = CliRunner().invoke(main, ["validate", "-f", str(REPO / "examples" / "minimal.yaml")])
    assert result.exit_code == 0, result.output
    assert result.output.strip().endswith("ProgressiveSync argocd/guestbook: OK")


def test_cli_invalid_exits_1_and_prints_each_error(tmp_path: Path) -> None:
    manifest = tmp_path / "bad.yaml"
    manifest.write_text(
        VALID.replace("targets: {clusters: {selector: {}}}", 'targets: {}\n      maxTargets: "150%"')
    )
    result = CliRunner().invoke(main, ["validate", "-f", str(manifest)])
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert lines[0] == f"{manifest}: ProgressiveSync checkout: invalid, 2 errors"
    assert f"  spec.stages[0].targets: {NO_STAGE_SELECTOR}" in lines
    assert any(line.startswith('  spec.stages[0].maxTargets: "150%" is not a size') for line in lines)


def test_cli_reads_stdin_and_several_documents() -> None:
    result = CliRunner().invoke(main, ["validate", "-f", "-"], input=f"{VALID}---\n{VALID}")
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        "<stdin> (document 1): ProgressiveSync checkout: OK",
        "<stdin> (document 2): ProgressiveSync checkout: OK",
    ]


def test_cli_without_any_progressive_sync_exits_1() -> None:
    result = CliRunner().invoke(main, ["validate", "-f", "-"], input="apiVersion: v1\nkind: ConfigMap\n")
    assert result.exit_code == 1
    assert "skipped, not a ProgressiveSync" in result.output
    assert "no ProgressiveSync found" in result.output


def test_cli_json_output() -> None:
    result = CliRunner().invoke(
        main, ["validate", "-f", "-", "-o", "json"], input=VALID.replace("checkout}", "X}")
    )
    assert result.exit_code == 1
    (report,) = json.loads(result.output)
    (document,) = report["documents"]
    assert document["result"] == "invalid"
    assert {error["path"] for error in document["errors"]} == {"metadata.name", "spec.appSetRef.name"}


def test_cli_missing_file_is_a_usage_error() -> None:
    result = CliRunner().invoke(main, ["validate", "-f", "/no/such/file.yaml"])
    assert result.exit_code == 2


def test_cli_says_what_a_valid_rollback_does() -> None:
    path = REPO / "examples" / "rollback.yaml"
    result = CliRunner().invoke(main, ["validate", "-f", str(path)])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        f"{path}: ProgressiveSync argocd/checkout: OK",
        "  rollback: on StageFailed, DeadlineExceeded, Cancelled; scope Reached (later stages first); "
        "50% of a stage's clusters at a time; each cluster within 600s",
    ]
    as_json = json.loads(CliRunner().invoke(main, ["validate", "-f", str(path), "-o", "json"]).output)
    assert as_json[0]["documents"][0]["notes"] == [result.output.splitlines()[1].strip()]


def test_cli_names_a_bad_rollback_field_and_the_fix() -> None:
    text = VALID + '  rollback:\n    "on": [StageFailed, StageFailed]\n'
    result = CliRunner().invoke(main, ["validate", "-f", "-"], input=text)
    assert result.exit_code == 1
    assert (
        "  spec.rollback.on: StageFailed is listed at [0] and [1] (list each trigger once)" in result.output
    )


def test_cli_says_an_unquoted_on_was_read_as_true() -> None:
    result = CliRunner().invoke(
        main, ["validate", "-f", "-"], input=VALID + "  rollback:\n    on: [StageFailed]\n"
    )
    assert result.exit_code == 1
    assert "spec.rollback: the key on was read as the boolean true" in result.output
    assert '(quote it: "on": [StageFailed])' in result.output
