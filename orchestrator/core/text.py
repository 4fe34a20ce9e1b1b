"""Cutting text people read to a bound, keeping what matters in it.

A reason reads "<where>: <Reason>: <what failed> ... <why: the value, the condition>": its start
says what and its end says why, and a long middle (a run's name, a list of clusters) matters least.
`shorten` keeps the start and the end of a text over the limit and puts an ellipsis where it cut.
"""

from __future__ import annotations

ELLIPSIS = "\u2026"
# The share of the limit kept from the start; the rest (less the ellipsis) comes from the end.
HEAD_SHARE = 0.4


def shorten(text: str, limit: int) -> str:
    """`text` when it fits in `limit` characters, else its start and its end joined by an ellipsis,
    exactly `limit` characters long."""
    if limit < 1:
        raise ValueError("limit must be at least 1")
    if len(text) <= limit:
        return text
    keep = limit - len(ELLIPSIS)
    head = int(keep * HEAD_SHARE)
    tail = keep - head
    return text[:head] + ELLIPSIS + (text[-tail:] if tail else "")
