"""What progressive-sync writes into objects' metadata, in one place: the Workflow name, our labels
and annotations, the finalizer, and the patch bodies the operator commands send to a ProgressiveSync.

These names are a contract with whoever reads them (a restarted watcher rebuilding a rollout from its
Workflow, `kubectl get -l`, dashboards, the steps recognising their own sync by its `info`), so
none of them changes lightly. Argo's and Argo CD's own names stay next to their views: Argo
Workflows' annotations and template names in `workflow_templates.names`, the Workflow patch bodies
(stop, suspend, resume) in `orchestrator.workflows.control`, Argo CD's cluster Secret label in
`orchestrator.kube.client` (the adapter filters by it), its refresh annotation in
`orchestrator.argocd.appsync`.

Pure values and functions. Callers: the Workflow builder, the Workflow view, the watcher, the
operator commands, the Argo CD views, the local executor.
"""

from __future__ import annotations

import hashlib
from typing import Any

from orchestrator.api.models import RolloutStatus
from orchestrator.api.release import Release

# --- on rollout Workflows ---------------------------------------------------------------------

# Which ProgressiveSync a Workflow belongs to (`label_value` of its name) and which rollout it runs.
NAME_LABEL = "progressivesync.io/name"
ROLLOUT_ID_LABEL = "progressivesync.io/rollout-id"
# The full ProgressiveSync name when it is too long for the label value (see `label_value`).
NAME_ANNOTATION = "progressivesync.io/name"
# The rollout's identity, so a restarted watcher can rebuild `status.rollout` from the Workflow
# alone (a crash between create and the status write).
RELEASE_ANNOTATION = "progressivesync.io/release-id"
ATTEMPT_ANNOTATION = "progressivesync.io/attempt"
GENERATION_ANNOTATION = "progressivesync.io/generation"
SPEC_HASH_ANNOTATION = "progressivesync.io/spec-hash"
RETRY_TOKEN_ANNOTATION = "progressivesync.io/retry-token"
REVISION_ANNOTATION = "progressivesync.io/revision"
# Set together with `spec.suspend` when the watcher suspends for `spec.paused`, in the same patch:
# the watcher lifts only a suspend it made (an `argo suspend` by a person is theirs to lift).
SUSPENDED_BY_ANNOTATION = "progressivesync.io/suspended-by"
SUSPENDED_BY_WATCHER = "progressive-sync"
# Set by the watcher in the same patch as `spec.shutdown: Stop` when it stops a rollout itself (a new
# release or spec supersedes it, the ProgressiveSync is being deleted, a stale Workflow): its value
# says why. A stop without it is a person's cancel (`argo stop`, `progressive-sync cancel`), the
# only stop `spec.rollback.on: [Cancelled]` rolls back for (steps.rollback_plan).
STOPPED_BY_WATCHER_ANNOTATION = "progressivesync.io/stopped-by-watcher"

# --- on ProgressiveSyncs ----------------------------------------------------------------------

# Held while the ProgressiveSync has a live Workflow, so deleting it stops the rollout first.
FINALIZER = "progressivesync.io/workflow"
# A fresh value asks the watcher for another attempt of a failed or cancelled release.
RETRY_ANNOTATION = "progressivesync.io/retry"

# --- on Applications: nothing in their metadata -----------------------------------------------

# The ApplicationSet controller rewrites the annotations and labels of the Applications it
# generates, so our sync request is known by its `operation.info` entries instead (Argo CD keeps
# them in `status.operationState.operation`): which rollout and stage asked, and when.
INFO_ROLLOUT_ID = "rollout-id"
INFO_STAGE = "stage"
INFO_REQUESTED_AT = "requested-at"
# What the Application ran before our forward sync (a JSON list, one revision per source: the last
# `status.history` entry when we wrote the sync); a rollback restores it (orchestrator.argocd.rollback).
INFO_PREVIOUS_REVISIONS = "previous-revisions"
# "true" on a rollback sync of this rollout: the one sync we write after a forward one.
INFO_ROLLBACK = "rollback"

# --- on Applications -------------------------------------------------------------------------

# Set by a person on one Application (value: why, or "true"): its cluster is left out of every
# rollout while it is there (orchestrator.planning.skip, docs/skip.md). The ApplicationSet controller
# keeps it only when the ApplicationSet lists it in `spec.preservedFields.annotations`.
SKIP_ANNOTATION = "progressivesync.io/skip"

# --- on ApplicationSets ----------------------------------------------------------------------

# Set by whoever owns an ApplicationSet: the namespaces (comma-separated, "*" for any) whose
# ProgressiveSyncs may roll it out besides its own namespace's (docs/security.md, tenancy). The
# ApplicationSet controller does not touch its own ApplicationSet's annotations.
ALLOWED_NAMESPACES_ANNOTATION = "progressivesync.io/allowed-namespaces"
ANY_NAMESPACE = "*"


def parse_allowed_namespaces(value: str | None) -> tuple[str, ...]:
    """The namespaces an `ALLOWED_NAMESPACES_ANNOTATION` value names, in order, without blanks."""
    return tuple(part.strip() for part in (value or "").replace(" ", ",").split(",") if part.strip())


# --- names ------------------------------------------------------------------------------------

MAX_OBJECT_NAME = 63  # Argo copies the Workflow name into label values: 63 is the real limit
_HASH_LENGTH = 6


def bounded_name(base: str, tail: str, limit: int, *, hash_length: int = _HASH_LENGTH) -> str:
    """`<base><tail>`, or, when that is longer than `limit`, `<cut base>-<hash of base><tail>`.

    The one rule for every name derived from a ProgressiveSync's name (a Workflow, a label value, a
    stage record, an Event): the tail that tells them apart is kept whole; the hash of the whole
    base keeps two long names that share a beginning apart; and the cut drops the '-' and '.' it
    leaves at its end, which a DNS label cannot end with. The same inputs give the same name.
    """
    name = base + tail
    if len(name) <= limit:
        return name
    keep = limit - len(tail) - hash_length - 1
    if keep < 1:
        raise ValueError(f"{tail!r} leaves no room for a name within {limit} characters")
    digest = hashlib.sha256(base.encode()).hexdigest()[:hash_length]
    return f"{base[:keep].rstrip('-.')}-{digest}{tail}"


def workflow_name(ps_name: str, rollout_id: str) -> str:
    """`<ps>-<rollout-id>`, capped at 63 characters, the same every time for the same inputs.

    Argo copies the Workflow name into label values (`workflows.argoproj.io/workflow` on pods), so
    63 is the real limit. A longer ProgressiveSync name is cut and followed by a short hash of the
    whole name, so two long names that share a prefix still get different Workflows.
    """
    try:
        return bounded_name(ps_name, f"-{rollout_id}", MAX_OBJECT_NAME)
    except ValueError:
        raise ValueError(f"rollout id {rollout_id!r} is too long for a Workflow name") from None


def rollout_workflow_name(ps_name: str, rollout: RolloutStatus) -> str:
    """The Workflow of a recorded rollout: the name the status recorded, else `workflow_name`."""
    return rollout.workflow or workflow_name(ps_name, rollout.id)


def label_value(ps_name: str) -> str:
    """The `progressivesync.io/name` label value: the name, or a cut name plus hash past 63 chars."""
    return bounded_name(ps_name, "", MAX_OBJECT_NAME)


def rollout_annotations(release: Release) -> dict[str, str]:
    """The identity annotations of a rollout Workflow (the builder writes them; `WorkflowView` reads them).

    `progressivesync.io/revision` holds `Release.display`, for people and for `status.rollout.revision`
    of a rollout rebuilt from the Workflow; it is never parsed back into revisions.
    """
    annotations = {
        RELEASE_ANNOTATION: release.id,
        ATTEMPT_ANNOTATION: str(release.attempt),
        GENERATION_ANNOTATION: str(release.generation),
        SPEC_HASH_ANNOTATION: release.spec_hash,
        REVISION_ANNOTATION: release.display,
    }
    if release.retry_token:
        annotations[RETRY_TOKEN_ANNOTATION] = release.retry_token
    return annotations


# --- patch bodies on a ProgressiveSync --------------------------------------------------------


def paused_patch(paused: bool) -> dict[str, Any]:
    """The merge patch of `spec.paused` (progressive-sync pause / unpause)."""
    return {"spec": {"paused": paused}}


def retry_patch(token: str) -> dict[str, Any]:
    """The merge patch setting the retry annotation to `token` (progressive-sync retry)."""
    return {"metadata": {"annotations": {RETRY_ANNOTATION: token}}}
