"""Durations as Argo Workflows and Argo Rollouts write them ("30s", "5m", "1h30m", "500ms"; a bare
number is seconds), in seconds: one reader for the local executor and the analysis builder."""

from __future__ import annotations

import re

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_SECONDS_PER_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def duration_seconds(value: str | int | float) -> float:
    """Seconds from `value`; ValueError naming it when it is not a duration."""
    if isinstance(value, int | float):
        return float(value)
    text = value.strip()
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(number + unit for number, unit in parts) != text:
        raise ValueError(f"{text!r} is not a duration such as 30s, 5m, 1h30m or 500ms")
    return sum(float(number) * _SECONDS_PER_UNIT[unit] for number, unit in parts)
