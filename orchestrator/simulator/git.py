"""The simulated Git repository: what each ref (branch, tag) resolves to, as Argo CD's repo-server
would answer.

A test or the demo publishes a release by writing the refs into the ConfigMap `simulator-git`
(data key `refs`: a YAML mapping `ref -> full commit SHA`) in the Argo CD namespace; every Application
compares against what its `targetRevision` resolves to there. Without the ConfigMap there is no
repository: revisions are taken as written and an Application is compared against the revision its
`status.sync` already names (the seeded fleet's world).

Resolution is Argo CD's: a ref resolves to its commit; a full 40-hex SHA is itself; a short SHA
resolves to the one known commit it prefixes; anything else cannot be resolved (the sync ends in
phase Error). Pure; the controller reads the ConfigMap.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

GIT_CONFIGMAP = "simulator-git"
REFS_KEY = "refs"
DEFAULT_BRANCH = "HEAD"

_FULL_SHA = re.compile(r"^[0-9a-f]{40}$")
_SHORT_SHA = re.compile(r"^[0-9a-f]{7,39}$")


class UnresolvableRevision(ValueError):
    """A revision the repository does not know; the message is the repo-server's."""


@dataclass(frozen=True)
class GitRefs:
    """The refs of the simulated repository (empty: there is no repository, revisions are taken as
    written)."""

    refs: Mapping[str, str]

    @property
    def exists(self) -> bool:
        """True when a repository was published."""
        return bool(self.refs)

    @classmethod
    def from_configmap(cls, configmap: Mapping[str, Any] | None) -> GitRefs:
        """Read the ConfigMap (None: no repository). A malformed one counts as no repository."""
        data = (configmap or {}).get("data") or {}
        try:
            refs = yaml.safe_load(data.get(REFS_KEY) or "") or {}
        except yaml.YAMLError:
            return cls({})
        if not isinstance(refs, Mapping):
            return cls({})
        return cls({str(ref): str(sha).strip().lower() for ref, sha in refs.items() if sha})

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


def refs_configmap(refs: Mapping[str, str]) -> dict[str, Any]:
    """The ConfigMap that publishes `refs`."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": GIT_CONFIGMAP},
        "data": {REFS_KEY: yaml.safe_dump(dict(refs), sort_keys=True)},
    }
