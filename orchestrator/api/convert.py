"""Turn another tool's progressive rollout into a ProgressiveSync: `progressive-sync convert`.

Two sources, each a parsed manifest (a dict as YAML gives it):

- an Argo CD ApplicationSet with `spec.strategy.type: RollingSync` (`from_application_set`): each
  of `spec.strategy.rollingSync.steps[]` becomes one stage that selects the same Applications by
  their labels (`targets.applications.selector.matchExpressions`, the step's as written), takes
  every cluster so selected (`maxTargets: "100%"`) and syncs `maxUpdate` of them at once
  (`maxParallel`, a percentage kept as one; RollingSync's default, all at once, is `"100%"`). A
  step with `maxUpdate: 0` (its Applications synced by hand) becomes a manual gate. As in Argo CD
  (applicationset/progressivesync), an Application belongs to the first step that selects it, and
  a stage skips the clusters an earlier stage took; an Application no step selects is in no
  stage, which progressive-sync reports before anything syncs (`UncoveredClusters`);
- Skyscanner's applicationset-progressive-sync `ProgressiveSync`
  (`argoproj.skyscanner.net/v1alpha1`, `from_skyscanner`): the same spec under a new
  `apiVersion` (docs/migration.md's field table), its integers kept.

Each conversion returns the manifest (the fields it sets, nothing defaulted), the model it
validates into, and notes: what to change in the ApplicationSet (`Change`) and what does not map
exactly (`Difference`), each naming the source field. What cannot be converted raises
`ConversionError`, naming the field and the fix. `convert_documents` does a whole file: every
document of the source's kind, what else it held said as skipped.

Pure: no I/O, no clock. Callers: `orchestrator.cli.convert_cmd`; docs/migration.md shows its output.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TypeGuard

from pydantic import ValidationError

from orchestrator.api.base import (
    OBJECT_NAME_PATTERN,
    STAGE_NAME_MAX_LENGTH,
    STAGE_NAME_PATTERN,
)
from orchestrator.api.models import API_VERSION, KIND, ProgressiveSync
from orchestrator.api.validation import validate_object

APPLICATION_SET_KIND = "ApplicationSet"
ARGOCD_GROUP = "argoproj.io"
ROLLING_SYNC = "RollingSync"
STEPS = "spec.strategy.rollingSync.steps"
SKYSCANNER_API_VERSION = "argoproj.skyscanner.net/v1alpha1"
ROLLING_SYNC_OPERATORS = ("In", "NotIn")
# What Argo CD's ApplicationSet controller takes when maxUpdate is unset: every Application at once.
ALL_AT_ONCE = "100%"
# Annotations a converted Skyscanner object does not keep: kubectl's and Argo CD's records of the old
# object (an ApplicationSet's labels and annotations are its own, so none is kept from it).
_NOT_KEPT = ("kubectl.kubernetes.io/last-applied-configuration", "argocd.argoproj.io/tracking-id")


class Source(StrEnum):
    """What a conversion reads: the flag of `progressive-sync convert` that names it."""

    APPLICATION_SET = "applicationset"
    SKYSCANNER = "skyscanner"


class NoteKind(StrEnum):
    """A note is either a change to make elsewhere, or a way the result differs from its source."""

    CHANGE = "change"
    DIFFERENCE = "difference"


@dataclass(frozen=True)
class Note:
    """One thing to do or to know, about one field of the source."""

    kind: NoteKind
    where: str
    text: str

    def __str__(self) -> str:
        return f"{self.where}: {self.text}"


@dataclass(frozen=True)
class Conversion:
    """One source object converted: the ProgressiveSync as a manifest, as a model, and the notes."""

    source: str  # e.g. "ApplicationSet argocd/guestbook"
    manifest: dict[str, Any]
    progressive_sync: ProgressiveSync
    notes: tuple[Note, ...]

    @property
    def changes(self) -> tuple[Note, ...]:
        """What to change in the source (or next to it) for the ProgressiveSync to work."""
        return tuple(note for note in self.notes if note.kind is NoteKind.CHANGE)

    @property
    def differences(self) -> tuple[Note, ...]:
        """Where the ProgressiveSync does not do exactly what its source did."""
        return tuple(note for note in self.notes if note.kind is NoteKind.DIFFERENCE)


class ConversionError(ValueError):
    """The source cannot be converted: each problem names its field and the fix."""

    def __init__(self, source: str, problems: Sequence[str]) -> None:
        super().__init__(f"{source}: " + "; ".join(problems))
        self.source = source
        self.problems = tuple(problems)


class NotConvertible(ValueError):
    """The document is of the right kind but has nothing to convert (e.g. no RollingSync strategy):
    skipped among several, an error alone."""

    def __init__(self, source: str, reason: str) -> None:
        super().__init__(f"{source}: {reason}")
        self.source = source
        self.reason = reason


@dataclass
class FileConversion:
    """What `convert_documents` made of one file's documents."""

    conversions: list[Conversion] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # "document 2 (ConfigMap x): not an ApplicationSet"
    errors: list[ConversionError] = field(default_factory=list)


# --- shared helpers ----------------------------------------------------------------------------


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _describe(document: Mapping[str, Any]) -> str:
    metadata = _mapping(document.get("metadata"))
    who = "/".join(str(part) for part in (metadata.get("namespace"), metadata.get("name")) if part)
    return f"{document.get('kind') or '(no kind)'} {who or '(no name)'}"


def _metadata(
    document: Mapping[str, Any],
    *,
    namespace: str | None,
    fallback_namespace: str,
    problems: list[str],
    keep_labels: bool = False,
) -> tuple[dict[str, Any], str | None]:
    """The ProgressiveSync's metadata (the source's name, and with `keep_labels` its labels and
    annotations; the namespace `namespace`, else the source's, else `fallback_namespace`) and the
    source's own namespace."""
    source = _mapping(document.get("metadata"))
    name = source.get("name")
    if not isinstance(name, str) or not name:
        problems.append("metadata.name: missing (give the object a name)")
    elif not re.fullmatch(OBJECT_NAME_PATTERN, name):
        problems.append(f"metadata.name: {name!r} is not a Kubernetes object name")
    own = (
        source.get("namespace")
        if isinstance(source.get("namespace"), str) and source.get("namespace")
        else None
    )
    metadata: dict[str, Any] = {"name": name, "namespace": namespace or own or fallback_namespace}
    if not keep_labels:
        return metadata, own
    labels = source.get("labels")
    if isinstance(labels, Mapping) and labels:
        metadata["labels"] = dict(labels)
    annotations = {k: v for k, v in _mapping(source.get("annotations")).items() if k not in _NOT_KEPT}
    if annotations:
        metadata["annotations"] = annotations
    return metadata, own


def unique_stage_names(candidates: Sequence[str]) -> list[str]:
    """Valid, unique stage names: each candidate with what the pattern refuses turned into "-",
    cut to the length limit; "step N" (N counting from 1) for one left empty, a duplicate or a
    name taken by a later step's "step N"."""
    names: list[str] = []
    for index, candidate in enumerate(candidates):
        name = re.sub(r"[^A-Za-z0-9 ._-]+", "-", candidate)[:STAGE_NAME_MAX_LENGTH]
        name = re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", name)
        if not name or name in names:
            name = f"step {index + 1}"
        suffix = 2
        base = name
        while name in names:
            name = f"{base}-{suffix}"[-STAGE_NAME_MAX_LENGTH:]
            suffix += 1
        names.append(name)
    assert all(re.fullmatch(STAGE_NAME_PATTERN, name) for name in names)
    return names


def _validated(source: str, manifest: dict[str, Any], where: Mapping[str, str]) -> ProgressiveSync:
    """The manifest as the model, or a ConversionError whose fields are the source's (`where` maps a
    prefix of the ProgressiveSync's field paths to the source field it came from)."""
    errors = validate_object(manifest)
    if errors:
        problems = []
        for error in errors:
            text = str(error)
            for ours, theirs in where.items():
                if text.startswith(ours):
                    text = theirs + text[len(ours) :]
                    break
            problems.append(text)
        raise ConversionError(source, problems)
    try:
        return ProgressiveSync.model_validate(manifest)
    except ValidationError as exc:  # validate_object found nothing, so this is not expected
        raise ConversionError(source, [str(exc)]) from exc


# --- Argo CD RollingSync -----------------------------------------------------------------------


def label_keys_set_by_templates(spec: Mapping[str, Any]) -> set[str]:
    """The Application label keys the ApplicationSet's templates write: `spec.template`'s and those
    of every generator's own `template` (a generator's template overrides the spec's)."""
    keys = set(_mapping(_mapping(_mapping(spec.get("template")).get("metadata")).get("labels")))

    def walk(value: Any) -> None:
        if isinstance(value, Mapping):
            template = value.get("template")
            if isinstance(template, Mapping):
                keys.update(_mapping(_mapping(template.get("metadata")).get("labels")))
            for child in value.values():
                walk(child)
        elif isinstance(value, list):
            for child in value:
                walk(child)

    walk(spec.get("generators"))
    return keys


def _expressions(index: int, step: Mapping[str, Any], problems: list[str]) -> list[dict[str, Any]]:
    """A step's matchExpressions as a label selector's, or problems naming each wrong field."""
    where = f"{STEPS}[{index}].matchExpressions"
    raw = step.get("matchExpressions")
    if raw is None:
        return []
    if not isinstance(raw, list):
        problems.append(f"{where}: must be a list of {{key, operator, values}}")
        return []
    out: list[dict[str, Any]] = []
    for number, expression in enumerate(raw):
        at = f"{where}[{number}]"
        if not isinstance(expression, Mapping):
            problems.append(f"{at}: must be a map with key, operator and values")
            continue
        key, operator, values = expression.get("key"), expression.get("operator"), expression.get("values")
        if not isinstance(key, str) or not key:
            problems.append(f"{at}.key: missing (name the Application label the step matches)")
            continue
        if operator not in ROLLING_SYNC_OPERATORS:
            problems.append(
                f"{at}.operator: {operator!r} is not one RollingSync takes (In or NotIn; Argo CD refuses "
                "the step's Applications otherwise)"
            )
            continue
        if values is None:
            values = []
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            problems.append(f"{at}.values: must be a list of label values (strings)")
            continue
        if not values:
            if operator == "In":
                problems.append(
                    f"{at}.values: empty, so the step selects no Application (list the values, or "
                    "remove the step)"
                )
            continue  # NotIn nothing excludes nothing: the expression is dropped (noted by the caller)
        out.append({"key": key, "operator": operator, "values": list(values)})
    return out


def _max_update(index: int, step: Mapping[str, Any], problems: list[str]) -> int | str | None:
    """A step's maxUpdate as maxParallel ("100%" when unset), 0 for "never synced by the controller",
    None (with a problem) when it is no size."""
    where = f"{STEPS}[{index}].maxUpdate"
    value = step.get("maxUpdate")
    if value is None:
        return ALL_AT_ONCE
    if isinstance(value, bool) or not isinstance(value, int | str):
        problems.append(f'{where}: {value!r} is not a count or a percentage (write 2 or "25%")')
        return None
    if isinstance(value, int):
        if value < 0:
            problems.append(f"{where}: {value} is below 0 (write a count >= 0 or a percentage)")
            return None
        return value
    match = re.fullmatch(r"(\d+)%", value.strip())
    if match is None:
        hint = f" (write {value.strip()} without quotes for a count)" if value.strip().isdigit() else ""
        problems.append(f"{where}: {value!r} is not a count or a percentage{hint}")
        return None
    percent = int(match.group(1))
    if percent == 0:
        return 0
    return f"{min(percent, 100)}%"


def _step_name(expressions: Sequence[Mapping[str, Any]]) -> str:
    """A stage name from a step's expressions when they are all `In`: their values (`prod`,
    `eu-us`, `prod eu-west-1`), else "" (then "step N")."""
    if expressions and all(e["operator"] == "In" for e in expressions):
        return " ".join("-".join(e["values"]) for e in expressions)
    return ""


def from_application_set(
    document: Mapping[str, Any], *, namespace: str | None = None, fallback_namespace: str = "argocd"
) -> Conversion:
    """The ProgressiveSync that rolls an ApplicationSet out as its RollingSync steps did.

    `namespace` (the `-n` flag) places the ProgressiveSync; without it, the ApplicationSet's
    namespace, else `fallback_namespace`. Raises NotConvertible when the ApplicationSet has no
    RollingSync strategy, ConversionError when a field is wrong.
    """
    source = _describe(document)
    if document.get("kind") != APPLICATION_SET_KIND:
        raise ConversionError(source, [f"kind: {document.get('kind')!r} is not {APPLICATION_SET_KIND}"])
    problems: list[str] = []
    api_version = document.get("apiVersion")
    if not isinstance(api_version, str) or api_version.split("/")[0] != ARGOCD_GROUP:
        problems.append(f"apiVersion: {api_version!r} is not Argo CD's ({ARGOCD_GROUP}/v1alpha1)")
    spec = _mapping(document.get("spec"))
    strategy = _mapping(spec.get("strategy"))
    if strategy.get("type") != ROLLING_SYNC:
        what = f"spec.strategy.type is {strategy.get('type')!r}" if strategy else "it has no spec.strategy"
        raise NotConvertible(source, f"{what}, not {ROLLING_SYNC}: there are no steps to convert")
    steps = _mapping(strategy.get("rollingSync")).get("steps")
    if not isinstance(steps, list) or not steps:
        raise ConversionError(
            source,
            [f"{STEPS}: {'missing' if steps is None else 'empty or not a list'} (a RollingSync needs steps)"],
        )
    metadata, own_namespace = _metadata(
        document, namespace=namespace, fallback_namespace=fallback_namespace, problems=problems
    )
    notes: list[Note] = []
    selectors: list[list[dict[str, Any]]] = []
    sizes: list[int | str | None] = []
    for index, step in enumerate(steps):
        if not isinstance(step, Mapping):
            problems.append(f"{STEPS}[{index}]: must be a map with matchExpressions and maxUpdate")
            selectors.append([])
            sizes.append(None)
            continue
        selectors.append(_expressions(index, step, problems))
        sizes.append(_max_update(index, step, problems))
    if problems:
        raise ConversionError(source, problems)

    stages: list[dict[str, Any]] = []
    for index, (step, expressions, size, name) in enumerate(
        zip(steps, selectors, sizes, unique_stage_names([_step_name(s) for s in selectors]), strict=True)
    ):
        selector: dict[str, Any] = {"matchExpressions": expressions} if expressions else {}
        stage: dict[str, Any] = {
            "name": name,
            "targets": {"applications": {"selector": selector}},
            "maxTargets": ALL_AT_ONCE,
            "maxParallel": ALL_AT_ONCE if size == 0 else size,
        }
        if size == 0:
            stage["approval"] = "Manual"
        stages.append(stage)
        notes += _step_notes(index, step, expressions, size, name, last=index == len(steps) - 1)
    notes += _application_set_notes(spec, strategy, selectors, metadata, own_namespace)

    ps_spec: dict[str, Any] = {"appSetRef": {"name": metadata["name"]}}
    if own_namespace and own_namespace != metadata["namespace"]:
        ps_spec["appSetRef"]["namespace"] = own_namespace
    if _automated(spec).get("prune") is True:
        ps_spec["syncOptions"] = {"prune": True}
    ps_spec["stages"] = stages
    manifest = {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": ps_spec}
    where = {
        f"spec.stages[{i}].targets.applications.selector.matchExpressions": f"{STEPS}[{i}].matchExpressions"
        for i in range(len(steps))
    }
    return Conversion(source, manifest, _validated(source, manifest, where), tuple(notes))


def _automated(spec: Mapping[str, Any]) -> Mapping[str, Any]:
    """The template's `syncPolicy.automated` when it turns automated sync on, else {} (absent, or
    Argo CD 3.x's `enabled: false`)."""
    sync_policy = _mapping(_mapping(_mapping(spec.get("template")).get("spec")).get("syncPolicy"))
    if "automated" not in sync_policy:
        return {}
    automated = _mapping(sync_policy.get("automated"))
    if automated.get("enabled") is False:
        return {}
    return automated or {"enabled": True}


def _step_notes(
    index: int,
    step: Mapping[str, Any],
    expressions: Sequence[Mapping[str, Any]],
    size: int | str | None,
    name: str,
    *,
    last: bool,
) -> list[Note]:
    """What does not map exactly in one step."""
    at = f"{STEPS}[{index}]"
    notes: list[Note] = []
    if size == 0:
        notes.append(
            Note(
                NoteKind.DIFFERENCE,
                f"{at}.maxUpdate",
                f"0: RollingSync never synced this step's Applications (a person did, by hand); stage "
                f"{name!r} is a manual gate instead (approval: Manual): after `progressive-sync approve` "
                "it syncs them itself, all at once",
            )
        )
    raw = step.get("maxUpdate")
    if isinstance(raw, str) and raw.strip().endswith("%") and size != raw.strip() and size != 0:
        notes.append(Note(NoteKind.DIFFERENCE, f"{at}.maxUpdate", f"{raw} is above 100%: {size} here"))
    for number, expression in enumerate(step.get("matchExpressions") or []):
        if isinstance(expression, Mapping) and expression.get("operator") == "NotIn":
            if not expression.get("values"):
                notes.append(
                    Note(
                        NoteKind.DIFFERENCE,
                        f"{at}.matchExpressions[{number}]",
                        "NotIn without values excludes nothing: left out of the stage's selector",
                    )
                )
            else:
                notes.append(
                    Note(
                        NoteKind.DIFFERENCE,
                        f"{at}.matchExpressions[{number}]",
                        f"NotIn also selects Applications without the label {expression.get('key')!r}, as in "
                        "RollingSync; here a stage takes a whole cluster when any of its Applications "
                        "matches",
                    )
                )
    if not expressions and not last:
        notes.append(
            Note(
                NoteKind.DIFFERENCE,
                f"{at}.matchExpressions",
                f"none: the step selects every Application, so stage {name!r} takes every cluster left "
                "and the later stages take none (RollingSync called them empty steps)",
            )
        )
    return notes


def _application_set_notes(
    spec: Mapping[str, Any],
    strategy: Mapping[str, Any],
    selectors: Sequence[Sequence[Mapping[str, Any]]],
    metadata: Mapping[str, Any],
    own_namespace: str | None,
) -> list[Note]:
    """What to change in the ApplicationSet, and the differences that concern every step."""
    notes = [
        Note(
            NoteKind.CHANGE,
            "spec.strategy",
            "remove it (or set type: AllAtOnce): while it is there the ProgressiveSync reports Valid=False "
            "ApplicationSetRollingSync and syncs nothing. Apply the ProgressiveSync first, then remove it",
        )
    ]
    used = sorted({e["key"] for expressions in selectors for e in expressions})
    set_by_templates = label_keys_set_by_templates(spec)
    if used:
        notes.append(
            Note(
                NoteKind.CHANGE,
                "spec.template.metadata.labels",
                f"keep {', '.join(used)}: the stages select Applications by "
                f"{'this label' if len(used) == 1 else 'these labels'}",
            )
        )
    patched = "templatePatch" in spec
    for key in used:
        if key in set_by_templates:
            continue
        unless = " unless spec.templatePatch sets it" if patched else ""
        steps = [
            str(i) for i, expressions in enumerate(selectors) if any(e["key"] == key for e in expressions)
        ]
        notes.append(
            Note(
                NoteKind.DIFFERENCE,
                f"{STEPS}[{','.join(steps)}]",
                f"no template of the ApplicationSet sets the label {key!r}{unless}: no Application carries "
                f"it, so an In on it selects none (set it in spec.template.metadata.labels)",
            )
        )
    automated = _automated(spec)
    if automated:
        notes.append(
            Note(
                NoteKind.CHANGE,
                "spec.template.spec.syncPolicy.automated",
                "remove it (on Argo CD 3.x `enabled: false` works too) in the same change that removes "
                "spec.strategy: RollingSync turned automated sync off on the Applications itself, and "
                "progressive-sync needs it off (`plan` warns AutomatedSync)"
                + (
                    "; its prune: true is spec.syncOptions.prune here, which the chart allows only with "
                    "policy.allowPrune: true"
                    if automated.get("prune") is True
                    else ""
                ),
            )
        )
    else:
        notes.append(
            Note(
                NoteKind.CHANGE,
                "spec.template.spec.syncPolicy",
                "keep automated sync off (no `automated`): progressive-sync syncs, stage by stage",
            )
        )
    if own_namespace and own_namespace != metadata["namespace"]:
        notes.append(
            Note(
                NoteKind.CHANGE,
                "metadata.namespace",
                f"the ProgressiveSync is in {metadata['namespace']}, the ApplicationSet in {own_namespace}: "
                "the chart must allow that namespace (appSetRef.namespace)",
            )
        )
    if strategy.get("deletionOrder"):
        notes.append(
            Note(
                NoteKind.DIFFERENCE,
                "spec.strategy.deletionOrder",
                f"{strategy.get('deletionOrder')!r} is not carried over: deleting Applications stays "
                "Argo CD's",
            )
        )
    if all(expressions for expressions in selectors):
        notes.append(
            Note(
                NoteKind.DIFFERENCE,
                STEPS,
                "Applications no step selects, if any: RollingSync left them to be synced by hand; here "
                "their clusters are an error before anything syncs (`plan` lists them: UncoveredClusters). "
                "Add a last stage with targets.clusters.selector: {} to roll them out last, or set "
                "spec.allowPartialRollout: true to leave them out as RollingSync did",
            )
        )
    notes.append(
        Note(
            NoteKind.DIFFERENCE,
            STEPS,
            "a stage takes whole clusters (with every Application of the ApplicationSet on them) and "
            "maxParallel counts clusters, where maxUpdate counted Applications: the same with one "
            "Application per cluster. A cluster not Synced and Healthy within progressDeadlineSeconds "
            "(600) fails its stage; RollingSync waited without a limit",
        )
    )
    return notes


# --- Skyscanner's applicationset-progressive-sync ----------------------------------------------


def _positive_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _skyscanner_stage(
    at: str, stage_in: Any, name: str, problems: list[str], notes: list[Note]
) -> dict[str, Any] | None:
    """One Skyscanner stage as ours (None, with problems, when it cannot be)."""
    if not isinstance(stage_in, Mapping):
        problems.append(f"{at}: must be a map with name, maxParallel, maxTargets and targets")
        return None
    if stage_in.get("name") != name:
        notes.append(
            Note(
                NoteKind.DIFFERENCE,
                f"{at}.name",
                f"{stage_in.get('name')!r} is {name!r} here (a valid, unique stage name)",
            )
        )
    selector = _mapping(_mapping(stage_in.get("targets")).get("clusters")).get("selector")
    if selector is not None and not isinstance(selector, Mapping):
        problems.append(f"{at}.targets.clusters.selector: must be a label selector")
        return None
    stage: dict[str, Any] = {"name": name, "targets": {"clusters": {"selector": dict(selector or {})}}}
    targets, parallel = stage_in.get("maxTargets"), stage_in.get("maxParallel")
    for key, value in (("maxTargets", targets), ("maxParallel", parallel)):
        if value is not None and not _positive_int(value):
            problems.append(f"{at}.{key}: {value!r} is not an integer >= 1 (Skyscanner's CRD required one)")
    if _positive_int(targets):
        stage["maxTargets"] = targets
    if _positive_int(parallel):
        if _positive_int(targets) and parallel > targets:
            notes.append(
                Note(
                    NoteKind.DIFFERENCE,
                    f"{at}.maxParallel",
                    f"{parallel} is above maxTargets {targets}: {targets} here "
                    "(Skyscanner synced at most maxTargets anyway)",
                )
            )
            parallel = targets
        stage["maxParallel"] = parallel
    return stage


def from_skyscanner(
    document: Mapping[str, Any], *, namespace: str | None = None, fallback_namespace: str = "argocd"
) -> Conversion:
    """The progressive-sync ProgressiveSync for one of Skyscanner's (docs/migration.md's table)."""
    source = f"Skyscanner {_describe(document)}"
    problems: list[str] = []
    if document.get("apiVersion") != SKYSCANNER_API_VERSION or document.get("kind") != KIND:
        raise ConversionError(
            source,
            [
                f"apiVersion/kind: {document.get('apiVersion')!r} {document.get('kind')!r} is not "
                f"Skyscanner's {SKYSCANNER_API_VERSION} {KIND}"
            ],
        )
    spec = _mapping(document.get("spec"))
    metadata, _own = _metadata(
        document,
        namespace=namespace,
        fallback_namespace=fallback_namespace,
        problems=problems,
        keep_labels=True,
    )
    app_set = _mapping(spec.get("appSetRef")).get("name")
    if not isinstance(app_set, str) or not app_set:
        problems.append("spec.appSetRef.name: missing (name the ApplicationSet)")
    stages_in = spec.get("stages")
    if not isinstance(stages_in, list) or not stages_in:
        problems.append("spec.stages: missing or empty (a ProgressiveSync needs at least one stage)")
        stages_in = []
    notes: list[Note] = []
    stages: list[dict[str, Any]] = []
    names = unique_stage_names([str(_mapping(stage).get("name") or "") for stage in stages_in])
    for index, (stage_in, name) in enumerate(zip(stages_in, names, strict=True)):
        stage = _skyscanner_stage(f"spec.stages[{index}]", stage_in, name, problems, notes)
        if stage is not None:
            stages.append(stage)
    if problems:
        raise ConversionError(source, problems)
    last = stages[-1]
    if "maxTargets" in last:
        notes.append(
            Note(
                NoteKind.DIFFERENCE,
                f"spec.stages[{len(stages) - 1}].maxTargets",
                f"{last['maxTargets']}: the last stage takes at most that many clusters, and every other "
                "out-of-date cluster is an error before anything syncs (UncoveredClusters): remove "
                "maxTargets there to take the rest, or set spec.allowPartialRollout: true",
            )
        )
    ps_spec: dict[str, Any] = {"appSetRef": {"name": app_set}}
    if _mapping(spec.get("syncOptions")).get("prune") is True:
        ps_spec["syncOptions"] = {"prune": True}
        notes.append(
            Note(
                NoteKind.CHANGE,
                "spec.syncOptions.prune",
                "kept: the chart allows it only with policy.allowPrune: true",
            )
        )
    ps_spec["stages"] = stages
    notes.append(
        Note(
            NoteKind.CHANGE,
            "metadata",
            "delete the Skyscanner ProgressiveSync while its controller still runs (it removes its "
            "finalizer), uninstall it, then apply this one; turn automated sync off in the ApplicationSet",
        )
    )
    manifest = {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": ps_spec}
    return Conversion(source, manifest, _validated(source, manifest, {}), tuple(notes))


# --- a whole file ------------------------------------------------------------------------------


def _is_source(document: Mapping[str, Any], source: Source) -> bool:
    if source is Source.APPLICATION_SET:
        return document.get("kind") == APPLICATION_SET_KIND
    return document.get("kind") == KIND and document.get("apiVersion") == SKYSCANNER_API_VERSION


def convert_documents(
    documents: Iterable[Any],
    source: Source,
    *,
    name: str | None = None,
    namespace: str | None = None,
    fallback_namespace: str = "argocd",
) -> FileConversion:
    """Every document of `source`'s kind converted (only the one called `name`, if given); what
    else the file holds, and what of that kind has nothing to convert, is said in `skipped`."""
    result = FileConversion()
    convert = from_application_set if source is Source.APPLICATION_SET else from_skyscanner
    wanted = "an ApplicationSet" if source is Source.APPLICATION_SET else "a Skyscanner ProgressiveSync"
    for number, document in enumerate(documents, start=1):
        if document is None:
            continue
        if not isinstance(document, Mapping):
            result.skipped.append(f"document {number}: not an object")
            continue
        if not _is_source(document, source):
            other = next((s for s in Source if s is not source and _is_source(document, s)), None)
            hint = f" (convert it with --from-{other.value})" if other is not None else ""
            result.skipped.append(f"document {number} ({_describe(document)}): not {wanted}{hint}")
            continue
        if name is not None and _mapping(document.get("metadata")).get("name") != name:
            result.skipped.append(f"document {number} ({_describe(document)}): not named {name!r}")
            continue
        try:
            result.conversions.append(
                convert(document, namespace=namespace, fallback_namespace=fallback_namespace)
            )
        except NotConvertible as exc:
            result.skipped.append(f"document {number} ({exc.source}): {exc.reason}")
        except ConversionError as exc:
            result.errors.append(exc)
    return result
