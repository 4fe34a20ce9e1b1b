"""The thin entrypoint of the steps: parse options, build the adapter, call the step, map the outcome.

Options come from flags or from `PROGRESSIVE_SYNC_<OPTION>` environment variables (a flag wins), as
docs/design/CONTRACTS.md fixes them. Every step reads the rollout contract (`--contract`, its JSON or a
file holding it; `PROGRESSIVE_SYNC_CONTRACT` in a Workflow's containers), parsed once here
(`orchestrator.planning.contract.parse_contract`; missing or malformed: exit 2 naming the field):
the rollout id, the release and every stage's sizing come from it and from nowhere else. Each
command builds the `RolloutRef` and the `Kube` adapter once, opens the step's context
(`steps.context.StepContext.open`) with a `SystemClock`, calls its typed step function, writes the
output files, prints one summary line on stdout (logs go to stderr) and exits:

- 0 success; 1 a rollout failure (the cluster or the stage failed, or the rollout was superseded);
- 2 a permanent error (`orchestrator.core.errors.PermanentError`: bad usage or configuration, the
  message names the option or object; RBAC refusals too);
- 75 a temporary error (`TemporaryError`: API unreachable, timeouts, conflicts that kept coming): the
  only code the Workflow's retryStrategy retries.

Which of the two an error is follows from its type alone (`step_error`): a step raises one of them,
and an adapter error is mapped by the adapter (`orchestrator.kube.client.temporary_or_permanent`);
`exit_code` maps the two types to exit codes, here and nowhere else.

Caller: `python -m steps` (steps/__main__.py), i.e. the Workflow's containers and the local executor.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NoReturn, Protocol

import click

from orchestrator.api.analysis import AnalysisWhen
from orchestrator.argocd.assess import WorkflowOutcome
from orchestrator.core.clock import SystemClock
from orchestrator.core.errors import PermanentError, TemporaryError
from orchestrator.core.stop_signals import relay_stop_signals
from orchestrator.kube.client import Kube, KubeError, temporary_or_permanent
from orchestrator.planning.contract import ContractError, RolloutContract, parse_contract
from steps.analyze import AnalyzeResult, OpenRuns, analyze
from steps.batch import run_batch
from steps.chain import run_and_hand_off
from steps.common import RolloutRef, Superseded, Tuning
from steps.context import StepContext
from steps.depends import wait_for_dependencies
from steps.failure import record_step_failure
from steps.finalize import finalize
from steps.follow import follow_rollout
from steps.hand_over import HandOverResult, hand_over
from steps.rollback import rollback_batch, rollback_cluster
from steps.rollback_plan import RollbackPlanResult, plan_rollout_rollback
from steps.rollout_end import record_step
from steps.select_stage import SelectResult, select_stage
from steps.status_sink import OpenSinks
from steps.sync import sync_cluster
from steps.wait_healthy import wait_healthy

log = logging.getLogger("steps")

EXIT_OK = 0
EXIT_ROLLOUT_FAILED = 1
EXIT_USAGE = 2
EXIT_TEMPORARY = 75
ENV_PREFIX = "PROGRESSIVE_SYNC_"
TERMINATION_LOG_ENV = "PROGRESSIVE_SYNC_TERMINATION_LOG"
DEFAULT_TERMINATION_LOG = "/dev/termination-log"
# The kubelet keeps at most 4096 bytes of a container's termination message.
TERMINATION_MESSAGE_BYTES = 4096


def step_error(exc: BaseException) -> TemporaryError | PermanentError | None:
    """What a step's error says about trying again: its own type, or the adapter's mapping of an API
    error; None for anything else (a bug)."""
    if isinstance(exc, TemporaryError | PermanentError):
        return exc
    if isinstance(exc, KubeError):
        return temporary_or_permanent(exc)
    return None


def exit_code(error: TemporaryError | PermanentError) -> int:
    """The exit code of a step's error, from its type alone: 75 temporary (the Workflow retries the
    step), 2 permanent (a person must act). A crash is a bug: its traceback, exit 1 from Python."""
    return EXIT_TEMPORARY if isinstance(error, TemporaryError) else EXIT_USAGE


class StepResult(Protocol):
    """What every step function returns."""

    @property
    def failed(self) -> bool:
        """True on a rollout failure."""
        ...

    @property
    def summary(self) -> str:
        """One line for people."""
        ...


@dataclass(frozen=True)
class StepSettings:
    """The options every step takes, parsed once from flags and environment."""

    rollout: RolloutRef
    contract: RolloutContract
    kubeconfig: str | None
    outputs_dir: Path
    tuning: Tuning


def _env(option: str) -> str:
    return ENV_PREFIX + option.upper().replace("-", "_")


def _option(name: str, **kwargs: Any) -> Callable[[Any], Any]:
    return click.option(f"--{name}", envvar=_env(name), show_envvar=True, **kwargs)


def common_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The options of every step (docs/design/CONTRACTS.md)."""
    decorators = [
        _option("namespace", required=True, help="Namespace of the ProgressiveSync."),
        _option("name", required=True, help="Name of the ProgressiveSync."),
        _option(
            "contract",
            default=None,
            help=(
                "The rollout contract (docs/design/CONTRACTS.md): its JSON, or a file holding it. The "
                "rollout id, the release's revisions and every stage's sizing come from it."
            ),
        ),
        _option(
            "argocd-namespace",
            default=None,
            help="Where the cluster inventory ConfigMap lives [default: --namespace].",
        ),
        _option("kubeconfig", default=None, help="Kubeconfig file; in a pod the service account is used."),
        _option(
            "outputs-dir",
            default="/tmp/outputs",
            show_default=True,
            type=click.Path(file_okay=False, path_type=Path),
            help="Where output parameters are written.",
        ),
        _option(
            "watch-window-seconds",
            default=Tuning.watch_window_seconds,
            show_default=True,
            type=click.IntRange(min=1),
            help="Longest quiet watch before the step looks at its deadline and the cluster inventory again.",
        ),
    ]
    for decorator in reversed(decorators):
        command = decorator(command)
    return command


def _settings(options: Mapping[str, Any]) -> StepSettings:
    namespace = options["namespace"]
    for key in ("namespace", "name"):
        if not str(options[key]).strip():
            raise click.UsageError(f"--{key.replace('_', '-')} is empty")
    try:
        contract = parse_contract(options["contract"])
    except ContractError as exc:
        # As any step's usage problem: one line on stdout, exit 2 (no status write: without a
        # contract there is no rollout to write it for).
        _setup_logging()
        log.error("--contract: %s", exc)
        click.echo(f"--contract: {exc}")
        sys.exit(EXIT_USAGE)
    return StepSettings(
        rollout=RolloutRef(
            namespace=namespace,
            name=options["name"],
            rollout_id=contract.rollout_id,
            argocd_namespace=options["argocd_namespace"] or namespace,
            stage_names=tuple(stage.name for stage in contract.stages),
        ),
        contract=contract,
        kubeconfig=options["kubeconfig"],
        outputs_dir=options["outputs_dir"],
        tuning=Tuning(watch_window_seconds=options["watch_window_seconds"]),
    )


def _setup_logging() -> None:
    level = os.environ.get(_env("log-level"), "INFO").upper()
    logging.basicConfig(
        stream=sys.stderr,
        level=getattr(logging, level, logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def run_step(
    step: str,
    settings: StepSettings,
    call: Callable[[Kube], StepResult],
    outputs: Callable[[StepResult], Mapping[str, str]] | None = None,
    *,
    stage: str | Callable[[], str] = "",
    cluster: str = "",
    before_exit: Callable[[], str] | None = None,
) -> NoReturn:
    """Build the adapter, run the step, write outputs, print the summary and exit with its code.

    A step of a stage that cannot do its job (exit 2 or 75, a crash) first leaves its message in
    the stage status (`steps.failure`). `before_exit`: what a step sent SIGTERM still does before
    it exits (bounded; it returns what it did, for the summary line)."""
    _setup_logging()
    # On the relay thread, not in a handler: what it writes may need a lock the main thread holds.
    # Never undone: a SIGTERM after the work, while the process exits, still exits 75, not 143.
    relay_stop_signals(lambda _signum: _stopped(step, before_exit), signals=(signal.SIGTERM,))
    code, line = _run(step, settings, call, outputs, stage=stage, cluster=cluster)
    click.echo(line)
    if code != EXIT_OK:
        write_termination_message(line)
    sys.exit(code)


def write_termination_message(line: str) -> None:
    """Leave a failing step's summary line as its container's termination message.

    Kubernetes keeps that file's text on the container's terminated state and Argo v3.7 puts it
    in the node's `message` ("main: Error (exit code 1): <line>", operator.go inferFailedReason),
    which the Argo UI shows in the node's panel; without it the message is only "Error (exit code
    1)". The kubelet makes the file in every container ($PROGRESSIVE_SYNC_TERMINATION_LOG, default
    /dev/termination-log); where it does not exist (the local executor, a shell) nothing is
    written: the local executor puts the same line in the node's message from stdout."""
    path = Path(os.environ.get(TERMINATION_LOG_ENV) or DEFAULT_TERMINATION_LOG)
    if not path.is_file():
        return
    with contextlib.suppress(OSError):
        path.write_text(line.encode()[:TERMINATION_MESSAGE_BYTES].decode(errors="ignore"))


def _stopped(step: str, before_exit: Callable[[], str] | None = None) -> NoReturn:
    """SIGTERM: the step's pod is being deleted (by hand, evicted, its node drained). That is no
    verdict on the cluster or the stage: exit 75 at once, so the Workflow's retryStrategy runs the
    step again, and the retry resumes where this one was (the steps are idempotent).

    Without this the process died of the signal (exit 137 through Argo's emissary), its pod ended
    Failed, and Argo retries only `Error` nodes and exit 75: a deleted pod failed its cluster, unless
    the pod was gone before the controller saw it end (then "pod deleted", an Error, retried).
    Argo itself stops pods with SIGTERM only when the Workflow is stopped, terminated or past its
    deadline, and then retries nothing. Exits without waiting for a batch's cluster threads
    (`os._exit`): what they did is found again by the retry; what they had gathered for the status
    is written first, within a bound (`before_exit`: a batch's `OpenSinks`, issue 29 point 9).
    Runs on the stop-signals relay thread (orchestrator.core.stop_signals), never in the handler:
    the writes take locks (the connection pool's, the sinks') that the main thread may hold.
    """
    line = (
        f"{step}: stopped by SIGTERM before it finished (its pod deleted, evicted or drained): "
        "not a verdict on the cluster; exit 75, the retry resumes it"
    )
    log.warning("%s", line)
    if before_exit is not None:
        try:
            done = before_exit()
        except Exception as exc:  # the exit 75 must happen whatever this did
            done = f"could not write what it had gathered: {exc}"
        log.warning("%s: %s", step, done)
        line += f"; {done}"
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
    write_termination_message(line)
    os._exit(EXIT_TEMPORARY)


def _run(
    step: str,
    settings: StepSettings,
    call: Callable[[Kube], StepResult],
    outputs: Callable[[StepResult], Mapping[str, str]] | None,
    *,
    stage: str | Callable[[], str] = "",
    cluster: str = "",
) -> tuple[int, str]:
    try:
        kube = Kube.from_kubeconfig(settings.kubeconfig)
    except KubeError as exc:
        log.error("%s", exc)
        return EXIT_USAGE, f"{step}: cannot reach the API server: {exc} (check --kubeconfig)"

    def leave_word(message: str, *, final: bool) -> None:
        # A step of two stages (record-and-select) names the stage it is at when it fails.
        stage_now = stage() if callable(stage) else stage
        if stage_now:
            record_step_failure(
                kube,
                settings.rollout,
                step=step,
                stage=stage_now,
                cluster=cluster,
                message=message,
                final=final,
                settings=settings.tuning.status,
            )

    try:
        result = call(kube)
    except Superseded as exc:
        log.error("%s", exc)
        return EXIT_ROLLOUT_FAILED, f"{step}: {exc}"
    except Exception as exc:
        error = step_error(exc)
        if error is None:
            # A bug: the traceback goes to stderr as usual, the stage hears of it first.
            leave_word(f"crashed: {type(exc).__name__}: {exc}", final=True)
            raise
        if isinstance(error, PermanentError):
            # A retry cannot help: a person changes an option, a permission or an object.
            log.error("%s", error)
            leave_word(str(error), final=True)
            return exit_code(error), f"{step}: {error}"
        log.error("temporary error: %s", error)
        leave_word(f"temporary error: {error}", final=False)
        return exit_code(error), f"{step}: temporary error, try again: {error}"
    finally:
        kube.close()
    if outputs is not None:
        settings.outputs_dir.mkdir(parents=True, exist_ok=True)
        for filename, content in outputs(result).items():
            (settings.outputs_dir / filename).write_text(content)
    return (EXIT_ROLLOUT_FAILED if result.failed else EXIT_OK), result.summary


def _context(kube: Kube, settings: StepSettings, stage: str, *, taking_over: bool = False) -> StepContext:
    """The step's opening (steps.context): the ProgressiveSync read and checked, the stage's contract."""
    return StepContext.open(
        kube,
        settings.rollout,
        settings.contract,
        stage=stage,
        clock=SystemClock(),
        tuning=settings.tuning,
        taking_over=taking_over,
    )


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
def main() -> None:
    """The steps of a progressive-sync rollout Workflow (docs/design/CONTRACTS.md)."""


_compare_wait_option = _option(
    "compare-wait-seconds",
    default=Tuning.compare_wait_seconds,
    show_default=True,
    type=click.FloatRange(min=0),
    help="Longest wait for Argo CD to answer the refreshes select asked for before planning.",
)


def _settings_waiting_for_compare(options: Mapping[str, Any], compare_wait_seconds: float) -> StepSettings:
    """The step's settings with `--compare-wait-seconds` (select and record-and-select)."""
    settings = _settings(options)
    return replace(settings, tuning=replace(settings.tuning, compare_wait_seconds=compare_wait_seconds))


def _targets_output(result: StepResult) -> dict[str, str]:
    """The `targets` output parameter: the selected stage's targets as a JSON list, rollout order."""
    assert isinstance(result, SelectResult | HandOverResult)
    return {"targets": json.dumps(list(result.targets))}


@main.command("select")
@common_options
@_option("stage", required=True, help="The stage to plan.")
@_compare_wait_option
def select_command(stage: str, compare_wait_seconds: float, **options: Any) -> None:
    """Plan one stage against the live fleet; output `targets` (JSON list, rollout order); start the
    syncs of its first wave (the contract's `startSyncs`)."""
    settings = _settings_waiting_for_compare(options, compare_wait_seconds)
    run_step(
        "select",
        settings,
        lambda kube: select_stage(kube, _context(kube, settings, stage, taking_over=True)),
        _targets_output,
        stage=stage,
    )


ClusterStep = Callable[[Kube, StepContext, str], StepResult]


def _cluster_command(step: str, function: ClusterStep, summary: str) -> None:
    """`sync`, `wait-healthy` and `cluster`: one cluster of a stage, the same options."""

    @main.command(step, help=summary)
    @common_options
    @_option("stage", required=True, help="The stage the cluster belongs to.")
    @_option("cluster", required=True, help="The cluster (Argo CD cluster name).")
    def command(stage: str, cluster: str, **options: Any) -> None:
        settings = _settings(options)
        run_step(
            step,
            settings,
            lambda kube: function(kube, _context(kube, settings, stage), cluster),
            stage=stage,
            cluster=cluster,
        )


_cluster_command(
    "sync", sync_cluster, "Request the pinned sync of the cluster's Applications (once per rollout)."
)
_cluster_command(
    "wait-healthy",
    wait_healthy,
    "Follow the cluster's Applications until done or failed; record the outcome.",
)
_cluster_command(
    "cluster",
    run_and_hand_off,
    "Sync the cluster, then wait until it is done or failed (not started when the stage failed); "
    "once it is done, start the next cluster's sync (the chained hand-off, steps/chain.py).",
)


@main.command("batch")
@common_options
@_option("stage", required=True, help="The stage the batch belongs to.")
@_option(
    "batch",
    required=True,
    type=click.IntRange(min=0),
    help="Which batch: 0 .. the stage's batches - 1 (the contract's `batches`).",
)
@_option(
    "batch-flush-seconds",
    default=Tuning.batch_flush_seconds,
    show_default=True,
    type=click.FloatRange(min=0.1),
    help="How often the batch writes the status changes its clusters gathered (a failure at once).",
)
def batch_command(*, stage: str, batch: int, batch_flush_seconds: float, **options: Any) -> None:
    """Run one batch of a large stage's clusters in this process (each as the `cluster` step would)."""
    settings = _settings(options)
    settings = replace(settings, tuning=replace(settings.tuning, batch_flush_seconds=batch_flush_seconds))
    open_sinks = OpenSinks()
    run_step(
        "batch",
        settings,
        lambda kube: run_batch(kube, _context(kube, settings, stage), batch, open_sinks=open_sinks),
        stage=stage,
        before_exit=lambda: open_sinks.flush_before_exit(settings.tuning.stop_flush_seconds),
    )


@main.command("wait-for-dependencies")
@common_options
@_option("stage", required=True, help="The stage that waits (the contract's dependsOn[].beforeStage).")
def wait_for_dependencies_command(stage: str, **options: Any) -> None:
    """Wait until the ProgressiveSyncs this stage depends on passed their stage (spec.dependsOn);
    exit 1 and close the stage Failed when one does not within its timeoutSeconds."""
    settings = _settings(options)
    run_step(
        "wait-for-dependencies",
        settings,
        lambda kube: wait_for_dependencies(kube, _context(kube, settings, stage, taking_over=True)),
        stage=stage,
    )


@main.command("follow")
@common_options
def follow_command(**options: Any) -> None:
    """Beside the stages: record each cluster done the moment it is, hand its slot on, close its
    stage when it was the last (steps/follow.py); always exits 0."""
    settings = _settings(options)
    run_step(
        "follow",
        settings,
        lambda kube: follow_rollout(
            kube, settings.rollout, settings.contract, clock=SystemClock(), tuning=settings.tuning
        ),
    )


@main.command("record")
@common_options
@_option("stage", required=True, help="The stage to close.")
def record_command(stage: str, **options: Any) -> None:
    """Close the stage Succeeded or Failed by failurePolicy.maxFailedClusters; for the last stage,
    also record the rollout's end when it succeeded (steps/rollout_end.py)."""
    settings = _settings(options)
    run_step("record", settings, lambda kube: record_step(kube, _context(kube, settings, stage)), stage=stage)


@main.command("record-and-select")
@common_options
@_option("stage", required=True, help="The stage to close.")
@_option("next-stage", required=True, help="The stage after it, to plan once it is closed.")
@_compare_wait_option
def record_and_select_command(
    stage: str, next_stage: str, compare_wait_seconds: float, **options: Any
) -> None:
    """Close the stage (as record), then plan the next one (as select); output its `targets`."""
    settings = _settings_waiting_for_compare(options, compare_wait_seconds)
    at = [stage]
    run_step(
        "record-and-select",
        settings,
        lambda kube: hand_over(
            kube, _context(kube, settings, stage), next_stage, on_next=lambda: at.append(next_stage)
        ),
        _targets_output,
        stage=lambda: at[-1],
    )


@main.command("analyze")
@common_options
@_option("stage", required=True, help="The stage whose analysis gate runs.")
@_option(
    "cluster",
    default="",
    help="With perCluster: the one cluster to analyze (after its wait-healthy) [default: every "
    "completed cluster of the stage, or one run for the stage].",
)
@_option(
    "when",
    default=AnalysisWhen.AFTER_HEALTHY.value,
    show_default=True,
    type=click.Choice([moment.value for moment in AnalysisWhen]),
    help="afterHealthy: the gate before the next stage; duringBake: a run for the stage's bake.",
)
@_option(
    "rollouts-instance-id",
    default="",
    help="The Argo Rollouts controller's --instance-id: our AnalysisRuns carry its label "
    "(argo-rollouts.argoproj.io/controller-instance-id) [default: none, for a controller without one].",
)
def analyze_command(stage: str, cluster: str, when: str, rollouts_instance_id: str, **options: Any) -> None:
    """Run the stage's Argo Rollouts analysis (steps/analyze.py); output `verdict`: Passed, Failed,
    Skipped, or Inconclusive (waiting for approval)."""
    settings = _settings(options)
    open_runs = OpenRuns()

    def verdict(result: StepResult) -> dict[str, str]:
        assert isinstance(result, AnalyzeResult)
        return result.outputs

    run_step(
        "analyze",
        settings,
        lambda kube: analyze(
            kube,
            _context(kube, settings, stage),
            cluster=cluster,
            when=AnalysisWhen(when),
            open_runs=open_runs,
            instance_id=rollouts_instance_id.strip(),
        ),
        verdict,
        stage=stage,
        cluster=cluster,
        before_exit=lambda: open_runs.stop_before_exit(settings.tuning.analysis_terminate_wait_seconds),
    )


def exit_handler_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The options of the exit handler's steps (`finalize`, `rollback-plan`): every step's, and
    the Workflow's name and outcome."""
    decorators = [
        common_options,
        _option("workflow-name", required=True, help="The Workflow whose exit handler this is."),
        _option(
            "workflow-status",
            required=True,
            type=click.Choice([outcome.value for outcome in WorkflowOutcome]),
            help="{{workflow.status}}.",
        ),
    ]
    for decorator in reversed(decorators):
        command = decorator(command)
    return command


@main.command("finalize")
@exit_handler_options
def finalize_command(workflow_name: str, workflow_status: str, **options: Any) -> None:
    """Exit handler: record how the rollout ended (Succeeded, Failed, Cancelled)."""
    settings = _settings(options)
    run_step(
        "finalize",
        settings,
        lambda kube: finalize(
            kube,
            settings.rollout,
            workflow_name=workflow_name,
            workflow_status=WorkflowOutcome(workflow_status),
            clock=SystemClock(),
            tuning=settings.tuning,
        ),
    )


@main.command("rollback-plan")
@exit_handler_options
def rollback_plan_command(workflow_name: str, workflow_status: str, **options: Any) -> None:
    """Exit handler, first: decide whether the rollout's end rolls it back, and which clusters of
    which stages (outputs rollback-<stage index>: JSON lists); record phase RollingBack."""
    settings = _settings(options)
    run_step(
        "rollback-plan",
        settings,
        lambda kube: plan_rollout_rollback(
            kube,
            settings.rollout,
            settings.contract,
            workflow_name=workflow_name,
            workflow_status=WorkflowOutcome(workflow_status),
            clock=SystemClock(),
            tuning=settings.tuning,
        ),
        _rollback_outputs,
    )


def _rollback_outputs(result: StepResult) -> Mapping[str, str]:
    assert isinstance(result, RollbackPlanResult)
    return result.outputs


@main.command("rollback")
@common_options
@_option("stage", required=True, help="The stage the cluster belongs to.")
@_option("cluster", required=True, help="The cluster (Argo CD cluster name).")
def rollback_command(stage: str, cluster: str, **options: Any) -> None:
    """Sync the cluster's Applications this rollout synced back to what they ran before; record it."""
    settings = _settings(options)
    run_step(
        "rollback",
        settings,
        lambda kube: rollback_cluster(kube, _context(kube, settings, stage), cluster),
        cluster=cluster,
    )


@main.command("rollback-batch")
@common_options
@_option("stage", required=True, help="The stage (in batches) the batch belongs to.")
@_option("batch", required=True, type=click.IntRange(min=0), help="The batch's index (0 for the first).")
def rollback_batch_command(stage: str, batch: int, **options: Any) -> None:
    """Restore one batch's share of a stage in batches, each cluster as `rollback` does."""
    settings = _settings(options)
    run_step(
        "rollback-batch",
        settings,
        lambda kube: rollback_batch(kube, _context(kube, settings, stage), batch),
    )
