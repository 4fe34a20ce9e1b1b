"""The opening every stage step shares: one `StepContext` per step, made by `StepContext.open`.

A step of a stage (`select`, `sync`, `wait-healthy`, `cluster`, `batch`, `record`,
`record-and-select`) starts the same way: read the ProgressiveSync, check that its status is on this
Workflow's rollout (or, for `select`, that this rollout may take it over:
`steps.common.check_succession`), check that the stage is one of the spec's and of the rollout
contract's, and take the release and the stage's sizing from the contract
(`orchestrator.planning.contract`, parsed once by the entrypoint). `open` does all of that, in that
order, and the step then reads what it needs from the context: no step checks a revision or
resolves a size of its own.

The context is a frozen snapshot: `ps` is the ProgressiveSync as read when it was opened. A step
that needs a fresher read (wait-healthy after the sync, each cluster of a batch) opens it again
(`reopen`), which checks the rollout and the stage again on the new read.

Callers: `steps.cli` (the entrypoint opens it for each step) and the step modules.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from orchestrator.api.models import ProgressiveSync
from orchestrator.api.release import Revisions
from orchestrator.api.stage_records import StageOutcomes
from orchestrator.core.clock import Clock
from orchestrator.kube.client import Kube
from orchestrator.planning.contract import RolloutContract, StageContract
from steps.common import (
    FleetLookup,
    RolloutRef,
    Tuning,
    UsageProblem,
    check_rollout,
    check_stage,
    check_succession,
    load_progressive_sync,
)
from steps.status_sink import DirectSink, StatusSink, read_stage_records


@dataclass(frozen=True)
class StepContext:
    """What a stage step works with: its rollout, the contract, its stage, the ProgressiveSync as
    read when the step opened, and its clock and timings (see the module)."""

    rollout: RolloutRef  # with the namespace of the ApplicationSet's Applications
    contract: RolloutContract
    stage: StageContract
    ps: ProgressiveSync
    clock: Clock
    tuning: Tuning
    # `select` only: the older rollout the status records, which this one may take over.
    replaces: str | None = None

    @property
    def stage_name(self) -> str:
        """The stage the step works on."""
        return self.stage.name

    @property
    def release(self) -> tuple[Revisions, ...]:
        """The release's revision sets, as the contract carries them (checked when it was parsed)."""
        return self.contract.release

    @classmethod
    def open(
        cls,
        kube: Kube,
        rollout: RolloutRef,
        contract: RolloutContract,
        *,
        stage: str,
        clock: Clock,
        tuning: Tuning | None = None,
        ps: ProgressiveSync | None = None,
        taking_over: bool = False,
    ) -> StepContext:
        """Read the ProgressiveSync (unless `ps`, read a moment ago), check the rollout and the stage.

        Raises Superseded when the status is on another rollout (with `taking_over`, `select`'s
        rule: unless it is an older one this rollout replaces), UsageProblem when the stage is not
        the spec's or the contract's, or the contract names another rollout than `rollout`.
        """
        if rollout.rollout_id != contract.rollout_id:
            raise UsageProblem(
                f"the rollout contract is for rollout {contract.rollout_id}, not {rollout.rollout_id}"
            )
        ps = ps or load_progressive_sync(kube, rollout)
        replaces = None
        if taking_over:
            check_stage(ps, stage)
            replaces = check_succession(kube, ps, rollout.rollout_id)
        else:
            check_rollout(ps, rollout.rollout_id)
            check_stage(ps, stage)
        sized = contract.stage(stage)
        if sized is None:
            raise UsageProblem(
                f"--stage {stage!r} is not in the rollout contract (stages: "
                f"{', '.join(s.name for s in contract.stages)}): the contract was made for another spec"
            )
        return cls(
            rollout=rollout.with_applications_of(ps),
            contract=contract,
            stage=sized,
            ps=ps,
            clock=clock,
            tuning=tuning or Tuning(),
            replaces=replaces,
        )

    def reopen(
        self,
        kube: Kube,
        *,
        stage: str | None = None,
        ps: ProgressiveSync | None = None,
        taking_over: bool = False,
    ) -> StepContext:
        """The context again with the ProgressiveSync read now (or `ps`), for `stage` (default: this one)."""
        return StepContext.open(
            kube,
            self.rollout,
            self.contract,
            stage=stage or self.stage.name,
            clock=self.clock,
            tuning=self.tuning,
            ps=ps,
            taking_over=taking_over,
        )


@dataclass(frozen=True)
class Shared:
    """What a cluster step (`sync`, `wait-healthy`, `cluster`) may be handed instead of making its
    own: the sink its records go to (a batch gathers its clusters'; default: each written at once),
    the stage's records as the caller read them with the context's ProgressiveSync (`outcomes`: the
    cluster's recorded outcome and the stage's failures; a batch hands in its first read with what
    it wrote since and the failures read again; default: read here) and the fleet lookup (a
    `cluster` pod's sync and wait share one, a batch's clusters another; default: read fresh,
    `steps.common.FleetLookup`)."""

    sink: StatusSink | None = None
    fleet: FleetLookup | None = None
    outcomes: StageOutcomes | None = None

    def with_records(self, kube: Kube, ctx: StepContext) -> Shared:
        """This, with a sink and the stage's outcomes: the stage's records are read (one list
        request) only when either was not handed in."""
        if self.sink is not None and self.outcomes is not None:
            return self
        where = read_stage_records(kube, ctx.rollout, ctx.ps, ctx.stage_name)
        return replace(
            self, sink=self.sink or DirectSink(kube, where), outcomes=self.outcomes or where.outcomes
        )

    def fleet_for(self, kube: Kube, ctx: StepContext, *, max_age_seconds: float = 0.0) -> FleetLookup:
        """The lookup handed in, else one over the context's ProgressiveSync; either told the
        Applications `select` planned for each target when the stage's records are at hand
        (`outcomes`: their `targetApps`), so a cluster's are read by name, not by listing the
        namespace. The one place a cluster step's lookup learns them."""
        fleet = self.fleet or FleetLookup(
            kube, ctx.rollout, ctx.ps, clock=ctx.clock, max_age_seconds=max_age_seconds
        )
        if self.outcomes is not None:
            fleet.plan(self.outcomes.apps)
        return fleet


ALONE = Shared()
"""A cluster step run on its own: its own sink and lookup."""
