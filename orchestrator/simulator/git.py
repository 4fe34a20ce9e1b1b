"""The simulated Git repository: what each ref (branch, tag) resolves to, as Argo CD's repo-server
would answer; and the simulated Helm chart repositories (which versions each chart has).

A test or the demo publishes a release by writing the refs into the ConfigMap `simulator-git`
(data key `refs`: a YAML mapping `ref -> full commit SHA`) in the Argo CD namespace; every Application
compares against what its `targetRevision` resolves to there. Without the ConfigMap there is no
repository: revisions are taken as written and an Application is compared against the revision its
`status.sync` already names (the seeded fleet's world).

Resolution is Argo CD's: a ref resolves to its commit; a full 40-hex SHA is itself; a short SHA
resolves to the one known commit it prefixes; anything else cannot be resolved (the sync ends in
phase Error). Pure; the controller reads the ConfigMap.

Helm chart repositories live in the same ConfigMap (data key `charts`: a YAML mapping
`repoURL -> chart -> [versions]`, what each repository's index.yaml lists). A source with `chart`
resolves there instead (`orchestrator.simulator.charts`): an exact version is itself, a constraint
(`1.2.*`) the highest version of the chart that meets it; the revision is the version, never a SHA.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from orchestrator.simulator.charts import ChartVersionError, resolve_chart_version

GIT_CONFIGMAP = "simulator-git"
REFS_KEY = "refs"
CHARTS_KEY = "charts"
DEFAULT_BRANCH = "HEAD"

_FULL_SHA = re.compile(r"^[0-9a-f]{40}$")
_SHORT_SHA = re.compile(r"^[0-9a-f]{7,39}$")


class UnresolvableRevision(ValueError):
    """A revision the repository does not know; the message is the repo-server's."""


@dataclass(frozen=True)
class GitRefs:
    """The refs of the simulated repository and the simulated chart repositories' charts (both
    empty: there is no repository, revisions are taken as written)."""

    refs: Mapping[str, str]
    # repoURL -> chart -> the versions its index lists.
    charts: Mapping[str, Mapping[str, tuple[str, ...]]] = field(default_factory=dict)

    @property
    def exists(self) -> bool:
        """True when a repository was published."""
        return bool(self.refs) or bool(self.charts)

    @classmethod
    def from_configmap(cls, configmap: Mapping[str, Any] | None) -> GitRefs:
        """Read the ConfigMap (None: no repository). A malformed part counts as not published."""
        data = (configmap or {}).get("data") or {}
        try:
            refs = yaml.safe_load(data.get(REFS_KEY) or "") or {}
        except yaml.YAMLError:
            refs = {}
        try:
            charts = yaml.safe_load(data.get(CHARTS_KEY) or "") or {}
        except yaml.YAMLError:
            charts = {}
        return cls(
            {str(ref): str(sha).strip().lower() for ref, sha in refs.items() if sha}
            if isinstance(refs, Mapping)
            else {},
            _charts(charts),
        )

    def resolve_source(self, source: Mapping[str, Any], revision: str = "") -> str:
        """The revision `revision` (empty: the source's `targetRevision`) resolves to for `source`:
        a chart version for a Helm chart source, else a full commit SHA."""
        target = str(source.get("targetRevision") or "")
        if not source.get("chart"):
            return self.resolve(revision, target_revision=target)
        wanted = (revision or target).strip()
        if not self.exists:
            return wanted
        repo = str(source.get("repoURL") or "")
        chart = str(source["chart"])
        entries = self.charts.get(repo.rstrip("/")) or self.charts.get(repo) or {}
        if chart not in entries:
            raise UnresolvableRevision(f"chart '{chart}' not found in index of {repo}")
        try:
            return resolve_chart_version(wanted, entries[chart])
        except ChartVersionError as exc:
            raise UnresolvableRevision(str(exc)) from exc

    def resolve(self, revision: str, *, target_revision: str = "") -> str:
        """The full commit SHA of `revision` (empty: the source's `target_revision`)."""
        wanted = (revision or target_revision or DEFAULT_BRANCH).strip()
        if not self.exists:
            return wanted
        if wanted in self.refs:
            return self.refs[wanted]
        if wanted == DEFAULT_BRANCH and "main" in self.refs:
            return self.refs["main"]
        lowered = wanted.lower()
        if _FULL_SHA.match(lowered):
            return lowered
        if _SHORT_SHA.match(lowered):
            matches = {sha for sha in self.refs.values() if sha.startswith(lowered)}
            if len(matches) == 1:
                return matches.pop()
        raise UnresolvableRevision(f"unable to resolve '{wanted}' to a commit SHA")


def _charts(value: Any) -> dict[str, dict[str, tuple[str, ...]]]:
    if not isinstance(value, Mapping):
        return {}
    charts: dict[str, dict[str, tuple[str, ...]]] = {}
    for repo, entries in value.items():
        if isinstance(entries, Mapping):
            charts[str(repo).rstrip("/")] = {
                str(chart): tuple(str(v) for v in versions or ())
                for chart, versions in entries.items()
                if isinstance(versions, list | tuple)
            }
    return charts


def refs_configmap(
    refs: Mapping[str, str], charts: Mapping[str, Mapping[str, Sequence[str]]] | None = None
) -> dict[str, Any]:
    """The ConfigMap that publishes `refs` (and, when given, the chart repositories' `charts`)."""
    data = {REFS_KEY: yaml.safe_dump(dict(refs), sort_keys=True)}
    if charts is not None:
        data[CHARTS_KEY] = yaml.safe_dump(
            {
                repo: {chart: list(versions) for chart, versions in entries.items()}
                for repo, entries in charts.items()
            },
            sort_keys=True,
        )
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": GIT_CONFIGMAP}, "data": data}
