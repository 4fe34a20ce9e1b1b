"""An opt-in timeline of the test run: which worker ran which test, when, and at what CPU cost.

Set PROGRESSIVE_SYNC_TEST_TIMELINE to a folder: each pytest process (each xdist worker, or the one
process without xdist) appends one JSON line per test to `<folder>/<worker>.jsonl`, with the wall
times (epoch seconds) of the whole protocol (the real-stack tests' wait for their turn and the
stack's start included), the setup/call/teardown durations, the worker's own CPU seconds, and the
machine's busy CPU seconds (all processes, /proc/stat) over the test. A `session` line marks each
worker's start and end. Unset, nothing is written and nothing is measured.

`python -m tests.support.timeline FOLDER` prints the summary: each worker's start, end, busy and
idle seconds, its last tests, the idle tail (the last worker's end minus each other's), the
slowest tests with the worker that ran them, and the CPU seconds of the tests outside the real
stack.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

VARIABLE = "PROGRESSIVE_SYNC_TEST_TIMELINE"


def folder() -> Path | None:
    """Where this run's timeline goes (None: not asked for)."""
    value = os.environ.get(VARIABLE, "").strip()
    return Path(value) if value else None


def machine_busy_seconds() -> float:
    """The machine's CPU seconds spent busy since boot (every CPU, every process), from /proc/stat."""
    try:
        with open("/proc/stat") as stat:
            fields = stat.readline().split()[1:]
    except OSError:
        return 0.0
    ticks = [int(value) for value in fields]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)  # idle + iowait
    return (sum(ticks[:8]) - idle) / os.sysconf("SC_CLK_TCK")


@dataclass
class Recorder:
    """Writes one worker's lines; `phases` gathers the durations pytest reports for the current test,
    `failed` the phases of it that failed."""

    path: Path
    worker: str
    phases: dict[str, float] = field(default_factory=dict)
    failed: list[str] = field(default_factory=list)

    @classmethod
    def for_worker(cls, worker: str) -> Recorder | None:
        """A recorder for this process, or None when no timeline was asked for."""
        where = folder()
        if where is None:
            return None
        where.mkdir(parents=True, exist_ok=True)
        return cls(where / f"{worker}.jsonl", worker)

    def write(self, line: dict[str, Any]) -> None:
        """Append one line (a whole line per write: readers never see half of one)."""
        with self.path.open("a") as out:
            out.write(json.dumps({"worker": self.worker, **line}, sort_keys=True) + "\n")

    def session(self, event: str) -> None:
        """Mark this worker's session start or end."""
        self.write({"session": event, "at": time.time(), "machine_busy": machine_busy_seconds()})

    @contextlib.contextmanager
    def test(self, nodeid: str, realstack: bool) -> Iterator[None]:
        """Around one test's whole protocol: write its line after it ends."""
        self.phases = {}
        self.failed = []
        start, cpu, busy = time.time(), time.process_time(), machine_busy_seconds()
        children = _children_cpu()
        try:
            yield
        finally:
            self.write(
                {
                    "nodeid": nodeid,
                    "realstack": realstack,
                    "start": start,
                    "end": time.time(),
                    "cpu": time.process_time() - cpu,
                    "children_cpu": _children_cpu() - children,
                    "machine_busy": machine_busy_seconds() - busy,
                    "phases": dict(self.phases),
                    **({"failed": list(self.failed)} if self.failed else {}),
                }
            )


def _children_cpu() -> float:
    """CPU seconds of this process's children that ended and were waited for (steps, watchers, kubectl).

    A child counts when it is waited for, all its life at once: the session's real stack (etcd,
    kube-apiserver, the node's and Argo's programs, children of the worker that owns it) counts in
    the test that stops it, e.g. ~750 s in the SIGKILL clean-up test of a 36-minute run."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


# --- the summary ------------------------------------------------------------------------------------


def read(where: Path) -> list[dict[str, Any]]:
    """Every line of every worker's file."""
    lines = []
    for path in sorted(where.glob("*.jsonl")):
        lines += [json.loads(text) for text in path.read_text().splitlines() if text.strip()]
    return lines


def _cpu(lines: Sequence[dict[str, Any]], key: str) -> float:
    return sum(float(line.get(key, 0.0)) for line in lines)


def waited(line: dict[str, Any]) -> float:
    """Seconds of a test's protocol outside its setup, call and teardown: a realstack test's wait for
    its turn on the shared stack (a stack-stopping test's wait for the guest's last test) and the
    stack's start before it."""
    return max(0.0, line["end"] - line["start"] - sum((line.get("phases") or {}).values()))


def summary(lines: Sequence[dict[str, Any]], slowest: int = 25) -> str:
    """The per-worker timeline in words (see the module doc)."""
    tests = [line for line in lines if "nodeid" in line]
    sessions = [line for line in lines if "session" in line]
    if not tests:
        return "no tests in the timeline"
    origin = min([line["start"] for line in tests] + [line["at"] for line in sessions])
    workers = sorted({line["worker"] for line in tests})
    ends = {worker: max(line["end"] for line in tests if line["worker"] == worker) for worker in workers}
    last_end = max(ends.values())
    out = [f"{len(tests)} tests on {len(workers)} workers; the last ended at {last_end - origin:.0f}s"]
    for worker in workers:
        own = sorted((line for line in tests if line["worker"] == worker), key=lambda line: line["start"])
        busy = sum(line["end"] - line["start"] for line in own)
        stack = sum(line["end"] - line["start"] for line in own if line["realstack"])
        out.append(
            f"  {worker}: {len(own)} tests, first start {own[0]['start'] - origin:.0f}s, "
            f"end {ends[worker] - origin:.0f}s (idle tail {last_end - ends[worker]:.0f}s), "
            f"in tests {busy:.0f}s ({stack:.0f}s real stack), own CPU {_cpu(own, 'cpu'):.0f}s, "
            f"children's {_cpu(own, 'children_cpu'):.0f}s"
        )
        for line in own[-3:]:
            out.append(
                f"      last: {line['start'] - origin:6.0f}s-{line['end'] - origin:6.0f}s "
                f"{line['end'] - line['start']:6.1f}s {line['nodeid']}"
            )
    others = [line for line in tests if not line["realstack"]]
    others_wall = sum(line["end"] - line["start"] for line in others)
    out.append(
        f"outside the real stack: {len(others)} tests, {others_wall:.0f}s "
        f"of wall time over the workers, {_cpu(others, 'cpu'):.0f}s of their workers' own CPU, "
        f"{_cpu(others, 'children_cpu'):.0f}s of their children's"
    )
    busy = [line for line in sessions if "machine_busy" in line]
    if len(busy) >= 2:
        spent = max(line["machine_busy"] for line in busy) - min(line["machine_busy"] for line in busy)
        span = max(line["at"] for line in busy) - min(line["at"] for line in busy)
        out.append(
            f"the machine's busy CPU over the sessions: {spent:.0f}s in {span:.0f}s "
            f"(average {spent / span if span else 0:.2f} of {os.cpu_count()} CPUs)"
        )
    out.append(f"slowest {slowest} (whole protocol; waited: outside setup, call and teardown):")
    for line in sorted(tests, key=lambda line: line["start"] - line["end"])[:slowest]:
        out.append(
            f"  {line['end'] - line['start']:6.1f}s {line['worker']} "
            f"{line['start'] - origin:5.0f}s-{line['end'] - origin:5.0f}s "
            f"waited {waited(line):5.1f}s cpu {line['cpu']:5.1f}s "
            f"+{line.get('children_cpu', 0.0):5.1f}s "
            f"machine {line['machine_busy']:5.0f}s {line['nodeid']}"
        )
    failed = sorted((line for line in tests if line.get("failed")), key=lambda line: line["start"])
    if failed:
        out.append(f"failed ({len(failed)}), with what ran beside them in the worker lines above:")
        for line in failed:
            out.append(
                f"  {line['worker']} {line['start'] - origin:5.0f}s-{line['end'] - origin:5.0f}s "
                f"[{', '.join(line['failed'])}] {line['nodeid']}"
            )
    return "\n".join(out)


def main(argv: Sequence[str]) -> int:
    """`python -m tests.support.timeline FOLDER`: print the summary."""
    if len(argv) != 1:
        sys.stderr.write("usage: python -m tests.support.timeline FOLDER\n")
        return 2
    print(summary(read(Path(argv[0]))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
