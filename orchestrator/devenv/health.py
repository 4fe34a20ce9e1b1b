"""Which programs of a running dev stack are dead, and the log lines that say why.

Each part that starts programs answers `exited()` with a `DeadProgram` per program it started that
is no longer running: `DevCluster` (etcd, kube-apiserver), `Node` (containerd, the kubelet,
kube-scheduler, kube-controller-manager), `ArgoWorkflows` (workflow-controller, argo-server) and
`Supervisor` (Argo CD's programs, Prometheus, the Argo Rollouts controller). `DevStack.health()`
gathers them. A process that cannot see the programs (a second test worker attached to the stack)
builds `DeadProgram`s from failed probes instead (`answered`).

What a person needs from a dead program's log is the line it died with (`level=fatal`, a Go
`panic:`, a klog `F1205 ...` line), not its last 30 lines of routine: `telling_lines` picks those,
or the last few lines when there is none. Logs are read from their end only (`read_tail`): a
controller that ran for an hour at info level has written megabytes.

Callers: the parts above, `orchestrator.devenv.stack` (`DevStack.health`), the real-stack tests'
watchdog (tests/support/stack_watch.py).
"""

from __future__ import annotations

import re
import signal
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

# The line a program died with: logrus/Argo (`level=fatal`, `level=panic`, or as JSON), a Go runtime
# panic or fatal error, klog's fatal severity (`F1205 10:00:00.000000 ...`), etcd's zap JSON.
FATAL_LINE = re.compile(
    r'level=(?:fatal|panic)\b|"level":\s*"(?:fatal|panic)"|^panic: |^fatal error: |^F\d{4} \d{2}:\d{2}:\d{2}'
)
# How many of a log's lines a dead program's description carries.
TELLING_LINES = 3
# How much of a log's end is read (a line longer than this is cut).
TAIL_BYTES = 64 * 1024
# A telling line longer than this is cut (JSON log lines carry whole objects).
LINE_CHARS = 400


@dataclass(frozen=True)
class DeadProgram:
    """A program of the stack that is not running: how it went, and its log's telling lines."""

    name: str
    # "exited (code 1)", "exited (killed by SIGKILL)", or for a probe "does not answer <url>: <error>".
    how: str
    log_path: Path | None = None
    lines: tuple[str, ...] = ()
    # Tells one death from the next of the same program (its process id; empty for a probe).
    key: str = ""

    def summary(self) -> str:
        """One line: `workflow-controller exited (code 1): level=fatal msg="..."`."""
        last = f": {self.lines[-1]}" if self.lines else ""
        return f"{self.name} {self.how}{last}"

    def details(self) -> str:
        """The summary, then where its log is and its telling lines, one a line."""
        if self.log_path is None:
            return self.summary()
        quoted = [f"    | {line}" for line in self.lines]
        return "\n".join([self.summary(), f"    its log ({self.log_path}) ends:", *quoted])


def exit_description(returncode: int) -> str:
    """`exited (code 1)`, or `exited (killed by SIGKILL)` for a negative (signal) return code."""
    if returncode < 0:
        try:
            return f"exited (killed by {signal.Signals(-returncode).name})"
        except ValueError:
            return f"exited (killed by signal {-returncode})"
    return f"exited (code {returncode})"


def telling_lines(lines: Sequence[str], *, keep: int = TELLING_LINES) -> tuple[str, ...]:
    """The lines that say why a program died: its fatal lines (the last `keep`), else its last
    `keep` non-blank lines; each cut to LINE_CHARS."""
    written = [line.rstrip() for line in lines if line.strip()]
    fatal = [line for line in written if FATAL_LINE.search(line)]
    chosen = (fatal or written)[-keep:] if keep > 0 else []
    return tuple(_cut(line) for line in chosen)


def _cut(line: str) -> str:
    return line if len(line) <= LINE_CHARS else line[: LINE_CHARS - 3] + "..."


def read_tail(path: Path, max_bytes: int = TAIL_BYTES) -> list[str]:
    """The lines of the last `max_bytes` of `path` (the first, cut, line dropped); [] without it."""
    try:
        with path.open("rb") as log:
            size = log.seek(0, 2)
            log.seek(max(0, size - max_bytes))
            text = log.read().decode(errors="replace")
    except OSError:
        return []
    lines = text.splitlines()
    return lines[1:] if size > max_bytes else lines


def exited_program(name: str, process: subprocess.Popen[bytes], log_path: Path) -> DeadProgram | None:
    """A `DeadProgram` when `process` has exited (reaped now if need be), else None."""
    returncode = process.poll()
    if returncode is None:
        return None
    return DeadProgram(
        name=name,
        how=exit_description(returncode),
        log_path=log_path,
        lines=telling_lines(read_tail(log_path)),
        key=f"pid {process.pid}",
    )


def exited_programs(
    programs: Iterable[tuple[str, subprocess.Popen[bytes], Path]],
) -> list[DeadProgram]:
    """`exited_program` of each (name, process, log) that has exited, in order."""
    return [
        dead for name, process, log in programs if (dead := exited_program(name, process, log)) is not None
    ]


def program_name(process: subprocess.Popen[bytes]) -> str:
    """The name a program was started under: its binary's file name (what its log is named after)."""
    args = process.args
    first = args[0] if isinstance(args, list | tuple) and args else args
    return Path(str(first)).name


def answered(name: str, failure: str | None, log_path: Path | None) -> DeadProgram | None:
    """A `DeadProgram` for a program whose probe failed (`failure`: what it said), else None."""
    if failure is None:
        return None
    lines = telling_lines(read_tail(log_path)) if log_path is not None else ()
    return DeadProgram(name=name, how=failure, log_path=log_path, lines=lines)
