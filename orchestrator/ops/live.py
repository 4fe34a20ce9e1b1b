"""Showing a rollout as it happens, for `status --watch` and the demo.

On a terminal, `LiveDisplay` redraws one progress bar per stage in place with rich's `Live` (it
owns the cursor movement, hides the cursor meanwhile and shows it again when the display closes,
also on Ctrl-C, and crops a block taller than the screen); anywhere else (a pipe, a CI log) it
prints one timestamped plain line per change and never a control code. What to show comes from
the pure view in `orchestrator.ops.view` and the renderables in `orchestrator.ops.tables`;
this module only decides how to put them on the screen.

Callers: `orchestrator.cli.ops_cmd` and `orchestrator.devenv.demo`.
"""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType

from rich.console import Console
from rich.live import Live

from orchestrator.core.clock import Clock
from orchestrator.ops import tables
from orchestrator.ops import view as ops_view


class _Writer:
    """A file for rich that hands each write to `write` (click.echo, the demo's printer)."""

    def __init__(self, write: Callable[[str], None]) -> None:
        self._write = write

    def write(self, text: str) -> int:
        self._write(text)
        return len(text)

    def flush(self) -> None:
        """Each write is handed on at once; nothing is buffered here."""


class LiveDisplay:
    """Shows each `RolloutView` handed to `show`: redrawn bars on a TTY, changed lines elsewhere.

    Use it as a context manager (or call `close`): leaving it stops the redraw, leaves the last
    block on screen and gives the cursor back.
    """

    def __init__(self, write: Callable[[str], None], clock: Clock, *, tty: bool) -> None:
        self._write = write
        self._clock = clock
        self._tty = tty
        self._live: Live | None = None
        self._previous: ops_view.RolloutView | None = None

    def show(self, view: ops_view.RolloutView) -> None:
        """Draw `view` (on a TTY: over the previous block)."""
        now = self._clock.now()
        if self._tty:
            block = tables.stage_bars(view, now)
            if self._live is None:
                console = Console(file=_Writer(self._write), force_terminal=True, highlight=False)  # type: ignore[arg-type]
                self._live = Live(
                    block,
                    console=console,
                    auto_refresh=False,
                    redirect_stdout=False,
                    redirect_stderr=False,
                )
                self._live.start(refresh=True)
            else:
                self._live.update(block, refresh=True)
        else:
            for line in ops_view.change_lines(self._previous, view):
                self._write(f"{now.strftime('%H:%M:%S')} {line}\n")
        self._previous = view

    def close(self) -> None:
        """Stop redrawing; the last block stays on screen and the next `show` starts a new one."""
        if self._live is not None:
            self._live.stop()
            self._live = None

    def __enter__(self) -> LiveDisplay:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
