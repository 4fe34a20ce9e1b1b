"""One Pod node's process: its environment, its start (forked by the warm launcher, or a plain
subprocess), its wait, its kill, and its result (exit code, output parameters, the last line it
printed).

Callers: `workflow_worker` (starts and kills a Workflow's steps), and the `LocalExecutor`, which
gives the warm launcher the environment common to every step (`common_environment`).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
from datetime import datetime
from pathlib import Path
from typing import Any

from orchestrator.core.clock import Clock
from orchestrator.engine.executor_settings import ExecutorSettings
from orchestrator.engine.interface import PodLaunch, PodResult, PodState
from orchestrator.engine.pods import OUTPUTS_DIR_ENV
from orchestrator.engine.warm_python import WarmLauncher, WarmProcess

# How much of a step's last printed line its node keeps as a summary.
SUMMARY_LIMIT = 300


def common_environment(settings: ExecutorSettings) -> dict[str, str]:
    """What every step gets whatever its container says (the warm launcher starts with it)."""
    return step_environment(settings, (), None)


def step_environment(
    settings: ExecutorSettings, container_env: tuple[tuple[str, str], ...], outputs_dir: Path | None
) -> dict[str, str]:
    """A step's whole environment: host passthrough, the container's env, then ours on top."""
    env = {key: os.environ[key] for key in settings.passthrough_env if key in os.environ}
    env.update(dict(container_env))
    if outputs_dir is not None:
        env[OUTPUTS_DIR_ENV] = str(outputs_dir)
    if settings.kubeconfig is not None:
        env["PROGRESSIVE_SYNC_KUBECONFIG"] = str(settings.kubeconfig)
        env["KUBECONFIG"] = str(settings.kubeconfig)
    env.update(dict(settings.extra_env))
    return env


class StepProcess:
    """One Pod node's subprocess: started in its own process group, waited for by a thread."""

    def __init__(
        self,
        launch: PodLaunch,
        node_dir: Path,
        settings: ExecutorSettings,
        clock: Clock,
        notify: Any,
        *,
        launcher: WarmLauncher | None,
    ):
        self.launch = launch
        self.node_dir = node_dir
        self.settings = settings
        self.started_at: datetime = clock.now()
        self.result: PodResult | None = None
        self._notify = notify
        self._killed_reason = ""
        self._lock = threading.Lock()
        outputs_dir = node_dir / "outputs"
        shutil.rmtree(outputs_dir, ignore_errors=True)
        outputs_dir.mkdir(parents=True, exist_ok=True)
        self.outputs_dir = outputs_dir
        env = step_environment(settings, launch.env, outputs_dir)
        argv = list(launch.argv)
        if argv[0] in ("python", "python3"):
            argv[0] = settings.python
        self.stdout_path = node_dir / "stdout.log"
        self.stderr_path = node_dir / "stderr.log"
        self.popen: subprocess.Popen[bytes] | WarmProcess | None = None
        if launcher is not None:
            self.popen = launcher.launch(argv, env, node_dir, self.stdout_path, self.stderr_path)
        if self.popen is not None:
            threading.Thread(target=self._wait, name=f"pod-{launch.node_id}", daemon=True).start()
            return
        try:
            with self.stdout_path.open("wb") as out, self.stderr_path.open("wb") as err:
                self.popen = subprocess.Popen(
                    argv,
                    env=env,
                    cwd=node_dir,
                    stdout=out,
                    stderr=err,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
        except OSError as exc:
            self.result = PodResult(exit_code=127, error=f"could not start {argv[0]}: {exc}")
            notify()
            return
        threading.Thread(target=self._wait, name=f"pod-{launch.node_id}", daemon=True).start()

    def _wait(self) -> None:
        assert self.popen is not None
        try:
            code = self.popen.wait(timeout=self.settings.step_timeout_seconds)
        except subprocess.TimeoutExpired:
            self.kill(f"timed out after {self.settings.step_timeout_seconds:.0f}s")
            code = self.popen.wait()
        if isinstance(self.popen, WarmProcess) and self.popen.lost:
            self._killed_reason = self._killed_reason or self.popen.lost
        with self._lock:
            self.result = self._read_result(code)
        self._notify()

    def _read_result(self, code: int) -> PodResult:
        if self._killed_reason:
            return PodResult(exit_code=code, error=self._killed_reason)
        outputs: dict[str, str] = {}
        missing: list[str] = []
        for name, relative in self.launch.outputs:
            path = self.outputs_dir / relative
            try:
                data = path.read_bytes()[: self.settings.max_output_bytes]
            except OSError:
                missing.append(name)
                continue
            outputs[name] = data.decode("utf-8", errors="replace").rstrip("\n")
        return PodResult(
            exit_code=code,
            outputs=outputs,
            missing_outputs=tuple(missing) if code == 0 else (),
            summary=self._summary(),
        )

    def _summary(self) -> str:
        try:
            lines = self.stdout_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return lines[-1][:SUMMARY_LIMIT] if lines else ""

    def state(self) -> PodState:
        """When it started and, once it ended, its result (what `operate` reads)."""
        with self._lock:
            return PodState(started_at=self.started_at, result=self.result)

    def kill(self, reason: str = "killed by the local executor") -> None:
        """SIGTERM the process group, then SIGKILL after the grace period."""
        if self.popen is None or self.popen.poll() is not None:
            return
        self._killed_reason = self._killed_reason or reason
        try:
            os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout=self.settings.kill_grace_seconds)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
