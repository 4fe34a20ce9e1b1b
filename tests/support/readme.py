"""The README's marked code blocks, for the test that follows the install section as a user would.

A block is marked by a line `<!-- readme-test: NAME -->` right before its fence (blank lines
between are allowed). The test runs what the README says, so the README cannot drift from what works.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"
_MARKER = re.compile(r"^<!--\s*readme-test:\s*(?P<name>[\w-]+)\s*-->\s*$")
_FENCE = re.compile(r"^```(?P<lang>[\w-]*)\s*$")


class ReadmeError(AssertionError):
    """A marked block is missing or malformed; the message says which and where."""


@dataclass(frozen=True)
class Block:
    """One fenced block: its language tag and its text."""

    name: str
    lang: str
    text: str

    def commands(self) -> list[list[str]]:
        """The shell commands of a `sh` block, one argv each (comments dropped, `\\` joined)."""
        joined = re.sub(r"\\\n\s*", " ", self.text)
        commands = []
        for line in joined.splitlines():
            words = shlex.split(line, comments=True)
            if words:
                commands.append(words)
        return commands


def marked_blocks(text: str) -> dict[str, Block]:
    """Every marked block of a Markdown text, by marker name (pure)."""
    lines = text.splitlines()
    found: dict[str, Block] = {}
    for index, line in enumerate(lines):
        marker = _MARKER.match(line.strip())
        if marker is None:
            continue
        name = marker["name"]
        start = index + 1
        while start < len(lines) and not lines[start].strip():
            start += 1
        fence = _FENCE.match(lines[start].strip()) if start < len(lines) else None
        if fence is None:
            raise ReadmeError(f"README line {index + 1}: marker {name!r} is not followed by a ``` fence")
        end = start + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        if end >= len(lines):
            raise ReadmeError(f"README line {start + 1}: the block of {name!r} is never closed")
        if name in found:
            raise ReadmeError(f"README line {index + 1}: marker {name!r} appears twice")
        found[name] = Block(name, fence["lang"], "\n".join(lines[start + 1 : end]) + "\n")
    return found


def readme_blocks(names: tuple[str, ...], path: Path = README) -> dict[str, Block]:
    """The named blocks of the README; a missing one fails with the marker to add."""
    blocks = marked_blocks(path.read_text())
    missing = [name for name in names if name not in blocks]
    if missing:
        raise ReadmeError(
            f"{path.name} lacks the marked blocks {missing}: put `<!-- readme-test: NAME -->` "
            "on the line before each block's fence"
        )
    return blocks
