"""`progressive-sync completion bash|zsh|fish`: print the shell completion script.

Click generates it (`click.shell_completion`); the script calls `progressive-sync` back with
`_PROGRESSIVE_SYNC_COMPLETE` set, which is the same as
`_PROGRESSIVE_SYNC_COMPLETE=bash_source progressive-sync`. Subcommands are imported only when a
completion needs them (`orchestrator.cli.main.LazyGroup`).
"""

from __future__ import annotations

import click
from click.shell_completion import get_completion_class

from orchestrator.cli.help_catalog import epilog

PROG_NAME = "progressive-sync"
COMPLETE_VARIABLE = "_PROGRESSIVE_SYNC_COMPLETE"
SHELLS = ("bash", "zsh", "fish")


@click.command("completion", epilog=epilog("completion"))
@click.argument("shell", type=click.Choice(SHELLS))
@click.pass_context
def completion(ctx: click.Context, shell: str) -> None:
    """Print the shell completion script for bash, zsh or fish.

    \b
    bash:  source <(progressive-sync completion bash)        # in ~/.bashrc
    zsh:   source <(progressive-sync completion zsh)         # in ~/.zshrc
    fish:  progressive-sync completion fish > ~/.config/fish/completions/progressive-sync.fish

    The same as `_PROGRESSIVE_SYNC_COMPLETE=bash_source progressive-sync` (zsh_source, fish_source).
    """
    completer = get_completion_class(shell)
    if completer is None:  # click knows all three; this guards a click without one of them
        raise click.UsageError(f"click has no completion for {shell}")
    root = ctx.find_root().command
    script = completer(root, {}, PROG_NAME, COMPLETE_VARIABLE).source()
    click.echo(script)
