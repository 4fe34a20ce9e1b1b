"""How many step processes the local executor runs at once, and which waiting step a free slot goes to.

A node bounds its pods by what it can allocate; the local executor bounds its step processes by
`ExecutorSettings.max_step_processes`. Unbounded, 200 rollouts whose stages start a pod per
cluster at once asked one machine for thousands of processes and most of its memory
(docs/design/workflow.md, "Many rollouts at once").

Two rules, applied to the waiting requests oldest first (`admit`, pure):

- a request is admitted while fewer than `limit` processes run (0: no limit);
- a Workflow may always run `floor` processes, whatever the others run.

The floor keeps the bound from deadlocking. Some steps wait for others: the follower for its whole
rollout, a pod for its turn in its stage, a stage for another rollout's canary. A bound alone lets
such steps fill every slot while the steps that would let them go on wait for one. With the floor,
every Workflow runs its oldest waiting step beside one that waits. Within a Workflow, requests are
admitted in the order its passes made them, which in a stage is the targets' order, so a pod that
waits for its turn never holds a slot that the pod of a cluster before it needs.

`StepSlots` holds the state (thread-safe) for the executor's workers: `request` (admitted now or
queued), `release` (a process ended, or a queued step was dropped), `forget` (a Workflow's worker
ended); a request admitted by someone else's release wakes its worker.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass

# Processes every Workflow may run whatever the others run: one step that waits (the follower, a pod
# waiting for its turn or for a dependency) and the step it waits on.
WORKFLOW_FLOOR = 2


@dataclass(frozen=True)
class SlotRequest:
    """One Pod node's wish to run: its Workflow (`owner`) and its node id."""

    owner: Hashable
    node_id: str


def admit(
    waiting: Sequence[SlotRequest], running: Iterable[SlotRequest], *, limit: int, floor: int
) -> list[SlotRequest]:
    """The waiting requests (oldest first) that may run now, beside those `running`."""
    counts = Counter(request.owner for request in running)
    total = sum(counts.values())
    admitted = []
    for request in waiting:
        if (limit <= 0 or total < limit) or counts[request.owner] < floor:
            admitted.append(request)
            counts[request.owner] += 1
            total += 1
    return admitted


class StepSlots:
    """The executor's slots: who runs, who waits (in the order they asked), whom to wake."""

    def __init__(self, limit: int, floor: int = WORKFLOW_FLOOR) -> None:
        self.limit = limit
        self.floor = floor
        self._lock = threading.Lock()
        self._running: set[SlotRequest] = set()
        self._waiting: dict[SlotRequest, Callable[[], None]] = {}  # insertion order: oldest first

    def request(self, owner: Hashable, node_id: str, wake: Callable[[], None]) -> bool:
        """True: the step may start now (it holds a slot until `release`). False: it waits in line,
        and `wake` is called when a slot is its; the caller then asks again."""
        wanted = SlotRequest(owner, node_id)
        with self._lock:
            if wanted in self._running:
                return True
            self._waiting.setdefault(wanted, wake)
            woken = self._admit_locked(skip=wanted)
            admitted = wanted in self._running
        for other in woken:
            other()
        return admitted

    def release(self, owner: Hashable, node_id: str) -> None:
        """The step's process ended (or it will not start): its slot, or its place in line, is free."""
        gone = SlotRequest(owner, node_id)
        with self._lock:
            self._running.discard(gone)
            self._waiting.pop(gone, None)
            woken = self._admit_locked()
        for wake in woken:
            wake()

    def forget(self, owner: Hashable) -> None:
        """A Workflow's worker ended: drop its places in line (its processes release their own)."""
        with self._lock:
            for request in [r for r in self._waiting if r.owner == owner]:
                del self._waiting[request]
            woken = self._admit_locked()
        for wake in woken:
            wake()

    def holds(self, owner: Hashable, node_id: str) -> bool:
        """Whether the step holds a slot."""
        with self._lock:
            return SlotRequest(owner, node_id) in self._running

    def usage(self) -> tuple[int, int]:
        """(processes holding a slot, steps waiting for one)."""
        with self._lock:
            return len(self._running), len(self._waiting)

    def _admit_locked(self, skip: SlotRequest | None = None) -> list[Callable[[], None]]:
        """Move the admitted requests to running; their wakes (not `skip`'s: it is asking now)."""
        admitted = admit(list(self._waiting), self._running, limit=self.limit, floor=self.floor)
        wakes = []
        for request in admitted:
            wake = self._waiting.pop(request)
            self._running.add(request)
            if request != skip:
                wakes.append(wake)
        return wakes
