"""`WorkflowView`: what the watcher reads of a rollout Workflow, small enough to cache.

A Workflow object carries the whole template tree and a node map that grows with the fleet; the
watcher needs a dozen fields of it: who it belongs to, which rollout it runs (labels and our
annotations), whether it is suspended or being stopped, its phase, and which stage is running or
waiting. `workflow_view_from_object` reads those, from `status.nodes` or, when Argo compressed
them, from `status.compressedNodes` (base64 of gzip of the same JSON map), and keeps nothing else.

Pure; callers: the watcher's Workflow informer, `orchestrator.watcher.decide`, tests.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import json
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from orchestrator.api.metadata import (
    ATTEMPT_ANNOTATION,
    GENERATION_ANNOTATION,
    NAME_ANNOTATION,
    NAME_LABEL,
    RELEASE_ANNOTATION,
    RETRY_TOKEN_ANNOTATION,
    REVISION_ANNOTATION,
    ROLLOUT_ID_LABEL,
    SPEC_HASH_ANNOTATION,
    SUSPENDED_BY_ANNOTATION,
    SUSPENDED_BY_WATCHER,
)
from orchestrator.api.release import attempt_of, release_of
from workflow_templates import names

FINISHED_PHASES = frozenset({"Succeeded", "Failed", "Error"})


@dataclass(frozen=True, slots=True)
class WorkflowView:
    """One Workflow of a ProgressiveSync, as the reconcile decision reads it."""

    name: str
    namespace: str
    uid: str = ""
    ps_label: str = ""
    ps_name: str = ""  # the full ProgressiveSync name (the label is cut past 63 characters)
    rollout_id: str = ""
    release_id: str = ""
    attempt: int = 1
    generation: int | None = None
    spec_hash: str = ""
    retry_token: str = ""
    revision: str = ""
    phase: str = ""  # "", Pending, Running, Succeeded, Failed, Error
    message: str = ""
    suspended: bool = False
    suspended_by_us: bool = False
    shutdown: str = ""  # "", Stop, Terminate
    started_at: str = ""
    finished_at: str = ""
    created: str = ""  # metadata.creationTimestamp: which of two rollouts is the newer (api.succession)
    deleting: bool = False
    current_stage: str = ""  # the stage whose node runs now (latest started)
    waiting: str = ""  # "approval" or "bake" when the current stage waits on a suspend node

    @property
    def is_finished(self) -> bool:
        """True once Argo (or the local executor) gave the Workflow an end phase."""
        return self.phase in FINISHED_PHASES

    @property
    def is_live(self) -> bool:
        """True while it may still run steps."""
        return not self.is_finished


def workflow_view_from_object(obj: Mapping[str, Any]) -> WorkflowView:
    """Read a Workflow object into a `WorkflowView` (missing fields read as empty)."""
    metadata = _mapping(obj.get("metadata"))
    labels = _mapping(metadata.get("labels"))
    annotations = _mapping(metadata.get("annotations"))
    spec = _mapping(obj.get("spec"))
    status = _mapping(obj.get("status"))
    rollout_id = str(labels.get(ROLLOUT_ID_LABEL, ""))
    current_stage, waiting = _running_stage(workflow_nodes(status))
    return WorkflowView(
        name=str(metadata.get("name", "")),
        namespace=str(metadata.get("namespace", "")),
        uid=str(metadata.get("uid", "")),
        ps_label=str(labels.get(NAME_LABEL, "")),
        ps_name=str(annotations.get(NAME_ANNOTATION) or labels.get(NAME_LABEL, "")),
        rollout_id=rollout_id,
        release_id=str(annotations.get(RELEASE_ANNOTATION) or release_of(rollout_id)),
        attempt=_int(annotations.get(ATTEMPT_ANNOTATION), attempt_of(rollout_id)),
        generation=_int(annotations.get(GENERATION_ANNOTATION), None),
        spec_hash=str(annotations.get(SPEC_HASH_ANNOTATION, "")),
        retry_token=str(annotations.get(RETRY_TOKEN_ANNOTATION, "")),
        revision=str(annotations.get(REVISION_ANNOTATION, "")),
        phase=str(status.get("phase") or ""),
        message=str(status.get("message") or "")[:1024],
        suspended=spec.get("suspend") is True,
        suspended_by_us=annotations.get(SUSPENDED_BY_ANNOTATION) == SUSPENDED_BY_WATCHER,
        shutdown=str(spec.get("shutdown") or ""),
        started_at=str(status.get("startedAt") or ""),
        finished_at=str(status.get("finishedAt") or ""),
        created=str(metadata.get("creationTimestamp") or ""),
        deleting=bool(metadata.get("deletionTimestamp")),
        current_stage=current_stage,
        waiting=waiting,
    )


# --- nodes ------------------------------------------------------------------------------------


def decode_compressed_nodes(compressed: str) -> dict[str, Any]:
    """`status.compressedNodes` (base64 of gzip of the JSON node map) as a node map.

    The one decoder of that form; raises ValueError when the text is not one.
    """
    try:
        decoded = json.loads(gzip.decompress(base64.b64decode(compressed)))
    except (binascii.Error, OSError, EOFError, zlib.error, ValueError) as exc:
        raise ValueError(f"status.compressedNodes that do not decode ({exc})") from exc
    if not isinstance(decoded, dict):
        raise ValueError("status.compressedNodes that are not a node map")
    return decoded


def workflow_nodes(status: Mapping[str, Any]) -> Mapping[str, Any]:
    """A Workflow status's node map, from `nodes` or from gzip+base64 `compressedNodes` ({} if neither)."""
    nodes = status.get("nodes")
    if isinstance(nodes, Mapping) and nodes:
        return nodes
    compressed = status.get("compressedNodes")
    if isinstance(compressed, str) and compressed:
        try:
            return decode_compressed_nodes(compressed)
        except ValueError:
            return {}
    return {}


def _running_stage(nodes: Mapping[str, Any]) -> tuple[str, str]:
    """(stage name, what it waits on) of the latest-started running stage node; ("", "") if none."""
    stages: dict[str, tuple[str, str]] = {}  # node id -> (startedAt, stage name)
    for node_id, node in nodes.items():
        if not isinstance(node, Mapping):
            continue
        template = str(node.get("templateName") or "")
        if template.startswith(names.STAGE_TEMPLATE_PREFIX) and node.get("phase") == "Running":
            stages[str(node_id)] = (str(node.get("startedAt") or ""), _stage_name(node))
    if not stages:
        return "", ""
    stage_id, (_, stage_name) = max(stages.items(), key=lambda item: item[1][0])
    waiting = ""
    handing_over = (names.RECORD_AND_SELECT_TEMPLATE, names.RECORD_AND_SELECT_FOR_BATCHES_TEMPLATE)
    for node in nodes.values():
        # The step that closes this stage selects the next one (steps/hand_over.py), which then
        # is the ProgressiveSync's current stage: say so, rather than name the stage being closed
        # until the next stage's node starts (a status write per boundary that undid select's).
        if (
            isinstance(node, Mapping)
            and node.get("phase") == "Running"
            and str(node.get("boundaryID") or "") == stage_id
            and node.get("templateName") in handing_over
        ):
            following = _input(node, "next-stage")
            if following:
                return following, ""
    for node in nodes.values():
        if not isinstance(node, Mapping) or node.get("phase") != "Running" or node.get("type") != "Suspend":
            continue
        if str(node.get("boundaryID") or "") != stage_id:
            continue
        template = str(node.get("templateName") or "")
        if template == names.APPROVAL_TEMPLATE:
            waiting = "approval"
        elif template.startswith(names.BAKE_TEMPLATE_PREFIX):
            waiting = "bake"
    return stage_name, waiting


def _input(node: Mapping[str, Any], name: str) -> str:
    for parameter in _mapping(node.get("inputs")).get("parameters") or []:
        if isinstance(parameter, Mapping) and parameter.get("name") == name and parameter.get("value"):
            return str(parameter["value"])
    return ""


def _stage_name(node: Mapping[str, Any]) -> str:
    return _input(node, "stage") or str(node.get("displayName") or node.get("name") or "")


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _int(value: Any, default: Any) -> Any:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return default
