"""The `progressive-sync` command line: assembles the subcommands and sets up logging.

Each subcommand lives in its own module under `orchestrator/cli/` and parses its flags into
a typed settings object; nothing here holds state. Exit codes: 0 ok, 1 a failed rollout or invalid
input, 2 bad usage (click's own code for usage errors); each command's own are in
`orchestrator.cli.help_catalog`, printed at the end of its --help. `--help` lists the operator
commands apart from the dev and infrastructure ones (`SECTIONS`); `resume`, the old name of
`unpause`, works but is not listed (`HIDDEN`).

A subcommand's module is imported only when that subcommand runs (`--help` lists them from the
summaries kept here): `plan` and `render` must not pay for the watcher, the dev environment and the
Kubernetes client they never use (importing every module cost about 2 s of CPU per command, as much
as planning a 10,000-cluster fleet; issue 15), nor `--help` (1.8 s when it imported them all).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from types import MappingProxyType

import click

# Subcommand name -> (module under orchestrator.cli, attribute of the click command in it, the first
# paragraph of its help). The summary lets `--help` list every subcommand without importing them all
# (that cost 1.8 s); tests/unit/test_cli_lazy_help.py checks each summary against the command's help.
COMMANDS: Mapping[str, tuple[str, str, str]] = MappingProxyType(
    {
        "dev-cluster": (
            "devcluster_cmd",
            "dev_cluster",
            "A local control plane, optionally with a real node and real Argo Workflows.",
        ),
        "plan": ("plan_cmd", "plan", "Show which clusters each stage would take, in which order, and why."),
        "validate": (
            "validate_cmd",
            "validate",
            "Validate ProgressiveSync manifests offline, the way the API server will.",
        ),
        "convert": (
            "convert_cmd",
            "convert",
            "Convert an Argo CD RollingSync (or a Skyscanner ProgressiveSync) into a ProgressiveSync.",
        ),
        "status": (
            "ops_cmd",
            "status",
            "Show a ProgressiveSync's rollout: phase, stages, clusters, failures and durations.",
        ),
        "cancel": (
            "ops_cmd",
            "cancel",
            "Stop the running rollout (like `argo stop`); its exit handler marks it Cancelled.",
        ),
        "pause": (
            "ops_cmd",
            "pause",
            "Pause a ProgressiveSync: no new step starts; running syncs finish. Undo with unpause.",
        ),
        "unpause": (
            "ops_cmd",
            "unpause",
            "Unpause a paused ProgressiveSync: the rollout carries on where it stood.",
        ),
        # The old name of unpause (issue 34: `argo resume` opens a gate, ours did not); hidden.
        "resume": (
            "ops_cmd",
            "resume",
            "The old name of unpause: does what unpause does, after saying so on stderr.",
        ),
        "approve": (
            "ops_cmd",
            "approve",
            "Open a stage's manual approval gate (like `argo resume` on that node).",
        ),
        "retry": (
            "ops_cmd",
            "retry",
            "Run a failed (or cancelled) rollout again, as a new attempt of the same release.",
        ),
        "rollback": (
            "ops_cmd",
            "rollback",
            "Roll the last rollout back by hand: its clusters back to what they ran before it.",
        ),
        "simulate": (
            "simulate_cmd",
            "simulate",
            "A fleet simulator standing in for Argo CD's application controller (demo, tests).",
        ),
        "demo": (
            "demo_cmd",
            "demo",
            "Run a 3-stage rollout over a 12-cluster simulated fleet (or 6 clusters on the real Argo CD).",
        ),
        "watch": (
            "watch_cmd",
            "watch",
            "Watch ProgressiveSyncs and run their rollouts as Workflows (until SIGTERM or Ctrl-C).",
        ),
        "render": (
            "render_cmd",
            "render",
            "Print the Argo Workflow the watcher would create for the ProgressiveSync's next rollout.",
        ),
        "executor": (
            "executor_cmd",
            "executor",
            "Run progressive-sync's Workflows locally, the way Argo Workflows would.",
        ),
        "completion": (
            "completion_cmd",
            "completion",
            "Print the shell completion script for bash, zsh or fish.",
        ),
    }
)
# Commands that work but are not listed (old names kept for scripts).
HIDDEN = frozenset({"resume"})

# How `--help` groups the commands: what an operator runs, in the order of a rollout's life, apart
# from what runs the system or tries it out (dev and infrastructure).
SECTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "Operator commands",
        (
            "status",
            "approve",
            "pause",
            "unpause",
            "cancel",
            "retry",
            "rollback",
            "plan",
            "render",
            "validate",
            "convert",
        ),
    ),
    ("Dev and infrastructure commands", ("watch", "executor", "simulate", "demo", "dev-cluster")),
    ("Other commands", ("completion",)),
)


class LazyGroup(click.Group):
    """A click group whose subcommands are imported from `COMMANDS` when first asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Every subcommand's name, sorted (as click.Group lists them), without importing any."""
        return sorted({*COMMANDS, *self.commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """The subcommand `cmd_name`, its module imported on first use; None for an unknown name."""
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            module_name, attribute, _summary = COMMANDS[cmd_name]
            module = importlib.import_module(f"orchestrator.cli.{module_name}")
            command = getattr(module, attribute)
            if command.name != cmd_name:  # a renamed command must be renamed here too
                raise RuntimeError(
                    f"orchestrator.cli.{module_name}.{attribute} is {command.name!r}, not {cmd_name!r}"
                )
            self.add_command(command)
        return self.commands.get(cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command sections of `--help` (`SECTIONS`; a command in none is listed last): a command
        not imported yet is listed from its summary in `COMMANDS`, cut to the width the way click
        cuts a command's own help (the same text). Hidden commands are left out."""
        names = [
            name
            for name in self.list_commands(ctx)
            if (name in self.commands and not self.commands[name].hidden)
            or (name not in self.commands and name in COMMANDS and name not in HIDDEN)
        ]
        if not names:
            return
        limit = formatter.width - 6 - max(len(name) for name in names)
        placed = {name for _title, members in SECTIONS for name in members}
        sections = [*SECTIONS, ("Commands", tuple(name for name in names if name not in placed))]
        for title, members in sections:
            rows = [
                (
                    name,
                    self.commands[name].get_short_help_str(limit)
                    if name in self.commands
                    else click.Command(name, help=COMMANDS[name][2]).get_short_help_str(limit),
                )
                for name in members
                if name in names
            ]
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)


@click.group(
    cls=LazyGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    epilog=(
        "Shell completion: `progressive-sync completion bash|zsh|fish` prints the script, e.g.\n"
        "`source <(progressive-sync completion bash)` in ~/.bashrc."
    ),
)
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=lambda ctx, _param, value: _print_version(ctx) if value else None,
    help="Show the version and exit.",
)
def main() -> None:
    """Roll a change out across a fleet of Kubernetes clusters with Argo CD, in stages.

    Commands that act on a ProgressiveSync take -n/--namespace (default: the kubeconfig context's
    namespace, then $PROGRESSIVE_SYNC_NAMESPACE, then argocd) and -o table|json|yaml. Each
    command's --help ends with the environment variables it reads and its exit codes.
    """


def _print_version(ctx: click.Context) -> None:
    # What click.version_option prints, with the version looked up only when asked for.
    if ctx.resilient_parsing:
        return
    from orchestrator import __version__  # noqa: PLC0415 - importlib.metadata costs every command 60 ms

    click.echo(f"progressive-sync, version {__version__}")
    ctx.exit()


if __name__ == "__main__":
    main()
