"""Reading an Application as Argo CD's controllers read it: its name, its requested operation and
operation state, its source(s), the revisions a sync result names; and the copy a decision writes
into. Pure functions of the object.

Callers: the simulated controllers' decisions (`behaviours`, `comparison`, `sync_operation`).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

# The phases of an operation that has ended (Argo CD's OperationPhase.Completed).
COMPLETED_PHASES = frozenset({"Succeeded", "Failed", "Error"})


def name(app: Mapping[str, Any]) -> str:
    """The Application's name."""
    return str((app.get("metadata") or {}).get("name", ""))


def operation_state(app: Mapping[str, Any]) -> dict[str, Any] | None:
    """`status.operationState`, or None when there is none."""
    value = (app.get("status") or {}).get("operationState")
    return value if isinstance(value, dict) and value else None


def requested_operation(app: Mapping[str, Any]) -> dict[str, Any] | None:
    """`.operation` (an operation requested and not yet finished), or None."""
    value = app.get("operation")
    return value if isinstance(value, dict) and value else None


def is_multi_source(app: Mapping[str, Any]) -> bool:
    """True when the Application has `spec.sources` (one revision per source)."""
    return bool((app.get("spec") or {}).get("sources"))


def sources(app: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Its source(s) as a list: `spec.sources`, or `[spec.source]`."""
    spec = app.get("spec") or {}
    if spec.get("sources"):
        return [dict(source) for source in spec["sources"]]
    return [dict(spec.get("source") or {})]


def result_revisions(result: Mapping[str, Any] | None) -> list[str]:
    """The revision(s) a sync result names (`revisions`, else `revision`); [] when none."""
    if not result:
        return []
    return [str(r) for r in result.get("revisions") or []] or (
        [str(result["revision"])] if result.get("revision") else []
    )


def writable_copy(app: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy to write into, with a `status`."""
    new = copy.deepcopy(dict(app))
    new.setdefault("status", {})
    return new
