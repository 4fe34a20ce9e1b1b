"""Helm chart versions as the simulated repo-server resolves them (Argo CD v3.6.1's
`versions.MaxVersion` with Masterminds semver constraints): an exact version is itself, a constraint
the highest version of the index that meets it.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.simulator.charts import ChartVersionError, Version, resolve_chart_version, satisfies

INDEX = ["1.2.3", "1.2.4", "1.3.0", "2.0.0", "1.2.5-rc.1", "0.1.2", "0.2.0"]


@pytest.mark.parametrize(
    ("revision", "expected"),
    [
        pytest.param("1.2.4", "1.2.4", id="an-exact-version-is-itself"),
        pytest.param("9.9.9", "9.9.9", id="an-exact-version-is-not-looked-up"),
        pytest.param("v1.2", "v1.2", id="a-partial-version-is-a-version-taken-as-written"),
        pytest.param("1.2.*", "1.2.4", id="wildcard-patch"),
        pytest.param("1.2.x", "1.2.4", id="x-wildcard"),
        pytest.param("1.x", "1.3.0", id="wildcard-minor"),
        pytest.param("*", "2.0.0", id="anything"),
        pytest.param("~1.2", "1.2.4", id="tilde-minor"),
        pytest.param("~1.2.3", "1.2.4", id="tilde-patch"),
        pytest.param("^1.2.3", "1.3.0", id="caret-major"),
        pytest.param("^0.1.0", "0.1.2", id="caret-below-one-keeps-the-minor"),
        pytest.param(">=1.2.0 <1.3.0", "1.2.4", id="range-with-a-space"),
        pytest.param(">=1.2.0, <1.3.0", "1.2.4", id="range-with-a-comma"),
        pytest.param(">= 1.2.0 < 1.3.0", "1.2.4", id="operators-apart-from-versions"),
        pytest.param("<1.0.0", "0.2.0", id="below-one"),
        pytest.param("1.2.3 || 2.x", "2.0.0", id="alternatives"),
        pytest.param(">=1.2.5-rc.0 <1.3.0", "1.2.5-rc.1", id="a-pre-release-only-when-asked-for"),
    ],
)
def test_a_revision_resolves_like_argo_cds_repo_server(revision: str, expected: str) -> None:
    assert resolve_chart_version(revision, INDEX) == expected


@pytest.mark.parametrize(
    ("revision", "message"),
    [
        pytest.param("3.*", "version matching constraint not found in 7 tags", id="nothing-matches"),
        pytest.param("stable", "failed to determine semver constraint", id="not-a-constraint"),
        pytest.param(">=1.2.0 <", "failed to determine semver constraint", id="a-dangling-operator"),
        pytest.param("!=1.2", "does not resolve", id="a-form-the-simulator-does-not-know"),
    ],
)
def test_what_cannot_be_resolved_says_why(revision: str, message: str) -> None:
    with pytest.raises(ChartVersionError, match=message):
        resolve_chart_version(revision, INDEX)


versions = st.builds(lambda a, b, c: f"{a}.{b}.{c}", *(st.integers(0, 4) for _ in range(3)))


@given(index=st.lists(versions, min_size=1, max_size=8), major=st.integers(0, 4), minor=st.integers(0, 4))
def test_a_wildcard_resolves_to_the_highest_version_it_covers(
    index: list[str], major: int, minor: int
) -> None:
    constraint = f"{major}.{minor}.*"
    covered = [v for v in index if v.startswith(f"{major}.{minor}.")]
    if not covered:
        with pytest.raises(ChartVersionError):
            resolve_chart_version(constraint, index)
        return
    found = resolve_chart_version(constraint, index)
    assert found in covered
    parsed = Version.parse(found)
    assert parsed is not None and satisfies(constraint, parsed)
    assert all(Version.parse(v) <= parsed for v in covered)  # type: ignore[operator]
