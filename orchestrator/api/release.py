"""A release as data: what one rollout rolls out, resolved once from release detection to the steps.

A release of a ProgressiveSync is its spec generation plus the revisions its out-of-date
Applications are to reach. `Release` carries it as values, never as a joined string:

- `revisions` is a tuple of revision tuples, one tuple per distinct set an Application is to reach,
  one entry per source (`("4f1c...",)` for a single-source Application, `("a1...", "b2...")` for a
  two-source one); usually just one tuple, several when Applications are at different commits;
- `id` is `release_id(generation, revisions)`; an attempt `n > 1` (a retry, or a follow-up for
  Applications Argo CD compared late) runs as rollout `<id>-<n>` in its own Workflow.

The watcher builds it from the plan (`orchestrator.watcher.decide_release`), the Workflow builder
writes its identity into the Workflow's annotations and its revisions into the rollout contract
(`orchestrator.planning.contract`: the Workflow's one `contract` argument, whose `release` is checked
once, by `revisions_from_data`), and the steps read them from there. Which of the release's
revisions one Application syncs to is decided per Application from what Argo CD reports about it
(`orchestrator.argocd.appsync.release_pin`).

Pure values; callers: the watcher, the planner, the Workflow builder and view, the steps, render.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from orchestrator.api.models import ProgressiveSyncSpec

RELEASE_ID_LENGTH = 10

Revisions = tuple[str, ...]
"""The revisions one Application is to reach, one per source, in `spec.sources` order."""


class RevisionsError(ValueError):
    """A revisions document that is not a non-empty JSON list of non-empty lists of non-empty strings."""


def revision_key(revisions: Iterable[str]) -> str:
    """One string for a revision tuple, for hashing and for people: the sources' revisions joined by ','.

    Never parsed back: the tuple travels as data (`revisions_to_json`).
    """
    return ",".join(revisions)


def release_id(generation: int, revisions: Iterable[Sequence[str]]) -> str:
    """A short stable id of a release: the first 10 hex digits of sha256(generation, sorted revisions).

    The same spec generation rolling out the same revisions always gets the same id, whatever the
    order the revisions come in, so the Workflow name `<ps-name>-<id>` is deterministic.
    """
    keys = sorted({revision_key(r) for r in revisions})
    text = "\n".join([str(generation), *keys])
    return hashlib.sha256(text.encode()).hexdigest()[:RELEASE_ID_LENGTH]


def spec_hash(spec: ProgressiveSyncSpec) -> str:
    """A stable hash of the spec without `paused`: what makes a spec change a new release."""
    body = spec.to_api()
    body.pop("paused", None)
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]


def rollout_id_for(release: str, attempt: int) -> str:
    """The rollout id of an attempt: the release id, then `-2`, `-3`, ... for later attempts.

    Each attempt is its own rollout to the steps (a cluster is synced at most once per rollout) and
    gets its own Workflow, `<ps>-<rollout id>`.
    """
    return release if attempt <= 1 else f"{release}-{attempt}"


def release_of(rollout_id: str) -> str:
    """The release id of a rollout id (release ids are hex, so the first '-' starts the attempt)."""
    return rollout_id.split("-", 1)[0]


def attempt_of(rollout_id: str) -> int:
    """The attempt number a rollout id carries (1 without a suffix)."""
    _, _, suffix = rollout_id.partition("-")
    return int(suffix) if suffix.isdigit() else 1


def normalize_revisions(revisions: Iterable[Sequence[str]]) -> tuple[Revisions, ...]:
    """Distinct revision tuples, sorted: the canonical form a `Release` holds."""
    return tuple(sorted({tuple(r) for r in revisions}))


def revisions_to_json(revisions: Iterable[Sequence[str]]) -> str:
    """The command-line form: a JSON list of lists (`[["4f1c..."], ["a1...", "b2..."]]`)."""
    return json.dumps([list(r) for r in normalize_revisions(revisions)], separators=(",", ":"))


def revisions_from_json(text: str) -> tuple[Revisions, ...]:
    """Read `revisions_to_json`'s form back; RevisionsError says what is wrong with it."""
    try:
        data = json.loads(text)
    except (TypeError, json.JSONDecodeError) as exc:
        raise RevisionsError(
            f'not JSON ({exc}); expected a list of revision lists, e.g. [["4f1c2e9..."]]'
        ) from exc
    return revisions_from_data(data)


def revisions_from_data(data: object) -> tuple[Revisions, ...]:
    """The release's revisions from their data form (a list of lists of strings), checked: the one
    check of a release's revisions (the rollout contract's `release` runs it); RevisionsError says
    what is wrong. A sync is never sent without a pinned revision: an empty one rolls out whatever
    targetRevision resolves to now."""
    if not isinstance(data, list | tuple) or not data:
        raise RevisionsError(
            'expected a non-empty list of revision lists, e.g. [["4f1c2e9..."]] '
            "(an empty revision would roll out whatever targetRevision resolves to now)"
        )
    for entry in data:
        if (
            not isinstance(entry, list | tuple)
            or not entry
            or not all(isinstance(r, str) and r.strip() == r and r for r in entry)
        ):
            raise RevisionsError(
                f"{json.dumps(list(entry) if isinstance(entry, tuple) else entry)} is not a list of "
                "non-empty revisions (one per source, no blanks)"
            )
    return normalize_revisions(data)


@dataclass(frozen=True)
class Release:
    """One release and the attempt at it that a rollout runs (see the module docstring)."""

    id: str
    generation: int
    spec_hash: str
    revisions: tuple[Revisions, ...]
    attempt: int = 1
    retry_token: str = ""

    @classmethod
    def of(
        cls,
        *,
        generation: int,
        spec_hash: str,
        revisions: Iterable[Sequence[str]],
        attempt: int = 1,
        retry_token: str = "",
    ) -> Release:
        """The release of `revisions` at spec `generation` (its id computed), at `attempt`."""
        normalized = normalize_revisions(revisions)
        return cls(
            id=release_id(generation, normalized),
            generation=generation,
            spec_hash=spec_hash,
            revisions=normalized,
            attempt=attempt,
            retry_token=retry_token,
        )

    @property
    def rollout_id(self) -> str:
        """The rollout this attempt runs as."""
        return rollout_id_for(self.id, self.attempt)

    @property
    def display(self) -> str:
        """The revisions for people (`status.rollout.revision`, the Workflow's description); never parsed."""
        return " ".join(revision_key(r) for r in self.revisions)
