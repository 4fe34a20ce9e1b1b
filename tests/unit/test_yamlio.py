"""orchestrator.core.yamlio: the fast loaders give exactly what yaml.safe_load(_all) gives. Pure."""

from __future__ import annotations

import json

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.core import yamlio

# Beyond the Basic Multilingual Plane JSON escapes a surrogate pair, which PyYAML refuses to read.
TEXT = st.text(st.characters(max_codepoint=0xFFFF, exclude_categories=("Cs",)), max_size=20)
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), TEXT)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(TEXT, inner, max_size=4)),
    max_leaves=20,
)


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("a: 1\nb: [yes, no, '1']\n", id="yaml-mapping-with-yaml-1.1-booleans"),
        pytest.param("---\nkind: A\n---\nkind: B\n", id="several-documents"),
        pytest.param("{a: 1, b: on}", id="flow-mapping-that-is-not-json"),
        pytest.param('{"a": 1}\n# a comment\n', id="json-with-a-yaml-comment"),
        pytest.param('{"items": [{"kind": "Secret", "data": {"name": "eA=="}}]}', id="json-list"),
        pytest.param("", id="empty"),
    ],
)
def test_the_fast_loaders_read_what_safe_load_reads(text: str) -> None:
    assert list(yamlio.safe_load_all(text)) == list(yaml.safe_load_all(text))
    if len(list(yaml.safe_load_all(text))) <= 1:
        assert yamlio.safe_load(text) == yaml.safe_load(text)


def test_the_c_loader_is_used_where_pyyaml_has_it() -> None:
    assert yamlio.SAFE_LOADER is getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@given(VALUES)
def test_json_documents_read_as_yaml_would(value: object) -> None:
    text = json.dumps(value)
    assert list(yamlio.safe_load_all(text)) == list(yaml.safe_load_all(text))
