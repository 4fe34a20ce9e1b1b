"""The release as data (`orchestrator.api.release`): ids, the steps' `--revisions` form, round trips."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.api.release import (
    Release,
    RevisionsError,
    attempt_of,
    release_id,
    release_of,
    revisions_from_json,
    revisions_to_json,
)

SHA = st.text(alphabet="0123456789abcdef", min_size=7, max_size=40)
REVISION_SETS = st.lists(st.lists(SHA, min_size=1, max_size=3).map(tuple), min_size=1, max_size=4)


@given(revisions=REVISION_SETS)
def test_revisions_survive_the_command_line_as_data(revisions: list[tuple[str, ...]]) -> None:
    back = revisions_from_json(revisions_to_json(revisions))
    assert set(back) == set(revisions)
    assert back == tuple(sorted(set(revisions)))


@pytest.mark.parametrize(
    ("text", "error"),
    [
        pytest.param("", "not JSON", id="empty"),
        pytest.param("4f1c2e9", "not JSON", id="a-bare-sha"),
        pytest.param("[]", "non-empty list", id="no-revision"),
        pytest.param('["4f1c2e9"]', "is not a list of non-empty revisions", id="a-list-of-strings"),
        pytest.param('[["4f1c2e9", ""]]', "is not a list of non-empty revisions", id="an-empty-source"),
        pytest.param('[[" 4f1c2e9"]]', "is not a list of non-empty revisions", id="blanks"),
        pytest.param("[[]]", "is not a list of non-empty revisions", id="an-empty-set"),
    ],
)
def test_malformed_revisions_are_refused_with_the_reason(text: str, error: str) -> None:
    with pytest.raises(RevisionsError, match=error):
        revisions_from_json(text)


def test_a_single_revision_release_keeps_the_id_it_always_had() -> None:
    # Rollouts started before revisions became data keep their Workflow names.
    assert release_id(3, [("abc",)]) == hashlib.sha256(b"3\nabc").hexdigest()[:10]


def test_mixed_revisions_are_one_release_with_one_tuple_each() -> None:
    release = Release.of(generation=2, spec_hash="h", revisions=[("new",), ("old",), ("new",)], attempt=2)
    assert release.revisions == (("new",), ("old",))
    assert release.rollout_id == f"{release.id}-2"
    assert (release_of(release.rollout_id), attempt_of(release.rollout_id)) == (release.id, 2)
    assert revisions_from_json(revisions_to_json(release.revisions)) == release.revisions
    assert release.display == "new old"
