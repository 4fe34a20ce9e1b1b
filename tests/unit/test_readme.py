"""The README's install section is followed by a real-stack test (tests/realstack/test_readme_install.py)
that finds its blocks by their `<!-- readme-test: NAME -->` markers. This checks, without a cluster,
that every marker is there with the block it promises and that the manifests it gives are ones a
user can apply: the ProgressiveSync passes `validate` (the models, as the API server would) and the
ApplicationSet leaves the syncing to it. Pure: reads README.md only."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from orchestrator.api.models import ProgressiveSync
from orchestrator.api.validation import validate_object
from tests.support.readme import readme_blocks


def _block(name: str) -> tuple[str, str]:
    """(language, text) of the fenced block right after the marker `name` (tests.support.readme)."""
    block = readme_blocks((name,))[name]
    return block.lang, block.text


@pytest.mark.parametrize(
    ("name", "language", "must_say"),
    [
        pytest.param(
            "cli",
            "sh",
            [
                "python3 -m venv ~/.local/share/progressive-sync",
                "~/.local/share/progressive-sync/bin/pip install .",
            ],
            id="cli",
        ),
        pytest.param(
            "image", "sh", ["make image", "oci-archive:dist/progressive-sync-image.tar"], id="image"
        ),
        pytest.param(
            "chart",
            "sh",
            [
                "helm install progressive-sync charts/progressive-sync",
                "--namespace argocd",
                "image.repository=",
            ],
            id="chart",
        ),
        pytest.param("applicationset", "yaml", ["kind: ApplicationSet"], id="applicationset"),
        pytest.param("progressivesync", "yaml", ["kind: ProgressiveSync"], id="progressivesync"),
    ],
)
def test_every_install_step_has_its_marked_block(name: str, language: str, must_say: list[str]) -> None:
    found_language, text = _block(name)
    assert found_language == language
    missing = [phrase for phrase in must_say if phrase not in text]
    assert not missing, f"the {name} block lacks {missing}"


def test_the_chart_block_installs_once() -> None:
    _, text = _block("chart")
    assert text.count("helm install") == 1


def _manifest(name: str) -> dict[str, Any]:
    _, text = _block(name)
    document = yaml.safe_load(text)
    assert isinstance(document, dict)
    return document


def test_the_progressivesync_validates_and_names_the_applicationset() -> None:
    document = _manifest("progressivesync")
    assert validate_object(document) == []
    ps = ProgressiveSync.model_validate(document)
    app_set = _manifest("applicationset")
    assert (ps.metadata.name, ps.metadata.namespace) == ("guestbook", "argocd")
    assert ps.spec.app_set_ref.name == app_set["metadata"]["name"]
    assert ps.metadata.namespace == app_set["metadata"]["namespace"]
    first, rest = ps.spec.stages
    assert (first.max_targets, rest.max_parallel) == (1, 2), "a canary of one, then the rest two at a time"


def test_the_applicationset_leaves_syncing_to_the_progressivesync() -> None:
    app_set = _manifest("applicationset")
    spec = app_set["spec"]
    assert "strategy" not in spec, "RollingSync would refuse the ProgressiveSync (ApplicationSetRollingSync)"
    template = spec["template"]["spec"]
    assert "automated" not in (template.get("syncPolicy") or {}), "automated sync must be off"
    assert {"project", "source", "destination"} <= set(template)
    [generator] = spec["generators"]
    assert generator["clusters"]["selector"]["matchLabels"], "a clusters generator selecting by label"
