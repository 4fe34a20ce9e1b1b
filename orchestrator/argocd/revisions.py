"""What "the same revision" means, by source type: the one rule for release identity.

Argo CD reports what an Application runs or is compared against as a revision per source
(`status.sync.revision(s)`, `status.operationState.syncResult.revision(s)`), and what that string is
depends on the source (REFERENCE.md, "Revisions Argo CD reports, by source type"):

- **Git** (`repoURL` + `path`, no `chart`): the resolved full commit SHA, whatever `targetRevision`
  says (a branch, a tag, a short SHA).
- **Helm repository** (`chart` + `targetRevision`): the chart version itself (`1.2.4`); a constraint
  such as `1.2.*` or `>=1.2.0` resolves to one version. Two versions are two revisions.
- **OCI** (`repoURL: oci://...` without `chart`): the resolved digest (`sha256:...`); a tag resolves
  to a digest.

A revision we hold (a release revision, a pin) is either **concrete** (a commit SHA or a prefix of
one of at least 7 hex digits; a digest; an exact chart version) or **symbolic** (a branch or tag, an
OCI tag, a chart version constraint). A concrete one is compared with what Argo CD reports by
identity: equal strings, or for Git a short SHA that the full SHA starts with. A symbolic one is
never compared as a string: only Argo CD can say what it resolved to, and it does so on the
Application itself, in two places this module reads (`resolutions`):

- `status.sync.comparedTo.source(s)[i].targetRevision` -> `status.sync.revision(s)[i]`: what the
  last comparison resolved the Application's own `targetRevision` to;
- `status.operationState.operation.sync.revision(s)[i]` -> `status.operationState.syncResult
  .revision(s)[i]`: what the last operation resolved the revision it was asked for to.

Never "both non-empty": `1.2.4` is not `1.2.3`, `sha256:aaa` is not `sha256:bbb`, `v2` is not `v1`.

Pure; callers: `orchestrator.argocd.appsync` (adopting, pinning, judging our operation's result)
and the tests in `tests/unit/test_revisions.py`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Any

SHORT_SHA_MIN = 7
"""The shortest hex string taken as a commit SHA prefix (git's own default abbreviation)."""

_HEX = re.compile(r"[0-9a-fA-F]+")
# `algorithm:hex` as OCI content digests are written (`sha256:` + 64 hex digits, `sha512:` + 128).
_DIGEST = re.compile(r"[a-z0-9]+(?:[+._-][a-z0-9]+)*:[0-9a-fA-F]{32,}")
# Anything of Helm's (Masterminds semver) constraint syntax makes a chart version a range, not one version.
_HELM_CONSTRAINT = re.compile(r"[\^~<>=!*|, ]|(?:^|\.)[xX](?:$|\.)")


class SourceKind(StrEnum):
    """Which kind of source a revision belongs to (how Argo CD reports it)."""

    GIT = "git"
    HELM = "helm"
    OCI = "oci"


def source_kind(source: Mapping[str, Any]) -> SourceKind:
    """The kind of one `spec.source` / `spec.sources[i]` entry.

    A `chart` makes it a Helm chart (from a Helm repository, or a Helm OCI registry: either way the
    chart version is the revision); an `oci://` repoURL without a chart is an OCI artifact (a digest);
    anything else is Git.
    """
    if source.get("chart"):
        return SourceKind.HELM
    if str(source.get("repoURL") or "").startswith("oci://"):
        return SourceKind.OCI
    return SourceKind.GIT


def _sources(app: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    spec = app.get("spec") or {}
    sources = spec.get("sources")
    if isinstance(sources, list) and sources:
        return [s if isinstance(s, Mapping) else {} for s in sources]
    source = spec.get("source")
    return [source if isinstance(source, Mapping) else {}]


def source_kinds(app: Mapping[str, Any]) -> tuple[SourceKind, ...]:
    """The kind of each of the Application's sources, in source order (one for a single source)."""
    return tuple(source_kind(source) for source in _sources(app))


def is_concrete(revision: str, kind: SourceKind) -> bool:
    """True when `revision` names one revision by itself (see the module): a SHA (or a prefix of 7+ hex
    digits) for Git, a digest for OCI, an exact version for a Helm chart."""
    if not revision:
        return False
    if kind is SourceKind.GIT:
        return len(revision) >= SHORT_SHA_MIN and _HEX.fullmatch(revision) is not None
    if kind is SourceKind.OCI:
        return _DIGEST.fullmatch(revision) is not None
    return _HELM_CONSTRAINT.search(revision) is None


Resolutions = tuple[Mapping[str, str], ...]
"""Per source, in source order: a revision as written -> what Argo CD resolved it to."""


def _listed(holder: Mapping[str, Any], multi: bool, key: str) -> list[str]:
    if multi:
        values = holder.get(key + "s")
        return [str(v or "") for v in values] if isinstance(values, list) else []
    value = holder.get(key)
    return [str(value)] if value else []


def resolutions(app: Mapping[str, Any]) -> Resolutions:
    """What Argo CD recorded on the Application about resolving symbolic revisions (see the module)."""
    spec = app.get("spec") or {}
    multi = bool(spec.get("sources"))
    count = len(spec.get("sources") or []) if multi else 1
    found: list[dict[str, str]] = [{} for _ in range(count)]
    status = app.get("status") or {}

    sync = status.get("sync") or {}
    compared_to = sync.get("comparedTo") or {}
    compared_sources = (
        compared_to.get("sources")
        if multi
        else [compared_to.get("source")]
        if compared_to.get("source")
        else []
    )
    _add(
        found,
        [str((s or {}).get("targetRevision") or "") for s in compared_sources or []],
        _listed(sync, multi, "revision"),
    )

    state = status.get("operationState") or {}
    requested = ((state.get("operation") or {}).get("sync")) or {}
    result = state.get("syncResult") or {}
    _add(found, _listed(requested, multi, "revision"), _listed(result, multi, "revision"))
    return tuple(found)


def _add(found: list[dict[str, str]], written: Sequence[str], resolved: Sequence[str]) -> None:
    if len(written) != len(found) or len(resolved) != len(found):
        return  # counts that do not agree with the sources say nothing reliable
    for index, (pin, full) in enumerate(zip(written, resolved, strict=True)):
        if pin and full:
            found[index].setdefault(pin, full)


def same_revision(
    pin: str, reported: str, kind: SourceKind, resolved: Mapping[str, str] | None = None
) -> bool:
    """True when `reported` (what Argo CD says a source runs or is compared against) is the revision `pin`
    names; `resolved` is Argo CD's own record for that source (`resolutions`). See the module."""
    if not pin or not reported:
        return False
    if pin == reported:
        return True
    if is_concrete(pin, kind):
        # A short SHA names the commit its full SHA starts with; other concrete revisions only themselves.
        return (
            kind is SourceKind.GIT
            and _HEX.fullmatch(reported) is not None
            and reported.lower().startswith(pin.lower())
        )
    return (resolved or {}).get(pin) == reported


def same_revisions(
    pins: Sequence[str],
    reported: Sequence[str],
    kinds: Sequence[SourceKind],
    resolved: Resolutions = (),
) -> bool:
    """`same_revision` for every source, in source order; the counts must agree.

    A source whose kind is not known (fewer kinds than pins) is taken as Git; one without Argo CD's
    record resolves nothing symbolic.
    """
    if len(pins) != len(reported) or not pins:
        return False
    for index, (pin, full) in enumerate(zip(pins, reported, strict=True)):
        kind = kinds[index] if index < len(kinds) else SourceKind.GIT
        record = resolved[index] if index < len(resolved) else None
        if not same_revision(pin, full, kind, record):
            return False
    return True
