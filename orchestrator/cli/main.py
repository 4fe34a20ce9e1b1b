"""The `progressive-sync` command line: assembles the subcommands and sets up logging.

Each subcommand lives in its own module under `orchestrator/cli/` and parses its flags into
a typed settings object; nothing here holds state. Exit codes: 0 ok, 1 a failed rollout or invalid
input, 2 bad usage (click's own code for usage errors).

A subcommand's module is imported only when that subcommand runs (or when `--help` lists them all):
`plan` and `render` must not pay for the watcher, the dev environment and the Kubernetes client
they never use (importing every module cost about 2 s of CPU per command, as much as planning a
10,000-cluster fleet; issue 15).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from types import MappingProxyType

import click

# Subcommand name -> (module under orchestrator.cli, attribute of the click command in it).
COMMANDS: Mapping[str, tuple[str, str]] = MappingProxyType(
    {
        "dev-cluster": ("devcluster_cmd", "dev_cluster"),
        "plan": ("plan_cmd", "plan"),
        "validate": ("validate_cmd", "validate"),
        "status": ("ops_cmd", "status"),
        "cancel": ("ops_cmd", "cancel"),
        "pause": ("ops_cmd", "pause"),
        "resume": ("ops_cmd", "resume"),
        "approve": ("ops_cmd", "approve"),
        "retry": ("ops_cmd", "retry"),
        "simulate": ("simulate_cmd", "simulate"),
        "demo": ("demo_cmd", "demo"),
        "watch": ("watch_cmd", "watch"),
        "render": ("render_cmd", "render"),
        "executor": ("executor_cmd", "executor"),
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
            module_name, attribute = COMMANDS[cmd_name]
            module = importlib.import_module(f"orchestrator.cli.{module_name}")
            command = getattr(module, attribute)
            if command.name != cmd_name:  # a renamed command must be renamed here too
                raise RuntimeError(
                    f"orchestrator.cli.{module_name}.{attribute} is {command.name!r}, not {cmd_name!r}"
                )
            self.add_command(command)
        return self.commands.get(cmd_name)


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
