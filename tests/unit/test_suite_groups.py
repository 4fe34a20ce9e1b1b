"""`make test` runs on pytest-xdist workers with `--dist loadgroup`, and the tests of one shared stack
must stay on one worker (tests/conftest.py SHARED_STACK_GROUPS): several real nodes cannot run on
one machine, and each worker would start its own real Argo CD. pytest 9.2 with pytest-xdist 3.8
ignored every group without a word; this checks that the group reaches xdist's scheduler."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support import timeline

ROOT = Path(__file__).resolve().parents[2]
PYTEST = (sys.executable, "-m", "pytest")


# The real-Argo-CD tests stand for every group: a realstack test's protocol starts the node even
# under --setup-plan (tests/conftest.py warms the stack up before the test), so it cannot be planned
# cheaply; the same hook gives both their group.
def test_the_tests_of_a_shared_stack_reach_xdist_in_one_group() -> None:
    test_file, group = "tests/argocd_real/test_rollout.py", "argocd"
    plan = subprocess.run(
        [
            *PYTEST,
            "-n",
            "2",
            "--dist",
            "loadgroup",
            "--setup-plan",
            "-v",
            "-p",
            "no:cacheprovider",
            test_file,
        ],
        cwd=ROOT,
        # Not in the run's timeline: its workers are named gw0 and gw1 too, and would add a session to theirs.
        env={k: v for k, v in os.environ.items() if k != timeline.VARIABLE},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    planned = [line for line in plan.stdout.splitlines() if line.startswith(f"{test_file}::")]
    assert planned, plan.stdout + plan.stderr
    assert all(line.split()[0].endswith(f"@{group}") for line in planned), planned
