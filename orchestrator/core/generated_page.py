"""The command line of a generated docs page (`make docs`): print it, or write it with `--write PATH`.

Every page generated from a catalog or the models (the field reference, the troubleshooting page, the
CLI reference) is rendered by a pure function; this is the one place that prints or writes it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path


def page_main(render: Callable[[], str], description: str, argv: list[str] | None = None) -> int:
    """Parse `[--write PATH]`; print `render()` or write it there (its folder made). Exit code 0."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--write", type=Path, help="write the page here instead of printing it")
    args = parser.parse_args(argv)
    text = render()
    if args.write is None:
        sys.stdout.write(text)
    else:
        args.write.parent.mkdir(parents=True, exist_ok=True)
        args.write.write_text(text)
    return 0
