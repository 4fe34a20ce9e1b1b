"""orchestrator.core.yamlio: the fast loaders give exactly what yaml.safe_load(_all) gives. Pure."""

from __future__ import annotations

import json
import math

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


# --- yaml-rs (YAML 1.2) where it provably agrees with PyYAML (YAML 1.1) ----------------------------

# Plain scalars where YAML 1.1 and 1.2 (and yaml-rs) differ, or nearly: booleans, octals, exponents
# without a dot, sexagesimals, underscores, dates and timestamps, merge and value keys; and plain
# strings kubectl writes (revisions, uids, URLs, versions).
TRICKY = [
    *("no", "yes", "on", "off", "On", "NO", "Off", "y", "n", "Y", "true", "False", "null", "~", "Null"),
    *("0777", "0o17", "0x1f", "0b101", "1_000", "1e3", "1.0e3", "1.5e+3", "1.5", "1.", "+5", "-0", ".5"),
    *(".inf", "-.Inf", "1:20", "1:20.5", "190:20:30", "012", "0", "12", "-12", "007"),
    *("2026-01-01", "2026-11-20T09:14:02Z", "2001-12-14 21:59:43.10 -5", "2026-11-20 09:14:02"),
    *(
        "<<",
        "=",
        "4f1c2e9b7a3d5c8e1f0a2b4c6d8e0f1a3b5c7d9e",
        "123e4567",
        "00000000-0000-4000-8000-0000000000a5",
    ),
    *("v1", "argoproj.io/v1alpha1", "https://api.example:6443", "a b", "Healthy", "OutOfSync", "1.2.3"),
]
WORD = st.text(st.sampled_from("abyYnNoO019.-+_:eE "), min_size=1, max_size=6)
TOKEN = st.one_of(st.sampled_from(TRICKY), WORD)


@st.composite
def scalar_text(draw: st.DrawFn) -> str:
    """A scalar as written in a file: plain, single-quoted or double-quoted."""
    token = draw(TOKEN)
    style = draw(st.sampled_from(["plain", "plain", "single", "double"]))
    if style == "single":
        return "'" + token.replace("'", "''") + "'"
    if style == "double":
        return json.dumps(token)
    return token


@st.composite
def block(draw: st.DrawFn, indent: int = 0, depth: int = 0) -> list[str]:
    """Lines of a block mapping or sequence whose scalars are written by hand (plain ones too)."""
    pad = " " * indent
    lines: list[str] = []
    sequence = draw(st.booleans())
    for _ in range(draw(st.integers(1, 3))):
        nested = depth < 2 and draw(st.booleans())
        lead = f"{pad}- " if sequence else f"{pad}{draw(scalar_text())}:"
        if nested:
            lines.append(lead.rstrip() if sequence else lead)
            lines += draw(block(indent + 2, depth + 1))
        else:
            value = draw(st.one_of(scalar_text(), st.sampled_from(["{}", "[]", ""])))
            lines.append(f"{lead}{value}" if sequence else f"{lead} {value}".rstrip())
    return lines


@st.composite
def streams(draw: st.DrawFn) -> str:
    """One or more documents, with or without `---` before the first."""
    documents = ["\n".join(draw(block())) + "\n" for _ in range(draw(st.integers(1, 3)))]
    first = "---\n" if draw(st.booleans()) else ""
    return first + "---\n".join(documents)


def same(a: object, b: object) -> bool:
    """Equal and of the same types all the way down (1 == 1.0 == True in Python; NaN is itself)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)  # type: ignore[index]
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))  # type: ignore[arg-type]
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)  # type: ignore[arg-type]
    return a == b


@given(streams())
def test_yaml_rs_is_used_only_where_it_reads_what_pyyaml_reads(text: str) -> None:
    try:
        reference: list[object] | None = list(yaml.load_all(text, Loader=yamlio.SAFE_LOADER))
    except yaml.YAMLError:
        reference = None
    native = yamlio._native_load_all(text)
    if native is not None:
        assert reference is not None, "yaml-rs read a stream PyYAML refuses"
        assert same(native, reference)


def test_a_kubectl_fleet_file_is_read_by_yaml_rs(tmp_path: pytest.TempPathFactory) -> None:
    # What `kubectl get -o yaml` prints: every string YAML would read otherwise is quoted.
    app = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Application",
        "metadata": {"name": "checkout-eu-1", "uid": "00000000-0000-4000-8000-0000000000a5", "generation": 4},
        "status": {
            "sync": {"status": "OutOfSync", "revision": "4f1c2e9b7a3d5c8e1f0a2b4c6d8e0f1a3b5c7d9e"},
            "reconciledAt": "2026-11-29T21:58:40Z",
            "history": [{"id": 0, "revision": "1234567"}],
        },
    }
    text = (
        yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [app] * 3})
        + "---\n"
        + yaml.safe_dump(app)
    )
    native = yamlio._native_load_all(text)
    assert native is not None
    assert same(native, list(yaml.load_all(text, Loader=yamlio.SAFE_LOADER)))


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("a: no\n", id="yaml-1.1-boolean"),
        pytest.param("a: 0777\n", id="yaml-1.1-octal"),
        pytest.param("a: 1e3\n", id="exponent-without-a-dot"),
        pytest.param("a: 2026-01-01\n", id="plain-date"),
        pytest.param("a: {<<: {b: 1}}\n", id="merge-key-in-flow"),
        pytest.param("a:\n  <<: {b: 1}\n", id="merge-key"),
        pytest.param("a: !!str 5\n", id="tag"),
        pytest.param("---\n- a\n- b\n", id="one-document-that-is-a-list"),
        pytest.param("%YAML 1.1\n---\na: 1\n", id="directive"),
    ],
)
def test_what_yaml_1_2_reads_otherwise_is_left_to_pyyaml(text: str) -> None:
    native = yamlio._native_load_all(text)
    assert native is None or same(native, list(yaml.load_all(text, Loader=yamlio.SAFE_LOADER)))
    assert same(
        list(yamlio.safe_load_all(text * 5000)), list(yaml.load_all(text * 5000, Loader=yamlio.SAFE_LOADER))
    )
