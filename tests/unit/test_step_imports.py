"""A step pod does not import the `kubernetes` package: ~0.45 s of CPU at every step pod's start.

The steps reach the API server through `orchestrator.kube`, whose endpoint reads the pod's service
account itself and imports `kubernetes` only to read a kubeconfig. A fresh interpreter imports
what `python -m steps` imports and says which of the slow packages it loaded.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_step_program_does_not_import_the_kubernetes_package() -> None:
    probe = (
        "import json, sys; import steps.cli; "
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules} & {'kubernetes', 'requests'})))"
    )
    run = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=60, check=False
    )
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == [], "steps.cli imports these; a step pod would pay for them"
