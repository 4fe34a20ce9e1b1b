"""What "the same revision" means by source type (`orchestrator.argocd.revisions`), without any cluster.

Issue 29, finding 1: any two different non-hex strings used to "resolve" (`1.2.4` vs `1.2.3`,
`sha256:aaa` vs `sha256:bbb`, `v2` vs `v1`), so an Application still at chart 1.2.3 counted as at
release 1.2.4 and was adopted instead of synced.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.argocd import appsync
from orchestrator.argocd.revisions import (
    SHORT_SHA_MIN,
    SourceKind,
    is_concrete,
    resolutions,
    same_revision,
    source_kinds,
)
from tests.support.builders import NEW_REVISION, OLD_REVISION, make_application, our_operation

GIT, HELM, OCI = SourceKind.GIT, SourceKind.HELM, SourceKind.OCI
DIGEST_A = "sha256:" + "a" * 64
DIGEST_B = "sha256:" + "b" * 64
CHART = {"repoURL": "https://charts.example", "chart": "myservice", "targetRevision": "1.2.4"}
OCI_SOURCE = {"repoURL": "oci://registry.example/manifests/myservice", "targetRevision": "v2"}


@pytest.mark.parametrize(
    ("source", "kind"),
    [
        pytest.param({"repoURL": "https://git.example/deploy.git", "path": "app"}, GIT, id="git"),
        pytest.param(CHART, HELM, id="helm-repository-chart"),
        pytest.param({"repoURL": "registry.example/charts", "chart": "c"}, HELM, id="helm-oci-chart"),
        pytest.param(
            {"repoURL": "oci://registry.example/charts", "chart": "c"}, HELM, id="oci-url-with-chart"
        ),
        pytest.param(OCI_SOURCE, OCI, id="oci-artifact"),
        pytest.param({}, GIT, id="nothing-said-is-git"),
    ],
)
def test_source_kind(source: dict[str, Any], kind: SourceKind) -> None:
    assert source_kinds(make_application(source=source)) == (kind,)


def test_source_kinds_of_a_multi_source_application() -> None:
    app = make_application(revisions=["1.2.4", NEW_REVISION])
    app["spec"]["sources"][0] = CHART
    assert source_kinds(app) == (HELM, GIT)


@pytest.mark.parametrize(
    ("revision", "kind", "concrete"),
    [
        pytest.param(NEW_REVISION, GIT, True, id="git-full-sha"),
        pytest.param(NEW_REVISION[:7], GIT, True, id="git-short-sha"),
        pytest.param(NEW_REVISION[:6], GIT, False, id="git-six-hex-digits-is-a-name"),
        pytest.param("main", GIT, False, id="git-branch"),
        pytest.param("v1.4.2", GIT, False, id="git-tag"),
        pytest.param("1.2.4", HELM, True, id="helm-version"),
        pytest.param("1.2.4-rc.1+build.5", HELM, True, id="helm-prerelease-version"),
        pytest.param("1.2.*", HELM, False, id="helm-wildcard"),
        pytest.param("1.2.x", HELM, False, id="helm-x-range"),
        pytest.param(">=1.2.0 <2.0.0", HELM, False, id="helm-range"),
        pytest.param("^1.2", HELM, False, id="helm-caret"),
        pytest.param("~1.2.3", HELM, False, id="helm-tilde"),
        pytest.param(DIGEST_A, OCI, True, id="oci-digest"),
        pytest.param("v2", OCI, False, id="oci-tag"),
        pytest.param("", GIT, False, id="empty-is-nothing"),
    ],
)
def test_is_concrete(revision: str, kind: SourceKind, concrete: bool) -> None:
    assert is_concrete(revision, kind) is concrete


@pytest.mark.parametrize(
    ("pin", "reported", "kind", "resolved", "same"),
    [
        pytest.param(NEW_REVISION, NEW_REVISION, GIT, {}, True, id="git-full-sha"),
        pytest.param(NEW_REVISION[:7], NEW_REVISION, GIT, {}, True, id="git-short-sha"),
        pytest.param(NEW_REVISION[:7].upper(), NEW_REVISION, GIT, {}, True, id="git-short-sha-any-case"),
        pytest.param(OLD_REVISION[:7], NEW_REVISION, GIT, {}, False, id="git-another-commit"),
        pytest.param(OLD_REVISION, NEW_REVISION, GIT, {}, False, id="git-another-full-sha"),
        pytest.param("v2", "v1", GIT, {}, False, id="two-tags-are-two-revisions"),
        pytest.param("v1.4.2", NEW_REVISION, GIT, {}, False, id="git-tag-unresolved-is-not-a-match"),
        pytest.param(
            "v1.4.2", NEW_REVISION, GIT, {"v1.4.2": NEW_REVISION}, True, id="git-tag-argo-cd-resolved"
        ),
        pytest.param(
            "v1.4.2", NEW_REVISION, GIT, {"v1.4.2": OLD_REVISION}, False, id="git-tag-resolved-elsewhere"
        ),
        pytest.param("1.2.4", "1.2.3", HELM, {}, False, id="helm-two-versions"),
        pytest.param("1.2.3", "1.2.4", HELM, {}, False, id="helm-never-a-downgrade"),
        pytest.param("1.2.4", "1.2.4", HELM, {}, True, id="helm-same-version"),
        pytest.param(
            "1.2.4", "1.2.3", HELM, {"1.2.4": "1.2.3"}, False, id="helm-exact-version-is-not-resolved"
        ),
        pytest.param("1.2.*", "1.2.4", HELM, {"1.2.*": "1.2.4"}, True, id="helm-range-argo-cd-resolved"),
        pytest.param("1.2.*", "1.2.4", HELM, {}, False, id="helm-range-unresolved"),
        pytest.param(DIGEST_A, DIGEST_B, OCI, {}, False, id="oci-two-digests"),
        pytest.param(DIGEST_A, DIGEST_A, OCI, {}, True, id="oci-same-digest"),
        pytest.param(DIGEST_A[:20], DIGEST_A, OCI, {}, False, id="oci-digest-prefix-is-not-a-short-sha"),
        pytest.param("v2", DIGEST_A, OCI, {"v2": DIGEST_A}, True, id="oci-tag-argo-cd-resolved"),
        pytest.param("v2", DIGEST_A, OCI, {}, False, id="oci-tag-unresolved"),
        pytest.param("main", "", GIT, {"main": ""}, False, id="nothing-reported"),
        pytest.param("", NEW_REVISION, GIT, {}, False, id="nothing-pinned"),
    ],
)
def test_same_revision(
    pin: str, reported: str, kind: SourceKind, resolved: dict[str, str], same: bool
) -> None:
    assert same_revision(pin, reported, kind, resolved) is same


@given(sha=st.text(alphabet="0123456789abcdef", min_size=40, max_size=40), cut=st.integers(0, 40))
def test_a_full_sha_is_exactly_its_prefixes_of_seven_or_more(sha: str, cut: int) -> None:
    assert same_revision(sha[:cut], sha, GIT) is (cut >= SHORT_SHA_MIN)


@given(
    pin=st.text(min_size=1, max_size=12),
    reported=st.text(min_size=1, max_size=12),
    kind=st.sampled_from(list(SourceKind)),
)
def test_two_different_strings_are_never_the_same_revision_without_argo_cds_word(
    pin: str, reported: str, kind: SourceKind
) -> None:
    """The finding itself: without a record of Argo CD resolving it, only identity (or a Git short SHA
    the reported full SHA starts with) makes two revisions the same."""
    git_prefix = kind is GIT and is_concrete(pin, kind) and reported.lower().startswith(pin.lower())
    assert same_revision(pin, reported, kind) is (pin == reported or git_prefix)


def test_resolutions_read_the_comparison_and_the_last_operation() -> None:
    app = make_application(
        revision=NEW_REVISION,
        compared_to="main",
        phase="Succeeded",
        state_operation=our_operation(revision="v1.4.2"),
        result_revision=OLD_REVISION,
    )
    assert resolutions(app) == ({"main": NEW_REVISION, "v1.4.2": OLD_REVISION},)


def test_resolutions_of_a_multi_source_application_are_per_source() -> None:
    app = make_application(revisions=["1.2.4", NEW_REVISION], compared_to=["1.2.*", "main"])
    assert resolutions(app) == ({"1.2.*": "1.2.4"}, {"main": NEW_REVISION})


def test_resolutions_that_do_not_fit_the_sources_say_nothing() -> None:
    app = make_application(revisions=["1.2.4", NEW_REVISION])
    app["status"]["sync"]["comparedTo"] = {"sources": [{"targetRevision": "1.2.*"}]}
    assert resolutions(app) == ({}, {})


# --- what it changes for adopting and pinning (appsync.release_match / release_pin) ------------------


@pytest.mark.parametrize(
    ("app", "release", "matched"),
    [
        pytest.param(
            make_application(source=CHART, sync="Synced", revision="1.2.3"),
            [("1.2.4",)],
            None,
            id="helm-at-the-old-version-is-not-at-the-release",
        ),
        pytest.param(
            make_application(source=CHART, sync="Synced", revision="1.2.4"),
            [("1.2.4",)],
            ("1.2.4",),
            id="helm-at-the-release-version",
        ),
        pytest.param(
            make_application(source=OCI_SOURCE, sync="Synced", revision=DIGEST_A),
            [(DIGEST_B,)],
            None,
            id="oci-at-another-digest",
        ),
        pytest.param(
            make_application(sync="Synced", revision=OLD_REVISION),
            [("v2",)],
            None,
            id="git-tag-release-unresolved",
        ),
        pytest.param(
            make_application(sync="Synced", revision=NEW_REVISION, compared_to="v2"),
            [("v2",)],
            ("v2",),
            id="git-tag-release-argo-cd-resolved",
        ),
        pytest.param(
            make_application(sync="Synced", revision=NEW_REVISION),
            [(NEW_REVISION[:8],)],
            (NEW_REVISION[:8],),
            id="git-short-sha-release",
        ),
    ],
)
def test_release_match_by_source_kind(
    app: dict[str, Any], release: list[tuple[str, ...]], matched: tuple[str, ...] | None
) -> None:
    assert appsync.release_match(app, release) == matched


def test_a_helm_application_at_the_old_version_is_synced_not_adopted() -> None:
    app = make_application(source=CHART, sync="Synced", revision="1.2.3", health="Progressing")
    decision = appsync.decide_sync(app, "r1", release=[("1.2.4",)])
    assert decision.action is appsync.SyncAction.REQUEST
    assert decision.pins == ("1.2.4",)


def test_release_pin_never_picks_a_downgrade() -> None:
    """Compared against 1.2.4, of a release (1.2.3, 1.2.4): pinned to 1.2.4 (1.2.3 came first and, as
    any non-hex string, used to match)."""
    app = make_application(source=CHART, sync="OutOfSync", revision="1.2.4")
    assert appsync.release_pin(app, [("1.2.3",), ("1.2.4",)]) == ("1.2.4",)
