"""Following a few Argo CD Applications with list → watch (never sleep-and-poll).

`follow_applications` is `orchestrator.kube.follow.follow_objects` over Applications: a snapshot
of the named Applications (name -> object, None when it does not exist) after the initial list,
after every event that touches one of them, and each time a watch window ends quietly, so the
caller can look at its clock (deadlines) and at anything a watch does not cover (the cluster
Secret).

Callers: `steps.sync` (waiting for someone else's operation to end), `steps.wait_healthy`,
`steps.terminate` and the demo's Argo CD view.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence

from orchestrator.kube.client import APPLICATIONS, Kube
from orchestrator.kube.follow import Snapshot, SnapshotCause, follow_objects

__all__ = ["Snapshot", "SnapshotCause", "follow_applications"]


def follow_applications(
    kube: Kube,
    namespace: str,
    names: Sequence[str],
    *,
    window_seconds: Callable[[], int],
) -> Generator[Snapshot, None, None]:
    """Yield snapshots of the named Applications until the caller stops iterating (see the module)."""
    return follow_objects(kube, APPLICATIONS, namespace, names, window_seconds=window_seconds)
