"""Helm chart versions as Argo CD's repo-server resolves them: the simulated chart repositories.

A source with `chart` names a chart in a Helm chart repository (`repoURL`); its `targetRevision` is
an exact version or a semver constraint, and the revision Argo CD reports is the version itself
(`status.sync.revision: "1.2.4"`), never a commit SHA. Argo CD v3.6.1 (`versions.MaxVersion`,
reposerver/repository/repository.go): a string that parses as a version (`1.2.4`, `v1.2`) is taken
as written, without looking at the index; otherwise it must be a constraint, resolved to the
highest version in the chart's index entries that satisfies it ("invalid revision: version
matching constraint not found in N tags" when none does).

The constraint language is the part of Masterminds semver v3 that chart sources use: `||`
alternatives of comma- or space-separated terms, each `=`, `!=`, `>`, `<`, `>=`, `<=`, `~`, `^`
or none, with `x`/`X`/`*` wildcards (`1.2.*` is `>=1.2.0 <1.3.0`); a version with a pre-release
matches only a constraint that names one. Anything else cannot be resolved (the simulator says so).

Pure. Callers: `orchestrator.simulator.git` (`GitRefs.resolve_source`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

_VERSION = re.compile(
    r"^v?(?P<major>0|[1-9]\d*)(?:\.(?P<minor>0|[1-9]\d*))?(?:\.(?P<patch>0|[1-9]\d*))?"
    r"(?:-(?P<pre>[0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$"
)
_OPERATORS = ("!=", ">=", "<=", "~>", "=", ">", "<", "~", "^")
_WILD = ("x", "X", "*")


class ChartVersionError(ValueError):
    """A chart revision that cannot be resolved; the message is the repo-server's."""


def _identifiers(pre: str) -> tuple[tuple[int, int | str], ...]:
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in pre.split(".")) if pre else ()


@dataclass(frozen=True, order=True)
class Version:
    """A semantic version, ordered as semver orders them (a pre-release before its release)."""

    major: int
    minor: int
    patch: int
    release: bool  # False with a pre-release: sorts before the release of the same numbers
    pre: tuple[tuple[int, int | str], ...] = ()

    @classmethod
    def parse(cls, text: str) -> Version | None:
        """The version `text` names (`1.2.4`, `v1.2`, `1.2.4-rc.1`), or None when it is none."""
        found = _VERSION.match(text.strip())
        if found is None:
            return None
        pre = found["pre"] or ""
        return cls(
            int(found["major"]),
            int(found["minor"] or 0),
            int(found["patch"] or 0),
            not pre,
            _identifiers(pre),
        )


def is_version(text: str) -> bool:
    """True when `text` is a version (taken as written), not a constraint."""
    return Version.parse(text) is not None


def _invalid(constraint: str) -> ChartVersionError:
    return ChartVersionError(f"invalid revision: failed to determine semver constraint: {constraint}")


def _bounds(op: str, text: str, constraint: str) -> list[tuple[str, Version]]:
    """One term as comparisons that must all hold: partial and wildcard versions, `~` and `^`
    expanded to the range they name (`1.2.*` and `~1.2`: >=1.2.0 <1.3.0; `^1.2.3`: >=1.2.3 <2.0.0)."""
    core, _, pre = text.split("+", maxsplit=1)[0].partition("-")
    parts = core.split(".")
    given: list[int] = []
    for part in parts:
        if part in _WILD:
            break
        if not part.isdigit():
            raise _invalid(constraint)
        given.append(int(part))
    if len(parts) > 3 or any(part not in _WILD for part in parts[len(given) :]):
        raise _invalid(constraint)
    if not given:  # `*`: any version
        return []
    numbers = [*given, 0, 0][:3]
    low = Version(numbers[0], numbers[1], numbers[2], not pre, _identifiers(pre))

    def above(position: int) -> Version:
        bumped = [*numbers[:position], numbers[position] + 1, 0, 0][:3]
        return Version(bumped[0], bumped[1], bumped[2], True)

    partial = len(given) < 3
    if op in ("", "="):
        return [(">=", low), ("<", above(len(given) - 1))] if partial else [("=", low)]
    if op in ("~", "~>"):
        return [(">=", low), ("<", above(0 if len(given) == 1 else 1))]
    if op == "^":
        first_non_zero = next((i for i, n in enumerate(given) if n != 0), len(given) - 1)
        return [(">=", low), ("<", above(first_non_zero))]
    if op == "!=" and partial:
        raise ChartVersionError(f"the simulator does not resolve the constraint {constraint!r}")
    if partial and op in (">", "<="):  # `>1.2`: above every 1.2.x; `<=1.2`: up to the last 1.2.x
        return [(">=" if op == ">" else "<", above(len(given) - 1))]
    return [(op, low)]


def _holds(op: str, candidate: Version, bound: Version) -> bool:
    return {
        "=": candidate == bound,
        "!=": candidate != bound,
        ">": candidate > bound,
        "<": candidate < bound,
        ">=": candidate >= bound,
        "<=": candidate <= bound,
    }[op]


def _terms(alternative: str, constraint: str) -> list[tuple[str, str]]:
    """(operator, version) terms of one `||` alternative (comma or space separated; an operator may
    stand apart from its version)."""
    tokens = [t for t in re.split(r"[\s,]+", alternative.strip()) if t]
    terms: list[tuple[str, str]] = []
    pending = ""
    for token in tokens:
        if token in _OPERATORS:
            if pending:
                raise _invalid(constraint)
            pending = token
            continue
        op = next((o for o in _OPERATORS if token.startswith(o)), "")
        if op and pending:
            raise _invalid(constraint)
        terms.append((pending or op, token[len(op) :].removeprefix("v")))
        pending = ""
    if pending or not terms:
        raise _invalid(constraint)
    return terms


def satisfies(constraint: str, version: Version) -> bool:
    """True when `version` meets `constraint` (ChartVersionError when it is not one)."""
    for alternative in constraint.split("||"):
        terms = _terms(alternative, constraint)
        checks = [check for op, text in terms for check in _bounds(op, text, constraint)]
        # A pre-release only matches a constraint that names a pre-release itself.
        if not version.release and not any("-" in text for _, text in terms):
            continue
        if all(_holds(op, version, bound) for op, bound in checks):
            return True
    return False


def resolve_chart_version(revision: str, available: Sequence[str]) -> str:
    """The version Argo CD's repo-server resolves `revision` to among a chart's `available` ones."""
    wanted = revision.strip()
    if is_version(wanted):
        return wanted
    best: tuple[Version, str] | None = None
    for text in available:
        version = Version.parse(text)
        if version is not None and satisfies(wanted, version) and (best is None or version > best[0]):
            best = (version, text)
    if best is None:
        raise ChartVersionError(
            f"invalid revision: version matching constraint not found in {len(available)} tags"
        )
    return best[1]
