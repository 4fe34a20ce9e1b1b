"""The README's marked blocks: found by marker, commands split as a shell would, mistakes named."""

from __future__ import annotations

import pytest

from tests.support.readme import ReadmeError, marked_blocks

TEXT = """# Install

<!-- readme-test: cli -->

```sh
python3 -m venv ~/.local/share/progressive-sync   # a fresh virtualenv
~/.local/share/progressive-sync/bin/pip install .
```

<!-- readme-test: chart -->
```sh
helm install progressive-sync charts/progressive-sync --namespace argocd \\
  --set image.repository=registry.example.com/platform/progressive-sync
```
"""


def test_blocks_are_found_by_marker_with_their_commands() -> None:
    blocks = marked_blocks(TEXT)
    assert sorted(blocks) == ["chart", "cli"]
    assert blocks["cli"].commands() == [
        ["python3", "-m", "venv", "~/.local/share/progressive-sync"],
        ["~/.local/share/progressive-sync/bin/pip", "install", "."],
    ]
    assert blocks["chart"].commands() == [
        [
            "helm",
            "install",
            "progressive-sync",
            "charts/progressive-sync",
            "--namespace",
            "argocd",
            "--set",
            "image.repository=registry.example.com/platform/progressive-sync",
        ]
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            "<!-- readme-test: cli -->\nprose\n", "not followed by a ``` fence", id="marker-without-block"
        ),
        pytest.param("<!-- readme-test: cli -->\n```sh\nmake\n", "never closed", id="block-never-closed"),
        pytest.param(
            "<!-- readme-test: cli -->\n```sh\na\n```\n<!-- readme-test: cli -->\n```sh\nb\n```\n",
            "appears twice",
            id="marker-twice",
        ),
    ],
)
def test_a_malformed_block_is_named(text: str, message: str) -> None:
    with pytest.raises(ReadmeError, match=message):
        marked_blocks(text)
