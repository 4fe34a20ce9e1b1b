"""The analysis tier: standalone AnalysisRuns against the real Argo Rollouts analysis controller.

What is real: the session's control plane (etcd + kube-apiserver) with Argo Rollouts' own analysis
CRDs, the Argo Rollouts analysis controller of the pinned release (`rollouts-controller
--controllers=analysis`, built by `make tools`), a real Prometheus (Debian's package) scraping the
metrics endpoint every second, and the `web` provider's HTTP endpoint (the same endpoint). The
metrics endpoint is ours: it plays a service whose error rate the test sets per cluster. What is
not: no node (the `prometheus` and `web` providers measure inside the controller's process; the
`job` provider's test is in tests/realstack), no Argo CD, no ProgressiveSync: these tests create
AnalysisRuns directly, as `kubectl argo rollouts create analysisrun` does.

The fixtures (`analysis_stack` once per session, `analysis_env` per test) are in
tests/support/analysis.py; every test using them is marked `analysis`.
"""

from __future__ import annotations

import pytest

from tests.support.analysis import STARTUP


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print how long the analysis stack took to start, by part."""
    if STARTUP:
        parts = ", ".join(f"{name} {seconds:.1f}s" for name, seconds in STARTUP.items())
        terminalreporter.write_line(f"analysis stack started: {parts}")
