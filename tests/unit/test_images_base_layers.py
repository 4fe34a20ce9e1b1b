"""The step image's base layers as `make tools` builds them ahead (orchestrator/devenv/images.py).

hack/tools/build.sh starts `python3 -m orchestrator.devenv.images` beside its compiles, before any
virtualenv exists: the module must run on a bare python3, and the pause program must be compiled
with the flags the tools are, so that it reuses their compiles of the standard library. Real: the
machine's python3, the script's own text. The layers themselves are built by the real node's tests.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.devenv import images

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "hack" / "tools" / "build.sh"


def bare_python(code: str) -> subprocess.CompletedProcess[str]:
    """`code` run by a python3 without site-packages or user paths (-I -S), as before `make test`
    made the virtualenv, with the checkout importable."""
    return subprocess.run(
        [sys.executable, "-I", "-S", "-c", f"import sys; sys.path.insert(0, {str(ROOT)!r}); {code}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def run_module(*args: str) -> subprocess.CompletedProcess[str]:
    return bare_python(
        f"sys.argv[1:] = {list(args)!r}; "
        "import runpy; runpy.run_module('orchestrator.devenv.images', run_name='__main__')"
    )


def test_the_module_runs_on_the_standard_library_alone() -> None:
    result = bare_python(
        "import orchestrator.devenv.images; print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    assert result.returncode == 0, result.stderr
    loaded = set(result.stdout.split())
    assert "orchestrator" in loaded
    assert not loaded & {"pydantic", "yaml", "click", "urllib3", "kubernetes", "steps"}


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(("--rootfs",), id="an-option"),
        pytest.param(("steps",), id="a-layer-name"),
    ],
)
def test_arguments_are_refused_with_the_usage(args: tuple[str, ...]) -> None:
    result = run_module(*args)
    assert result.returncode == 2
    assert "usage: python3 -m orchestrator.devenv.images" in result.stderr
    assert result.stdout == ""


def test_a_failed_build_exits_1_naming_what_failed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def no_mmdebstrap(cache: Path) -> list[Path]:
        raise images.ImageError("mmdebstrap is not installed; it builds the step image's root filesystem")

    monkeypatch.setattr(images, "build_base_layers", no_mmdebstrap)
    assert images.main([]) == 1
    assert (
        capsys.readouterr().err
        == "error: mmdebstrap is not installed; it builds the step image's root filesystem\n"
    )


def test_the_pause_program_is_compiled_with_the_tools_flags() -> None:
    go_build = next(line for line in BUILD.read_text().splitlines() if line.startswith("go_build()"))
    *compile_flags, ldflags_option, ldflags = images.GO_BUILD_FLAGS
    assert (ldflags_option, ldflags) == ("-ldflags", "-s -w"), "stripped, as every tool is"
    assert compile_flags == ["-trimpath", "-gcflags=all=-dwarf=false"]
    for flag in compile_flags:
        assert re.search(rf"(^|\s){re.escape(flag)}(\s|$)", go_build), f"build.sh's go_build lacks {flag}"
    assert "CGO_ENABLED=0" in go_build and "-buildvcs=false" in go_build
