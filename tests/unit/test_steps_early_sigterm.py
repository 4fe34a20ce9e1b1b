"""A step's pod deleted while `python -m steps` still imports exits 75 (retried), not of the signal.

The kill is sent from inside the import of `steps.cli` (an import hook in the child), so it lands
before `steps.cli.run_step` installs the step's own handler, every time.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

from steps.cli import EXIT_TEMPORARY

CHILD = textwrap.dedent(
    """
    import importlib.abc, os, runpy, signal, sys

    class KillDuringImport(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "steps.cli":
                os.kill(os.getpid(), signal.SIGTERM)
            return None

    sys.meta_path.insert(0, KillDuringImport())
    sys.argv = ["python -m steps", "select", "--help"]
    runpy.run_module("steps", run_name="__main__", alter_sys=True)
    print("not stopped")
    """
)


def test_sigterm_while_the_steps_import_exits_75() -> None:
    done = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == EXIT_TEMPORARY == 75, (done.returncode, done.stdout, done.stderr)
    assert "stopped by SIGTERM while starting" in done.stderr
    assert "not stopped" not in done.stdout
