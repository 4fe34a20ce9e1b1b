"""The `progressive-sync` command line: assembles the subcommands and sets up logging.

Each subcommand lives in its own module under `orchestrator/cli/` and parses its flags into
a typed settings object; nothing here holds state. Exit codes: 0 ok, 1 a failed rollout or invalid
input, 2 bad usage (click's own code for usage errors).

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
        "pause": ("ops_cmd", "pause", "Pause a ProgressiveSync: no new step starts; running syncs finish."),
        "resume": ("ops_cmd", "resume", "Resume a paused ProgressiveSync where it stood."),
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
    }
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
        """The Commands section of `--help`: a command not imported yet is listed from its summary in
        `COMMANDS`, cut to the width the way click cuts a command's own help (the same text)."""
        names = [
            name
            for name in self.list_commands(ctx)
            if (name in self.commands and not self.commands[name].hidden)
            or (name not in self.commands and name in COMMANDS)
        ]
        if not names:
            return
        limit = formatter.width - 6 - max(len(name) for name in names)
        rows = [
            (
                name,
                self.commands[name].get_short_help_str(limit)
                if name in self.commands
                else click.Command(name, help=COMMANDS[name][2]).get_short_help_str(limit),
            )
            for name in names
        ]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(
    cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100}
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
    """Roll a change out across a fleet of Kubernetes clusters with Argo CD, in stages."""


def _print_version(ctx: click.Context) -> None:
    # What click.version_option prints, with the version looked up only when asked for.
    if ctx.resilient_parsing:
        return
    from orchestrator import __version__  # noqa: PLC0415 - importlib.metadata costs every command 60 ms

    click.echo(f"progressive-sync, version {__version__}")
    ctx.exit()


if __name__ == "__main__":
    main()
