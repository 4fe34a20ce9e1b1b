"""Parsing YAML fast, with PyYAML's answers: JSON's C parser, then yaml-rs where it provably agrees,
then libyaml's C loader.

Fleet files (`plan --fleet`, `render --fleet`), ProgressiveSync manifests and CRDs can be tens of
megabytes. PyYAML (`CSafeLoader`, YAML 1.1) is the reference: every parse of a file a user hands us
goes through here and gives exactly what `yaml.load_all(text, CSafeLoader)` gives, only sooner.

1. JSON is YAML too, and `kubectl get -o json` prints it: a stream that is one JSON document is
   read by the standard library's C JSON parser (about 20 times faster than PyYAML).
2. Otherwise yaml-rs (Rust; it builds the Python objects natively, ~20x faster than PyYAML, whose
   C loader still constructs every object in Python: ~40 s for a 10,000-cluster `kubectl get -o
   yaml` file). yaml-rs reads YAML 1.2, which resolves some *plain* (unquoted) scalars differently
   from PyYAML's YAML 1.1 (`no`, `on`, `0777`, `1e3`, `2026-01-01`, `<<`, ...) and cannot say how
   many documents a stream held when it returns a list. So before trusting its answer,
   `_agrees_with_pyyaml` scans the text: every plain scalar that could resolve to anything but a
   string or a plain integer (found by one regular expression) is resolved by both parsers and must
   come out equal and of the same type; tags, directives, `...` and flow
   collections (other than `{}` and `[]`) are left to PyYAML; the document count must match the
   `---` markers. kubectl's output passes (it quotes every string that YAML would read as something
   else); a file that does not is read by PyYAML. tests/unit/test_yamlio.py checks the two agree on
   generated streams full of the scalars where YAML 1.1 and 1.2 differ.
3. Otherwise libyaml's C loader (the pure-Python one where PyYAML was built without libyaml).

Callers: orchestrator.argocd.fleet, orchestrator.api.validation, orchestrator.cli.manifest,
orchestrator.kube.crds, orchestrator.devenv.argoworkflows.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import re
import threading
from collections.abc import Iterator
from typing import Any

import yaml

try:  # a compiled wheel: where none installs, PyYAML reads everything (only slower)
    import yaml_rs
except ImportError:  # pragma: no cover - the wheel is a dependency; this keeps a broken install working
    yaml_rs = None  # type: ignore[assignment]

# The C loader exists only when PyYAML was compiled against libyaml (the manylinux wheels are).
SAFE_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

# Below this size PyYAML is fast enough, and one parser for small files keeps error messages alike.
NATIVE_MIN_CHARS = 64 * 1024

_NOT_JSON = object()

# Where a plain scalar may start: the line's start or after a blank (after indentation, `- `,
# `? `, `key: `); and where it ends: the end of the line, a comment, or `: ` when it is a key.
_END = r"(?=[ \t]*$|[ \t]+#|:[ \t]|:$)"
# The plain scalars that may read as something other than a string in YAML 1.1 or 1.2: those that
# start with a digit, or a sign, dot or underscore before another (numbers and timestamps), and the
# 1.1 booleans and merge/value keys (yes, no, on, off, y, n, <<, =; a superset is fine). `true`,
# `false`, `null`, `~`, `.inf` and `.nan` read alike in both and are not looked at. Each pattern
# starts with a character class (the blank before the scalar; the text is scanned with a newline
# put in front) so that the regular expression engine skips ahead in C.
# One pattern, one pass over the text (two passes, one per kind, took 0.52-0.65 s on the
# 10,000-cluster YAML fleet file; one 0.38-0.46 s). The two kinds start with different characters,
# so at any blank at most one can match; a number-led token runs to the scalar's end, so a word it
# covers is part of that scalar, not a scalar of its own.
_SUSPECT = re.compile(
    r"[ \t\n]((?:[0-9]|[-+._][-+._0-9])[^\n]*?|[yYnNoO<=](?:[eE][sS]|[oO]|[nN]|[fF][fF]|<|))" + _END,
    re.MULTILINE,
)
# Of the suspect numbers, those either YAML reads as a number or a timestamp: PyYAML's own
# resolvers (YAML 1.1) and the YAML 1.2 core schema's int and float. The rest (uids, revisions,
# versions) are strings in both and are not parsed twice.
_NUMERIC_IN_EITHER = re.compile(
    "|".join(
        # PyYAML files each resolver under every character a scalar may start with: each pattern
        # once (joined 38 times over, the expression took 25 us a token; 10,000 uids, 0.25 s).
        dict.fromkeys(
            [
                *(
                    pattern.pattern
                    for resolvers in yaml.resolver.Resolver.yaml_implicit_resolvers.values()
                    for tag, pattern in resolvers
                    if tag.endswith((":int", ":float", ":timestamp"))
                ),
                r"^[-+]?[0-9]+$|^0o[0-7]+$|^0x[0-9a-fA-F]+$",
                r"^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?$",
            ]
        )
    ),
    re.VERBOSE,
)
_PLAIN_DECIMAL = re.compile(r"-?(?:0|[1-9][0-9]*)")
# What yaml-rs is not asked to read: tags (!), directives (%), document ends (...), flow
# collections other than the empty ones, empty keys. Conservative: these may also match inside a
# quoted string, which only sends that file to PyYAML. (Anchors and aliases read alike: PyYAML's dumper writes
# them for shared objects; merge keys `<<` are among the suspect words.)
_LEFT_TO_PYYAML = (
    re.compile(r"![^ \t\n](?<![^ \t\n]..)"),
    re.compile(r"[\[{](?<![^ \t\n].)(?![\]}])"),
    re.compile(r"\n%"),  # each pattern starts with a literal: the engine then skips ahead in C
    re.compile(r"\n\.\.\.(?=[ \t\r\n]|\Z)"),
    # An empty key (`: a` where a scalar may start): YAML 1.2 reads it, PyYAML refuses it.
    re.compile(r":(?<![^ \t\n].)(?=[ \t]|$)", re.MULTILINE),
)
_DOCUMENT_START = re.compile(r"\n---(?=[ \t\r\n]|\Z)")
_CONTENT_LINE = re.compile(r"^[ \t]*[^\s#]", re.MULTILINE)


def _as_json(text: str) -> Any:
    """The text as one JSON document, or _NOT_JSON (then the YAML loaders read it)."""
    if not text.lstrip().startswith(("{", "[")):
        return _NOT_JSON
    try:
        return json.loads(text)
    except ValueError:  # a YAML flow mapping, several documents, comments: YAML's to read
        return _NOT_JSON


def _same_scalar(a: Any, b: Any) -> bool:
    # Same type and value: 1 == 1.0 == True in Python, and a date is not a str.
    return type(a) is type(b) and a == b


def _resolves_alike(token: str) -> bool:
    """True when the plain scalar `token` reads the same in PyYAML (1.1) and yaml-rs (1.2)."""
    assert yaml_rs is not None
    try:
        ours = yaml_rs.loads(token, parse_datetime=False)
        reference = yaml.load(token, Loader=SAFE_LOADER)
    except Exception:
        return False
    if isinstance(reference, datetime.date):  # 1.1 timestamps; yaml-rs is asked for strings
        return False
    return _same_scalar(ours, reference)


def _agrees_with_pyyaml(text: str) -> bool:
    """True when every plain scalar in `text` that YAML 1.1 and 1.2 could read differently reads alike."""
    # Every pattern reads within one line (a line's start is a newline), so the text can be read
    # as its distinct lines, each once: a fleet file repeats most of its lines thousands of times
    # (10,000 clusters: 530,000 lines, 100,000 distinct, a quarter of the characters; the scan
    # took 0.85 s over the whole text, 0.25 s so).
    text = "\n" + "\n".join(set(text.split("\n")))
    if any(pattern.search(text) for pattern in _LEFT_TO_PYYAML):
        return False
    # Each distinct token once (a fleet repeats the same revisions and numbers thousands of times).
    for token in set(_SUSPECT.findall(text)):
        if _PLAIN_DECIMAL.fullmatch(token):
            continue
        # Digit-led tokens that match neither YAML's numbers are strings in both (uids, revisions);
        # yaml-rs also reads some with underscores as numbers (`_0`), so those are always checked.
        if token[0].isdigit() and "_" not in token and not _NUMERIC_IN_EITHER.search(token):
            continue
        if not _resolves_alike(token):
            return False
    return True


def _document_count(text: str) -> int:
    """How many documents the stream holds: one per `---`, and one before the first if it has content."""
    text = "\n" + text  # the first line starts after a newline like the others
    starts = list(_DOCUMENT_START.finditer(text))
    head = text[: starts[0].start()] if starts else text
    return len(starts) + (1 if _CONTENT_LINE.search(head) else 0)


def _yaml_rs_load(text: str, into: list[Any]) -> None:
    """yaml-rs's reading of `text` appended to `into`, or nothing when it refuses the text."""
    assert yaml_rs is not None
    # Whatever yaml-rs refuses, PyYAML reads (or explains).
    with contextlib.suppress(Exception):
        policy = yaml_rs.DuplicateKeyPolicy.LastWins
        into.append(yaml_rs.loads(text, parse_datetime=False, duplicate_key_policy=policy))


def _native_load_all(text: str) -> list[Any] | None:
    """Every document, read by yaml-rs, when that provably equals PyYAML's reading; else None."""
    if yaml_rs is None:
        return None
    # yaml-rs parses without the GIL (it takes it back to build the objects), so the scan runs on
    # another core meanwhile; yaml-rs's answer is used only when the scan says it may be.
    parsed: list[Any] = []
    parser = threading.Thread(target=_yaml_rs_load, args=(text, parsed), name="yaml-rs", daemon=True)
    parser.start()
    agrees = _agrees_with_pyyaml(text)
    parser.join()
    if not agrees or not parsed:
        return None
    loaded = parsed[0]
    # yaml-rs gives None for no document, the document for one, and a list for several.
    count = _document_count(text)
    if count == 0:
        return [] if loaded is None else None
    if count == 1:
        return [loaded]
    return loaded if isinstance(loaded, list) and len(loaded) == count else None


def safe_load(text: str) -> Any:
    """One YAML document as plain Python objects (yaml.safe_load, with the C loader when there is one)."""
    document = _as_json(text)
    if document is not _NOT_JSON:
        return document
    return yaml.load(text, Loader=SAFE_LOADER)


def safe_load_all(text: str) -> Iterator[Any]:
    """Every document of a YAML stream (yaml.safe_load_all's answer; lazily when PyYAML reads it)."""
    document = _as_json(text)
    if document is not _NOT_JSON:
        return iter([document])
    documents = _native_load_all(text) if len(text) >= NATIVE_MIN_CHARS else None
    if documents is not None:
        return iter(documents)
    return yaml.load_all(text, Loader=SAFE_LOADER)
