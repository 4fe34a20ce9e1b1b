"""The Argo UI as a person sees it: a Workflow's graph read from the page's SVG, and screenshots.

The UI (Argo Workflows v3.7, `ui/src/shared/components/graph/graph-panel.tsx`) draws each node as

    <g transform="translate(x,y)">
      <title>NODE-ID (LABEL)</title>                       the full label, never cut
      <g class="node PHASE [selected]"> circle, icon </g>   PHASE: the node's phase; Suspended for a
                                                           waiting suspend node; Collapsed for a group
      <g><text class="node-label"><tspan>..</tspan></text></g>   the label as shown: one or two
    </g>                                                   lines, cut with ".." past 28 characters

A label is the node's display name (`displayName`, else its name). A node with more than three
children shows the first, a "N hidden nodes" group and the last until someone expands it. Node types
the UI's filter leaves out (TaskGroup, StepGroup by default) are laid out as points and not drawn.

`WorkflowPage` opens `<server>/workflows/<namespace>/<name>` in a `Chromium` and reads the drawn
nodes (`graph()`), waiting on conditions with deadlines.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.chromium import BrowserError, Chromium

# Every drawn node of the graph: its <title>, its classes, the label's lines and its position.
_READ_GRAPH = r"""
(() => {
  const svg = document.querySelector('.graph svg');
  if (!svg) return null;
  const nodes = [];
  for (const g of svg.querySelectorAll('g[transform]')) {
    const title = g.querySelector(':scope > title');
    const node = g.querySelector(':scope > g.node');
    if (!title || !node) continue;
    const at = /translate\(([-\d.e]+)[ ,]+([-\d.e]+)\)/.exec(g.getAttribute('transform') || '');
    const label = g.querySelector('text.node-label');
    nodes.push({
      title: title.textContent,
      classes: (node.getAttribute('class') || '').split(/\s+/).filter(Boolean),
      lines: label ? Array.from(label.querySelectorAll('tspan')).map(t => t.textContent) : [],
      x: at ? Number(at[1]) : null,
      y: at ? Number(at[2]) : null,
    });
  }
  return nodes;
})()
"""

# The graph's drawn size (the <svg>'s width and height attributes), to size a screenshot.
_GRAPH_SIZE = r"""
(() => {
  const svg = document.querySelector('.graph svg');
  if (!svg) return null;
  const box = svg.getBoundingClientRect();
  return {width: Number(svg.getAttribute('width')), height: Number(svg.getAttribute('height')),
          left: box.left + window.scrollX, top: box.top + window.scrollY};
})()
"""

PHASES = ("Pending", "Running", "Succeeded", "Skipped", "Failed", "Error", "Omitted", "Suspended")


@dataclass(frozen=True)
class GraphNode:
    """One node as drawn: its id, full label, phase, the text shown under it and where it is."""

    id: str
    label: str
    classes: tuple[str, ...]
    lines: tuple[str, ...]
    x: float
    y: float

    @property
    def phase(self) -> str | None:
        """The phase the node is drawn in (Suspended: a gate or bake waiting), or None (a group)."""
        return next((c for c in self.classes if c in PHASES), None)

    @property
    def collapsed(self) -> bool:
        """True for a "N hidden nodes" group."""
        return "Collapsed" in self.classes

    @property
    def shown(self) -> str:
        """The label's text as it reads on screen (its lines joined)."""
        return "".join(self.lines)

    @classmethod
    def from_page(cls, raw: dict[str, Any]) -> GraphNode:
        """From what `_READ_GRAPH` returns: the title is `<id> (<label>)`."""
        node_id, _, rest = str(raw["title"]).partition(" (")
        return cls(
            id=node_id,
            label=rest[:-1] if rest.endswith(")") else rest,
            classes=tuple(raw["classes"]),
            lines=tuple(raw["lines"]),
            x=float(raw["x"] or 0.0),
            y=float(raw["y"] or 0.0),
        )


@dataclass(frozen=True)
class Graph:
    """The drawn nodes of one Workflow's graph."""

    nodes: tuple[GraphNode, ...]

    def labelled(self, label: str) -> list[GraphNode]:
        """The nodes whose full label is `label`."""
        return [node for node in self.nodes if node.label == label]

    def one(self, label: str) -> GraphNode:
        """The one node labelled `label` (an AssertionError naming what is drawn otherwise)."""
        found = self.labelled(label)
        assert len(found) == 1, f"expected one node labelled {label!r}, found {len(found)}: {self.labels()}"
        return found[0]

    def by_id(self, node_id: str) -> GraphNode | None:
        """The node drawn for the Workflow node `node_id`, if drawn."""
        return next((node for node in self.nodes if node.id == node_id), None)

    def labels(self) -> list[str]:
        """Every label, top to bottom, left to right."""
        return [node.label for node in sorted(self.nodes, key=lambda n: (n.y, n.x))]

    def groups(self) -> list[GraphNode]:
        """The "N hidden nodes" groups."""
        return [node for node in self.nodes if node.collapsed]


class WorkflowPage:
    """One Workflow's page in the Argo UI, in a `Chromium`."""

    def __init__(self, browser: Chromium, server_url: str, namespace: str, name: str) -> None:
        self.browser = browser
        self.url = f"{server_url.rstrip('/')}/workflows/{namespace}/{name}"
        self.opened_seconds: float | None = None

    def open(self, timeout: float = 60.0) -> float:
        """Navigate to the page and wait until the graph has drawn a node; the seconds it took."""
        started = time.monotonic()
        self.browser.navigate(self.url, timeout=timeout)
        self.browser.wait_for(
            "document.querySelectorAll('.graph svg g.node').length > 0",
            timeout=timeout,
            what=f"the graph of {self.url} to draw",
        )
        self.opened_seconds = time.monotonic() - started
        return self.opened_seconds

    def graph(self) -> Graph:
        """The nodes drawn now."""
        raw = self.browser.evaluate(_READ_GRAPH) or []
        return Graph(tuple(GraphNode.from_page(item) for item in raw))

    def wait_for_graph(self, condition: Callable[[Graph], bool], *, timeout: float, what: str) -> Graph:
        """Read the graph until `condition` holds (the UI updates it live); that graph."""
        deadline = time.monotonic() + timeout
        graph = self.graph()
        while not condition(graph):
            if time.monotonic() >= deadline:
                raise BrowserError(
                    f"timed out after {timeout:g}s waiting for {what}; drawn now: "
                    + ", ".join(f"{n.label}[{n.phase}]" for n in graph.nodes)
                )
            time.sleep(0.2)
            graph = self.graph()
        return graph

    def text(self) -> str:
        """The page's visible text (headers, panels; the graph's labels too)."""
        return str(self.browser.evaluate("document.body.innerText"))

    def screenshot(self, path: Path, margin: int = 40) -> Path:
        """A PNG of the page with the whole graph in it.

        The graph scrolls inside its panel, so a taller page would not show more of it: when the
        graph is bigger than the window, the window grows to hold it for the capture, then shrinks.
        """
        size = self.browser.evaluate(_GRAPH_SIZE)
        browser = self.browser
        width, height = browser.width, browser.height
        if size:
            width = max(width, int(size["left"] + size["width"]) + margin)
            height = max(height, int(size["top"] + size["height"]) + margin)
        if (width, height) == (browser.width, browser.height):
            return browser.screenshot(path)
        browser.resize(width, height)
        try:
            return browser.screenshot(path)
        finally:
            browser.resize(browser.width, browser.height)


def phases(graph: Graph, labels: Iterable[str]) -> dict[str, str | None]:
    """label -> phase of the one node with that label (for compact assertions)."""
    return {label: graph.one(label).phase for label in labels}


def below(node: GraphNode, *, after: GraphNode, before: GraphNode | None = None) -> bool:
    """True when `node` is drawn lower than `after` (and higher than `before`, when given)."""
    return node.y > after.y and (before is None or node.y < before.y)


def cut_label(label: str) -> str:
    """What the UI shows for a label past 28 characters: 12 characters, "..", the last 13."""
    if len(label) <= 28:
        return label
    return f"{label[:12]}..{label[-13:]}"


def is_hidden_group(label: str) -> re.Match[str] | None:
    """The match of a "N hidden nodes" group label (N in group 1)."""
    return re.fullmatch(r"(\d+) hidden nodes", label)
