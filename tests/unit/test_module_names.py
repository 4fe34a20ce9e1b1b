"""Every test module's file name is unique across tests/: the suite's folders are not packages, so
pytest imports each module under its bare name, and a second `test_x.py` in another folder fails
the whole run at collection ("import file mismatch") once both are collected together, as `make
test` does (a CI run at 3377a24 lost its result that way)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_no_two_test_modules_share_a_name() -> None:
    where: dict[str, list[str]] = defaultdict(list)
    for module in TESTS.rglob("test_*.py"):
        if "__pycache__" not in module.parts:
            where[module.name].append(str(module.relative_to(TESTS)))
    assert {name: paths for name, paths in where.items() if len(paths) > 1} == {}
