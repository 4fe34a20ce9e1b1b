"""A real Prometheus as a host process, scraping the dev stack's metrics endpoint every second.

`Prometheus.start(targets, folder=...)` writes a config (scrape and evaluation interval 1 s, one job
`progressive-sync-metrics` over `targets`, `host:port` each) and a TSDB folder under `folder`, runs
Debian's `/usr/bin/prometheus` (`hack/tools/debian-packages.sh` installs the `prometheus` package;
its systemd service is never used) on a free loopback port, and returns once `/-/ready` answers.
`query` and `wait_for_value` read it over its HTTP API (what the analysis controller's `prometheus`
provider asks too). `stop()` ends it; the folder is the caller's.

Callers: `orchestrator.devenv.stack` (`dev-cluster up --argo-rollouts`), the analysis test tier
(tests/support/analysis.py).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from orchestrator.devenv.controlplane import ControlPlaneError, free_port
from orchestrator.devenv.processes import ProcessError, Supervisor, http_ok

JOB = "progressive-sync-metrics"
DEBIAN_BINARY = Path("/usr/bin/prometheus")
SCRAPE_INTERVAL = "1s"


class PrometheusError(ControlPlaneError):
    """Prometheus could not start or answer; the message says why."""


def find_binary() -> Path:
    """The `prometheus` on PATH, else Debian's; PrometheusError saying how to install it."""
    found = shutil.which("prometheus")
    if found:
        return Path(found)
    if DEBIAN_BINARY.is_file() and os.access(DEBIAN_BINARY, os.X_OK):
        return DEBIAN_BINARY
    raise PrometheusError(
        "prometheus is not installed: run `make tools` (as root it installs Debian's `prometheus` "
        "package: hack/tools/debian-packages.sh), or `apt-get install --no-install-recommends prometheus`"
    )


def config(targets: Sequence[str], *, interval: str = SCRAPE_INTERVAL) -> dict[str, Any]:
    """The configuration: every `interval` scrape `targets` (job `progressive-sync-metrics`)."""
    return {
        "global": {"scrape_interval": interval, "evaluation_interval": interval, "scrape_timeout": interval},
        "scrape_configs": [{"job_name": JOB, "static_configs": [{"targets": list(targets)}]}],
    }


@dataclass
class Prometheus:
    """A running Prometheus; create with `start`, always `stop()`."""

    url: str
    folder: Path
    supervisor: Supervisor
    timings: dict[str, float] = field(default_factory=dict)

    @classmethod
    def start(
        cls,
        targets: Sequence[str],
        *,
        folder: Path,
        binary: Path | None = None,
        interval: str = SCRAPE_INTERVAL,
        ready_timeout: float = 60.0,
    ) -> Prometheus:
        """Start it scraping `targets` with its config, data and log under `folder`; wait until ready."""
        started = time.monotonic()
        program = binary or find_binary()
        folder.mkdir(parents=True, exist_ok=True)
        config_path = folder / "prometheus.yml"
        config_path.write_text(yaml.safe_dump(config(targets, interval=interval), sort_keys=False))
        port = free_port()
        supervisor = Supervisor(folder)
        prometheus = cls(url=f"http://127.0.0.1:{port}", folder=folder, supervisor=supervisor)
        supervisor.spawn(
            "prometheus",
            [
                str(program),
                f"--config.file={config_path}",
                f"--storage.tsdb.path={folder / 'data'}",
                "--storage.tsdb.retention.time=6h",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
        )
        try:
            supervisor.wait_until(
                "prometheus",
                lambda: http_ok(f"{prometheus.url}/-/ready", timeout=1.0),
                timeout=ready_timeout,
                what=f"GET {prometheus.url}/-/ready",
            )
        except ProcessError as exc:
            supervisor.stop()
            raise PrometheusError(str(exc)) from exc
        prometheus.timings["prometheus ready"] = time.monotonic() - started
        return prometheus

    def query(self, expression: str, *, timeout: float = 5.0) -> list[tuple[dict[str, str], float]]:
        """An instant query's samples, as (labels, value); a scalar is one sample without labels."""
        address = f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': expression})}"
        try:
            with urllib.request.urlopen(address, timeout=timeout) as response:
                body = json.loads(response.read())
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise PrometheusError(f"query {expression!r} at {self.url} failed: {exc}") from exc
        data = body.get("data") or {}
        if data.get("resultType") == "scalar":
            return [({}, float(data["result"][1]))]
        return [(dict(sample["metric"]), float(sample["value"][1])) for sample in data.get("result", [])]

    def wait_for_value(self, expression: str, *, timeout: float = 30.0) -> float:
        """The first value `expression` gives that is a number (not NaN): a series that has just
        appeared needs two scrapes before `rate()` over it answers."""
        deadline = time.monotonic() + timeout
        last: object = "no sample yet"
        while time.monotonic() < deadline:
            self.supervisor.check_alive()
            samples = self.query(expression)
            if samples and not math.isnan(samples[0][1]):
                return samples[0][1]
            last = samples
            time.sleep(0.2)
        raise PrometheusError(f"{expression!r} gave no value within {timeout:g}s (last: {last})")

    def stop(self) -> None:
        """Stop the process (its data folder stays, with the caller's folder)."""
        self.supervisor.stop()
