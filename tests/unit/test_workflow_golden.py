"""Golden files and reference checks of everything workflow_templates renders.

The committed YAML in workflow_templates/ (the WorkflowTemplates the chart installs and an example
rollout Workflow) must equal what the Python renders; `REGENERATE=1` rewrites it. Every rendered
object must pass `validate.problems` (references resolve), and the checker itself must catch the
mistakes it exists for.
"""

from __future__ import annotations

import functools
import json
import os
import tomllib
from typing import Any

import pytest
import yaml

from orchestrator.api.models import ProgressiveSync
from tests.support.builders import make_release
from workflow_templates import names, pieces, render, validate
from workflow_templates.builder import assumed_sizes, build_workflow
from workflow_templates.settings import WorkflowSettings


def test_committed_yaml_matches_the_python() -> None:
    files = render.golden_files()
    if os.environ.get("REGENERATE") == "1":
        for path, text in files.items():
            path.write_text(text)
    stale = [str(path.name) for path, text in files.items() if not path.exists() or path.read_text() != text]
    assert not stale, (
        f"{stale} differ from the Python; run `REGENERATE=1 pytest {__file__}` and review the diff"
    )


def test_golden_files_do_not_depend_on_the_installed_package_version(monkeypatch: pytest.MonkeyPatch) -> None:
    """The image tag comes from pyproject.toml, not from the installed version (the default image)."""
    before = render.golden_files()
    installed_elsewhere = functools.partial(WorkflowSettings, image="ghcr.io/x/y:0.0.0+unknown")
    monkeypatch.setattr(render, "WorkflowSettings", installed_elsewhere)
    assert render.golden_files() == before
    version = tomllib.loads(render.PYPROJECT.read_text())["project"]["version"]
    assert render.golden_settings().image.endswith(f":{version}")


def test_committed_yaml_is_what_hera_builds_and_resolves() -> None:
    objects = [yaml.safe_load(text.split("\n", 2)[2]) for text in render.golden_files().values()]
    library = validate.library_of(o for o in objects if o["kind"] == "WorkflowTemplate")
    assert set(library) == {pieces.STEPS_WORKFLOW_TEMPLATE, pieces.CLUSTER_WORKFLOW_TEMPLATE}
    for obj in objects:
        assert validate.problems(obj, library=library) == [], obj["metadata"]["name"]


@functools.cache
def _example_text() -> str:
    return render.golden_files()[render.EXAMPLE_WORKFLOW]


@functools.cache
def _library_text() -> str:
    return json.dumps(validate.library_of(t.to_dict() for t in pieces.workflow_templates(WorkflowSettings())))


def example_workflow() -> dict[str, Any]:
    return dict(yaml.safe_load(_example_text()))


def template(obj: dict[str, Any], name: str) -> dict[str, Any]:
    return next(t for t in obj["spec"]["templates"] if t["name"] == name)


def _dangling_entrypoint(obj: dict[str, Any]) -> None:
    obj["spec"]["entrypoint"] = "nowhere"


def _dangling_on_exit(obj: dict[str, Any]) -> None:
    obj["spec"]["onExit"] = "nowhere"


def _missing_template(obj: dict[str, Any]) -> None:
    obj["spec"]["templates"] = [t for t in obj["spec"]["templates"] if t["name"] != "record"]


def _unknown_dependency(obj: dict[str, Any]) -> None:
    template(obj, "stage-canary-in-eu-west-1")["dag"]["tasks"][1]["dependencies"] = ["nope"]


def _cycle(obj: dict[str, Any]) -> None:
    tasks = template(obj, "stage-canary-in-eu-west-1")["dag"]["tasks"]
    tasks[0]["dependencies"] = [tasks[-1]["name"]]


def _invalid_task_name(obj: dict[str, Any]) -> None:
    template(obj, "rollout")["dag"]["tasks"][0]["name"] = "canary in eu-west-1"


def _unknown_template_ref(obj: dict[str, Any]) -> None:
    task = template(obj, "fanout-canary-in-eu-west-1")["dag"]["tasks"][0]
    task.pop("template")
    task["templateRef"] = {"name": "progressive-sync-steps", "template": "no-such-step"}


def _unresolved_variable(obj: dict[str, Any]) -> None:
    template(obj, "cluster")["container"]["args"].append("{{inputs.parameters.nope}}")


def _status_outside_exit_handler(obj: dict[str, Any]) -> None:
    template(obj, "record")["container"]["args"].append("{{workflow.status}}")


def _output_of_a_non_ancestor(obj: dict[str, Any]) -> None:
    tasks = template(obj, "stage-canary-in-eu-west-1")["dag"]["tasks"]
    tasks[1]["dependencies"] = []


def _missing_argument(obj: dict[str, Any]) -> None:
    template(obj, "rollout")["dag"]["tasks"][0].pop("arguments")


def _parallelism_expression(obj: dict[str, Any]) -> None:
    template(obj, "fanout-canary-in-eu-west-1")["parallelism"] = "{{inputs.parameters.n}}"


def _fail_fast(obj: dict[str, Any]) -> None:
    template(obj, "fanout-canary-in-eu-west-1")["failFast"] = True


def _bad_display_name(obj: dict[str, Any]) -> None:
    template(obj, "stage-canary-in-eu-west-1")["annotations"] = {
        "workflows.argoproj.io/display-name": "canary in eu-west-1"
    }


def _other_expression(obj: dict[str, Any]) -> None:
    template(obj, "cluster")["container"]["args"].append("{{=inputs.parameters.cluster}}")


def _display_expression_of_an_undeclared_input(obj: dict[str, Any]) -> None:
    template(obj, "record")["annotations"] = {
        "workflows.argoproj.io/display-name": names.display_name_of_input("cluster")
    }


@pytest.mark.parametrize(
    ("break_it", "expected"),
    [
        pytest.param(_dangling_entrypoint, "spec.entrypoint names template 'nowhere'", id="entrypoint"),
        pytest.param(_dangling_on_exit, "spec.onExit names template 'nowhere'", id="on-exit"),
        pytest.param(_missing_template, "template 'record' does not exist", id="task-template"),
        pytest.param(_unknown_dependency, "depends on 'nope', which does not exist", id="dependency"),
        pytest.param(_cycle, "dependency cycle", id="cycle"),
        pytest.param(_invalid_task_name, "is not valid for Argo", id="task-name"),
        pytest.param(_unknown_template_ref, "is not in WorkflowTemplate", id="template-ref"),
        pytest.param(_unresolved_variable, "{{inputs.parameters.nope}} does not resolve", id="variable"),
        pytest.param(_status_outside_exit_handler, "{{workflow.status}} does not resolve", id="status-scope"),
        pytest.param(
            _output_of_a_non_ancestor, "outputs.parameters.targets}} does not resolve", id="non-ancestor"
        ),
        pytest.param(_missing_argument, "input parameter 'stage' is not passed", id="argument"),
        pytest.param(_parallelism_expression, "parallelism must be an integer", id="parallelism"),
        pytest.param(_bad_display_name, "does not pass Argo's rule", id="display-name"),
        pytest.param(_fail_fast, "template failFast hangs the Workflow", id="fail-fast"),
        pytest.param(_other_expression, "is not used by our Workflows", id="other-expression"),
        pytest.param(
            _display_expression_of_an_undeclared_input,
            "is not used by our Workflows",
            id="display-expression-of-an-undeclared-input",
        ),
    ],
)
def test_checker_finds_broken_references(break_it: Any, expected: str) -> None:
    obj = example_workflow()
    library = json.loads(_library_text())
    assert validate.problems(obj, library=library) == []
    break_it(obj)
    found = validate.problems(obj, library=library)
    assert any(expected in problem for problem in found), found


def test_yaml_quotes_strings_that_go_would_read_as_numbers() -> None:
    ps = ProgressiveSync.model_validate(yaml.safe_load(render.EXAMPLE_PS.read_text()))
    workflow = build_workflow(
        ps,
        release=make_release("0123456789", revisions=(("1e5",),)),
        plan=assumed_sizes(ps, 3),
        settings=WorkflowSettings(),
    )
    text = render.to_yaml(workflow)
    assert "progressivesync.io/rollout-id: '0123456789'" in text
    assert "progressivesync.io/attempt: '1'" in text  # the identity annotations too
    assert yaml.safe_load(text) == workflow.to_dict()
