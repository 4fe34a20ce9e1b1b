"""Running the real `kubectl` (from KUBEBUILDER_ASSETS) against the test control plane."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Kubectl:
    """`kubectl` bound to one kubeconfig; `run` returns the finished process without raising."""

    binary: Path
    kubeconfig: Path

    def run(
        self, *args: str, stdin: str | None = None, timeout: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        """Run `kubectl ARGS` with our kubeconfig; output captured as text."""
        return subprocess.run(
            [str(self.binary), f"--kubeconfig={self.kubeconfig}", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def ok(self, *args: str, stdin: str | None = None) -> str:
        """Run and require exit 0; returns stdout."""
        result = self.run(*args, stdin=stdin)
        assert result.returncode == 0, f"kubectl {' '.join(args)} failed: {result.stderr}"
        return result.stdout
