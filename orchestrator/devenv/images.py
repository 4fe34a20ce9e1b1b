"""Container images for the dev node, built on this machine and never pulled.

Three images, each one uncompressed layer (a tar of its root filesystem) wrapped as an OCI image
archive and imported into the node's containerd with `ctr images import`; pods use
`imagePullPolicy: Never`:

- `pause`: our own tiny static Go program (hack/images/pause), containerd's sandbox image;
- `argoexec`: Argo Workflows' executor binary (init, wait and emissary of every step pod);
- `steps`: the step image. A Debian root filesystem with python3 (`mmdebstrap --variant=essential
  --include=python3`, cached: it depends only on the suite), plus the installed distributions our
  package needs (copied from this environment, so the image runs exactly the versions the tests
  ran) and our own sources, compiled to bytecode.

Every image is named after a hash of what it holds (`progressive-sync.local/steps:<hash>`), so a
changed source makes a new image and an unchanged one is reused from the cache without work. The
layers live in the tool cache (`<cache>/images/`); the few most recent step layers are kept.

Building writes under a `.partial` name and renames into place, under a lock, so concurrent callers
and a killed build never leave a half-made layer where a reader looks.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import json
import logging
import os
import py_compile
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import IO, Any

from orchestrator.devenv import tools

log = logging.getLogger(__name__)

REGISTRY = "progressive-sync.local"
REPO_ROOT = Path(__file__).resolve().parents[2]
PAUSE_SOURCE = REPO_ROOT / "hack" / "images" / "pause"
# What goes into the step image from this checkout (the same three packages the Dockerfile copies).
STEP_PACKAGES = ("orchestrator", "steps", "workflow_templates")
DEBIAN_SUITE = "bookworm"
# The Python of DEBIAN_SUITE: the distributions copied from this environment must match it.
SUITE_PYTHON = {"bookworm": (3, 11)}
SITE_PACKAGES = "usr/local/lib/python{major}.{minor}/dist-packages"
# Files of the Debian root filesystem nobody reads in a container (docs, manuals, translations).
ROOTFS_EXCLUDES = ("/usr/share/man/*", "/usr/share/doc/*", "/usr/share/locale/*", "/usr/share/info/*")
# The rootfs recipe; bump when it changes so the cache builds a new one.
ROOTFS_RECIPE = "v1"
# The pause program's build: the flags hack/tools/build.sh builds the tools with (its go_build), so a
# cold build reuses their compiles of the standard library; -s -w strip it, so no DWARF is compiled.
GO_BUILD_FLAGS = ("-trimpath", "-gcflags=all=-dwarf=false", "-ldflags", "-s -w")
STEP_LAYERS_KEPT = 3
STEP_USER = "65532:65532"  # as in the Dockerfile: the steps do not run as root
BUILD_TIMEOUT = 900.0


class ImageError(RuntimeError):
    """An image could not be built or imported; the message says what is missing."""


@dataclass(frozen=True)
class ImageConfig:
    """The runtime defaults of an image (the OCI image config's `config`)."""

    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    env: tuple[str, ...] = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",)
    working_dir: str = "/"
    user: str = ""

    def to_oci(self) -> dict[str, Any]:
        """The `config` object of an OCI image configuration."""
        config: dict[str, Any] = {"Env": list(self.env), "WorkingDir": self.working_dir}
        if self.entrypoint:
            config["Entrypoint"] = list(self.entrypoint)
        if self.cmd:
            config["Cmd"] = list(self.cmd)
        if self.user:
            config["User"] = self.user
        return config


@dataclass(frozen=True)
class Image:
    """A built image: its name, its one layer in the cache and that layer's digest."""

    reference: str
    layer: Path
    layer_digest: str  # "sha256:<hex>" of the uncompressed layer tar
    config: ImageConfig

    @property
    def tag(self) -> str:
        """The part after the last ':' (the content hash)."""
        return self.reference.rsplit(":", 1)[1]


# --- the OCI archive -----------------------------------------------------------------------------


def _blob(digest: str) -> str:
    return "blobs/sha256/" + digest.split(":", 1)[1]


def _json_bytes(document: dict[str, Any]) -> bytes:
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def oci_documents(image: Image, layer_size: int) -> tuple[bytes, bytes, bytes]:
    """(config, manifest, index.json) of a one-layer image (pure: tested without a layer)."""
    config = _json_bytes(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": image.config.to_oci(),
            "rootfs": {"type": "layers", "diff_ids": [image.layer_digest]},
            "history": [{"created_by": "progressive-sync orchestrator/devenv/images.py"}],
        }
    )
    manifest = _json_bytes(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": _sha256(config),
                "size": len(config),
            },
            "layers": [
                {
                    "mediaType": "application/vnd.oci.image.layer.v1.tar",
                    "digest": image.layer_digest,
                    "size": layer_size,
                }
            ],
        }
    )
    index = _json_bytes(
        {
            "schemaVersion": 2,
            "manifests": [
                {
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "digest": _sha256(manifest),
                    "size": len(manifest),
                    "annotations": {
                        "io.containerd.image.name": image.reference,
                        "org.opencontainers.image.ref.name": image.tag,
                    },
                }
            ],
        }
    )
    return config, manifest, index


def write_oci_archive(image: Image, out: IO[bytes]) -> None:
    """Write the image as an OCI image archive (a tar stream) to `out`; the layer is streamed."""
    layer_size = image.layer.stat().st_size
    config, manifest, index = oci_documents(image, layer_size)
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as archive:
        _add_bytes(archive, "oci-layout", _json_bytes({"imageLayoutVersion": "1.0.0"}))
        _add_bytes(archive, _blob(_sha256(config)), config)
        _add_bytes(archive, _blob(_sha256(manifest)), manifest)
        info = tarfile.TarInfo(_blob(image.layer_digest))
        info.size = layer_size
        info.mode = 0o644
        with image.layer.open("rb") as layer:
            archive.addfile(info, layer)
        _add_bytes(archive, "index.json", index)


def _add_bytes(archive: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = mode
    archive.addfile(info, io.BytesIO(data))


def import_image(ctr: Path, address: Path, image: Image, *, timeout: float = 300.0) -> None:
    """Import `image` into containerd's `k8s.io` namespace (where the kubelet's CRI looks) and unpack it."""
    command = [str(ctr), "--address", str(address), "--namespace", "k8s.io", "images", "import", "-"]
    started = time.monotonic()
    with tempfile.TemporaryFile() as output:
        process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=output, stderr=subprocess.STDOUT)
        assert process.stdin is not None
        try:
            write_oci_archive(image, process.stdin)
        except BrokenPipeError:
            pass  # ctr ended early; its output below says why
        finally:
            with contextlib.suppress(BrokenPipeError):
                process.stdin.close()
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise ImageError(f"importing {image.reference} took longer than {timeout:g}s") from None
        if process.returncode != 0:
            output.seek(0)
            text = output.read().decode(errors="replace")
            raise ImageError(f"ctr images import of {image.reference} failed: {text}")
    log.info("imported %s in %.1fs", image.reference, time.monotonic() - started)


# --- building layers -----------------------------------------------------------------------------


def images_cache(tools_cache: Path | None = None) -> Path:
    """Where built layers and the Debian root filesystem are kept: `images/` of the tool cache."""
    folder = (tools_cache or tools.cache_dir()) / "images"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@contextlib.contextmanager
def _cache_lock(cache: Path) -> Iterator[None]:
    with (cache / ".lock").open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return "sha256:" + digest.hexdigest()


def _cached_layer(cache: Path, stem: str, build: Any) -> tuple[Path, str]:
    """The layer `<stem>.tar` and its digest, built by `build(partial_path)` unless cached."""
    layer = cache / f"{stem}.tar"
    digest_file = cache / f"{stem}.tar.sha256"
    with _cache_lock(cache):
        if layer.exists() and digest_file.exists():
            return layer, digest_file.read_text().strip()
        partial = cache / f"{stem}.tar.partial"
        partial.unlink(missing_ok=True)
        started = time.monotonic()
        build(partial)
        digest = _file_digest(partial)
        partial.rename(layer)
        digest_file.write_text(digest + "\n")
        log.info(
            "built layer %s (%.1f MB) in %.1fs",
            layer.name,
            layer.stat().st_size / 1e6,
            time.monotonic() - started,
        )
        return layer, digest


def _tar_info(name: str, *, mode: int, mtime: float = 0, kind: bytes = tarfile.REGTYPE) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.mode = mode
    info.mtime = int(mtime)
    info.type = kind
    return info


def _add_dirs(archive: tarfile.TarFile, path: str, made: set[str]) -> None:
    """Add every parent directory of `path` not yet in the archive."""
    parts = path.split("/")[:-1]
    for index in range(1, len(parts) + 1):
        folder = "/".join(parts[:index])
        if folder and folder not in made:
            made.add(folder)
            archive.addfile(_tar_info(folder, mode=0o755, kind=tarfile.DIRTYPE))


def single_binary_layer(binary: Path, target: str, out: Path, *, extra_dirs: Iterable[str] = ()) -> None:
    """A layer holding one static binary at `target` (e.g. "bin/pause") and some empty folders."""
    made: set[str] = set()
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as archive:
        for folder in extra_dirs:
            _add_dirs(archive, folder + "/x", made)
        _add_dirs(archive, target, made)
        info = _tar_info(target, mode=0o755)
        info.size = binary.stat().st_size
        with binary.open("rb") as handle:
            archive.addfile(info, handle)


def pause_image(cache: Path, *, go: str = "go") -> Image:
    """The sandbox image: hack/images/pause built with Go (static), keyed by its source."""
    key = _hash_files(sorted(PAUSE_SOURCE.iterdir()), root=PAUSE_SOURCE)[:16]

    def build(partial: Path) -> None:
        with tempfile.TemporaryDirectory(prefix="pause-build-") as scratch:
            binary = Path(scratch) / "pause"
            _run(
                [go, "build", *GO_BUILD_FLAGS, "-o", str(binary), "."],
                cwd=PAUSE_SOURCE,
                env={**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-buildvcs=false"},
                what="building the pause program",
            )
            single_binary_layer(binary, "pause", partial)

    layer, digest = _cached_layer(cache, f"pause-{key}", build)
    return Image(f"{REGISTRY}/pause:{key}", layer, digest, ImageConfig(entrypoint=("/pause",), env=()))


def argoexec_image(cache: Path, argoexec: Path) -> Image:
    """Argo's executor image: the argoexec binary at /bin/argoexec (pods run `argoexec ...` by PATH)."""
    key = _file_digest(argoexec).split(":")[1][:16]

    def build(partial: Path) -> None:
        single_binary_layer(argoexec, "bin/argoexec", partial, extra_dirs=("tmp", "var/run/argo"))

    layer, digest = _cached_layer(cache, f"argoexec-{key}", build)
    config = ImageConfig(entrypoint=("/bin/argoexec",), env=("PATH=/bin:/usr/bin",))
    return Image(f"{REGISTRY}/argoexec:{key}", layer, digest, config)


# --- the python root filesystem -------------------------------------------------------------------


def python_rootfs(cache: Path, *, suite: str = DEBIAN_SUITE, mmdebstrap: str = "mmdebstrap") -> Path:
    """The Debian root filesystem with python3 as a tar, built once per suite (~1 min, ~100 MB)."""
    if shutil.which(mmdebstrap) is None:
        raise ImageError(
            "mmdebstrap is not installed; it builds the step image's Debian root filesystem. "
            "Install the node's Debian packages (`apt-get install mmdebstrap`, see docs/design/dev-stack.md)."
        )
    stem = f"rootfs-{suite}-python3-{ROOTFS_RECIPE}"

    def build(partial: Path) -> None:
        command = [
            mmdebstrap,
            "--quiet",
            "--variant=essential",
            "--include=python3",
            # bookworm's merged /usr without the usrmerge package (which pulls in perl, ~45 MB)
            "--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr",
            *(f"--dpkgopt=path-exclude={pattern}" for pattern in ROOTFS_EXCLUDES),
            "--format=tar",
            suite,
            str(partial),
        ]
        _run(command, what=f"mmdebstrap of Debian {suite} with python3", timeout=BUILD_TIMEOUT)

    layer, _ = _cached_layer(cache, stem, build)
    return layer


# --- the step image -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _File:
    """One file of the step layer: where it goes and where its bytes come from."""

    target: str
    source: Path | None = None
    data: bytes | None = None
    mode: int = 0o644
    mtime: float = 0.0


def runtime_distributions(project: str = "progressive-sync") -> list[metadata.Distribution]:
    """The installed distributions `project` needs at run time (its requirements, recursively)."""
    from packaging.requirements import Requirement  # noqa: PLC0415 - only image builds need it

    try:
        root = metadata.distribution(project)
    except metadata.PackageNotFoundError as exc:
        raise ImageError(f"{project} is not installed in this environment (run `make venv`)") from exc
    found: dict[str, metadata.Distribution] = {}
    pending: list[tuple[str, frozenset[str]]] = [
        (requirement, frozenset()) for requirement in root.requires or []
    ]
    while pending:
        text, extras = pending.pop()
        requirement = Requirement(text)
        environments = [{"extra": extra} for extra in extras] or [{"extra": ""}]
        if requirement.marker is not None and not any(
            requirement.marker.evaluate(environment) for environment in environments
        ):
            continue
        name = _normalize(requirement.name)
        if name in found and not requirement.extras:
            continue
        try:
            distribution = metadata.distribution(requirement.name)
        except metadata.PackageNotFoundError as exc:
            raise ImageError(f"{requirement.name} (needed by {project}) is not installed") from exc
        found[name] = distribution
        pending.extend((child, frozenset(requirement.extras)) for child in distribution.requires or [])
    return sorted(found.values(), key=lambda d: _normalize(d.metadata["Name"]))


def _normalize(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def _distribution_files(distribution: metadata.Distribution, site: str) -> Iterator[_File]:
    base = Path(str(distribution.locate_file(""))).resolve()
    for entry in distribution.files or []:
        source = Path(str(distribution.locate_file(entry))).resolve()
        if not source.is_relative_to(base) or not source.is_file():
            continue  # console scripts in bin/, files pip recorded but the installer left out
        stat = source.stat()
        yield _File(f"{site}/{source.relative_to(base).as_posix()}", source, mode=0o644, mtime=stat.st_mtime)


def _source_files(site: str) -> Iterator[_File]:
    for package in STEP_PACKAGES:
        for source in sorted((REPO_ROOT / package).rglob("*")):
            if "__pycache__" in source.parts or not source.is_file() or source.suffix == ".pyc":
                continue
            relative = source.relative_to(REPO_ROOT).as_posix()
            yield _File(f"{site}/{relative}", source)


def _hash_files(paths: Iterable[Path], *, root: Path) -> str:
    digest = hashlib.sha256()
    for path in paths:
        if path.is_file():
            digest.update(path.relative_to(root).as_posix().encode() + b"\0")
            digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def step_image_key(distributions: list[metadata.Distribution], rootfs_stem: str) -> str:
    """The content hash that names the step image: rootfs recipe, distributions, our sources."""
    digest = hashlib.sha256(rootfs_stem.encode() + b"\0")
    for distribution in distributions:
        digest.update(f"{distribution.metadata['Name']}=={distribution.version}\0".encode())
    sources = [file.source for file in _source_files("") if file.source is not None]
    digest.update(_hash_files(sources, root=REPO_ROOT).encode())
    return digest.hexdigest()[:16]


def steps_image(cache: Path, *, mmdebstrap: str = "mmdebstrap") -> Image:
    """The step image: python rootfs + this environment's runtime distributions + our sources."""
    major, minor = SUITE_PYTHON[DEBIAN_SUITE]
    if sys.version_info[:2] != (major, minor):
        raise ImageError(
            f"the step image runs Debian {DEBIAN_SUITE}'s Python {major}.{minor}, but this environment is "
            f"Python {sys.version_info.major}.{sys.version_info.minor}: its installed packages cannot be "
            f"copied into the image. Use a Python {major}.{minor} virtualenv."
        )
    rootfs = python_rootfs(cache, mmdebstrap=mmdebstrap)
    distributions = runtime_distributions()
    key = step_image_key(distributions, rootfs.stem)
    version = metadata.version("progressive-sync")
    site = SITE_PACKAGES.format(major=major, minor=minor)

    def build(partial: Path) -> None:
        shutil.copyfile(rootfs, partial)
        files: list[_File] = []
        for distribution in distributions:
            files.extend(_distribution_files(distribution, site))
        files.extend(_source_files(site))
        files.append(
            _File(
                f"{site}/progressive_sync-{version}.dist-info/METADATA",
                data=f"Metadata-Version: 2.1\nName: progressive-sync\nVersion: {version}\n".encode(),
            )
        )
        _append_layer(partial, files, site)

    layer, digest = _cached_layer(cache, f"steps-{key}", build)
    _prune(cache, "steps-", keep=STEP_LAYERS_KEPT, current=layer)
    config = ImageConfig(
        env=(
            "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "PYTHONUNBUFFERED=1",
            "PYTHONDONTWRITEBYTECODE=1",
        ),
        cmd=("python3",),
        user=STEP_USER,
    )
    return Image(f"{REGISTRY}/steps:{key}", layer, digest, config)


def _append_layer(layer: Path, files: list[_File], site: str) -> None:
    """Append `files` (with bytecode for our sources) and a `python` command to a rootfs tar."""
    made: set[str] = {"usr", "usr/local", "usr/local/bin", "usr/local/lib"}
    with tarfile.open(layer, "a", format=tarfile.PAX_FORMAT) as archive:
        made.update(member.name.lstrip("./").rstrip("/") for member in archive.getmembers() if member.isdir())
        link = _tar_info("usr/local/bin/python", mode=0o777, kind=tarfile.SYMTYPE)
        link.linkname = "/usr/bin/python3"
        archive.addfile(link)
        for file in files:
            _add_dirs(archive, file.target, made)
            data = file.data if file.data is not None else file.source.read_bytes()  # type: ignore[union-attr]
            _add_member(archive, file.target, data, file.mode, file.mtime)
            if file.source is not None and file.target.endswith(".py") and _is_ours(file.target, site):
                _add_bytecode(archive, file, data, made)


def _is_ours(target: str, site: str) -> bool:
    return target.startswith(tuple(f"{site}/{package}/" for package in STEP_PACKAGES))


def _add_member(archive: tarfile.TarFile, name: str, data: bytes, mode: int, mtime: float) -> None:
    info = _tar_info(name, mode=mode, mtime=mtime)
    info.size = len(data)
    archive.addfile(info, io.BytesIO(data))


def _add_bytecode(archive: tarfile.TarFile, file: _File, data: bytes, made: set[str]) -> None:
    """Our sources' bytecode (unchecked-hash pyc: valid whatever the files' times in the image)."""
    assert file.source is not None
    folder, _, name = file.target.rpartition("/")
    tag = sys.implementation.cache_tag
    target = f"{folder}/__pycache__/{name[:-3]}.{tag}.pyc"
    with tempfile.TemporaryDirectory(prefix="pyc-") as scratch:
        compiled = Path(scratch) / "out.pyc"
        try:
            py_compile.compile(
                str(file.source),
                cfile=str(compiled),
                dfile="/" + file.target,
                doraise=True,
                invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
            )
        except py_compile.PyCompileError as exc:
            raise ImageError(f"{file.source} does not compile: {exc.msg}") from exc
        _add_dirs(archive, target, made)
        _add_member(archive, target, compiled.read_bytes(), 0o644, 0)


def _prune(cache: Path, prefix: str, *, keep: int, current: Path, idle_seconds: float = 3600.0) -> None:
    """Remove layers named `prefix*` beyond the `keep` most recently used, unused for `idle_seconds`.

    Several checkouts share the cache, each with its own step image: a layer another checkout used
    in the last hour (it may be importing it right now) is never removed.
    """
    current.touch()  # "used now"
    layers = sorted(cache.glob(f"{prefix}*.tar"), key=lambda p: p.stat().st_mtime, reverse=True)
    cutoff = time.time() - idle_seconds
    for old in layers[keep:]:
        with contextlib.suppress(FileNotFoundError):
            if old != current and old.stat().st_mtime < cutoff:
                old.unlink()
                old.with_name(old.name + ".sha256").unlink(missing_ok=True)


def _run(
    command: list[str],
    *,
    what: str,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = BUILD_TIMEOUT,
) -> None:
    try:
        result = subprocess.run(
            command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
        )
    except FileNotFoundError as exc:
        raise ImageError(f"{what}: {command[0]} not found") from exc
    except subprocess.TimeoutExpired as exc:
        raise ImageError(f"{what} took longer than {timeout:g}s") from exc
    if result.returncode != 0:
        raise ImageError(f"{what} failed ({result.returncode}): {(result.stderr or result.stdout)[-2000:]}")


# --- the layers `make tools` builds ahead ---------------------------------------------------------


def build_base_layers(cache: Path) -> list[Path]:
    """The layers that depend on nothing in the virtualenv: the Debian root filesystem and pause.

    A cold `make test` used to wait for them in its first real-stack test (mmdebstrap's downloads
    and the pause program's compile, ~40 s on an idle machine, twice that beside the other
    workers). hack/tools/build.sh builds them in the background while it compiles (`python3 -m
    orchestrator.devenv.images`, with only the standard library: no virtualenv exists yet), and the
    node finds them cached. Each layer is built once, under the cache's lock, so either may come first.
    """
    return [python_rootfs(cache), pause_image(cache).layer]


def main(argv: list[str] | None = None) -> int:
    """`python3 -m orchestrator.devenv.images`: build the base layers into the tool cache, print them."""
    if argv is None:
        argv = sys.argv[1:]
    if argv:
        print(
            "usage: python3 -m orchestrator.devenv.images (builds the base layers; no arguments)",
            file=sys.stderr,
        )
        return 2
    try:
        layers = build_base_layers(images_cache())
    except ImageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for layer in layers:
        print(layer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
