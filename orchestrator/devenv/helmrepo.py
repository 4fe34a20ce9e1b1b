"""A Helm chart repository on 127.0.0.1: charts packaged by the real `helm`, served over HTTP.

Argo CD deploys a Helm chart from a chart repository (`source.chart` + `source.repoURL`, the
version in `targetRevision`: an exact version or a semver constraint such as `1.2.*`) and reports
the chart version it resolved as the Application's revision (`status.sync.revision: "1.2.4"`, not a
commit SHA). This is such a repository, for the real-Argo-CD tests and the demo:

    repo = HelmRepoServer.start(workdir, helm=tools.binary("helm"))
    repo.publish("myservice", "1.2.3", {"configmap.yaml": ...})   # helm package + helm repo index
    repo.url                                                        # http://127.0.0.1:PORT
    repo.stop()

`publish` writes the chart's sources (`Chart.yaml`, `values.yaml`, `templates/`) under the work dir,
packages them with `helm package --version` into the served folder and rebuilds `index.yaml` with
`helm repo index --url` (helm writes the index atomically, after the archive is in place, so a
client never sees a version whose archive is missing). A new version is a new release of the chart,
as a CI pipeline publishing to a chart repository makes one. The HTTP server (the standard
library's, on a thread, a port the kernel picks on 127.0.0.1) serves the folder as it is and keeps
the paths it was asked for (`requests`): how often Argo CD read the index is visible.

helm runs with its config, cache and data folders in the work dir: nothing outside it changes.
Callers: the real-Argo-CD tests (tests/support/argocd_harness.py), the demo.
"""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from orchestrator.core.http_server import QuietThreadingHTTPServer

HELM_TIMEOUT_SECONDS = 60.0


class HelmRepoError(RuntimeError):
    """helm failed or the repository could not start; the message carries helm's output."""


class _Handler(http.server.SimpleHTTPRequestHandler):
    """Serves the repository folder; records each path asked for, logs nothing to stderr."""

    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        self.server.asked.append((time.monotonic(), self.path))


class _Server(QuietThreadingHTTPServer):
    asked: list[tuple[float, str]]


@dataclass
class HelmRepoServer:
    """A running chart repository. Start with `HelmRepoServer.start`; always `stop()`."""

    workdir: Path
    helm: Path
    _server: _Server = field(repr=False)
    _thread: threading.Thread = field(repr=False)
    _owns_workdir: bool = True
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def start(
        cls, workdir: str | os.PathLike[str] | None = None, *, helm: str | os.PathLike[str]
    ) -> HelmRepoServer:
        """Serve an empty repository (no `index.yaml` until the first `publish`)."""
        helm_path = Path(helm)
        if not (helm_path.is_file() and os.access(helm_path, os.X_OK)):
            raise HelmRepoError(f"no helm at {helm_path}: run `make tools` (it builds helm)")
        owns = workdir is None or not Path(workdir).exists()
        root = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="progressive-sync-helm-"))
        (root / "served").mkdir(parents=True, exist_ok=True)
        handler = functools.partial(_Handler, directory=str(root / "served"))
        server = _Server(("127.0.0.1", 0), handler)
        server.asked = []
        thread = threading.Thread(target=server.serve_forever, name="helm-repo", daemon=True)
        thread.start()
        return cls(root, helm_path, server, thread, owns)

    @property
    def url(self) -> str:
        """The repository's URL (`repoURL` of a chart source)."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def served(self) -> Path:
        """The folder served: `index.yaml` and the chart archives."""
        return self.workdir / "served"

    @property
    def requests(self) -> list[tuple[float, str]]:
        """(monotonic time, path) of every request answered so far."""
        return list(self._server.asked)

    def index_reads(self, since: float = 0.0) -> int:
        """How many times `index.yaml` was read after `since` (monotonic)."""
        return sum(1 for at, path in self.requests if at >= since and path.split("?")[0] == "/index.yaml")

    def publish(
        self,
        chart: str,
        version: str,
        templates: Mapping[str, str],
        *,
        values: Mapping[str, Any] | None = None,
    ) -> Path:
        """Package `chart` at `version` (its templates by file name, its default values) into the
        repository and rebuild the index; the archive's path."""
        with self._lock:
            source = self.workdir / "sources" / chart / version / chart
            if source.exists():
                shutil.rmtree(source)
            (source / "templates").mkdir(parents=True)
            (source / "Chart.yaml").write_text(
                yaml.safe_dump(
                    {
                        "apiVersion": "v2",
                        "name": chart,
                        "version": version,
                        "appVersion": version,
                        "type": "application",
                    },
                    sort_keys=False,
                )
            )
            (source / "values.yaml").write_text(yaml.safe_dump(dict(values or {}), sort_keys=False))
            for name, text in templates.items():
                (source / "templates" / name).write_text(text)
            self._helm("package", str(source), "--version", version, "--destination", str(self.served))
            self._helm("repo", "index", str(self.served), "--url", self.url)
            return self.served / f"{chart}-{version}.tgz"

    def versions(self, chart: str) -> list[str]:
        """The versions of `chart` the index lists (newest first, as helm writes them)."""
        index = self.served / "index.yaml"
        if not index.exists():
            return []
        entries = (yaml.safe_load(index.read_text()) or {}).get("entries") or {}
        return [str(entry.get("version")) for entry in entries.get(chart) or []]

    def _helm(self, *args: str) -> str:
        home = self.workdir / "helm-home"
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home),
            "HELM_CACHE_HOME": str(home / "cache"),
            "HELM_CONFIG_HOME": str(home / "config"),
            "HELM_DATA_HOME": str(home / "data"),
        }
        try:
            done = subprocess.run(
                [str(self.helm), *args],
                env=env,
                capture_output=True,
                text=True,
                timeout=HELM_TIMEOUT_SECONDS,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise HelmRepoError(f"helm {' '.join(args)}: no answer in {HELM_TIMEOUT_SECONDS:g}s") from exc
        if done.returncode != 0:
            raise HelmRepoError(f"helm {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")
        return done.stdout

    def stop(self) -> None:
        """Stop serving; remove the work dir when `start` made it."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
        if self._owns_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> HelmRepoServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
