"""progressive-sync: staged rollouts of Argo CD Applications across a fleet, on Argo Workflows.

The package holds the API models, the pure planner, the Kubernetes adapter, the watcher, the CLI,
the local executor, the fleet simulator and the local control plane used by tests and the demo.

`__version__` is looked up in the installed package's metadata on first use, not on import:
importlib.metadata costs about 60 ms of every command's start (`plan` and `render` among them).
"""

from typing import Any


def __getattr__(name: str) -> Any:
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415 - see the docstring

    try:
        found = version("progressive-sync")
    except PackageNotFoundError:  # running from a source tree that was never installed
        found = "0.0.0+unknown"
    globals()["__version__"] = found
    return found
