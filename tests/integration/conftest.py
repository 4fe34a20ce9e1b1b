"""Fixtures that several files of tests/integration share (the session-wide ones, `control_plane`,
`kube`, `namespace` and the rest, are in tests/conftest.py).

The step tests' world (tests/integration/test_steps_*.py; tests/support/steps_rig.py): `steps_config`
(the steps' own kubeconfig, one per session), `fleet`, `runner`, `simulate` and `rig`, per test.
The fault suite's `plane` (tests/integration/test_fault_suite_*.py; tests/support/fault_rig.py).
"""

from __future__ import annotations

from tests.support.analysis_crds import rollouts_crds  # noqa: F401 - fixture
from tests.support.fault_rig import plane  # noqa: F401 - fixture
from tests.support.steps_rig import fleet, rig, runner, simulate, steps_config  # noqa: F401 - fixtures
