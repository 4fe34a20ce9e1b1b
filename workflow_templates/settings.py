"""`WorkflowSettings`: everything about the rollout Workflow that is deployment, not spec.

Built once by the caller (the watcher from its flags and `PROGRESSIVE_SYNC_*` environment, the
`render` command, tests) and passed down explicitly to `build_workflow` and the WorkflowTemplate
builders. Nothing here reads the environment by itself except `from_environment`, which the CLI
calls with the environment it was given.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from orchestrator import __version__

IMAGE_REPOSITORY = "ghcr.io/progressive-sync/progressive-sync"
DEFAULT_IMAGE = f"{IMAGE_REPOSITORY}:{__version__}"
ENV_PREFIX = "PROGRESSIVE_SYNC_WORKFLOW_"
_LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_QUANTITY = re.compile(r"^[+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+|[numkMGTPE]|[KMGTPE]i)?$")


@dataclass(frozen=True)
class StepResources:
    """Requests and limits of every step container (Kubernetes quantities; empty means unset)."""

    cpu_request: str = "50m"
    memory_request: str = "64Mi"
    cpu_limit: str = ""
    memory_limit: str = "256Mi"

    @classmethod
    def from_kubernetes(cls, value: Any, *, source: str) -> StepResources:
        """From a container's `resources` ({requests: {cpu, memory}, limits: {cpu, memory}}).

        What is not given is unset (not defaulted): the chart's `steps.resources` is the whole
        truth. ValueError naming `source` and the key for anything else.
        """
        if not isinstance(value, Mapping):
            raise ValueError(f"{source}: expected {{requests: {{...}}, limits: {{...}}}}, got {value!r}")
        unknown = sorted(set(value) - {"requests", "limits"})
        if unknown:
            raise ValueError(f"{source}: unknown key {unknown[0]!r} (use requests and limits)")
        fields_: dict[str, str] = {}
        for kind, suffix in (("requests", "request"), ("limits", "limit")):
            section = value.get(kind) or {}
            if not isinstance(section, Mapping):
                raise ValueError(f"{source}: {kind} must be a mapping of cpu and memory, got {section!r}")
            extra = sorted(set(section) - {"cpu", "memory"})
            if extra:
                raise ValueError(f"{source}: {kind}.{extra[0]} is not supported (only cpu and memory)")
            for resource in ("cpu", "memory"):
                quantity = section.get(resource)
                if quantity is not None and not _QUANTITY.fullmatch(str(quantity)):
                    raise ValueError(
                        f"{source}: {kind}.{resource} {quantity!r} is not a Kubernetes quantity "
                        "(e.g. 100m, 0.5, 64Mi, 1G)"
                    )
                fields_[f"{resource}_{suffix}"] = "" if quantity is None else str(quantity)
        return cls(**fields_)


@dataclass(frozen=True)
class WorkflowSettings:
    """How the rollout Workflow runs its steps, and the budgets its deadline is derived from.

    Retries: a step exiting 75 (temporary error, docs/design/CONTRACTS.md) or a node in phase Error (the
    pod was lost: evicted, node gone) is retried up to `retry_limit` times, however long each
    attempt ran, with the wait before attempt n+1 `retry_backoff` * `retry_factor`^(n-1) capped at
    `retry_backoff_cap` (Argo's `backoff.cap`: a cap on one wait). Nothing caps the whole window:
    Argo's `backoff.maxDuration` would count from the first attempt's start and also kill a
    retried attempt at that time (it becomes the pod's ARGO_DEADLINE), which a step that waits
    for minutes cannot live with. Exit 1 (a cluster or stage failed) is never retried, but Argo
    still waits out the current backoff before it says so (it checks the backoff before the
    retry expression), so a failure is reported `retry_backoff` late.

    Deadline (`activeDeadlineSeconds`, see `builder.active_deadline_seconds`): per stage,
    `step_budget_seconds` for each of select and record, per wave of `maxParallel` clusters
    `step_budget_seconds` (sync) plus the spec's `progressDeadlineSeconds` (wait-healthy), plus
    `bakeSeconds`, plus `approval_window_seconds` when the stage waits for a person; the sum,
    plus one step budget for the exit handler, is multiplied by `deadline_factor`.
    """

    image: str = DEFAULT_IMAGE
    image_pull_policy: str = "IfNotPresent"
    service_account: str = "progressive-sync-steps"
    # Where Applications and cluster Secrets live; None: the ProgressiveSync's namespace.
    argocd_namespace: str | None = None
    command: tuple[str, ...] = ("python", "-m", "steps")
    # The step container runs as this user, non-root, on a read-only root filesystem with the
    # RuntimeDefault seccomp profile; `outputs_dir` is an emptyDir, its only writable place.
    outputs_dir: str = "/tmp/outputs"
    run_as_user: int = 65532
    resources: StepResources = field(default_factory=StepResources)
    # The Argo Rollouts controller's `--instance-id` ("": one started without): the analysis steps
    # label their AnalysisRuns for it (`PROGRESSIVE_SYNC_ROLLOUTS_INSTANCE_ID` in the steps).
    rollouts_instance_id: str = ""
    # Extra environment for every step container, e.g. (("PROGRESSIVE_SYNC_LOG_LEVEL", "debug"),).
    extra_env: tuple[tuple[str, str], ...] = ()
    retry_limit: int = 4
    retry_backoff: str = "5s"
    retry_factor: int = 2
    retry_backoff_cap: str = "1m"
    step_budget_seconds: int = 300
    approval_window_seconds: int = 7 * 24 * 3600
    deadline_factor: float = 1.5
    # A stage with more planned targets than this runs in batches (`python -m steps batch`: one pod
    # syncs and watches many clusters) instead of one pod per cluster, so the Workflow keeps
    # O(stages x batches) nodes; 0 puts every stage with a planned target in batches.
    batch_threshold: int = 50
    # How many clusters one batch pod takes at most, unless maxParallel is smaller than the batch
    # count this gives (every batch runs at least one cluster at a time; then batches are bigger).
    batch_clusters: int = 500
    # Upper bound of status nodes one Workflow may create: Argo keeps every node in the Workflow
    # object (compressed past ~1 MiB, then an offload database we do not require). With batches a
    # stage costs about 7 + 2 x batches nodes, so only hundreds of stages reach it.
    max_nodes: int = 4000
    # Run the rollout follower (steps/follow.py) beside the stages: a done cluster's slot, and its
    # stage's boundary, are taken the moment it is done, not when its pod has started (~8 s on the
    # real engine). One more pod per rollout, which reads the ProgressiveSync every 1-2 s and
    # watches the stage's Applications. Off: `PROGRESSIVE_SYNC_WORKFLOW_FOLLOWER=false`, the
    # watcher's --no-follower, the chart's `steps.follower: false`.
    follower: bool = True
    # A stage of one pod per cluster with more targets than maxParallel and at most this many starts
    # all its cluster pods together; each waits for a free slot and claims it on the stage's records
    # (steps/turn.py), so a freed slot is taken by a pod that already runs instead of one Argo starts
    # once the pod before it ended (~8 s on a real node). The pods that wait cost their requests
    # (50m CPU, 64 MiB each) and one watch each. 0: never (maxParallel pods at a time).
    # `PROGRESSIVE_SYNC_WORKFLOW_PODS_AT_ONCE_LIMIT`, the chart's `steps.podsAtOnceLimit`.
    pods_at_once_limit: int = 20

    def __post_init__(self) -> None:
        if self.retry_limit < 0:
            raise ValueError("retry_limit must be >= 0")
        if self.step_budget_seconds < 1 or self.approval_window_seconds < 0:
            raise ValueError("step_budget_seconds must be >= 1 and approval_window_seconds >= 0")
        if self.deadline_factor < 1:
            raise ValueError("deadline_factor must be >= 1 (it only ever adds slack)")
        if not self.command:
            raise ValueError("command must not be empty")
        if self.batch_threshold < 0 or self.batch_clusters < 1:
            raise ValueError("batch_threshold must be >= 0 and batch_clusters >= 1")
        if self.pods_at_once_limit < 0:
            raise ValueError(
                "pods_at_once_limit must be >= 0 (0: a stage's pods start maxParallel at a time)"
            )
        if self.rollouts_instance_id and not _LABEL_VALUE.fullmatch(self.rollouts_instance_id):
            raise ValueError(
                f"--rollouts-instance-id (rollouts_instance_id, chart value analysis.rolloutsInstanceId) "
                f"{self.rollouts_instance_id!r} is not a label value (at most 63 "
                "letters, digits, '-', '_' or '.', starting and ending with a letter or digit): it "
                "must equal the Argo Rollouts controller's --instance-id"
            )

    @classmethod
    def from_environment(cls, environ: Mapping[str, str], **overrides: Any) -> WorkflowSettings:
        """Settings from `PROGRESSIVE_SYNC_WORKFLOW_<FIELD>` variables (e.g. `..._IMAGE`), then overrides.

        Covers the plain string and number fields; tuples and resources come from overrides.
        """
        values: dict[str, Any] = {}
        for item in fields(cls):
            raw = environ.get(ENV_PREFIX + item.name.upper())
            if raw is None:
                continue
            if item.type in ("str", "str | None"):
                values[item.name] = raw
            elif item.type == "int":
                values[item.name] = int(raw)
            elif item.type == "float":
                values[item.name] = float(raw)
            elif item.type == "bool":
                values[item.name] = _boolean(ENV_PREFIX + item.name.upper(), raw)
        return replace(cls(**values), **overrides)


def _boolean(variable: str, raw: str) -> bool:
    """`true`/`false` (any case, also 1/0, yes/no, on/off); ValueError naming the variable otherwise."""
    value = raw.strip().lower()
    if value in ("true", "1", "yes", "on"):
        return True
    if value in ("false", "0", "no", "off"):
        return False
    raise ValueError(f"{variable}={raw!r}: expected true or false")
