"""The headless Chromium driver and the Argo UI graph reader, on a page shaped like the UI's graph.

Real: Debian's `chromium`, driven over the DevTools protocol (tests/support/chromium.py). The page is
a static copy of the SVG structure Argo UI v3.7's graph panel draws (tests/support/argo_ui.py says
which), so what the reader gets from it is known exactly; the real UI is read by
tests/realstack/test_argo_ui.py.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.argo_ui import WorkflowPage, cut_label
from tests.support.chromium import BrowserError, Chromium
from tests.support.wait import wait_for

PAGE = """<!doctype html>
<html><body>
<div class="graph"><svg width="400" height="2400">
  <g transform="translate(88,16)"><title>wf (wf)</title>
    <g class="node Running"><circle r="16"/></g>
    <g><text class="node-label"><tspan>wf</tspan></text></g></g>
  <g transform="translate(88,88)"><title>wf-1 (canary)</title>
    <g class="node Succeeded"><circle r="16"/></g>
    <g><text class="node-label"><tspan>canary</tspan></text></g></g>
  <g transform="translate(16,160)"><title>wf-2 (cells-1-eu-west-1a)</title>
    <g class="node Failed"><circle r="16"/></g>
    <g><text class="node-label"><tspan>cells-1-eu-w</tspan><tspan>est-1a</tspan></text></g></g>
  <g transform="translate(88,160)"><title>{"kind":"collapsed"} (4 hidden nodes)</title>
    <g class="node Collapsed"><circle r="16"/></g>
    <g><text class="node-label"><tspan>4 hidden nodes</tspan></text></g></g>
  <g transform="translate(88,232)"><title>wf-3 (approve)</title>
    <g class="node Suspended"><circle r="16"/></g>
    <g><text class="node-label"><tspan>approve</tspan></text></g></g>
  <g transform="translate(88,2300)"><title>wf-4 (the-rest)</title>
    <g class="node Pending"><circle r="16"/></g>
    <g><text class="node-label"><tspan>the-rest</tspan></text></g></g>
</svg></div>
</body></html>
"""


@pytest.fixture(scope="module")
def browser() -> Iterator[Chromium]:
    with Chromium.launch(width=800, height=600) as chromium:
        yield chromium


@pytest.fixture
def page(browser: Chromium, tmp_path: Path) -> WorkflowPage:
    (tmp_path / "workflows" / "ns").mkdir(parents=True)
    # A file name Chromium takes for HTML: the page's URL is <server>/workflows/<namespace>/<name>.
    (tmp_path / "workflows" / "ns" / "wf.html").write_text(PAGE)
    workflow = WorkflowPage(browser, tmp_path.as_uri(), "ns", "wf.html")
    workflow.open(timeout=30)
    return workflow


def test_the_reader_gets_each_drawn_node_with_its_label_phase_and_place(page: WorkflowPage) -> None:
    graph = page.graph()
    assert graph.labels() == [
        "wf",
        "canary",
        "cells-1-eu-west-1a",
        "4 hidden nodes",
        "approve",
        "the-rest",
    ]
    failed = graph.one("cells-1-eu-west-1a")
    assert (failed.id, failed.phase, failed.lines, failed.x, failed.y) == (
        "wf-2",
        "Failed",
        ("cells-1-eu-w", "est-1a"),
        16.0,
        160.0,
    )
    assert failed.shown == "cells-1-eu-west-1a"
    assert graph.one("approve").phase == "Suspended"
    [group] = graph.groups()
    assert (group.label, group.collapsed, group.phase) == ("4 hidden nodes", True, None)
    assert graph.by_id("wf-4") == graph.one("the-rest")
    with pytest.raises(AssertionError, match="expected one node labelled 'nope', found 0"):
        graph.one("nope")


def test_a_wait_that_never_holds_fails_naming_what_it_waited_for(page: WorkflowPage) -> None:
    started = time.monotonic()
    with pytest.raises(BrowserError, match=r"timed out after 0.5s waiting for a node that never comes"):
        page.wait_for_graph(lambda g: bool(g.labelled("never")), timeout=0.5, what="a node that never comes")
    assert time.monotonic() - started < 5


def test_a_graph_taller_than_the_window_is_captured_whole(page: WorkflowPage, tmp_path: Path) -> None:
    shot = page.screenshot(tmp_path / "graph.png")
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert width >= 800 and height >= 2400  # the whole svg, not the 600-pixel window


def test_closing_stops_the_browser_and_removes_its_profile() -> None:
    chromium = Chromium.launch(width=400, height=300)
    pid, profile = chromium.process.pid, chromium.profile
    assert chromium.evaluate("1 + 1") == 2
    chromium.close()
    assert chromium.process.poll() is not None
    assert not profile.exists()
    # Its helpers (renderer, GPU, zygote) went with it; as orphans they are reaped by init shortly.
    wait_for(lambda: not _group_alive(pid), timeout=10, interval=0.1, what="chromium's helpers to be gone")


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize(
    ("label", "shown"),
    [
        pytest.param("canary", "canary", id="short-labels-whole"),
        pytest.param("c" * 28, "c" * 28, id="28-characters-whole"),
        pytest.param(
            "cluster(0:cells-4-eu-west-1b)", "cluster(0:ce..4-eu-west-1b)", id="longer-cut-in-the-middle"
        ),
    ],
)
def test_cut_label_follows_the_ui(label: str, shown: str) -> None:
    assert cut_label(label) == shown
