"""Sync windows of an AppProject, as Argo CD evaluates them (`SyncWindows.CanSync`).

The evaluation is `orchestrator.core.windows` (one truth for the simulated Argo CD, the planner and
the steps' sync gate); this module names what the simulator uses of it. A Running operation in a
closed window stays Running (`behaviours`).
"""

from __future__ import annotations

from orchestrator.core.windows import Cron, Window, WindowError, can_sync, windows_of

__all__ = ["Cron", "Window", "WindowError", "can_sync", "windows_of"]
