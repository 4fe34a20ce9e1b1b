"""Showing a rollout as it happens, for `status --watch` and the demo.

On a terminal, `LiveDisplay` redraws one progress bar per stage in place (ANSI: cursor up, clear
to the end); anywhere else (a pipe, a CI log) it prints one timestamped plain line per change and
never a control code. What to show comes from the pure renderers in `orchestrator.ops.decisions`; this
module only decides how to put it on the screen.

Callers: `orchestrator.cli.ops_cmd` and `orchestrator.devenv.demo`.
"""

from __future__ import annotations

from collections.abc import Callable

from orchestrator.core.clock import Clock
from orchestrator.ops import decisions as ops


class LiveDisplay:
    """Shows each `RolloutView` handed to `show`: redrawn bars on a TTY, changed lines elsewhere."""

    def __init__(self, write: Callable[[str], None], clock: Clock, *, tty: bool) -> None:
        self._write = write
        self._clock = clock
        self._tty = tty
        self._drawn_lines = 0
        self._previous: ops.RolloutView | None = None

    def show(self, view: ops.RolloutView) -> None:
        """Draw `view` (on a TTY: over the previous block)."""
        now = self._clock.now()
        if self._tty:
            block = ops.render_bars(view, now)
            # Back to the first line of the previous block, clear to the end of the screen, draw.
            prefix = f"\x1b[{self._drawn_lines}F\x1b[J" if self._drawn_lines else ""
            self._write(prefix + block)
            self._drawn_lines = block.count("\n")
        else:
            for line in ops.change_lines(self._previous, view):
                self._write(f"{now.strftime('%H:%M:%S')} {line}\n")
        self._previous = view

    def forget(self) -> None:
        """Leave the last block on screen; the next `show` starts a new one below it."""
        self._drawn_lines = 0
