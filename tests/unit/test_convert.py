"""orchestrator.api.convert: an ApplicationSet's RollingSync steps, and a Skyscanner ProgressiveSync,
as a ProgressiveSync and its notes; what cannot be converted, named by its field.

Pure: parsed manifests in, manifests and notes out. The property checks the converted stages pick
the Applications Argo CD's RollingSync picked (the model of its choice below follows
applicationset/progressivesync/progressive_sync.go's buildAppDependencyList: an Application
belongs to the first step all of whose expressions hold, an `In` on a label it lacks fails, a
`NotIn` on one it lacks holds).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.api.base import STAGE_NAME_MAX_LENGTH, STAGE_NAME_PATTERN
from orchestrator.api.convert import (
    ConversionError,
    NotConvertible,
    NoteKind,
    Source,
    convert_documents,
    from_application_set,
    from_skyscanner,
    label_keys_set_by_templates,
    unique_stage_names,
)
from orchestrator.api.models import ApprovalMode, ProgressiveSync
from orchestrator.planning.stage_match import stage_matches


def app_set(
    steps: list[Any] | None,
    *,
    labels: Mapping[str, str] | None = None,
    namespace: str | None = "argocd",
    sync_policy: Mapping[str, Any] | None = None,
    **strategy: Any,
) -> dict[str, Any]:
    """An ApplicationSet with these RollingSync steps (None: no strategy at all)."""
    template: dict[str, Any] = {
        "metadata": {"name": "{{name}}-web", "labels": dict(labels if labels is not None else {"env": "x"})},
        "spec": {"project": "default", "destination": {"server": "{{server}}"}},
    }
    if sync_policy is not None:
        template["spec"]["syncPolicy"] = dict(sync_policy)
    spec: dict[str, Any] = {"generators": [{"clusters": {}}], "template": template}
    if steps is not None:
        spec["strategy"] = {"type": "RollingSync", "rollingSync": {"steps": steps}, **strategy}
    metadata = {"name": "web", **({"namespace": namespace} if namespace else {})}
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "ApplicationSet",
        "metadata": metadata,
        "spec": spec,
    }


def step(*expressions: tuple[str, str, list[str]], max_update: Any = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "matchExpressions": [{"key": k, "operator": o, "values": v} for k, o, v in expressions]
    }
    if max_update is not None:
        out["maxUpdate"] = max_update
    return out


ENV_DEV = ("env", "In", ["dev"])
ENV_PROD = ("env", "In", ["prod"])


# --- stages --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("steps", "expected"),
    [
        pytest.param(
            [step(ENV_DEV)],
            [("dev", "100%", ApprovalMode.AUTOMATIC)],
            id="maxUpdate-unset-is-all-at-once",
        ),
        pytest.param(
            [step(ENV_DEV, max_update=2), step(ENV_PROD, max_update="25%")],
            [("dev", 2, ApprovalMode.AUTOMATIC), ("prod", "25%", ApprovalMode.AUTOMATIC)],
            id="count-and-percent-kept",
        ),
        pytest.param(
            [step(ENV_DEV, max_update=0), step(ENV_PROD, max_update="0%")],
            [("dev", "100%", ApprovalMode.MANUAL), ("prod", "100%", ApprovalMode.MANUAL)],
            id="maxUpdate-0-is-a-manual-gate",
        ),
        pytest.param(
            [step(ENV_PROD, max_update="150%")],
            [("prod", "100%", ApprovalMode.AUTOMATIC)],
            id="percent-above-100-capped",
        ),
        pytest.param(
            [step(("env", "In", ["eu", "us"]), ("tier", "In", ["web"])), step(("env", "NotIn", ["dev"]))],
            [("eu-us web", "100%", ApprovalMode.AUTOMATIC), ("step 2", "100%", ApprovalMode.AUTOMATIC)],
            id="names-from-In-values-else-step-n",
        ),
        pytest.param(
            [step(ENV_PROD), step(ENV_PROD), {"matchExpressions": []}],
            [
                ("prod", "100%", ApprovalMode.AUTOMATIC),
                ("step 2", "100%", ApprovalMode.AUTOMATIC),
                ("step 3", "100%", ApprovalMode.AUTOMATIC),
            ],
            id="duplicate-names-made-unique",
        ),
    ],
)
def test_each_step_becomes_a_stage(steps: list[Any], expected: list[tuple[str, Any, ApprovalMode]]) -> None:
    conversion = from_application_set(app_set(steps, labels={"env": "x", "tier": "y"}))
    stages = conversion.progressive_sync.spec.stages
    assert [(s.name, s.max_parallel, s.approval) for s in stages] == expected
    assert all(s.max_targets == "100%" and s.targets.clusters is None for s in stages)
    for stage, source in zip(stages, steps, strict=True):
        assert stage.targets.applications is not None
        written = [
            e.model_dump(by_alias=True, mode="json")
            for e in stage.targets.applications.selector.match_expressions or []
        ]
        assert written == source["matchExpressions"]


def test_the_manifest_is_minimal_and_is_the_model() -> None:
    conversion = from_application_set(app_set([step(ENV_DEV, max_update=1)]))
    assert conversion.manifest == {
        "apiVersion": "progressivesync.io/v1alpha1",
        "kind": "ProgressiveSync",
        "metadata": {"name": "web", "namespace": "argocd"},
        "spec": {
            "appSetRef": {"name": "web"},
            "stages": [
                {
                    "name": "dev",
                    "targets": {
                        "applications": {
                            "selector": {
                                "matchExpressions": [{"key": "env", "operator": "In", "values": ["dev"]}]
                            }
                        }
                    },
                    "maxTargets": "100%",
                    "maxParallel": 1,
                }
            ],
        },
    }
    assert ProgressiveSync.model_validate(conversion.manifest) == conversion.progressive_sync


@pytest.mark.parametrize(
    ("source_namespace", "flag", "placed", "ref_namespace"),
    [
        pytest.param("team", None, "team", None, id="the-application-sets-namespace"),
        pytest.param(None, None, "fallback", None, id="none-then-the-fallback"),
        pytest.param(None, "mine", "mine", None, id="flag-without-a-source-namespace"),
        pytest.param("team", "ops", "ops", "team", id="flag-elsewhere-refers-back"),
    ],
)
def test_namespace(
    source_namespace: str | None, flag: str | None, placed: str, ref_namespace: str | None
) -> None:
    conversion = from_application_set(
        app_set([step(ENV_DEV)], namespace=source_namespace), namespace=flag, fallback_namespace="fallback"
    )
    ps = conversion.progressive_sync
    assert ps.metadata.namespace == placed
    assert ps.spec.app_set_ref.namespace == ref_namespace
    assert any(n.where == "metadata.namespace" for n in conversion.changes) == (ref_namespace is not None)


# --- notes ---------------------------------------------------------------------------------------


def notes_of(document: dict[str, Any]) -> dict[str, str]:
    """Every note as where -> text (texts of one field joined)."""
    out: dict[str, str] = {}
    for note in from_application_set(document).notes:
        out[note.where] = (out.get(note.where, "") + " | " + note.text).strip(" |")
    return out


@pytest.mark.parametrize(
    ("document", "where", "says"),
    [
        pytest.param(app_set([step(ENV_DEV)]), "spec.strategy", "remove it", id="drop-the-strategy"),
        pytest.param(
            app_set([step(ENV_DEV)]), "spec.template.metadata.labels", "keep env", id="keep-the-labels"
        ),
        pytest.param(
            app_set([step(ENV_DEV)]),
            "spec.template.spec.syncPolicy",
            "keep automated sync off",
            id="auto-sync-off-stays",
        ),
        pytest.param(
            app_set([step(ENV_DEV)], sync_policy={"automated": {"selfHeal": True}}),
            "spec.template.spec.syncPolicy.automated",
            "remove it",
            id="auto-sync-on-must-go",
        ),
        pytest.param(
            app_set([step(ENV_DEV, max_update=0)]),
            "spec.strategy.rollingSync.steps[0].maxUpdate",
            "manual gate",
            id="maxUpdate-0",
        ),
        pytest.param(
            app_set([step(ENV_DEV, max_update="150%")]),
            "spec.strategy.rollingSync.steps[0].maxUpdate",
            "above 100%",
            id="percent-above-100",
        ),
        pytest.param(
            app_set([step(("env", "NotIn", ["dev"]))]),
            "spec.strategy.rollingSync.steps[0].matchExpressions[0]",
            "without the label 'env'",
            id="NotIn-selects-the-unlabelled",
        ),
        pytest.param(
            app_set([step(ENV_DEV), step(("env", "NotIn", []))]),
            "spec.strategy.rollingSync.steps[1].matchExpressions[0]",
            "excludes nothing",
            id="NotIn-nothing-dropped",
        ),
        pytest.param(
            app_set([step(("team", "In", ["a"]))], labels={"env": "x"}),
            "spec.strategy.rollingSync.steps[0]",
            "no template of the ApplicationSet sets the label 'team'",
            id="a-label-nothing-sets",
        ),
        pytest.param(
            app_set([step(ENV_DEV)]),
            "spec.strategy.rollingSync.steps",
            "UncoveredClusters",
            id="the-unselected",
        ),
        pytest.param(
            app_set([{"matchExpressions": []}, step(ENV_DEV)]),
            "spec.strategy.rollingSync.steps[0].matchExpressions",
            "later stages take none",
            id="select-all-before-the-end",
        ),
        pytest.param(
            app_set([step(ENV_DEV)], deletionOrder="Reverse"),
            "spec.strategy.deletionOrder",
            "not carried over",
            id="deletion-order",
        ),
    ],
)
def test_notes_name_the_field(document: dict[str, Any], where: str, says: str) -> None:
    notes = notes_of(document)
    assert where in notes, sorted(notes)
    assert says in notes[where]


def test_a_last_step_selecting_everything_takes_the_rest_so_no_uncovered_note() -> None:
    conversion = from_application_set(app_set([step(ENV_DEV), {}]))
    assert conversion.progressive_sync.spec.stages[-1].targets.applications.selector.matches({"any": "thing"})  # type: ignore[union-attr]
    assert not any("UncoveredClusters" in n.text for n in conversion.notes)


def test_automated_prune_carries_over_with_a_warning() -> None:
    conversion = from_application_set(app_set([step(ENV_DEV)], sync_policy={"automated": {"prune": True}}))
    assert conversion.progressive_sync.spec.sync_options.prune is True
    assert any("policy.allowPrune" in n.text for n in conversion.changes)


def test_automated_enabled_false_is_off() -> None:
    conversion = from_application_set(app_set([step(ENV_DEV)], sync_policy={"automated": {"enabled": False}}))
    assert "spec.template.spec.syncPolicy" in {n.where for n in conversion.changes}


def test_generator_templates_set_labels_too() -> None:
    spec = {
        "generators": [
            {"matrix": {"generators": [{"list": {"template": {"metadata": {"labels": {"a": "1"}}}}}]}}
        ]
    }
    assert label_keys_set_by_templates(spec) == {"a"}


def test_every_note_has_a_kind_and_a_field() -> None:
    conversion = from_application_set(app_set([step(ENV_DEV, max_update=0)]))
    assert {n.kind for n in conversion.notes} == {NoteKind.CHANGE, NoteKind.DIFFERENCE}
    assert all(n.where and str(n).startswith(n.where) for n in conversion.notes)


# --- what cannot be converted ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("document", "field"),
    [
        pytest.param(app_set([]), "spec.strategy.rollingSync.steps: empty", id="no-steps"),
        pytest.param({**app_set([step(ENV_DEV)]), "apiVersion": "v1"}, "apiVersion: 'v1'", id="not-argo-cds"),
        pytest.param({**app_set([step(ENV_DEV)]), "metadata": {}}, "metadata.name: missing", id="no-name"),
        pytest.param(
            app_set(["dev"]), "spec.strategy.rollingSync.steps[0]: must be a map", id="step-not-a-map"
        ),
        pytest.param(
            app_set([{"matchExpressions": {"key": "env"}}]),
            "steps[0].matchExpressions: must be a list",
            id="expressions-not-a-list",
        ),
        pytest.param(
            app_set([step(("env", "Exists", []))]),
            "steps[0].matchExpressions[0].operator: 'Exists' is not one RollingSync takes",
            id="operator-exists",
        ),
        pytest.param(
            app_set([step(("env", "In", []))]), "steps[0].matchExpressions[0].values: empty", id="In-nothing"
        ),
        pytest.param(
            app_set([{"matchExpressions": [{"operator": "In", "values": ["a"]}]}]),
            "steps[0].matchExpressions[0].key: missing",
            id="no-key",
        ),
        pytest.param(
            app_set([step(ENV_DEV, max_update=-1)]), "steps[0].maxUpdate: -1 is below 0", id="negative"
        ),
        pytest.param(
            app_set([step(ENV_DEV, max_update="5")]), "without quotes for a count", id="number-in-quotes"
        ),
        pytest.param(app_set([step(ENV_DEV, max_update="half")]), "'half' is not a count", id="not-a-size"),
        pytest.param(
            app_set([step(("env", "In", ["not a label value!"]))]),
            "spec.strategy.rollingSync.steps[0].matchExpressions[0].values",
            id="model-errors-named-by-the-source-field",
        ),
    ],
)
def test_what_cannot_be_converted_names_the_field(document: dict[str, Any], field: str) -> None:
    with pytest.raises(ConversionError) as raised:
        from_application_set(document)
    assert any(field in problem for problem in raised.value.problems), raised.value.problems


@pytest.mark.parametrize(
    "strategy",
    [pytest.param(None, id="no-strategy"), pytest.param({"type": "AllAtOnce"}, id="all-at-once")],
)
def test_without_rolling_sync_there_is_nothing_to_convert(strategy: dict[str, Any] | None) -> None:
    document = app_set(None)
    if strategy:
        document["spec"]["strategy"] = strategy
    with pytest.raises(NotConvertible, match="there are no steps to convert"):
        from_application_set(document)


# --- stage names ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("candidates", "expected"),
    [
        pytest.param(["dev", "prod"], ["dev", "prod"], id="kept"),
        pytest.param(["", "!!"], ["step 1", "step 2"], id="empty-is-step-n"),
        pytest.param(["a/b", "-x-"], ["a-b", "x"], id="cleaned"),
        pytest.param(["x", "x", "x"], ["x", "step 2", "step 3"], id="duplicates"),
        pytest.param(["step 2", "", ""], ["step 2", "step 2-2", "step 3"], id="a-taken-step-n"),
        pytest.param(["a" * 80], ["a" * STAGE_NAME_MAX_LENGTH], id="cut"),
    ],
)
def test_unique_stage_names(candidates: list[str], expected: list[str]) -> None:
    assert unique_stage_names(candidates) == expected


@given(st.lists(st.text(max_size=70), min_size=1, max_size=12))
def test_stage_names_are_always_valid_and_unique(candidates: list[str]) -> None:
    names = unique_stage_names(candidates)
    assert len(set(names)) == len(names) == len(candidates)
    assert all(re.fullmatch(STAGE_NAME_PATTERN, n) and len(n) <= STAGE_NAME_MAX_LENGTH for n in names)


# --- the property: the same Applications, step by step ----------------------------------------------


def rolling_sync_step(labels: Mapping[str, str], steps: Sequence[Mapping[str, Any]]) -> int | None:
    """The step Argo CD's RollingSync puts an Application with these labels in (None: none)."""
    for index, each in enumerate(steps):
        selected = True
        for expression in each.get("matchExpressions") or []:
            key, operator, values = expression["key"], expression["operator"], expression["values"]
            if key in labels:
                matched = labels[key] in values if operator == "In" else labels[key] not in values
            else:
                matched = operator == "NotIn"
            if not matched:
                selected = False
                break
        if selected:
            return index
    return None


KEYS = ("env", "region", "tier")
VALUES = ("a", "b", "c")
expressions = st.builds(
    lambda key, operator, values: {"key": key, "operator": operator, "values": sorted(values)},
    st.sampled_from(KEYS),
    st.sampled_from(("In", "NotIn")),
    st.sets(st.sampled_from(VALUES), min_size=1),
)
steps_strategy = st.lists(
    st.builds(
        lambda exprs, max_update: {
            "matchExpressions": exprs,
            **({} if max_update is None else {"maxUpdate": max_update}),
        },
        st.lists(expressions, max_size=3),
        st.sampled_from((None, 0, 1, 3, "0%", "1%", "50%", "100%", "150%")),
    ),
    min_size=1,
    max_size=5,
)
applications = st.lists(
    st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES)), min_size=1, max_size=10
)


@settings(max_examples=300)
@given(steps_strategy, applications)
def test_the_stages_take_the_applications_the_steps_took(
    steps: list[dict[str, Any]], apps: list[dict[str, str]]
) -> None:
    conversion = from_application_set(app_set(copy.deepcopy(steps), labels=dict.fromkeys(KEYS, "x")))
    ps = ProgressiveSync.model_validate(conversion.manifest)  # always valid
    stages = ps.spec.stages
    assert len(stages) == len(steps)
    for labels in apps:  # one Application per cluster: a stage takes it when no earlier one did
        taken = next((i for i, s in enumerate(stages) if stage_matches(s.targets, {}, [labels])), None)
        assert taken == rolling_sync_step(labels, steps), (labels, steps)
    for stage, source in zip(stages, steps, strict=True):
        never = source.get("maxUpdate") in (0, "0%")
        assert (stage.approval is ApprovalMode.MANUAL) == never
        if not never:
            expected = source.get("maxUpdate", "100%")
            if isinstance(expected, str):
                expected = f"{min(int(expected[:-1]), 100)}%"
            assert stage.max_parallel == expected
    unselected_note = any("UncoveredClusters" in n.text for n in conversion.notes)
    assert unselected_note == all(s.get("matchExpressions") for s in steps)


# --- Skyscanner ----------------------------------------------------------------------------------


def skyscanner(stages: list[Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "argoproj.skyscanner.net/v1alpha1",
        "kind": "ProgressiveSync",
        "metadata": {
            "name": "checkout",
            "namespace": "argocd",
            "finalizers": ["finalizers.argoproj.skyscanner.net"],
        },
        "spec": {"appSetRef": {"name": "checkout"}, "stages": stages, **spec},
        "status": {"lastSyncedStage": "x"},
    }


EMEA = {
    "name": "canary in emea",
    "maxParallel": 2,
    "maxTargets": 2,
    "targets": {"clusters": {"selector": {"matchLabels": {"area": "emea"}}}},
}


def test_skyscanner_carries_over_with_a_new_api_version() -> None:
    rest = {
        "name": "the rest",
        "maxParallel": 2,
        "maxTargets": 100,
        "targets": {"clusters": {"selector": {}}},
    }
    conversion = from_skyscanner(skyscanner([EMEA, rest], syncOptions={"prune": True}))
    assert conversion.manifest == {
        "apiVersion": "progressivesync.io/v1alpha1",
        "kind": "ProgressiveSync",
        "metadata": {"name": "checkout", "namespace": "argocd"},
        "spec": {
            "appSetRef": {"name": "checkout"},
            "syncOptions": {"prune": True},
            "stages": [
                {
                    "name": "canary in emea",
                    "targets": {"clusters": {"selector": {"matchLabels": {"area": "emea"}}}},
                    "maxTargets": 2,
                    "maxParallel": 2,
                },
                {
                    "name": "the rest",
                    "targets": {"clusters": {"selector": {}}},
                    "maxTargets": 100,
                    "maxParallel": 2,
                },
            ],
        },
    }
    wheres = {n.where for n in conversion.notes}
    assert {"spec.stages[1].maxTargets", "spec.syncOptions.prune", "metadata"} <= wheres


@pytest.mark.parametrize(
    ("stage", "where", "says"),
    [
        pytest.param(
            {**EMEA, "maxParallel": 5},
            "spec.stages[0].maxParallel",
            "above maxTargets",
            id="parallel-clamped",
        ),
        pytest.param(
            {**EMEA, "name": "emea/canary"}, "spec.stages[0].name", "'emea-canary'", id="name-cleaned"
        ),
    ],
)
def test_skyscanner_notes(stage: dict[str, Any], where: str, says: str) -> None:
    notes = {n.where: n.text for n in from_skyscanner(skyscanner([stage])).notes}
    assert says in notes[where]


def test_skyscanner_without_targets_selects_every_cluster() -> None:
    ps = from_skyscanner(skyscanner([{"name": "all", "maxParallel": 1, "maxTargets": 1}])).progressive_sync
    assert ps.spec.stages[0].targets.clusters is not None
    assert ps.spec.stages[0].targets.clusters.selector.matches({"any": "x"})


@pytest.mark.parametrize(
    ("document", "field"),
    [
        pytest.param(skyscanner([]), "spec.stages: missing or empty", id="no-stages"),
        pytest.param(
            {**skyscanner([EMEA]), "spec": {"stages": [EMEA]}}, "spec.appSetRef.name: missing", id="no-appset"
        ),
        pytest.param(skyscanner([{**EMEA, "maxTargets": 0}]), "spec.stages[0].maxTargets: 0", id="zero"),
        pytest.param(
            skyscanner([{**EMEA, "maxParallel": "10%"}]), "spec.stages[0].maxParallel: '10%'", id="percent"
        ),
        pytest.param(
            {**skyscanner([EMEA]), "apiVersion": "progressivesync.io/v1alpha1"}, "apiVersion/kind", id="ours"
        ),
    ],
)
def test_skyscanner_errors_name_the_field(document: dict[str, Any], field: str) -> None:
    with pytest.raises(ConversionError) as raised:
        from_skyscanner(document)
    assert any(field in problem for problem in raised.value.problems), raised.value.problems


# --- a whole file ---------------------------------------------------------------------------------


def test_a_file_converts_each_application_set_and_says_what_it_skipped() -> None:
    other = app_set([step(ENV_PROD)])
    other["metadata"]["name"] = "api"
    plain = app_set(None)
    plain["metadata"]["name"] = "plain"
    documents = [
        app_set([step(ENV_DEV)]),
        {"kind": "ConfigMap", "metadata": {"name": "c"}},
        None,
        other,
        plain,
        "text",
    ]
    result = convert_documents(documents, Source.APPLICATION_SET)
    assert [c.progressive_sync.metadata.name for c in result.conversions] == ["web", "api"]
    assert result.skipped == [
        "document 2 (ConfigMap c): not an ApplicationSet",
        "document 5 (ApplicationSet argocd/plain): it has no spec.strategy, not RollingSync: "
        "there are no steps to convert",
        "document 6: not an object",
    ]
    assert result.errors == []
    named = convert_documents(documents, Source.APPLICATION_SET, name="api")
    assert [c.progressive_sync.metadata.name for c in named.conversions] == ["api"]


def test_a_file_collects_every_error() -> None:
    result = convert_documents([app_set([]), app_set([step(ENV_DEV)])], Source.APPLICATION_SET)
    assert len(result.errors) == 1 and len(result.conversions) == 1


def test_metadata_kept_from_skyscanner_but_not_from_an_application_set() -> None:
    marks = {
        "labels": {"team": "shop"},
        "annotations": {
            "note": "kept",
            "argocd.argoproj.io/tracking-id": "root:argoproj.io/ApplicationSet:argocd/web",
            "kubectl.kubernetes.io/last-applied-configuration": "{}",
        },
    }
    document = app_set([step(ENV_DEV)])
    document["metadata"].update(copy.deepcopy(marks))
    assert from_application_set(document).manifest["metadata"] == {"name": "web", "namespace": "argocd"}
    old = skyscanner([EMEA])
    old["metadata"].update(copy.deepcopy(marks))
    metadata = from_skyscanner(old).manifest["metadata"]
    assert metadata["labels"] == {"team": "shop"} and metadata["annotations"] == {"note": "kept"}


def test_a_label_nothing_sets_may_come_from_a_template_patch() -> None:
    document = app_set([step(("team", "In", ["a"]))], labels={"env": "x"})
    document["spec"]["templatePatch"] = "metadata: {labels: {team: a}}"
    notes = notes_of(document)
    assert "unless spec.templatePatch sets it" in notes["spec.strategy.rollingSync.steps[0]"]
