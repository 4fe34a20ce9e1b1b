"""`progressive-sync --help` lists every subcommand from `COMMANDS` without importing them, and says
exactly what the commands' own help says (a changed docstring must be changed in `COMMANDS` too)."""

from __future__ import annotations

import subprocess
import sys

import click
import pytest

from orchestrator.cli.main import COMMANDS, HIDDEN, SECTIONS, LazyGroup, main


def _help_text(group: click.Group, width: int) -> str:
    ctx = click.Context(group, info_name="progressive-sync", max_content_width=width, terminal_width=width)
    formatter = ctx.make_formatter()
    group.format_commands(ctx, formatter)
    return formatter.getvalue()


def _fresh_group() -> LazyGroup:
    return LazyGroup(name="progressive-sync", help=main.help)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_summary_is_the_commands_own_first_paragraph(name: str) -> None:
    command = _fresh_group().get_command(click.Context(main), name)
    assert command is not None
    for limit in (20, 45, 80, 300):
        listed = click.Command(name, help=COMMANDS[name][2]).get_short_help_str(limit)
        assert listed == command.get_short_help_str(limit), (
            f"COMMANDS[{name!r}]'s summary no longer matches the command's help: copy its first paragraph"
        )


@pytest.mark.parametrize(
    "width",
    [
        pytest.param(60, id="narrow-terminal-cuts-summaries"),
        pytest.param(100, id="the-cli-width"),
        pytest.param(400, id="wide-terminal-shows-them-whole"),
    ],
)
def test_the_listing_is_the_same_before_and_after_the_commands_are_imported(width: int) -> None:
    group = _fresh_group()
    lazy = _help_text(group, width)
    assert not group.commands  # nothing imported to list them
    for name in COMMANDS:
        group.get_command(click.Context(group), name)
    assert set(group.commands) == set(COMMANDS)
    assert _help_text(group, width) == lazy
    assert all(name in lazy for name in COMMANDS if name not in HIDDEN)
    assert all(name not in lazy.split() for name in HIDDEN)  # an old name works, unlisted


def test_the_sections_place_every_listed_command_once() -> None:
    placed = [name for _title, members in SECTIONS for name in members]
    assert sorted(placed) == sorted(set(COMMANDS) - HIDDEN)


def test_help_lists_operator_commands_before_dev_commands() -> None:
    text = _help_text(_fresh_group(), 100)
    operator, _, dev = text.partition("Dev and infrastructure commands:")
    assert "Operator commands:" in operator and "unpause" in operator and "validate" in operator
    assert "watch" in dev and "dev-cluster" in dev and "demo" in dev
    assert "watch " not in operator


def test_help_in_a_fresh_process_imports_no_subcommand() -> None:
    code = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from orchestrator.cli.main import main\n"
        "result = CliRunner().invoke(main, ['--help'])\n"
        "assert result.exit_code == 0, result.output\n"
        "loaded = sorted(m for m in sys.modules if m.endswith('_cmd') or m.startswith('hera'))\n"
        "print(','.join(loaded))\n"
        "print(result.output)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    loaded, _, output = done.stdout.partition("\n")
    assert loaded == ""
    assert "render" in output and "Print the Argo Workflow" in output
