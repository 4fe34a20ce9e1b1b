"""progressive-sync: staged rollouts of Argo CD Applications across a fleet, on Argo Workflows.

The package holds the API models, the pure planner, the Kubernetes adapter, the watcher, the CLI,
the local executor, the fleet simulator and the local control plane used by tests and the demo.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("progressive-sync")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"
