"""Rollout contracts with a rollback, made by hand, and the Workflows built from them.

Until the API's `spec.rollback` reaches `make_contract`, the builder tests, the engine tests and the
lint test give the Workflow builder a contract with a rollback this way
(`workflow_templates.builder.build_workflow_of_contract`). Pure values; nothing here is a stand-in
for a real component.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hera.workflows import Workflow

from orchestrator.api.models import ProgressiveSync
from orchestrator.api.release import Release
from orchestrator.planning.contract import RollbackContract, RolloutContract
from workflow_templates.builder import StageSize, build_workflow_of_contract, contract_for
from workflow_templates.settings import WorkflowSettings


def with_rollback(
    contract: RolloutContract,
    *,
    parallel: Mapping[str, int] | None = None,
    on: Sequence[str] = ("StageFailed",),
    scope: str = "FailedStage",
    progress_deadline_seconds: int = 600,
) -> RolloutContract:
    """`contract` with a rollback; each stage's rollbackParallel from `parallel` (by stage name),
    else its maxParallel, as the sizing rule gives it without rollback.maxParallel."""
    stages = tuple(
        stage.model_copy(update={"rollback_parallel": (parallel or {}).get(stage.name, stage.max_parallel)})
        for stage in contract.stages
    )
    rollback = RollbackContract(
        on=tuple(on), scope=scope, progress_deadline_seconds=progress_deadline_seconds
    )
    return contract.model_copy(update={"rollback": rollback, "stages": stages})


def rollback_workflow(
    ps: ProgressiveSync,
    *,
    release: Release,
    sizes: Mapping[str, StageSize],
    settings: WorkflowSettings,
    parallel: Mapping[str, int] | None = None,
    **rollback: Any,
) -> Workflow:
    """The Workflow of `ps` with these stage sizes and a rollback (see `with_rollback`)."""
    contract = contract_for(ps, release=release, plan=sizes, settings=settings)
    contract = with_rollback(contract, parallel=parallel, **rollback)
    return build_workflow_of_contract(ps, release=release, contract=contract, settings=settings)
