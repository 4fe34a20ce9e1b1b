"""A failing step leaves its summary line as the container's termination message (Argo's node message).

Real: `steps.cli.write_termination_message` writing the file $PROGRESSIVE_SYNC_TERMINATION_LOG names
(a temp file standing in for the kubelet's /dev/termination-log); nothing else.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from steps.cli import TERMINATION_LOG_ENV, TERMINATION_MESSAGE_BYTES, write_termination_message


@pytest.mark.parametrize(
    ("line", "written"),
    [
        pytest.param(
            "cluster eu-west-1a: health Degraded after sync",
            "cluster eu-west-1a: health Degraded after sync",
            id="a-line",
        ),
        pytest.param("x" * 5000, "x" * TERMINATION_MESSAGE_BYTES, id="cut-to-what-the-kubelet-keeps"),
        pytest.param("é" * 3000, "é" * (TERMINATION_MESSAGE_BYTES // 2), id="cut-on-a-character"),
    ],
)
def test_the_line_is_the_termination_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, line: str, written: str
) -> None:
    log = tmp_path / "termination-log"
    log.write_text("")  # the kubelet makes the file; the step only writes it
    monkeypatch.setenv(TERMINATION_LOG_ENV, str(log))
    write_termination_message(line)
    assert log.read_text() == written


def test_without_the_kubelet_s_file_nothing_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "termination-log"
    monkeypatch.setenv(TERMINATION_LOG_ENV, str(log))
    write_termination_message("failed")
    assert not log.exists()
