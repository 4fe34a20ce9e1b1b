"""`make image`: the step image renamed for the release, with the CLI as its entrypoint."""

from __future__ import annotations

from pathlib import Path

from orchestrator.devenv import images
from orchestrator.devenv.release_image import release_image, release_reference


def test_the_release_image_is_the_step_image_named_for_the_version_with_the_cli_as_entrypoint() -> None:
    step = images.Image(
        "progressive-sync.local/steps:0123456789abcdef",
        Path("/cache/steps.tar"),
        "sha256:" + "0" * 64,
        images.ImageConfig(cmd=("python3",), user=images.STEP_USER),
    )
    released = release_image(step, "1.4.0")
    assert released.reference == release_reference("1.4.0") == "progressive-sync.local/progressive-sync:1.4.0"
    assert released.tag == "1.4.0"
    assert (released.layer, released.layer_digest) == (step.layer, step.layer_digest)  # the same bytes
    oci = released.config.to_oci()
    assert oci["Entrypoint"] == ["python3", "-m", "orchestrator.cli.main"]
    assert oci["User"] == images.STEP_USER  # never root, as the step image
