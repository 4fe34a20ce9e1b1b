"""Parsing YAML fast: libyaml's C loader where PyYAML was built with it, the pure-Python one otherwise.

Fleet files (`plan --fleet`, `render --fleet`), ProgressiveSync manifests and CRDs can be tens of
megabytes; PyYAML's pure-Python `SafeLoader` spends seconds on a 10,000-cluster fleet where
`CSafeLoader` parses in C. Both build the same safe Python objects (SafeConstructor), so callers
see no difference but the speed. Every parse of a file a user hands us goes through here.

Even with the C parser, PyYAML builds every object in Python (tag resolution by regular
expression per scalar): about 4 s per 1,000 clusters of `kubectl get -o yaml` output on the
development machine. JSON is YAML too, and `kubectl get -o json` prints it: a stream that is one
JSON document is read with the standard library's C JSON parser (about 20 times faster), and
anything that is not valid JSON falls back to the YAML loader, so the result never differs.

Callers: orchestrator.argocd.fleet, orchestrator.api.validation, orchestrator.cli.manifest,
orchestrator.kube.crds, orchestrator.devenv.argoworkflows.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import yaml

# The C loader exists only when PyYAML was compiled against libyaml (the manylinux wheels are).
SAFE_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


_NOT_JSON = object()


def _as_json(text: str) -> Any:
    """The text as one JSON document, or _NOT_JSON (then the YAML loader reads it)."""
    if not text.lstrip().startswith(("{", "[")):
        return _NOT_JSON
    try:
        return json.loads(text)
    except ValueError:  # a YAML flow mapping, several documents, comments: YAML's to read
        return _NOT_JSON


def safe_load(text: str) -> Any:
    """One YAML document as plain Python objects (yaml.safe_load, with the C loader when there is one)."""
    document = _as_json(text)
    if document is not _NOT_JSON:
        return document
    return yaml.load(text, Loader=SAFE_LOADER)


def safe_load_all(text: str) -> Iterator[Any]:
    """Every document of a YAML stream, lazily (yaml.safe_load_all, with the C loader when there is one)."""
    document = _as_json(text)
    if document is not _NOT_JSON:
        return iter([document])
    return yaml.load_all(text, Loader=SAFE_LOADER)
