"""`progressive-sync watch` that sends itself a signal at one point of a reconcile (the fault suite's
process rows): `python -m tests.support.watcher_pausepoint POINT SIGNAL watch ...`.

POINT, reached the first time only:

- `after-workflow-create`: a reconcile created the rollout's Workflow and is about to write the status
  that records it (observed, decided, the first action done, the write not sent);
- `event:<Reason>`: a reconcile is about to record an Event of that reason (for `RolloutStarted`: the
  status recording the rollout has been written just before, in the same reconcile).

SIGNAL: `KILL` (a crash: nothing runs after it) or `STOP` (the whole process paused — a GC stall, a
frozen VM, a starved container; `SIGCONT` from the test resumes it where it stopped).

Everything else is real: the CLI, the watcher, its leader election and its client. This is the test's
own failpoint, placed from outside; the product has none.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any

from orchestrator.watcher import act


def _arm(point: str, signum: int) -> None:
    fired = threading.Lock()
    created = threading.local()

    def hit() -> None:
        if fired.acquire(blocking=False):
            sys.stderr.flush()
            os.kill(os.getpid(), signum)

    if point == "after-workflow-create":
        real_create = act.Actor._create_workflow
        real_update = act.update_status

        def create(self: act.Actor, *args: Any, **kwargs: Any) -> None:
            real_create(self, *args, **kwargs)
            created.done = True

        def update(*args: Any, **kwargs: Any) -> Any:
            if getattr(created, "done", False):
                created.done = False
                hit()
            return real_update(*args, **kwargs)

        act.Actor._create_workflow = create  # type: ignore[method-assign]
        act.update_status = update
    elif point.startswith("event:"):
        reason = point.removeprefix("event:")
        real_record = act.Actor.record_event

        def record(self: act.Actor, cached: Any, action: Any) -> None:
            if action.reason == reason:
                hit()
            real_record(self, cached, action)

        act.Actor.record_event = record  # type: ignore[method-assign]
    else:
        raise SystemExit(f"unknown pause point {point!r}")


def main() -> None:
    point, signal_name = sys.argv[1], sys.argv[2]
    _arm(point, getattr(signal, f"SIG{signal_name}"))
    from orchestrator.cli.main import main as cli  # after the point is armed

    sys.argv = [sys.argv[0], *sys.argv[3:]]
    cli()


if __name__ == "__main__":
    main()
