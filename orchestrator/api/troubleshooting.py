"""docs/troubleshooting.md: every reason and state a person reads, with what it means and what to do.

Generated, never written by hand: the reasons (conditions, Events, cluster notices, plan issues,
analysis gates) come from the catalog `orchestrator.api.reasons.Reason`; this module adds what is not
a reason code but still shows up in the status and in `progressive-sync status`: the rollout and
stage phases, the states of a cluster's record, the rollback triggers and states, and why a cluster
failed (a sentence, catalogued by a fragment of it). Each table here is keyed by its enum, so
`tests/unit/test_reasons.py` fails when a member has no entry, and it fails when a cluster failure
the steps can write matches no entry of `CLUSTER_FAILURES`.

    python -m orchestrator.api.troubleshooting --write docs/troubleshooting.md     (make docs)

Callers: `make docs`, tests. Pure: no API server, no clock.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass

from orchestrator.api.conditions import ConditionType
from orchestrator.api.phases import RolloutPhase, StagePhase
from orchestrator.api.reasons import Reason, Section
from orchestrator.api.rollback import RollbackTrigger
from orchestrator.api.stage_records import ClusterState, RollbackState
from orchestrator.core.generated_page import page_main

# A target no step has started yet: not a record state (it has no record), but `progressive-sync
# status --clusters` and `-o json` show it as this state.
NOT_STARTED = "NotStarted"
# `status.rollback.trigger` of a rollback run by hand (`progressive-sync rollback`).
MANUAL_TRIGGER = "Manual"


@dataclass(frozen=True)
class Entry:
    """One value a person reads, what it means and what to do."""

    meaning: str
    fix: str


ROLLOUT_PHASES: dict[str, Entry] = {
    RolloutPhase.PENDING: Entry(
        "A release is due and its rollout is about to start (the Workflow is being created, or waits "
        "for Argo CD to compare the fleet: FleetCompared).",
        "Nothing to do; a long Pending says why in `status.message`.",
    ),
    RolloutPhase.PROGRESSING: Entry(
        "The rollout runs: `currentStage` names the stage, `progress` counts the clusters done.",
        "Follow it with `progressive-sync status NAME --watch`.",
    ),
    RolloutPhase.PAUSED: Entry(
        "No new step starts: `spec.paused` is true, or someone suspended the Workflow (`argo suspend`).",
        "`progressive-sync unpause NAME`, or `argo resume` for a suspend made by a person.",
    ),
    RolloutPhase.SUCCEEDED: Entry("Every stage succeeded or was skipped.", "Nothing to do."),
    RolloutPhase.FAILED: Entry(
        "A stage failed (more failed clusters than failurePolicy allows, or a failed analysis gate), "
        "a step could not run, or a rollback could not restore every cluster (RollbackFailed).",
        "Read `status.message` and the failed clusters' reasons (below); fix the cause, then "
        "`progressive-sync retry NAME` or push a fix.",
    ),
    RolloutPhase.CANCELLED: Entry(
        "The rollout was stopped before it finished: `progressive-sync cancel`, `argo stop`, `argo "
        "terminate`, its Workflow deleted, or a new spec.",
        "`progressive-sync retry NAME` runs the release again; a new release starts on its own.",
    ),
    RolloutPhase.ROLLING_BACK: Entry(
        "The rollout ended in an outcome `spec.rollback.on` lists, and the clusters it synced are being "
        "put back on what they ran before.",
        "Nothing to do; follow it with `progressive-sync status NAME`.",
    ),
    RolloutPhase.ROLLED_BACK: Entry(
        "Every cluster in the rollback's scope runs what it ran before the rollout again.",
        "Fix the release and push a new commit (Git still names the bad one: Argo CD shows OutOfSync).",
    ),
}

STAGE_PHASES: dict[str, Entry] = {
    StagePhase.PENDING: Entry("The stage has not started: an earlier stage runs.", "Nothing to do."),
    StagePhase.PROGRESSING: Entry(
        "The stage runs (or waits at its manual gate, or bakes).",
        "`progressive-sync approve NAME` if it waits for approval.",
    ),
    StagePhase.SUCCEEDED: Entry(
        "Every cluster of the stage is Synced and Healthy at the release (at most maxFailedClusters "
        "failed), and its analysis gate passed.",
        "Nothing to do.",
    ),
    StagePhase.FAILED: Entry(
        "More clusters failed than `failurePolicy.maxFailedClusters` allows, its analysis gate failed, or "
        "its steps could not run; no later stage starts.",
        "Read `status.stages[].failed` (each cluster with its reason) and `message`.",
    ),
    StagePhase.SKIPPED: Entry(
        "The stage had no cluster to take: its selector matched none that an earlier stage left and "
        "that has an Application to update. `message` says which.",
        "Nothing to do, unless you expected clusters there (check `progressive-sync plan`).",
    ),
    StagePhase.CANCELLED: Entry(
        "The rollout ended (failed or cancelled) before the stage started.", "Nothing to do."
    ),
}

CLUSTER_STATES: dict[str, Entry] = {
    NOT_STARTED: Entry(
        "A target of the stage that no step started yet (it has no record).", "Nothing to do."
    ),
    ClusterState.SYNCING: Entry(
        "The cluster's sync was requested and the step waits for it to be Synced and Healthy; its "
        "`note` says what holds it, if anything (the notices above).",
        "Nothing to do; the progress deadline bounds the wait.",
    ),
    ClusterState.COMPLETED: Entry(
        "The cluster's Applications are Synced and Healthy at the release (synced by this rollout, or "
        "adopted).",
        "Nothing to do.",
    ),
    ClusterState.FAILED: Entry(
        "The cluster failed; its `reason` says why (the next section).", "See the reason."
    ),
    ClusterState.SKIPPED: Entry(
        "The `sync` step found the cluster marked (progressivesync.io/skip on one of its "
        "Applications, or spec.skip) before it wrote anything: not synced, neither failed nor "
        "pending; `reason` says which mark.",
        "To release it, remove the mark, then `progressive-sync retry` (docs/skip.md).",
    ),
}

ROLLBACK_TRIGGERS: dict[str, Entry] = {
    RollbackTrigger.STAGE_FAILED: Entry(
        "The rollout failed because a stage had more failed clusters than it tolerates.",
        "Fix the release; see the failed clusters' reasons.",
    ),
    RollbackTrigger.ANALYSIS_FAILED: Entry(
        "A stage failed because its analysis gate failed.", "See the AnalysisRun named in the stage."
    ),
    RollbackTrigger.DEADLINE_EXCEEDED: Entry(
        "The Workflow's deadline passed before the rollout finished.",
        "Look for the cluster or gate that held it; raise deadlines if they are too short.",
    ),
    RollbackTrigger.CANCELLED: Entry(
        "A person cancelled the rollout (`progressive-sync cancel`, `argo stop`); a stop by the "
        "watcher (a new spec) never rolls back.",
        "Nothing to do.",
    ),
    MANUAL_TRIGGER: Entry("`progressive-sync rollback` was run by hand.", "Nothing to do."),
}

ROLLBACK_STATES: dict[str, Entry] = {
    RollbackState.ROLLING_BACK: Entry(
        "The cluster's rollback sync was requested; waiting for Synced and Healthy at the old revision.",
        "Nothing to do.",
    ),
    RollbackState.ROLLED_BACK: Entry(
        "The cluster runs what it ran before the rollout again, and is Healthy.", "Nothing to do."
    ),
    RollbackState.FAILED: Entry(
        "The cluster was not restored; its `rollback.reason` says why (a sync that failed, a deadline, "
        "no earlier revision).",
        "Restore it by hand (`argocd app rollback`, or a Git revert).",
    ),
    RollbackState.LEFT_ALONE: Entry(
        "Nothing of this rollout to undo there, or someone else synced it since: not touched.",
        "Nothing to do.",
    ),
}


@dataclass(frozen=True)
class ClusterFailure:
    """Why a cluster failed, as the steps word it: a fragment of the message (`{}` for a blank)."""

    fragment: str
    meaning: str
    fix: str


CLUSTER_FAILURES: tuple[ClusterFailure, ...] = (
    ClusterFailure(
        ": sync operation {}: {}",
        "Argo CD ran the sync and it ended Failed or Error (its message follows: a manifest the "
        "cluster refused, a hook that failed, ...), after the Application's retries.",
        "Read the operation's message (`argocd app get APP`), fix the release, then `progressive-sync "
        "retry`.",
    ),
    ClusterFailure(
        "health Degraded after the sync, past the grace of",
        "The Application read Degraded for longer than `degradedGraceSeconds` after the sync.",
        "Look at its resources in Argo CD; raise `degradedGraceSeconds` if it recovers on its own.",
    ),
    ClusterFailure(
        "progress deadline of {}s passed",
        "The cluster was not Synced and Healthy within `progressDeadlineSeconds` of its sync; the "
        "message says what it was still waiting for (a sync window, Progressing, Suspended, ...).",
        "Fix what it waited for, or raise `progressDeadlineSeconds`.",
    ),
    ClusterFailure(
        "not the pinned",
        "Argo CD's sync succeeded at another revision than the one the rollout pinned.",
        "Check the Application's targetRevision and source (a branch that moved, a chart version).",
    ),
    ClusterFailure(
        "did not end within the progress deadline; not overwritten",
        "Someone else's operation on the Application ran for the whole progress deadline; the "
        "rollout never overwrites another operation.",
        "Let it finish or terminate it (`argocd app terminate-op`), then `progressive-sync retry`.",
    ),
    ClusterFailure(
        "which is not a revision of this release, and Argo CD did not answer",
        "The Application was Synced and Healthy at another revision and Argo CD did not compare it "
        "again within the deadline, so it was not known to run the release.",
        "Check Argo CD's application controller and repo-server; then `progressive-sync retry`.",
    ),
    ClusterFailure(
        "refusing to guess which one to pin",
        "Argo CD compares the Application against none of the release's revisions.",
        "Check its targetRevision; `argocd app get APP --refresh`, then `progressive-sync retry`.",
    ),
    ClusterFailure(
        "no revision of the release ({}) has that many",
        "The Application's number of sources differs from the release's revisions.",
        "Check the ApplicationSet's template (sources); then `progressive-sync retry`.",
    ),
    ClusterFailure(
        "without a pinned revision",
        "The release named no revision for the Application, so no sync could be pinned.",
        "Check that Argo CD compared the Application (`argocd app get APP --refresh`); then "
        "`progressive-sync retry`.",
    ),
    ClusterFailure(
        "Application {} was deleted",
        "The Application was deleted (or deleted and created again) while the rollout synced or waited "
        "for it.",
        "Check who deletes it (the ApplicationSet's generator, a person); retry once it is back.",
    ),
    ClusterFailure(
        "is being deleted",
        "The Application has a deletionTimestamp: it is not synced.",
        "Nothing to do if it is meant to go; else find what deletes it.",
    ),
    ClusterFailure(
        "its Argo CD cluster Secret was deleted",
        "The cluster's Secret disappeared while its sync ran.",
        "Restore the cluster Secret, or let the next release leave the cluster out.",
    ),
    ClusterFailure(
        "no Argo CD cluster Secret has this name",
        "The cluster the stage took has no cluster Secret any more.",
        "Restore the cluster Secret; `progressive-sync retry`.",
    ),
    ClusterFailure(
        "no Application of",
        "No Application of the ApplicationSet targets the cluster any more (its generator dropped it).",
        "Nothing to do if that was intended.",
    ),
    ClusterFailure(
        "stopped before it finished",
        "The cluster's stage failed (another cluster) while this one was in flight: its sync was ended.",
        "See the stage's other failed clusters; `progressive-sync retry` syncs it again.",
    ),
    ClusterFailure(
        "not started: {}",
        "The stage failed before this cluster's turn: it was never synced.",
        "See the stage's failed clusters.",
    ),
    ClusterFailure(
        "recorded as failed already",
        "A step ran again for a cluster that this rollout already recorded failed; it is not synced "
        "twice in one attempt.",
        "`progressive-sync retry` (a new attempt) syncs it again.",
    ),
    ClusterFailure(
        ": Analysis",
        "A per-cluster analysis gate (`perCluster: true`) failed on this cluster: `cluster C: "
        "<AnalysisReason>: ...`, one of the analysis reasons above.",
        "See that reason.",
    ),
)

HEADER = """\
# Troubleshooting: every reason and what to do

<!-- Generated from orchestrator/api/reasons.py and orchestrator/api/troubleshooting.py by
     `make docs` (python -m orchestrator.api.troubleshooting --write docs/troubleshooting.md); do
     not edit by hand: tests/unit/test_reasons.py fails when this file and the catalogs disagree. -->

Every reason progressive-sync shows is listed here: the `reason` of a condition in
`status.conditions` (`kubectl get psync NAME -o jsonpath='{.status.conditions}'`), the reason of an
Event (`kubectl describe psync NAME`), a cluster's notice in `status.stages[]`, the code of a plan
issue (`progressive-sync plan -o json`), the phases and states `status` shows, and why a cluster
failed. Each says what it means and what to do.
"""


def _table(title: str, intro: str, rows: Mapping[str, Entry]) -> list[str]:
    lines = ["", f"## {title}", "", intro, "", "| value | means | do |", "| --- | --- | --- |"]
    return lines + [f"| `{value}` | {entry.meaning} | {entry.fix} |" for value, entry in rows.items()]


def render() -> str:
    """The whole page: condition types, every reason by section, then the phases, states and failures."""
    lines = [HEADER, "## Condition types", ""]
    lines += [f"- **{ctype.value}**: {ctype.meaning}" for ctype in ConditionType]
    for section in Section:
        lines += ["", f"## {section.value}", ""]
        for reason in Reason:
            if reason.section is not section:
                continue
            lines += [f"### {reason.value}", "", f"*{reason.condition}*", ""]
            lines += [f"**Means:** {reason.meaning}", "", f"**Do:** {reason.fix}", ""]
            if reason.message:
                example = re.sub(r"\{(\w+)(:[^}]*)?\}", r"<\1>", reason.message)
                lines += [f"Message: `{example}`", ""]
        while lines[-1] == "":
            lines.pop()
    lines += _table(
        "Rollout phases (status.phase)", "The `PHASE` column of `kubectl get psync`.", ROLLOUT_PHASES
    )
    lines += _table(
        "Stage phases (status.stages[].phase)", "Each stage of the current rollout.", STAGE_PHASES
    )
    lines += _table(
        "Cluster states (ProgressiveSyncStage records, `progressive-sync status --clusters`)",
        "Each cluster a stage took: `state` in its record.",
        CLUSTER_STATES,
    )
    lines += [
        "",
        "## Why a cluster failed (status.stages[].failed[].reason, a record's reason)",
        "",
        "A sentence, `cluster NAME: ...`; find the part it contains (`{}` stands for a name or a value).",
        "",
        "| the reason contains | means | do |",
        "| --- | --- | --- |",
    ]
    lines += [f"| `{failure.fragment}` | {failure.meaning} | {failure.fix} |" for failure in CLUSTER_FAILURES]
    lines += _table(
        "Rollback triggers (status.rollback.trigger)",
        "Why a rollback started ([rollback.md](rollback.md)).",
        ROLLBACK_TRIGGERS,
    )
    lines += _table(
        "Cluster rollback states (a record's rollback.state)",
        "Each cluster in a rollback's scope.",
        ROLLBACK_STATES,
    )
    return "\n".join(lines).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    """`python -m orchestrator.api.troubleshooting [--write PATH]`: print or write the page."""
    return page_main(render, __doc__.splitlines()[0] if __doc__ else "", argv)


if __name__ == "__main__":
    sys.exit(main())
