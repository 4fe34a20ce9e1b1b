"""The simulator's events log: one JSON line per transition it wrote, and reading it back (the
arithmetic tests and benchmarks do on it is in `tests/support/simulator_events.py`).

Each line: `event`, `app`, `cluster`, `time` (epoch seconds, float), `at` (RFC 3339, whole seconds)
and the event's own keys. The events (docs/simulator.md lists their keys):

- `sync-start`: the controller picked up an operation (its pick-up write is on the server);
- `sync-blocked`: a sync window holds the operation Running;
- `sync-attempt-failed`: an attempt failed and Argo CD will retry (Running with finishedAt set);
- `sync-retry`: a retry attempt began;
- `sync-finish`: the operation ended: `phase` Succeeded, Failed or Error (a terminated one: Failed);
- `compared`: a comparison wrote `status.sync` (`status`, `revision`, `stale` for the in-between one);
- `healthy`, `progressing`, `degraded`, `suspended`, `missing`, `unknown`: health changed to this;
- `appset-rewrite`: the ApplicationSet controller rewrote annotations/labels (`removed`, `changed`);
- `refresh-consumed`: the `argocd.argoproj.io/refresh` annotation was honoured and removed;
- `finalized`: the resources finalizer of an Application being deleted was removed.

Every event is written once per write that landed on the server, also when the answer to the write
was lost (the controller decides from what the server has).
"""

from __future__ import annotations

import json
import logging
import threading
from datetime import datetime
from pathlib import Path
from typing import Any

from orchestrator.core.clock import format_time

log = logging.getLogger(__name__)


class EventsLog:
    """Appends one JSON line per simulated transition; thread-safe. Without a path it only logs.

    The file's folder is made here: a missing one used to fail the first write after the pick-up had
    landed, which stopped the simulator with that operation Running for ever."""

    def __init__(self, path: str | Path | None) -> None:
        self.path = Path(path) if path else None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()

    def write(self, event: str, *, app: str, cluster: str, when: datetime, **extra: Any) -> None:
        """Append one event."""
        record = {
            "event": event,
            "app": app,
            "cluster": cluster,
            "time": when.timestamp(),
            "at": format_time(when),
        }
        record.update(extra)
        log.info("simulated %s: %s (cluster %s) %s", event, app, cluster, extra or "")
        if self.path is None:
            return
        with self._lock, self.path.open("a") as handle:
            handle.write(json.dumps(record, sort_keys=True) + "\n")


def read_events(path: str | Path) -> list[dict[str, Any]]:
    """The events log as a list of dicts, in the order written."""
    file = Path(path)
    if not file.exists():
        return []
    return [json.loads(line) for line in file.read_text().splitlines() if line.strip()]
