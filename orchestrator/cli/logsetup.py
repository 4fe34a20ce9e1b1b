"""Structured logs for long-running commands: one JSON object per line, or plain text.

`configure_logging(level, fmt)` installs one handler on the root logger (stderr). JSON lines carry
`time` (RFC 3339, UTC), `level`, `logger`, `message`, the exception text when there is one, and
every `extra={...}` field the caller passed (the watcher adds `ps`, `step`, `workflow`, ...), so a
log pipeline can filter on them without parsing sentences.

Callers: `progressive-sync watch` (and any command that wants the same format).
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

# Attributes every LogRecord has; anything else on a record came from `extra=`.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message",
    "asctime",
    "taskName",
}


class JsonFormatter(logging.Formatter):
    """One JSON object per record."""

    def format(self, record: logging.LogRecord) -> str:
        """Render the record as a single JSON line."""
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = value if isinstance(value, (str, int, float, bool, type(None))) else str(value)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def configure_logging(level: str = "INFO", fmt: str = "json", stream: TextIO | None = None) -> None:
    """Route every logger to `stream` (stderr) at `level`, as JSON lines or text."""
    handler = logging.StreamHandler(stream or sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(level.upper())
    # The HTTP client's own retry chatter duplicates our "attempt n/m" lines.
    logging.getLogger("urllib3").setLevel(max(logging.WARNING, root.level))
