"""The dev stack's free ports are below the kernel's ephemeral range: a port there is never taken
as the local port of an outgoing connection between our choosing it and a component listening."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from orchestrator.devenv.controlplane import PORT_FLOOR, ephemeral_port_floor, free_port


@pytest.mark.parametrize(
    ("text", "floor"),
    [
        pytest.param("32768\t60999\n", 32768, id="linux-default"),
        pytest.param("40000 50000", 40000, id="raised"),
        pytest.param("", 32768, id="unreadable-falls-back"),
    ],
)
def test_the_ephemeral_floor_is_read_from_the_kernel(tmp_path: Path, text: str, floor: int) -> None:
    range_file = tmp_path / "ip_local_port_range"
    range_file.write_text(text)
    assert ephemeral_port_floor(range_file) == floor


def test_a_free_port_is_below_the_ephemeral_range_and_bindable() -> None:
    ports = {free_port() for _ in range(20)}
    ceiling = ephemeral_port_floor()
    for port in ports:
        assert PORT_FLOOR <= port < ceiling
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", port))


def test_a_port_someone_listens_on_is_never_chosen() -> None:
    taken = []
    try:
        for _ in range(200):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", free_port()))
            sock.listen()
            taken.append(sock)
        assert len({s.getsockname()[1] for s in taken}) == len(taken)
    finally:
        for sock in taken:
            sock.close()
