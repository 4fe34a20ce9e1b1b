"""How the local executor runs: one frozen settings object, built once by the caller and passed in.

Callers: whoever starts a `LocalExecutor` (`progressive-sync executor`, the watcher's local engine,
the tests), and the executor's parts that read it: `workflow_worker` (retries, resync), `step_process`
(environment, timeouts, outputs) and the warm launcher's client in `warm_python`.
"""

from __future__ import annotations

import os
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path

# The bound on step processes at once (`max_step_processes`): what `progressive-sync executor` and
# the watcher's local engine use unless told otherwise.
DEFAULT_MAX_STEP_PROCESSES = 64


def _default_executor_id() -> str:
    return f"local-executor-{socket.gethostname()}-{os.getpid()}"


@dataclass(frozen=True)
class ExecutorSettings:
    """How the local executor runs; built once by the caller and passed in."""

    # The kubeconfig every step gets (`PROGRESSIVE_SYNC_KUBECONFIG` and `KUBECONFIG`); None: none.
    kubeconfig: Path | None = None
    # Watch one namespace, or None for all.
    namespace: str | None = None
    # What `python`/`python3` at the start of a container command means here: containers run the
    # image's interpreter, locally it is this one (the virtualenv with `steps` installed).
    python: str = sys.executable
    # Where each node's directory (outputs, stdout, stderr) goes; None: a temporary directory.
    workdir: Path | None = None
    step_timeout_seconds: float = 3600.0
    kill_grace_seconds: float = 5.0
    resync_seconds: float = 5.0
    watch_timeout_seconds: int = 60
    status_write_attempts: int = 5
    relist_backoffs: tuple[float, ...] = (0.5, 1.0, 2.0, 5.0, 10.0)
    # At most this many step processes at once (0: no bound), beside the two every Workflow may always
    # run (orchestrator/engine/slots.py): a step past it stays Pending, saying so, until a slot frees,
    # as a pod no node can take yet. `progressive-sync executor --max-step-processes`.
    max_step_processes: int = DEFAULT_MAX_STEP_PROCESSES
    # How many of a pass's steps are started at once (each waits for its fork); 1: one after another.
    parallel_starts: int = 8
    # Host variables a step inherits (a container inherits none; these make Python work here).
    passthrough_env: tuple[str, ...] = (
        "PATH",
        "HOME",
        "LANG",
        "LC_ALL",
        "TMPDIR",
        "PYTHONPATH",
        "SYSTEMROOT",
    )
    # Extra variables for every step (after the container's own), e.g. a log level.
    extra_env: tuple[tuple[str, str], ...] = ()
    max_output_bytes: int = 256 * 1024
    executor_id: str = field(default_factory=_default_executor_id)
    # Modules a warm launcher (orchestrator/engine/warm_python.py) imports once: a step whose command is
    # `python -m <one of these> ...` is forked from it instead of paying the imports again.
    # Empty: every step is a plain subprocess.
    warm_modules: tuple[str, ...] = ("steps",)
    # How long a step waits for the launcher to finish its imports, or for it to answer a start.
    warm_ready_timeout_seconds: float = 60.0
    warm_answer_timeout_seconds: float = 10.0
    # A launcher that died or answered an error is started again at most this many times.
    warm_restarts: int = 3
