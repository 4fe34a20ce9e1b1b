"""Every reason a person reads on a ProgressiveSync, with what it means and what to do, in one place.

A condition's `reason` (`status.conditions[].reason`), an Event's reason (`kubectl describe`), a
cluster's notice (`status.stages[]`) and a plan issue's code (`progressive-sync plan -o json`) are
all CamelCase words programs match on. Each is a member of `Reason` here, carrying the condition it
goes with, its meaning, the fix a person should apply and, where the message is one sentence with
blanks, its message template (`Reason.say`), as Argo Rollouts keeps `RolloutAbortedReason` next to
`RolloutAbortedMessage`. The code passes members, never strings: `ConditionPatch`, `RecordEvent`
and `set_condition` take a `Reason`, and `tests/unit/test_reasons.py` fails on a reason written as a
string literal, on an enum of reasons (plan issues, cluster notices, status transitions) with a
value the catalog lacks, and on a docs/troubleshooting.md that disagrees with the catalog.

docs/troubleshooting.md is generated from this catalog by `orchestrator.api.troubleshooting` (make docs).

Callers: the watcher's decision and its Events, `orchestrator.api.rollout_status`, the watch loop's
waits (`orchestrator.kube.watchloop`), the status transitions; `orchestrator.api.troubleshooting`;
tests.
"""

from __future__ import annotations

import re
from enum import StrEnum

from orchestrator.api.phases import RolloutPhase


class Section(StrEnum):
    """Where a reason is shown; the headings of docs/troubleshooting.md, in this order."""

    LIFECYCLE = "Ready and Progressing: where the rollout is"
    PAUSED = "Paused"
    VALID = "Valid: why no rollout may start"
    FLEET_COMPARED = "FleetCompared: waiting for Argo CD before a rollout starts"
    EVENTS = "Events on the ProgressiveSync"
    WATCHER = "Events about the watcher's own access"
    NOTICES = "Cluster notices (status.stages[], while a cluster waits)"
    PLAN = "Plan issues (progressive-sync plan; Valid=False with reason PlanInvalid)"
    ANALYSIS = "Analysis gates (status.stages[].message, cluster records, the analyze step)"


class Reason(StrEnum):
    """One reason: the CamelCase value is what the API shows; the rest is for people and the docs."""

    section: Section
    condition: str  # the condition (type=status) or Event type it goes with
    meaning: str
    fix: str
    message: str  # the message template (str.format fields), "" when the code composes it

    # Positional, as an Enum member's tuple is: (value, section, condition, meaning, fix[, message]).
    def __new__(  # noqa: PLR0917
        cls, value: str, section: Section, condition: str, meaning: str, fix: str, message: str = ""
    ) -> Reason:
        """A member from its tuple."""
        member = str.__new__(cls, value)
        member._value_ = value
        member.section = section
        member.condition = condition
        member.meaning = meaning
        member.fix = fix
        member.message = message
        return member

    @classmethod
    def named(cls, value: str) -> Reason:
        """The member whose value is `value`; ValueError when the catalog has none."""
        for member in cls:
            if member.value == value:
                return member
        raise ValueError(f"{value!r} is not a reason of the catalog (orchestrator.api.reasons)")

    def say(self, **values: object) -> str:
        """The message of this reason with its blanks filled in."""
        return self.message.format(**values)

    # --- Ready and Progressing ----------------------------------------------------------------

    ROLLOUT_PROGRESSING = (
        "RolloutProgressing",
        Section.LIFECYCLE,
        "Ready=False, Progressing=True",
        "A rollout runs: its Workflow was created (or adopted) and its stages are under way.",
        "Nothing to do; `progressive-sync status` shows the stage and the clusters in flight.",
        "rollout {rollout} is progressing{where}{waiting}",
    )
    ROLLOUT_PAUSED = (
        "RolloutPaused",
        Section.LIFECYCLE,
        "Ready=False, Progressing=True",
        "The rollout is paused by `spec.paused: true`: running steps finish, no new step starts.",
        "`progressive-sync unpause` (or set spec.paused to false) continues it.",
        "rollout {rollout} is paused{where}: running steps finish, no new step starts",
    )
    WORKFLOW_SUSPENDED = (
        "WorkflowSuspended",
        Section.LIFECYCLE,
        "Ready=False, Progressing=True; Paused=True",
        "Someone suspended the rollout's Workflow outside progressive-sync (`argo suspend`); the "
        "watcher does not lift a suspend it did not make.",
        "`argo resume <workflow>` continues it.",
        "rollout {rollout} is suspended{where} outside progressive-sync (argo suspend); "
        "`argo resume` continues it",
    )
    ROLLOUT_SUCCEEDED = (
        "RolloutSucceeded",
        Section.LIFECYCLE,
        "Ready=True, Progressing=False; Event (Normal)",
        "The rollout ended: every stage succeeded or was skipped.",
        "Nothing to do. The rollout's Workflow may still show Running for a while: its last cluster"
        " pods confirm what the status already says, then its exit handler runs (on Argo Workflows,"
        " ~24 s in our measurement of a three-stage rollout of 12 clusters; within the same second"
        " on the local engine). A new release's Workflow waits for it (the ProgressiveSync's"
        " mutex) and starts when it ends.",
    )
    ROLLOUT_FAILED = (
        "RolloutFailed",
        Section.LIFECYCLE,
        "Ready=False, Progressing=False; Event (Warning)",
        "The rollout ended failed: a stage had more failed clusters than failurePolicy allows, a "
        "step could not run, or the Workflow ended Failed or Error. Syncs of it still in flight "
        "were ended. It is never started again on its own.",
        "Read the message and `status.stages[].failed` (each failed cluster has its reason), fix "
        "the cause, then `progressive-sync retry`, or push a new release.",
    )
    ROLLOUT_CANCELLED = (
        "RolloutCancelled",
        Section.LIFECYCLE,
        "Ready=False, Progressing=False; Event (Warning)",
        "The rollout was stopped (`progressive-sync cancel`, `argo stop`, a new spec) before it "
        "finished; stages not started were cancelled and syncs in flight ended.",
        "`progressive-sync retry` starts it again; a new spec or release starts a new rollout.",
    )
    ROLLING_BACK = (
        "RollingBack",
        Section.LIFECYCLE,
        "Ready=False, Progressing=True; phase RollingBack; Event (Warning)",
        "The rollout failed or was cancelled for a reason `spec.rollback.on` lists: the Workflow's exit "
        "handler is syncing the clusters this rollout changed back to the revisions they ran before "
        "(`status.rollback` says which stages, later stages first).",
        "Nothing to do; follow it with `progressive-sync status NAME` or in the Argo UI. `argo stop` "
        "(or `progressive-sync cancel`) stops it; what was restored stays restored.",
    )
    ROLLOUT_ROLLED_BACK = (
        "RolloutRolledBack",
        Section.LIFECYCLE,
        "Ready=False, Progressing=False; phase RolledBack; Event (Warning)",
        "The rollout failed or was cancelled and every cluster it changed in the rollback's scope is "
        "back at the revision it ran before and Healthy (Applications someone else synced since were "
        "left alone, and named). Argo CD shows those Applications OutOfSync: Git still names the bad "
        "commit. The release is not started again on its own.",
        "Fix the release and push a new commit (a new rollout starts), or revert the commit in Git; "
        "`progressive-sync retry` rolls the same release out again.",
    )
    ROLLBACK_FAILED = (
        "RollbackFailed",
        Section.LIFECYCLE,
        "Ready=False, Progressing=False; phase Failed; Event (Warning)",
        "The rollout failed and its rollback could not restore every cluster: a rollback sync failed "
        "(the old revision no longer syncs), its Applications were not Healthy within "
        "`spec.rollback.progressDeadlineSeconds`, or an Application had no earlier revision. "
        "`status.rollback.notRestored` names each cluster and why.",
        "Look at the named Applications in Argo CD (`argocd app get`); restore them by hand (`argocd "
        "app rollback`, or a Git revert), then push a new release.",
    )
    WORKFLOW_DELETED = (
        "WorkflowDeleted",
        Section.LIFECYCLE,
        "Ready=False, Progressing=False; Event (Warning)",
        "The rollout's Workflow was deleted outside progressive-sync while the rollout ran; the "
        "rollout is recorded Cancelled and its syncs still in flight are ended. It is not re-created.",
        "`progressive-sync retry` starts a new attempt.",
    )
    UP_TO_DATE = (
        "UpToDate",
        Section.LIFECYCLE,
        "Ready=True, Progressing=False",
        "Every Application of the ApplicationSet is at the revision Argo CD compared it against: no "
        "release is due.",
        "Nothing to do; a new commit or ApplicationSet change starts the next rollout.",
        "every cluster is up to date; waiting for a release",
    )

    # --- Paused -------------------------------------------------------------------------------

    SPEC_PAUSED = (
        "SpecPaused",
        Section.PAUSED,
        "Paused=True",
        "`spec.paused` is true: the watcher suspended the Workflow (no new step starts) or holds a "
        "due release back. Only such a suspend is lifted by the watcher.",
        "`progressive-sync unpause` (or set spec.paused to false).",
        "spec.paused is true: no new step starts",
    )
    NOT_PAUSED = (
        "NotPaused",
        Section.PAUSED,
        "Paused=False",
        "`spec.paused` is false and the Workflow is not suspended.",
        "Nothing to do.",
        "spec.paused is false",
    )

    # --- Valid --------------------------------------------------------------------------------

    VALID = (
        "Valid",
        Section.VALID,
        "Valid=True",
        "The spec, its ApplicationSet and the plan of the fleet are accepted.",
        "Nothing to do.",
        "ApplicationSet {app_set} found; the plan has no errors",
    )
    INVALID_SPEC = (
        "InvalidSpec",
        Section.VALID,
        "Valid=False",
        "The spec does not pass the models' validation (an object written around the CRD's schema, "
        "or by an older version); nothing is started.",
        "Fix the field the message names (`progressive-sync validate -f` checks a manifest offline).",
    )
    APPLICATION_SET_NOT_FOUND = (
        "ApplicationSetNotFound",
        Section.VALID,
        "Valid=False",
        "The ApplicationSet `spec.appSetRef` names does not exist in that namespace.",
        "Create it, or fix spec.appSetRef.name (and namespace).",
        "ApplicationSet {app_set} in namespace {namespace} does not exist",
    )
    APPLICATION_SET_NAMESPACE_NOT_WATCHED = (
        "ApplicationSetNamespaceNotWatched",
        Section.VALID,
        "Valid=False",
        "The ApplicationSet is in a namespace this installation does not read ApplicationSets in.",
        "Set spec.appSetRef.namespace to one of the namespaces the message lists, or ask the "
        "operators to add the namespace to the watcher's.",
        "ApplicationSet {app_set}: this installation reads ApplicationSets only in namespace(s) "
        "{watched}; set spec.appSetRef.namespace to one of them",
    )
    NAMESPACE_NOT_ALLOWED = (
        "NamespaceNotAllowed",
        Section.VALID,
        "Valid=False",
        "The ApplicationSet lives in another namespace and does not admit ProgressiveSyncs of this "
        "one (its annotation progressivesync.io/allowed-namespaces).",
        "The ApplicationSet's owner adds this namespace to that annotation.",
        "ApplicationSet {app_set} may be rolled out only by ProgressiveSyncs of its own namespace or "
        "of the namespaces its annotation {annotation} lists ({allowed}), not of namespace "
        "{namespace}; its owner can add {namespace} there",
    )
    APPLICATION_SET_CLAIMED = (
        "ApplicationSetClaimed",
        Section.VALID,
        "Valid=False",
        "Another ProgressiveSync already rolls this ApplicationSet out; one ApplicationSet has one "
        "ProgressiveSync.",
        "Delete one of the two ProgressiveSyncs, or point this one at another ApplicationSet.",
        "ApplicationSet {app_set} is already rolled out by ProgressiveSync {owner}; one "
        "ApplicationSet has one ProgressiveSync",
    )
    APPLICATION_SET_ROLLING_SYNC = (
        "ApplicationSetRollingSync",
        Section.VALID,
        "Valid=False",
        "The ApplicationSet uses Argo CD's own RollingSync (spec.strategy.type), which syncs its "
        "Applications itself: two orchestrators would race over every sync.",
        "Remove spec.strategy from the ApplicationSet (or set type AllAtOnce).",
        "ApplicationSet {app_set} uses Argo CD's RollingSync (spec.strategy.type: RollingSync), which "
        "syncs its Applications itself; remove spec.strategy (or set type AllAtOnce) to roll it out "
        "with this ProgressiveSync",
    )
    DEPENDENCY_CYCLE = (
        "DependencyCycle",
        Section.VALID,
        "Valid=False",
        "spec.dependsOn of this ProgressiveSync and of those it names make a cycle (one depending on "
        "itself included): every rollout in it would wait for itself until its timeout.",
        "Remove the entry of spec.dependsOn that closes the cycle, in one of the ProgressiveSyncs the "
        "message names (docs/depends-on.md).",
        "spec.dependsOn makes a cycle: {cycle} (each would wait for itself); remove one of these entries",
    )
    SYNC_OPTION_NOT_ALLOWED = (
        "SyncOptionNotAllowed",
        Section.VALID,
        "Valid=False",
        "`spec.syncOptions` asks for something this installation does not allow (prune: true "
        "without policy.allowPrune, or an option outside policy.allowedSyncOptions).",
        "Remove the option from the spec, or ask the operators to allow it in the chart's policy.",
    )
    PLAN_INVALID = (
        "PlanInvalid",
        Section.VALID,
        "Valid=False",
        "The plan of the fleet has errors (the plan issues below); nothing is started.",
        "Fix what each issue says; `progressive-sync plan` shows the same plan offline or live.",
    )
    WORKFLOW_INVALID = (
        "WorkflowInvalid",
        Section.VALID,
        "Valid=False",
        "The Workflow this rollout needs cannot be built (e.g. more nodes than the configured "
        "budget); nothing is started.",
        "Change the spec as the message says (fewer stages or clusters per stage, a larger "
        "maxParallel), or raise the limit in the watcher's Workflow settings.",
    )

    # --- FleetCompared ------------------------------------------------------------------------

    AWAITING_FLEET_COMPARISON = (
        "AwaitingFleetComparison",
        Section.FLEET_COMPARED,
        "FleetCompared=False, Ready=False, Progressing=True; Event (Normal)",
        "A release is due and the watcher waits (at most --fleet-compare-wait) for Argo CD to "
        "compare every Application against it, so the Workflow is sized for the clusters each stage "
        "really has. The wait's start is the condition's lastTransitionTime.",
        "Nothing to do; a long wait means Argo CD's application controller is slow or down.",
        "{why} is due: waiting until {deadline} (at most {limit:g} s) for Argo CD to compare every "
        "Application of ApplicationSet {app_set} against it, so that the Workflow is sized for the "
        "clusters each stage really has; at the deadline the rollout starts with what is known",
    )
    FLEET_COMPARED = (
        "FleetCompared",
        Section.FLEET_COMPARED,
        "FleetCompared=True",
        "Argo CD had compared every Application against the release when the Workflow was sized.",
        "Nothing to do.",
        "Argo CD had compared all {owned} Application(s) of ApplicationSet {app_set} against release "
        "{release} when its Workflow was sized",
    )
    FLEET_COMPARISON_TIMED_OUT = (
        "FleetComparisonTimedOut",
        Section.FLEET_COMPARED,
        "FleetCompared=True; Event (Warning)",
        "Argo CD did not compare some Applications within the wait; the rollout started with what "
        "was known (a later stage's select asks Argo CD again and takes them if they are behind).",
        "Check Argo CD's application controller (its queue, its errors) for the Applications named.",
        "Argo CD did not compare {left} of {owned} Application(s) against release {release} within "
        "{limit:g} s: {names}; the rollout started with what was known: their clusters were sized by "
        "their last comparison (a later stage's select asks Argo CD again and takes them if they are "
        "behind the release)",
    )
    NO_COMPARISON_AWAITED = (
        "NoComparisonAwaited",
        Section.FLEET_COMPARED,
        "FleetCompared=True",
        "A wait for Argo CD's comparison ended without a rollout of its own (nothing due any more, "
        "or the rollout had started already).",
        "Nothing to do.",
    )

    # --- Events -------------------------------------------------------------------------------

    ROLLOUT_STARTED = (
        "RolloutStarted",
        Section.EVENTS,
        "Event (Normal)",
        "The watcher created the Workflow of a new rollout (a new release, or a retry).",
        "Nothing to do.",
        "rollout {rollout} started in Workflow {workflow}: {why}",
    )
    SPEC_CHANGED = (
        "SpecChanged",
        Section.EVENTS,
        "Event (Normal)",
        "The spec changed while a rollout ran: its Workflow is stopped and a rollout of the new spec "
        "starts once it ended.",
        "Nothing to do.",
        "the spec changed (generation {generation}): stopping rollout {rollout} before a rollout of "
        "the new spec starts",
    )
    PAUSED = (
        "Paused",
        Section.EVENTS,
        "Event (Normal)",
        "The watcher suspended the rollout's Workflow for `spec.paused: true`.",
        "`progressive-sync unpause` continues it.",
    )
    RESUMED = (
        "Resumed",
        Section.EVENTS,
        "Event (Normal)",
        "The watcher lifted its own suspend: `spec.paused` is false again.",
        "Nothing to do.",
        "rollout {rollout} resumed",
    )
    STALE_WORKFLOW_STOPPED = (
        "StaleWorkflowStopped",
        Section.EVENTS,
        "Event (Warning)",
        "A Workflow of an older rollout ran again (`argo retry`, `argo resubmit`) and was stopped: "
        "adopting it would roll an older release out over the recorded one.",
        "Do not retry old rollout Workflows with argo; `progressive-sync retry` retries the current release.",
        "Workflow {workflow} of rollout {rollout} runs again but is not adopted: {why}; an old "
        "Workflow brought back (argo retry) would roll an older release out over rollout {recorded}: "
        "stopping it",
    )
    STAGE_SUCCEEDED = (
        "StageSucceeded",
        Section.EVENTS,
        "Event (Normal)",
        "A stage ended with every cluster updated (or as many failed as failurePolicy tolerates).",
        "Nothing to do.",
    )
    STAGE_FAILED = (
        "StageFailed",
        Section.EVENTS,
        "Event (Warning)",
        "A stage ended with more failed clusters than failurePolicy.maxFailedClusters, or a step of "
        "it could not run; no later stage starts.",
        "Read `status.stages[].failed` for each cluster's reason; fix it, then `progressive-sync retry`.",
    )
    CLUSTER_SYNCING = (
        "ClusterSyncing",
        Section.EVENTS,
        "metric only",
        "A cluster's sync was requested (counted in the watcher's metrics, not recorded as an Event).",
        "Nothing to do.",
    )
    CLUSTER_COMPLETED = (
        "ClusterCompleted",
        Section.EVENTS,
        "metric only",
        "A cluster is Synced and Healthy at the release (counted in the metrics, not an Event).",
        "Nothing to do.",
    )
    CLUSTER_FAILED = (
        "ClusterFailed",
        Section.EVENTS,
        "Event (Warning)",
        "A cluster failed: its sync ended Failed or Error, it stayed Degraded past the grace period, "
        "or the progress deadline passed. The message carries the cluster's reason.",
        "Look at the cluster's Application in Argo CD (`argocd app get`), fix it, then retry.",
    )

    # --- the watcher's own access -------------------------------------------------------------

    WATCH_FORBIDDEN = (
        "WatchForbidden",
        Section.WATCHER,
        "Event (Warning)",
        "The watcher may not list or watch a resource this ProgressiveSync needs (a Role narrowed, "
        "a RoleBinding removed); it is not reconciled meanwhile and resumes by itself.",
        "Grant the watcher's account get, list and watch on the resource the message names (the "
        "chart's Role has them).",
    )
    CRD_MISSING = (
        "CRDMissing",
        Section.WATCHER,
        "Event (Warning)",
        "A CustomResourceDefinition the watcher reads (Workflows, Applications, ApplicationSets, "
        "ProgressiveSyncs) is not installed; it waits and resumes by itself once it is.",
        "Install the CRDs of the project the message names (Argo Workflows, Argo CD).",
    )
    WATCH_RESUMED = (
        "WatchResumed",
        Section.WATCHER,
        "Event (Normal)",
        "Every resource this ProgressiveSync needs is listed and watched again.",
        "Nothing to do.",
    )
    RECONCILE_FORBIDDEN = (
        "ReconcileForbidden",
        Section.WATCHER,
        "Event (Warning)",
        "A call of a reconcile was refused with 403 (e.g. `update` on progressivesyncs/status taken "
        "away): the status cannot say it, so an Event does; the watcher retries with backoff.",
        "Grant the permission the message quotes (was the Role narrowed or its RoleBinding removed?).",
    )
    RECONCILE_RESUMED = (
        "ReconcileResumed",
        Section.WATCHER,
        "Event (Normal)",
        "A reconcile works again after a 403.",
        "Nothing to do.",
        "reconciled again: the permission is back",
    )

    # --- cluster notices (orchestrator.argocd.assess.Notice) ----------------------------------

    SYNC_WINDOW = (
        "SyncWindow",
        Section.NOTICES,
        "cluster notice",
        "Argo CD holds the sync: a sync window of the Application's project denies it now. The "
        "progress deadline keeps running. The steps read the AppProject's windows before they write "
        "(WaitingForWindow): this shows when it could not be read, or its window closed after the write.",
        "Wait for the window, or change the AppProject's syncWindows; let the steps' service account "
        "get AppProjects (docs/windows.md).",
    )
    WAITING_FOR_WINDOW = (
        "WaitingForWindow",
        Section.NOTICES,
        "cluster notice (status.stages[].notes)",
        "No sync is written for the cluster yet: a window is closed now, the ProgressiveSync's "
        "spec.windows or a sync window of the Application's AppProject; the note says when they open "
        "(RFC 3339) and which is closed. The wave waits; the cluster's progress deadline starts when "
        "the sync is written; only the Workflow's activeDeadlineSeconds bounds the wait.",
        "Wait for the window, or change spec.windows or the AppProject's syncWindows "
        "(`progressive-sync plan` shows the windows and when they open; docs/windows.md).",
    )
    RETRYING = (
        "Retrying",
        Section.NOTICES,
        "cluster notice",
        "An attempt of the sync failed and Argo CD retries it (the Application's retry.limit).",
        "Look at the operation's message in Argo CD if it keeps failing.",
    )
    DEGRADED = (
        "Degraded",
        Section.NOTICES,
        "cluster notice",
        "The Application is Degraded within the grace period after the sync; past it the cluster fails.",
        "Look at the Application's resources in Argo CD.",
    )
    SUSPENDED = (
        "Suspended",
        Section.NOTICES,
        "cluster notice",
        "The Application's health is Suspended (e.g. an Argo Rollouts canary paused at a step).",
        "Promote or resume what is suspended; the progress deadline keeps running.",
    )
    MISSING = (
        "Missing",
        Section.NOTICES,
        "cluster notice",
        "A resource of the Application is Missing.",
        "Look at the Application in Argo CD.",
    )
    UNKNOWN = (
        "Unknown",
        Section.NOTICES,
        "cluster notice",
        "Argo CD reports health or sync status Unknown for the Application; the message names "
        "Argo CD's error conditions on it (`Argo CD reports ComparisonError: ...`) when it has any.",
        "Fix what the condition names (a manifest that does not render, a repository Argo CD "
        "cannot reach); else look at Argo CD's application controller (its connection to the cluster).",
    )
    OUT_OF_SYNC = (
        "OutOfSync",
        Section.NOTICES,
        "cluster notice",
        "The sync succeeded but the Application is still OutOfSync.",
        "Look at the diff in Argo CD (ignoreDifferences, a mutating webhook, a controller writing back).",
    )
    PRUNE_SKIPPED = (
        "PruneSkipped",
        Section.NOTICES,
        "cluster notice",
        "Done, but resources only pruning removes are left (prune is off).",
        "Prune them by hand, or allow spec.syncOptions.prune.",
    )
    BUSY = (
        "Busy",
        Section.NOTICES,
        "cluster notice",
        "Someone else's operation runs on the Application; the sync waits for it (within the deadline).",
        "Let it finish, or terminate it (`argocd app terminate-op`).",
    )
    ADOPTED = (
        "Adopted",
        Section.NOTICES,
        "cluster notice",
        "Done: someone else had synced the Application to the release revision; not synced again.",
        "Nothing to do.",
    )
    LEFT_ALONE = (
        "LeftAlone",
        Section.NOTICES,
        "cluster notice",
        "Done: the Application is up to date at a revision outside this release; not synced.",
        "Nothing to do, unless it should follow the release (then check its targetRevision).",
    )

    # --- plan issues (orchestrator.planning.planner.IssueCode) --------------------------------

    APP_SET_MISMATCH = (
        "AppSetMismatch",
        Section.PLAN,
        "plan error",
        "The ApplicationSet given to the planner is not the one the spec names.",
        "Pass the ApplicationSet spec.appSetRef names (`progressive-sync plan --appset`).",
    )
    APP_SET_NOT_GIVEN = (
        "AppSetNotGiven",
        Section.PLAN,
        "plan warning",
        "The offline plan was not given the ApplicationSet: Applications match it by owner name only.",
        "Add the ApplicationSet to the fleet file (`kubectl get applicationset NAME -o yaml`).",
    )
    APP_SET_NOT_FOUND = (
        "AppSetNotFound",
        Section.PLAN,
        "plan error",
        "The live plan found no ApplicationSet spec.appSetRef names in the ProgressiveSync's namespace.",
        "Create the ApplicationSet, fix spec.appSetRef.name, or pass -n for the namespace it lives in.",
    )
    NO_APPLICATIONS = (
        "NoApplications",
        Section.PLAN,
        "plan warning",
        "No Application is owned by the ApplicationSet: there is nothing to roll out.",
        "Check the ApplicationSet's generators and its Applications' ownerReferences.",
    )
    DUPLICATE_CLUSTER_NAME = (
        "DuplicateClusterName",
        Section.PLAN,
        "plan error",
        "Two or more Argo CD cluster Secrets name the same cluster.",
        "Give each cluster Secret its own `name`.",
    )
    SHARED_SERVER = (
        "SharedServer",
        Section.PLAN,
        "plan warning",
        "Two or more clusters share one server URL; Applications naming the server go to the first.",
        "Use one cluster Secret per server, or address Applications by destination.name.",
    )
    MISSING_CLUSTER_SECRET = (
        "MissingClusterSecret",
        Section.PLAN,
        "plan warning or error",
        "An Application's destination has no cluster Secret: no stage can select it (an error when "
        "it is out of date and allowPartialRollout is false).",
        "Add the cluster Secret, fix the destination, or set allowPartialRollout: true.",
    )
    DESTINATION_CONFLICT = (
        "DestinationConflict",
        Section.PLAN,
        "plan warning",
        "Applications set destination.server and destination.name to different clusters; the plan "
        "follows destination.server.",
        "Set one of the two in the ApplicationSet template.",
    )
    AUTOMATED_SYNC = (
        "AutomatedSync",
        Section.PLAN,
        "plan warning",
        "Automated sync is on for Applications: Argo CD syncs them by itself, outside the stages.",
        "Turn it off (spec.syncPolicy.automated) in the ApplicationSet template.",
    )
    MIXED_REVISIONS = (
        "MixedRevisions",
        Section.PLAN,
        "plan warning",
        "The Applications are at different revisions; each is synced to its own.",
        "Nothing to do unless that is unexpected (then check their targetRevision).",
    )
    UNKNOWN_REVISION = (
        "UnknownRevision",
        Section.PLAN,
        "plan warning",
        "Argo CD reports no revision yet for out-of-date Applications: their sync cannot be pinned "
        "until Argo CD compared them.",
        "Wait for Argo CD's comparison (`argocd app get --refresh`).",
    )
    UNCOVERED_CLUSTERS = (
        "UncoveredClusters",
        Section.PLAN,
        "plan warning or error",
        "Out-of-date clusters are in no stage (no selector matches, or maxTargets leaves them out); "
        "an error unless allowPartialRollout is true.",
        "Add a stage that takes them, or set allowPartialRollout: true.",
    )
    SPREAD_LABEL_MISSING = (
        "SpreadLabelMissing",
        Section.PLAN,
        "plan warning",
        "A stage spreads by a label some of its targets lack; they come after the labelled ones.",
        "Label the cluster Secrets, or drop spreadBy.",
    )
    SPREAD_VALUES_FEWER_THAN_TARGETS = (
        "SpreadValuesFewerThanTargets",
        Section.PLAN,
        "plan warning",
        "A stage spreads by a label that has fewer values among the clusters it can take than its "
        "maxTargets (a count): it takes more than one cluster of some value (two in one region where "
        '"one per region" was meant).',
        "Set maxTargets to the number of values the warning names, or drop spreadBy if several per "
        "value is what you want.",
    )
    GROUP_LABEL_MISSING = (
        "GroupLabelMissing",
        Section.PLAN,
        "plan warning",
        'spec.groupBy names a label some clusters lack: they form the group "(none)", rolled out on '
        "its own like any other group (docs/groups.md).",
        "Label their cluster Secrets with the groupBy label, or leave them in (none) if that is meant.",
    )
    UNKNOWN_PROGRESS_STAGE = (
        "UnknownProgressStage",
        Section.PLAN,
        "plan warning",
        "The running rollout recorded stages the spec no longer has; they are ignored.",
        "Nothing to do; the next rollout follows the new spec.",
    )
    LATE_CLUSTERS = (
        "LateClusters",
        Section.PLAN,
        "plan warning",
        "Clusters turned out of date after the stages that take them were selected (Argo CD compares "
        "Applications one by one); this rollout does not update them.",
        "`progressive-sync retry` starts a rollout that takes them.",
    )
    SKIPPED_CLUSTERS = (
        "SkippedClusters",
        Section.PLAN,
        "plan warning; status.stages[].skipped",
        "Out-of-date clusters are held back by the annotation progressivesync.io/skip on one of "
        "their Applications, or by spec.skip: no rollout syncs them while the mark is there.",
        "To release them: remove the annotation or change spec.skip, then `progressive-sync retry` "
        "(docs/skip.md).",
    )
    NOT_A_RELEASE = (
        "NotARelease",
        Section.PLAN,
        "plan warning",
        "Applications are Synced at the revision they run but not settled: a health question, not a "
        "release; no rollout syncs them for it.",
        "Look at why Argo CD reports them unhealthy; a new commit or `argocd app sync` changes them.",
    )

    # --- analysis gates -----------------------------------------------------------------------

    ANALYSIS_SUCCESSFUL = (
        "AnalysisSuccessful",
        Section.ANALYSIS,
        "Event (Normal)",
        "The stage's AnalysisRun ended Successful: every metric met its success condition; the gate "
        "lets the rollout go on.",
        "Nothing to do.",
    )
    ANALYSIS_FAILED = (
        "AnalysisFailed",
        Section.ANALYSIS,
        "stage Failed (cluster Failed with perCluster); Event (Warning)",
        "The stage's AnalysisRun ended Failed: a metric breached its failureLimit. The message names "
        "the metric, its last value and the condition it failed.",
        "Look at the service's metrics for the release (`kubectl get analysisrun NAME -o yaml` has every "
        "measurement); fix the release, then `progressive-sync retry`, or correct the template.",
        "analysis {run} failed: metric {metric} = {value} ({condition})",
    )
    ANALYSIS_ERROR = (
        "AnalysisError",
        Section.ANALYSIS,
        "stage Failed (cluster Failed with perCluster); Event (Warning)",
        "The AnalysisRun ended Error: a metric's provider could not measure (Prometheus unreachable, "
        "a query that does not parse) more often than its consecutiveErrorLimit. A gate that cannot "
        "measure never passes.",
        "Read the metric's message in the AnalysisRun's status; make the provider reachable or fix the "
        "query, then `progressive-sync retry`.",
    )
    ANALYSIS_INCONCLUSIVE = (
        "AnalysisInconclusive",
        Section.ANALYSIS,
        "stage Failed, or waiting for approval; Event (Warning)",
        "The AnalysisRun ended Inconclusive: no success or failure condition decided (or its "
        "inconclusiveLimit was reached). With onInconclusive: Approve the stage waits for a person.",
        "Look at the measurements; `progressive-sync approve NAME --stage STAGE` (or `argo resume`) to "
        "go on, `progressive-sync cancel NAME` to stop; or set onInconclusive.",
    )
    ANALYSIS_ARG_MISSING = (
        "AnalysisArgMissing",
        Section.ANALYSIS,
        "Valid=False before a release starts; stage Failed (step error)",
        "A template declares an argument without a default that the analysis gives no value, or a "
        "valueFrom that has no value here (a cluster without that label, a cluster with several "
        "Applications for applicationName).",
        "Add the argument to spec.analysis.args or the stage's (a value or a valueFrom), or give the "
        "template a default; label the cluster's Secret.",
        "argument {name!r}: {why}",
    )
    ANALYSIS_TEMPLATE_NOT_FOUND = (
        "AnalysisTemplateNotFound",
        Section.ANALYSIS,
        "Valid=False before a release starts; stage Failed (step error)",
        "An AnalysisTemplate (in the ProgressiveSync's namespace) or ClusterAnalysisTemplate "
        "(clusterScope: true) named in analysis.templates does not exist, or the Argo Rollouts CRDs "
        "are not installed.",
        "Create the template (or fix its name or clusterScope); install Argo Rollouts' CRDs and controller.",
    )
    ANALYSIS_METRIC_DUPLICATE = (
        "AnalysisMetricDuplicate",
        Section.ANALYSIS,
        "Valid=False before a release starts; stage Failed (step error)",
        "Two of the stage's templates define a metric of the same name; one AnalysisRun cannot hold "
        "both (Argo Rollouts refuses it the same way).",
        "Rename one of the metrics, or run one of the templates only.",
    )
    ANALYSIS_TIMED_OUT = (
        "AnalysisTimedOut",
        Section.ANALYSIS,
        "stage Failed",
        "The AnalysisRun did not end within the analysis' timeoutSeconds (or the bound its metrics' "
        "interval x count give, when no timeoutSeconds is set); it was terminated.",
        "Check that the Argo Rollouts controller runs and reconciles AnalysisRuns in this namespace "
        "(its --instance-id, --namespaced); raise timeoutSeconds if the metrics need longer.",
    )
    ANALYSIS_RUN_CONFLICT = (
        "AnalysisRunConflict",
        Section.ANALYSIS,
        "stage Failed (step error)",
        "An AnalysisRun with the name this rollout's stage uses exists but belongs to another rollout "
        "(its progressivesync.io/rollout-id label differs).",
        "Delete that AnalysisRun (`kubectl delete analysisrun NAME`), then `progressive-sync retry`.",
    )


# The condition reason of a rollout that ended in `phase` (the exit handler's and the watcher's).
# How the analyze step words a cluster its own AnalysisRun failed: `cluster C: <Reason>: <message>`
# (steps/analyze.py); group 1 is the reason (AnalysisFailed, AnalysisError, ...). Read by the
# watcher's transitions and the rollback's trigger.
ANALYSIS_CLUSTER_REASON = re.compile(r"^(?:cluster .+?: )?(Analysis[A-Za-z]+): ")

ROLLOUT_ENDED = {
    RolloutPhase.SUCCEEDED: Reason.ROLLOUT_SUCCEEDED,
    RolloutPhase.FAILED: Reason.ROLLOUT_FAILED,
    RolloutPhase.CANCELLED: Reason.ROLLOUT_CANCELLED,
    RolloutPhase.ROLLED_BACK: Reason.ROLLOUT_ROLLED_BACK,
}
