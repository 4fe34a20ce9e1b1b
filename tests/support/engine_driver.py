"""Driving `orchestrator.engine.operator.operate` in memory, without an API server or processes.

`drive()` plays the executor: it applies each Operation's status, "runs" each launched Pod with a
function of the launch (returning a PodResult) that finishes after a number of passes, and moves a
fake clock to the next wake-up when nothing else can happen. Unit tests of the engine use it to
check DAG order, parallelism, Omitted nodes, retries, suspend and shutdown quickly and deterministically.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from orchestrator.engine.interface import PodLaunch, PodResult, PodState
from orchestrator.engine.operator import operate

Step = Callable[[PodLaunch], PodResult]


def argv_step(launch: PodLaunch) -> str:
    """The step name of a `python -m steps <step> ...` launch."""
    return launch.argv[3] if launch.argv[:3] == ("python", "-m", "steps") else launch.argv[0]


def arg(launch: PodLaunch, flag: str) -> str:
    """The value following `flag` in a launch's argv."""
    return launch.argv[launch.argv.index(flag) + 1]


@dataclass
class Drive:
    """The state of a drive: the Workflow, the fake clock, and what ran."""

    workflow: dict[str, Any]
    now: datetime = field(default_factory=lambda: datetime(2026, 1, 1, tzinfo=UTC))
    pods: dict[str, PodState] = field(default_factory=dict)
    finishing: dict[str, tuple[int, PodResult]] = field(default_factory=dict)
    launched: list[PodLaunch] = field(default_factory=list)
    killed: list[str] = field(default_factory=list)
    max_running: int = 0
    passes: int = 0

    @property
    def status(self) -> dict[str, Any]:
        """The Workflow's current status."""
        return self.workflow.get("status") or {}

    def nodes(self, **match: str) -> list[dict[str, Any]]:
        """Status nodes whose fields equal every keyword given (e.g. type="Pod")."""
        return [
            n
            for n in (self.status.get("nodes") or {}).values()
            if all(n.get(k) == v for k, v in match.items())
        ]

    def step(
        self,
        run: Step,
        *,
        ticks: int = 1,
        lock_held: bool = True,
        until: Callable[[Drive], bool] | None = None,
        max_passes: int = 2000,
        on_pass: Callable[[Drive], None] | None = None,
    ) -> Drive:
        """Operate until the Workflow finishes (or `until` holds); pods finish `ticks` passes after start."""
        for _ in range(max_passes):
            self.passes += 1
            for node_id, (left, result) in list(self.finishing.items()):
                if left <= 1:
                    self.pods[node_id] = PodState(started_at=self.pods[node_id].started_at, result=result)
                    del self.finishing[node_id]
                else:
                    self.finishing[node_id] = (left - 1, result)
            op = operate(self.workflow, now=self.now, pods=dict(self.pods), lock_held=lock_held)
            self.workflow = {**self.workflow, "status": op.status}
            for node_id in op.kills:
                self.killed.append(node_id)
                self.finishing.pop(node_id, None)
                self.pods[node_id] = PodState(self.now, PodResult(exit_code=143, error="killed"))
            for launch in op.launches:
                self.launched.append(launch)
                self.pods[launch.node_id] = PodState(started_at=self.now)
                self.finishing[launch.node_id] = (ticks, run(launch))
            running = sum(1 for state in self.pods.values() if state.result is None)
            self.max_running = max(self.max_running, running)
            if on_pass:
                on_pass(self)
            if op.finished or (until and until(self)):
                return self
            if not op.launches and not self.finishing and op.wake_at is not None:
                self.now = max(self.now, op.wake_at)
            elif not op.launches and not self.finishing and op.wake_at is None and op.needs_lock is None:
                # Nothing runs and nothing is due: only an outside change (resume) moves it on.
                if until is None:
                    raise AssertionError(
                        f"the Workflow is stuck: {self.status.get('phase')} {self.status.get('progress')}"
                    )
                return self
            self.now += timedelta(seconds=1)
        raise AssertionError(f"no end after {max_passes} passes")
