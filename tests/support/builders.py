"""One keyword builder per kind of object the tests use (STYLE.md #9).

Each builder sets what a test names and fills the rest with a plain, valid default, so a test reads
as the one fact it checks: `make_app(cluster="eu-1", health="Degraded")`. Wire-form builders return
dicts as the API server returns them, usable for pure tests and for creating real objects; view
builders return what the code under test reads (`make_spec`, `make_stage_status`, `make_cluster`,
`make_app_set`, `make_app`). Nothing here talks to a cluster.

Kinds, in order: stages and specs, ProgressiveSyncs (with a status), stage statuses, Argo CD
clusters (view and Secret), ApplicationSets, Applications at any point of a sync (`make_application`,
its view `make_app`) with the operations and history entries on them, rollout Workflows and their
nodes. Times are RFC 3339 text or datetimes counted from `T0` (`at(seconds)`).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from orchestrator.api.metadata import NAME_LABEL, ROLLOUT_ID_LABEL, label_value, workflow_name
from orchestrator.api.models import (
    API_VERSION,
    KIND,
    ProgressiveSync,
    ProgressiveSyncSpec,
    ProgressiveSyncStatus,
    StagePhase,
    StageStatus,
)
from orchestrator.api.release import Release, revisions_to_json
from orchestrator.api.rollout_status import apply_summary
from orchestrator.api.stage_records import ClusterRecord, ClusterState, StageOutcomes, summarize
from orchestrator.argocd import appsync
from orchestrator.argocd.fleet import AppSetView, AppView, Cluster, app_view_from_object
from orchestrator.core.clock import format_time
from orchestrator.kube.cluster_secrets import CLUSTER_SECRET_TYPE, CLUSTER_SECRET_TYPE_LABEL
from orchestrator.planning.contract import RollbackContract, RolloutContract, StageContract
from workflow_templates import names

APP_SET = "myservice"
APP_SET_UID = "00000000-0000-4000-8000-0000000000a5"
PS_NAME = "myservice"
NEW_REVISION = "4f1c2e9b7a3d5c8e1f0a2b4c6d8e0f1a3b5c7d9e"
OLD_REVISION = "9d2b7e4a1c3f5e7d9b0a2c4e6f8a1b3d5e7f9c0b"
ROLLOUT_ID = "7f3c2a1"  # the rollout of the ProgressiveSync and Workflow builders
ROLLOUT = "r1"  # the rollout whose sync operations the Application builders write (`our_operation`)
# The steps' `--revisions` of a release of NEW_REVISION (orchestrator.api.release).
REVISIONS = revisions_to_json([(NEW_REVISION,)])
STARTED = "2026-11-29T10:00:00Z"
# The time the Argo CD builders count from.
T0 = datetime(2030, 1, 1, 12, 0, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    """T0 plus `seconds`."""
    return T0 + timedelta(seconds=seconds)


# --- stages and specs ---------------------------------------------------------------------------


def make_stage(
    name: str,
    *,
    labels: Mapping[str, str] | None = None,
    expressions: Sequence[Mapping[str, Any]] | None = None,
    region: str | None = None,
    max_targets: int | str | None = None,
    max_parallel: int | str | None = None,
    spread_by: str | None = None,
    approval: str | None = None,
    bake_seconds: int | None = None,
    applications: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A stage in wire form; without `labels`, `expressions` or `region` it matches every cluster.

    `applications` is `targets.applications.selector` (wire form); given alone, the stage has no
    cluster selector at all."""
    selector: dict[str, Any] = {}
    match_labels = {**(labels or {}), **({"region": region} if region else {})}
    if match_labels:
        selector["matchLabels"] = match_labels
    if expressions:
        selector["matchExpressions"] = [dict(e) for e in expressions]
    targets: dict[str, Any] = {}
    if selector or applications is None:
        targets["clusters"] = {"selector": selector}
    if applications is not None:
        targets["applications"] = {"selector": dict(applications)}
    stage: dict[str, Any] = {"name": name, "targets": targets}
    for key, value in (
        ("maxTargets", max_targets),
        ("maxParallel", max_parallel),
        ("spreadBy", spread_by),
        ("approval", approval),
        ("bakeSeconds", bake_seconds),
    ):
        if value is not None:
            stage[key] = value
    return stage


def canary_then_rest(*, canary_parallel: int = 1, rest_parallel: int = 1) -> list[dict[str, Any]]:
    """A canary of one cluster in region eu, then everything else."""
    return [
        make_stage("canary", region="eu", max_targets=1, max_parallel=canary_parallel),
        make_stage("rest", max_parallel=rest_parallel),
    ]


def make_spec(
    *stages: dict[str, Any], app_set: str = APP_SET, allow_partial: bool | None = None, **fields: Any
) -> ProgressiveSyncSpec:
    """A validated spec with these stages (default: one stage taking every cluster).

    `fields` are other spec fields in wire form (`paused=True`, `progressDeadlineSeconds=60`).
    """
    if allow_partial is not None:
        fields["allowPartialRollout"] = allow_partial
    return ProgressiveSyncSpec.model_validate(
        {"appSetRef": {"name": app_set}, "stages": list(stages) or [make_stage("all")], **fields}
    )


# The operator commands' tests: a canary in eu-west-1, one per region, the rest behind a gate.
OPERATOR_STAGES = (
    make_stage("canary", region="eu-west-1"),
    make_stage("one per region"),
    make_stage("everything else", approval="Manual"),
)


# --- ProgressiveSyncs ---------------------------------------------------------------------------


def make_ps(
    name: str = PS_NAME,
    *,
    namespace: str | None = "argocd",
    stages: Sequence[dict[str, Any]] = (),
    app_set: str | None = None,
    uid: str | None = None,
    generation: int | None = None,
    phase: str | None = None,
    message: str = "",
    observed_generation: int | None = None,
    rollout_id: str | None = ROLLOUT_ID,
    workflow: str | None = None,
    attempt: int = 1,
    finished_at: str | None = None,
    stage_status: Sequence[StageStatus] | None = None,
    status_extra: Mapping[str, Any] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A ProgressiveSync object (default: one stage over every cluster, ApplicationSet `name`).

    `spec` are more spec fields in wire form (`paused=True`, `progressDeadlineSeconds=60`). With
    `phase`, a status describing rollout `rollout_id` (None: no rollout) in that phase, with
    `stage_status` as its stages, and `status_extra` (wire form) added to it.
    """
    metadata: dict[str, Any] = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    if uid is not None:
        metadata["uid"] = uid
    if generation is not None:
        metadata["generation"] = generation
    obj: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": metadata,
        "spec": {
            "appSetRef": {"name": app_set or name},
            "stages": [dict(stage) for stage in stages] or [make_stage("all")],
            **spec,
        },
    }
    if phase is not None:
        status: dict[str, Any] = {"phase": phase, "message": message}
        if observed_generation is not None:
            status["observedGeneration"] = observed_generation
        if rollout_id is not None:
            rollout: dict[str, Any] = {
                "id": rollout_id,
                "revision": "4f1c2e9b7a3d",
                "workflow": workflow if workflow is not None else workflow_name(name, rollout_id),
                "attempt": attempt,
                "startedAt": STARTED,
            }
            if finished_at:
                rollout["finishedAt"] = finished_at
            status["rollout"] = rollout
        status["stages"] = [stage.to_api() for stage in stage_status or ()]
        status.update(status_extra or {})
        obj["status"] = status
    return obj


def make_ps_model(name: str = PS_NAME, **kwargs: Any) -> ProgressiveSync:
    """The validated `ProgressiveSync` of `make_ps(name, **kwargs)`."""
    return ProgressiveSync.model_validate(make_ps(name, **kwargs))


# --- stage statuses -----------------------------------------------------------------------------


def make_stage_outcomes(
    name: str = "canary",
    *,
    targets: Sequence[str] = (),
    completed: Sequence[str] = (),
    syncing: Sequence[str] = (),
    failed: Mapping[str, str] | None = None,
    notes: Mapping[str, str] | None = None,
    skipped: Mapping[str, str] | None = None,
) -> StageOutcomes:
    """A stage's clusters as its records would tell them; `failed` maps each failed cluster to its
    reason (in failing order), `notes` a cluster to its note, `skipped` a cluster the sync step found
    marked to its reason."""
    clusters: dict[str, ClusterRecord] = {}
    for cluster in syncing:
        clusters[cluster] = ClusterRecord(state=ClusterState.SYNCING)
    for cluster in completed:
        clusters[cluster] = ClusterRecord(state=ClusterState.COMPLETED)
    base = datetime(2026, 1, 1, tzinfo=UTC)
    for index, (cluster, reason) in enumerate((failed or {}).items()):
        finished = base + timedelta(seconds=index)
        clusters[cluster] = ClusterRecord(state=ClusterState.FAILED, reason=reason, finished_at=finished)
    for cluster, why in (skipped or {}).items():
        clusters[cluster] = ClusterRecord(state=ClusterState.SKIPPED, reason=why, finished_at=base)
    for cluster, note in (notes or {}).items():
        clusters[cluster] = clusters.get(cluster, ClusterRecord(state=ClusterState.SYNCING)).model_copy(
            update={"note": note}
        )
    return StageOutcomes(stage=name, targets=tuple(targets), clusters=clusters)


def make_stage_status(
    name: str = "canary",
    *,
    phase: StagePhase | str = StagePhase.PENDING,
    targets: Sequence[str] = (),
    completed: Sequence[str] = (),
    syncing: Sequence[str] = (),
    failed: Mapping[str, str] | None = None,
    message: str = "",
    started_at: datetime | str | None = None,
    finished_at: datetime | str | None = None,
) -> StageStatus:
    """One `status.stages` entry: the summary of a stage whose records hold these clusters
    (`make_stage_outcomes`); `failed` maps each failed cluster to its reason."""
    outcomes = make_stage_outcomes(name, targets=targets, completed=completed, syncing=syncing, failed=failed)
    status = apply_summary(ProgressiveSyncStatus(stages=[]), name, summarize(outcomes))
    stage = (status.stages or [])[0]
    if not (targets or completed or syncing or failed):
        stage.counts = None
    return StageStatus.model_validate(
        {
            **stage.model_dump(by_alias=True, exclude_none=True),
            "phase": StagePhase(phase),
            "message": message,
            "startedAt": started_at,
            "finishedAt": finished_at,
        }
    )


# --- Argo CD clusters and ApplicationSets -------------------------------------------------------


def server_of(cluster: str) -> str:
    """The API server URL the builders give a cluster."""
    return f"https://{cluster}.k8s.example.internal:6443"


def make_cluster(
    name: str = "c1",
    *,
    region: str | None = None,
    zone: str | None = None,
    labels: Mapping[str, str] | None = None,
    server: str | None = None,
    secret_name: str | None = None,
) -> Cluster:
    """A cluster with the `region`/`zone` labels given (and any other `labels`)."""
    all_labels = dict(labels or {})
    if region is not None:
        all_labels["region"] = region
    if zone is not None:
        all_labels["zone"] = zone
    return Cluster(
        name=name,
        server=server if server is not None else server_of(name),
        labels=all_labels,
        secret_name=secret_name if secret_name is not None else f"cluster-{name}",
    )


def regional_fleet(regions: Mapping[str, int]) -> list[Cluster]:
    """Clusters `<region>-<i>` with a region label and zone `<region>a`/`b` alternating."""
    return [
        make_cluster(f"{region}-{i}", region=region, zone=f"{region}{'ab'[i % 2]}")
        for region, count in regions.items()
        for i in range(1, count + 1)
    ]


def b64(text: str) -> str:
    """Base64 of a text, as Secret data holds it."""
    return base64.b64encode(text.encode()).decode()


def make_cluster_secret(
    name: str, *, labels: Mapping[str, str] | None = None, config: str = "{}", server: str | None = None
) -> dict[str, Any]:
    """An Argo CD cluster Secret object; `config` is stored base64-encoded like real credentials."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": f"cluster-{name}",
            "namespace": "argocd",
            "labels": {CLUSTER_SECRET_TYPE_LABEL: CLUSTER_SECRET_TYPE, **(labels or {})},
        },
        "data": {"name": b64(name), "server": b64(server or server_of(name)), "config": b64(config)},
    }


def make_app_set(name: str = APP_SET, *, uid: str = APP_SET_UID) -> AppSetView:
    """The ApplicationSet the specs of `make_spec` name."""
    return AppSetView(name=name, namespace="argocd", uid=uid)


# --- Applications -------------------------------------------------------------------------------


def requested_operation(
    *, revision: str = NEW_REVISION, info: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """A requested `.operation` (a sync to `revision`), with `.info` entries when given."""
    operation: dict[str, Any] = {"sync": {"revision": revision}}
    if info:
        operation["info"] = [{"name": key, "value": value} for key, value in info.items()]
    return operation


def our_operation(
    *,
    rollout_id: str = ROLLOUT,
    revision: str = NEW_REVISION,
    requested_at: datetime = T0,
    retry_limit: int | None = None,
    sources: int = 0,
) -> dict[str, Any]:
    """The `.operation` the sync step writes (`sources`: a multi-source Application's, one pin each)."""
    op: dict[str, Any] = {
        "initiatedBy": {"username": appsync.INITIATOR, "automated": True},
        "info": [
            {"name": appsync.INFO_ROLLOUT_ID, "value": rollout_id},
            {"name": appsync.INFO_STAGE, "value": "canary"},
            {"name": appsync.INFO_REQUESTED_AT, "value": format_time(requested_at)},
        ],
        "sync": {"revisions": [revision] * sources} if sources else {"revision": revision},
    }
    op["sync"]["prune"] = False
    if retry_limit is not None:
        op["retry"] = {"limit": retry_limit}
    return op


def foreign_operation(username: str = "alice", revision: str = OLD_REVISION) -> dict[str, Any]:
    """An operation someone else started (a person in the Argo CD UI)."""
    return {"initiatedBy": {"username": username}, "sync": {"revision": revision}}


def history_entry(
    *,
    username: str = appsync.INITIATOR,
    revision: str = NEW_REVISION,
    started_at: datetime = T0,
    deployed_at: datetime | None = None,
    entry_id: int = 1,
) -> dict[str, Any]:
    """One `status.history` entry, as Argo CD appends it when a sync finishes."""
    return {
        "id": entry_id,
        "revision": revision,
        "deployStartedAt": format_time(started_at),
        "deployedAt": format_time(deployed_at or started_at + timedelta(seconds=5)),
        "initiatedBy": {"username": username},
    }


def _stamp(value: datetime | str) -> str:
    return value if isinstance(value, str) else format_time(value)


def make_application(
    name: str | None = None,
    *,
    namespace: str | None = "argocd",
    cluster: str = "c1",
    by: str = "server",
    server: str | None = None,
    owner: str | None = APP_SET,
    owner_kind: str = "ApplicationSet",
    owner_uid: str | None = APP_SET_UID,
    annotations: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    automated: Mapping[str, Any] | None = None,
    sync: str = "OutOfSync",
    revision: str | None = NEW_REVISION,
    revisions: Sequence[str] | None = None,
    sources: int = 0,
    source: Mapping[str, Any] | None = None,
    compared_to: str | Sequence[str] | None = None,
    health: str = "Healthy",
    health_message: str | None = None,
    reconciled_at: datetime | str | None = None,
    history: Sequence[Mapping[str, Any]] | None = None,
    operation: Mapping[str, Any] | bool | None = None,
    operation_info: Mapping[str, str] | None = None,
    phase: str | None = None,
    state_operation: Mapping[str, Any] | None = None,
    result_revision: str | Sequence[str] | None = None,
    started_at: datetime | str | None = None,
    finished_at: datetime | str | None = None,
    retry_count: int | None = None,
    message: str | None = None,
) -> dict[str, Any]:
    """An Application object as the API server returns it, at any point of a sync.

    `by` is "server", "name" or "both" (how `spec.destination` names the cluster). Multi-source:
    `revisions` (one per source) or `sources` (that many, each at `revision`). `automated` goes
    under `spec.syncPolicy.automated`. `operation` is a requested `.operation` (True: a sync to the
    new revision, with `operation_info` as its info). `source` replaces the default Git source (every
    source of a multi-source one: `{"chart": ...}` makes them Helm charts); `compared_to` is the
    `targetRevision` (one, or one per source) Argo CD's comparison records in `status.sync.comparedTo`,
    which `revision`/`revisions` resolve it to. With `phase`, `status.operationState` holds
    `state_operation` (default: ours, `our_operation`), started at `started_at` (default T0),
    and `result_revision` (one, or one per source) in its syncResult.
    """
    app_name = name or f"{APP_SET}-{cluster}"
    metadata: dict[str, Any] = {"name": app_name, "uid": f"uid-{app_name}"}
    if namespace is not None:
        metadata["namespace"] = namespace
    if owner is not None:
        ref: dict[str, Any] = {"apiVersion": "argoproj.io/v1alpha1", "kind": owner_kind, "name": owner}
        if owner_uid is not None:
            ref["uid"] = owner_uid
        metadata["ownerReferences"] = [ref]
    if annotations:
        metadata["annotations"] = dict(annotations)
    if labels:
        metadata["labels"] = dict(labels)
    destination: dict[str, Any] = {"namespace": "myservice"}
    if by in ("server", "both"):
        destination["server"] = server if server is not None else server_of(cluster)
    if by in ("name", "both"):
        destination["name"] = cluster
    spec: dict[str, Any] = {"project": "default", "destination": destination}
    if sources and revisions is None and revision is not None:
        revisions = [revision] * sources
    sync_status: dict[str, Any] = {"status": sync}
    if revisions is not None:
        spec["sources"] = [
            dict(source) if source is not None else {"repoURL": f"https://git.example/{i}.git"}
            for i in range(len(revisions))
        ]
        sync_status["revisions"] = list(revisions)
        if compared_to is not None:
            written = [compared_to] * len(revisions) if isinstance(compared_to, str) else list(compared_to)
            sync_status["comparedTo"] = {
                "sources": [{**s, "targetRevision": t} for s, t in zip(spec["sources"], written, strict=True)]
            }
    else:
        spec["source"] = (
            dict(source)
            if source is not None
            else {"repoURL": "https://git.example/deploy.git", "targetRevision": "main"}
        )
        if revision is not None:
            sync_status["revision"] = revision
        if compared_to is not None:
            sync_status["comparedTo"] = {"source": {**spec["source"], "targetRevision": compared_to}}
    if automated is not None:
        spec["syncPolicy"] = {"automated": dict(automated)}
    status: dict[str, Any] = {"sync": sync_status, "health": {"status": health}}
    if health_message:
        status["health"]["message"] = health_message
    if reconciled_at is not None:
        status["reconciledAt"] = _stamp(reconciled_at)
    if history is not None:
        status["history"] = [dict(entry) for entry in history]
    if phase is not None:
        count = len(revisions) if revisions is not None else 0
        state: dict[str, Any] = {
            "operation": dict(state_operation)
            if state_operation is not None
            else our_operation(sources=count),
            "phase": phase,
            "startedAt": _stamp(started_at or T0),
        }
        if finished_at is not None:
            state["finishedAt"] = _stamp(finished_at)
        if result_revision is not None:
            if count:
                results = [result_revision] * count if isinstance(result_revision, str) else result_revision
                state["syncResult"] = {"revisions": list(results)}
            else:
                state["syncResult"] = {"revision": result_revision}
        if retry_count is not None:
            state["retryCount"] = retry_count
        if message is not None:
            state["message"] = message
        status["operationState"] = state
    obj: dict[str, Any] = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Application",
        "metadata": metadata,
        "spec": spec,
        "status": status,
    }
    if operation is True:
        obj["operation"] = requested_operation(info=operation_info)
    elif operation:
        obj["operation"] = dict(operation)
    return obj


def done_application(**overrides: Any) -> dict[str, Any]:
    """An Application our rollout finished: Succeeded at the new revision, Synced, Healthy, reconciled."""
    values: dict[str, Any] = {
        "phase": "Succeeded",
        "result_revision": NEW_REVISION,
        "finished_at": at(10),
        "sync": "Synced",
        "health": "Healthy",
        "reconciled_at": at(12),
    }
    values.update(overrides)
    return make_application(**values)


def make_app(name: str | None = None, **kwargs: Any) -> AppView:
    """The `AppView` of `make_application(...)`."""
    return app_view_from_object(make_application(name, **kwargs))


def up_to_date(cluster: str, **kwargs: Any) -> AppView:
    """An Application of `cluster` that is Synced at the new revision and Healthy."""
    return make_app(cluster=cluster, **{"sync": "Synced", "health": "Healthy", **kwargs})


# --- rollout Workflows --------------------------------------------------------------------------


def make_release(
    rollout_id: str = ROLLOUT_ID,
    *,
    revisions: Sequence[Sequence[str]] = ((NEW_REVISION,),),
    generation: int = 1,
    spec_hash: str = "0123456789abcdef",
    attempt: int = 1,
) -> Release:
    """A `Release` whose rollout id is `rollout_id` (as a test names it, not as its hash would be)."""
    return Release(
        id=rollout_id,
        generation=generation,
        spec_hash=spec_hash,
        revisions=tuple(tuple(r) for r in revisions),
        attempt=attempt,
    )


def make_contract(
    stages: Sequence[str] = ("canary", "rest"),
    *,
    rollout_id: str = ROLLOUT,
    revisions: Sequence[Sequence[str]] = ((NEW_REVISION,),),
    sizing: Mapping[str, Mapping[str, Any]] | None = None,
    rollback: Mapping[str, Any] | None = None,
    windows: Sequence[Any] | None = None,
) -> RolloutContract:
    """A rollout contract (orchestrator.planning.contract) for steps run by a test: each stage of
    `stages` one target at a time, one pod per cluster, no first wave, unless `sizing` says otherwise
    for it (`{"rest": {"start_syncs": 2}}`, `{"rest": {"batches": 1, "max_parallel": 3}}`).
    `rollback`: the contract's rollback (`{"on": ["StageFailed"], "scope": "Reached",
    "progress_deadline_seconds": 60}`); every stage then rolls back one cluster at a time unless
    `sizing` gives its `rollback_parallel`. `windows`: the contract's (`spec.windows`)."""
    sized = sizing or {}
    parallel = {"rollback_parallel": 1} if rollback is not None else {}
    return RolloutContract(
        rollout_id=rollout_id,
        release=tuple(tuple(r) for r in revisions),
        stages=tuple(
            StageContract(
                **{
                    "name": name,
                    "targets": 1,
                    "max_parallel": 1,
                    "start_syncs": 0,
                    **parallel,
                    **sized.get(name, {}),
                }
            )
            for name in stages
        ),
        rollback=RollbackContract(**rollback) if rollback is not None else None,
        windows=tuple(windows) if windows else None,
    )


def make_gate_node(
    workflow_name: str, stage: str, *, phase: str = "Running", with_input: bool = True
) -> dict[str, Any]:
    """The approval suspend node of `stage`, as Argo writes it into `status.nodes`."""
    task = names.sanitize_task_name(stage)
    node: dict[str, Any] = {
        "id": f"{workflow_name}-gate-{task}",
        "name": f"{workflow_name}.{task}.{names.APPROVE_TASK}",
        "displayName": names.APPROVE_TASK,
        "type": "Suspend",
        "templateName": names.APPROVAL_TEMPLATE,
        "phase": phase,
        "startedAt": STARTED,
    }
    if with_input:
        node["inputs"] = {"parameters": [{"name": "stage", "value": stage}]}
    return node


def make_bake_node(workflow_name: str, stage: str) -> dict[str, Any]:
    """A running bake wait after `stage` (a suspend node with a duration, not a gate)."""
    task = names.sanitize_task_name(stage)
    return {
        "id": f"{workflow_name}-bake-{task}",
        "name": f"{workflow_name}.{task}.{names.BAKE_TASK}",
        "displayName": names.BAKE_TASK,
        "type": "Suspend",
        "templateName": names.bake_template_name(60),
        "phase": "Running",
        "startedAt": STARTED,
    }


def make_workflow(
    ps_name: str = PS_NAME,
    *,
    namespace: str = "argocd",
    rollout_id: str = ROLLOUT_ID,
    phase: str = "Running",
    shutdown: str | None = None,
    suspend: bool = False,
    nodes: Sequence[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The rollout Workflow with `nodes` in `status.nodes` (keyed by id)."""
    name = workflow_name(ps_name, rollout_id)
    spec: dict[str, Any] = {"entrypoint": names.ENTRYPOINT, "templates": []}
    if shutdown:
        spec["shutdown"] = shutdown
    if suspend:
        spec["suspend"] = True
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {NAME_LABEL: label_value(ps_name), ROLLOUT_ID_LABEL: rollout_id},
        },
        "spec": spec,
        "status": {
            "phase": phase,
            "startedAt": STARTED,
            "nodes": {node["id"]: node for node in nodes or []},
        },
    }
