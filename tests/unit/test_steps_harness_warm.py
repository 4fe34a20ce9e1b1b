"""The steps harness forks steps from a warm launcher: what a test sees is what a plain
`python -m steps` subprocess gives (exit code, stdout, stderr), and the cold path stays available."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.steps_harness import COLD_STEPS_VARIABLE, StepRunner


def runner(tmp_path: Path) -> StepRunner:
    # `--help` and a usage error end before a step reads its kubeconfig or its contract.
    return StepRunner(kubeconfig=tmp_path / "none.kubeconfig", namespace="ns", outputs_dir=tmp_path)


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(("sync", "--help"), id="help-exits-0-on-stdout"),
        pytest.param(("sync", "--no-such-option"), id="a-usage-error-exits-2-on-stderr"),
        pytest.param(("no-such-step",), id="an-unknown-step-exits-2"),
    ],
)
def test_a_warm_step_ends_as_a_cold_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: tuple[str, ...]
) -> None:
    contract = {"PROGRESSIVE_SYNC_CONTRACT": "{}"}
    warm_runner, cold_runner = runner(tmp_path), runner(tmp_path)
    warm = warm_runner.run(*args, **contract)
    assert warm_runner.last_run_warm
    monkeypatch.setenv(COLD_STEPS_VARIABLE, "1")
    cold = cold_runner.run(*args, **contract)
    assert not cold_runner.last_run_warm
    assert (warm.returncode, warm.stdout, warm.stderr) == (cold.returncode, cold.stdout, cold.stderr)
    assert warm.returncode == (0 if "--help" in args else 2)
    assert (warm.stdout if warm.returncode == 0 else warm.stderr).strip()
