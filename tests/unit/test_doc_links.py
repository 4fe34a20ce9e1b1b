"""Every relative link in the repository's Markdown leads somewhere: the file exists, and a
`#fragment` into a Markdown page names one of its headings (GitHub's anchor for it). A page moved
into docs/design/ once left docs/status.md pointing at docs/workflow.md; readers of the rendered
docs met a 404. Links inside code (fenced blocks and `inline code`) are examples, not links."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
_SKIPPED_PARTS = {".venv", "node_modules", ".pytest_cache", ".git", ".hypothesis"}
_FENCED = re.compile(r"^```.*?^```", re.DOTALL | re.MULTILINE)
_INLINE_CODE = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.MULTILINE)
_SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*:")


def _pages() -> list[Path]:
    return sorted(
        path
        for path in REPO.rglob("*.md")
        if not _SKIPPED_PARTS.intersection(path.relative_to(REPO).parts) and "egg-info" not in str(path)
    )


def _prose(page: Path) -> str:
    return _INLINE_CODE.sub("", _FENCED.sub("", page.read_text(encoding="utf-8")))


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation but `-` and `_` dropped, spaces as `-`."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@cache
def anchors_of(page: Path) -> frozenset[str]:
    """Every heading's anchor; a repeated heading gets `-1`, `-2`, ... as on GitHub."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    for match in _HEADING.finditer(_FENCED.sub("", page.read_text(encoding="utf-8"))):
        anchor = github_anchor(match.group(1))
        count = seen.get(anchor, 0)
        seen[anchor] = count + 1
        found.add(anchor if count == 0 else f"{anchor}-{count}")
    return frozenset(found)


def broken_links(page: Path) -> list[str]:
    """The relative links of one page that lead nowhere, each with why."""
    broken: list[str] = []
    for match in _LINK.finditer(_prose(page)):
        target = match.group(1)
        if _SCHEME.match(target):
            continue
        path, _, fragment = target.partition("#")
        destination = (page.parent / path) if path else page
        if not destination.exists():
            broken.append(f"{target}: no such file")
        elif fragment and destination.suffix == ".md" and fragment not in anchors_of(destination.resolve()):
            broken.append(f"{target}: no heading with that anchor in {destination.name}")
    return broken


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        pytest.param("The rollback branch", "the-rollback-branch", id="spaces-become-dashes"),
        pytest.param("Why `retry`, not `restart`?", "why-retry-not-restart", id="punctuation-dropped"),
        pytest.param("Stop / terminate", "stop--terminate", id="slash-leaves-two-dashes"),
        pytest.param("spec.rollback_parallel", "specrollback_parallel", id="dots-dropped-underscore-kept"),
    ],
)
def test_github_anchor(heading: str, anchor: str) -> None:
    assert github_anchor(heading) == anchor


def test_a_link_to_a_missing_page_or_heading_is_found(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Title\n\n## A section\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](other.md) [ok](other.md#a-section) [gone](missing.md) [bad](other.md#nowhere)\n"
        "[web](https://example.com/x.md) `[code](missing.md)`\n\n```\n[fenced](missing.md)\n```\n"
    )
    assert broken_links(page) == [
        "missing.md: no such file",
        "other.md#nowhere: no heading with that anchor in other.md",
    ]


PAGES = _pages()


@pytest.mark.parametrize("page", PAGES, ids=[str(page.relative_to(REPO)) for page in PAGES])
def test_every_relative_link_leads_somewhere(page: Path) -> None:
    assert broken_links(page) == []
