"""Where the dev stack's Argo CD puts its unix sockets (`orchestrator.devenv.argocd_settings.socket_folder`):
in its work dir when the path fits a socket address, else in a short folder of its own. Found by
`make test` under pytest-xdist: the repo-server failed `bind: invalid argument` on a 110-byte path
under the worker's tmp_path."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orchestrator.devenv.argocd_settings import UNIX_SOCKET_PATH_MAX, socket_folder

NAME = "argocd-applicationset-controller-askpass.sock"


def test_a_short_work_dir_holds_its_sockets() -> None:
    workdir = Path("/tmp/w")
    assert socket_folder(workdir, NAME) == workdir


@pytest.mark.parametrize(
    "depth",
    [
        pytest.param(60, id="just-too-long"),
        pytest.param(400, id="far-too-long"),
    ],
)
def test_a_deep_work_dir_gets_a_short_folder_that_fits(depth: int) -> None:
    workdir = Path("/tmp") / ("d" * depth)
    folder = socket_folder(workdir, NAME)
    try:
        assert folder != workdir
        assert folder.is_dir()
        assert len(os.fsencode(folder / NAME)) <= UNIX_SOCKET_PATH_MAX
    finally:
        folder.rmdir()
