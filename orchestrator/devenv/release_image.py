"""`make image`: the image users install, written as an OCI image archive to push to their registry.

It is the dev node's step image (`images.steps_image`: a Debian root filesystem with python3, the
runtime distributions of this environment and our sources), named for the release
(`progressive-sync.local/progressive-sync:<version>`) and given the CLI as its entrypoint, so
`docker run IMAGE --help` prints the CLI's help. The chart's Deployment and every Workflow step set
their own command (`python -m orchestrator.cli.main watch`, `python -m steps ...`), as with the
Dockerfile's image. Built here from Debian packages, never from a pulled base image; push it with
`skopeo copy oci-archive:<file> docker://<registry>/progressive-sync:<version>` (or `docker load`
and `docker push`).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from importlib import metadata
from pathlib import Path

from orchestrator.devenv import images

DEFAULT_OUTPUT = Path("dist") / "progressive-sync-image.tar"
IMAGE_NAME = "progressive-sync"


def release_reference(version: str) -> str:
    """The name the archive carries; the registry is the user's to choose when pushing."""
    return f"{images.REGISTRY}/{IMAGE_NAME}:{version}"


def release_image(step_image: images.Image, version: str) -> images.Image:
    """The step image under the release's name, with the CLI as entrypoint (pure)."""
    config = dataclasses.replace(
        step_image.config, entrypoint=("python3", "-m", "orchestrator.cli.main"), cmd=("--help",)
    )
    return dataclasses.replace(step_image, reference=release_reference(version), config=config)


def write(output: Path) -> images.Image:
    """Build (or reuse from the cache) the image and write its archive to `output` atomically."""
    image = release_image(images.steps_image(images.images_cache()), metadata.version("progressive-sync"))
    output.parent.mkdir(parents=True, exist_ok=True)
    partial = output.with_name(output.name + ".partial")
    with partial.open("wb") as out:
        images.write_oci_archive(image, out)
    partial.replace(output)
    return image


def main(argv: list[str] | None = None) -> int:
    """Write the archive; print its image reference (stdout) and how to push it (stderr)."""
    parser = argparse.ArgumentParser(prog="make image", description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help=f"default: {DEFAULT_OUTPUT}")
    args = parser.parse_args(argv)
    try:
        image = write(args.output)
    except images.ImageError as exc:
        print(f"make image: {exc}", file=sys.stderr)
        return 1
    size_mb = args.output.stat().st_size / 1e6
    version = image.tag
    print(image.reference)
    print(
        f"wrote {args.output} ({size_mb:.0f} MB, an OCI image archive). Push it to your registry, e.g.:\n"
        f"  skopeo copy oci-archive:{args.output} docker://registry.example.com/platform/{IMAGE_NAME}:{version}\n"
        f"then install the chart with --set image.repository=registry.example.com/platform/{IMAGE_NAME} "
        f"--set image.tag={version}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
