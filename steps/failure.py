"""A step that cannot do its job leaves its own words in the ProgressiveSync's status.

A step that exits 2 (bad usage or configuration, an RBAC refusal, an object the API server rejects),
75 (a temporary error the Workflow retries) or crashes has no cluster outcome to record, so without
this the rollout would only say "Workflow ... ended Failed" and the stage would show Failed with no
failed cluster. Before exiting, the entrypoint (`steps.cli`) writes what went wrong:

- a step of one cluster (`sync`, `wait-healthy`, `cluster`) that ends for good (exit 2, a crash):
  the cluster is recorded Failed with the step's message in its stage's records (a merge patch of
  its ProgressiveSyncStage: a cluster's step never writes the ProgressiveSync);
- any other case (`select`, `record`, or a temporary error the Workflow may still retry): the
  stage's `message` says it (`rollout_status.note_step_error`), and `finalize` keeps it.

Best effort: the write is one bounded status update or record patch; when it fails too (the API
server is down, RBAC refuses it) the step's own exit code and stderr are all there is, and that is
logged. Nothing is written for a rollout other than the one the status describes.

Caller: `steps.cli`.
"""

from __future__ import annotations

import logging
from datetime import datetime

from orchestrator.api.models import ProgressiveSyncStatus
from orchestrator.api.rollout_status import find_stage, note_step_error
from orchestrator.kube.client import Kube, KubeError
from orchestrator.kube.status_writer import StatusWriterSettings, update_status
from steps import status_sink as sinks
from steps.common import RolloutRef, Superseded, UsageProblem, check_rollout, load_progressive_sync
from steps.status_sink import DirectSink, read_stage_records

log = logging.getLogger(__name__)


def record_step_failure(
    kube: Kube,
    rollout: RolloutRef,
    *,
    step: str,
    stage: str,
    cluster: str,
    message: str,
    final: bool,
    settings: StatusWriterSettings | None = None,
    now: datetime | None = None,
) -> bool:
    """Write the step's failure into the stage (see module); True when it was written or was there.
    `now`: the cluster's finish time (unset when not given)."""
    text = f"{step} step: {message}"
    if cluster and final:
        return _record_cluster_failed(
            kube,
            rollout,
            step=step,
            stage=stage,
            cluster=cluster,
            reason=f"cluster {cluster}: {text}",
            now=now,
        )

    def mutation(status: ProgressiveSyncStatus) -> ProgressiveSyncStatus:
        if status.rollout is None or status.rollout.id != rollout.rollout_id:
            return status  # another rollout's status (or none yet): not ours to write
        entry = find_stage(status, stage)
        if entry is None:
            return status
        detail = f"cluster {cluster}: {text}" if cluster else text
        return note_step_error(status, stage=stage, message=detail, final=final)

    try:
        update_status(
            kube,
            rollout.namespace,
            rollout.name,
            mutation,
            what=f"{step} failure in stage {stage}",
            settings=settings,
        )
    except KubeError as exc:
        log.error("could not record the failure of %s in the status: %s", step, exc)
        return False
    return True


def _record_cluster_failed(
    kube: Kube, rollout: RolloutRef, *, step: str, stage: str, cluster: str, reason: str, now: datetime | None
) -> bool:
    """The cluster recorded Failed in its stage's records (nothing for another rollout's stage)."""
    try:
        ps = load_progressive_sync(kube, rollout)
        check_rollout(ps, rollout.rollout_id)
        DirectSink(kube, read_stage_records(kube, rollout, ps, stage)).record(
            cluster, sinks.failed(now, reason), what=f"{step} failure of cluster {cluster}"
        )
    except (KubeError, UsageProblem) as exc:
        log.error("could not record the failure of %s in the stage's records: %s", step, exc)
        return False
    except Superseded as exc:  # another rollout's stage is not ours to write
        log.error("not recording the failure of %s: %s", step, exc)
        return False
    return True
