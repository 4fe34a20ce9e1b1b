"""Loading a `bench/*.py` script as a module, for the unit tests of its pure measuring functions.

The scripts are not a package: each imports its siblings (e.g. `bench_rollout`) from its own folder,
which Python puts first on a script's sys.path, so the folder goes on sys.path here too.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH_DIR = Path(__file__).resolve().parents[2] / "bench"


def load_bench(name: str) -> ModuleType:
    """The script bench/<name>.py, imported once under `name`."""
    if name in sys.modules:
        return sys.modules[name]
    if str(BENCH_DIR) not in sys.path:
        sys.path.append(str(BENCH_DIR))
    spec = importlib.util.spec_from_file_location(name, BENCH_DIR / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module
