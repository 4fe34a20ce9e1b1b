"""Label selectors and a stage's targets: `stages[].targets.clusters` and `.applications`.

A stage names the clusters it may take by two label selectors: `clusters.selector` over the Argo CD
cluster Secrets' labels, and `applications.selector` over the labels of the ApplicationSet's
Applications (Argo CD RollingSync's `steps[].matchExpressions`, for fleets that copy cluster labels
onto Applications in the ApplicationSet template). Given both, a cluster must meet both; at least
one is required. Which clusters a stage's targets match is decided in one place,
`orchestrator.planning.stage_match`.

`LabelSelector` is also what `spec.skip` matches with. Pure data with pure helpers, like
`orchestrator.api.models`, which imports this module and re-exports its names.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import ConfigDict, Field, ValidationInfo, field_validator, model_validator

from orchestrator.api.base import (
    LABEL_KEY_MAX_LENGTH,
    LABEL_KEY_PATTERN,
    LABEL_VALUE_MAX_LENGTH,
    LABEL_VALUE_PATTERN,
    MAX_SELECTOR_TERMS,
    MAX_SELECTOR_VALUES,
    _Model,
    _validations,
    cel,
)

LabelKey = Annotated[str, Field(pattern=LABEL_KEY_PATTERN, max_length=LABEL_KEY_MAX_LENGTH)]
LabelValue = Annotated[str, Field(pattern=LABEL_VALUE_PATTERN, max_length=LABEL_VALUE_MAX_LENGTH)]


class SelectorOperator(StrEnum):
    """Operators of a label selector requirement, as Kubernetes defines them."""

    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"


_OPERATORS_WITH_VALUES = (SelectorOperator.IN, SelectorOperator.NOT_IN)


class LabelSelectorRequirement(_Model):
    """One `matchExpressions` entry: a label key, an operator and (for In/NotIn) values."""

    model_config = ConfigDict(
        json_schema_extra=_validations(
            cel(
                "!(self.operator in ['In', 'NotIn']) || (has(self.values) && size(self.values) > 0)",
                "operators In and NotIn need a non-empty values list (add values, or use Exists)",
                field_path=".values",
                reason="FieldValueRequired",
            ),
            cel(
                "!(self.operator in ['Exists', 'DoesNotExist'])"
                " || !has(self.values) || size(self.values) == 0",
                "operators Exists and DoesNotExist take no values (remove values, or use In/NotIn)",
                field_path=".values",
                reason="FieldValueForbidden",
            ),
        )
    )

    key: LabelKey
    """The label key the requirement is about."""
    operator: SelectorOperator
    """In, NotIn, Exists or DoesNotExist."""
    values: Annotated[list[LabelValue], Field(max_length=MAX_SELECTOR_VALUES)] | None = Field(
        default=None, validate_default=True
    )
    """The values for In and NotIn (at least one); must be empty for Exists and DoesNotExist."""

    @field_validator("values")
    @classmethod
    def _values_fit_operator(cls, values: list[str] | None, info: ValidationInfo) -> list[str] | None:
        operator = info.data.get("operator")
        if operator is None:  # the operator itself is invalid; that error is reported on its own
            return values
        if operator in _OPERATORS_WITH_VALUES and not values:
            raise ValueError(
                f"operator {operator.value} needs a non-empty values list (add values, or use Exists)"
            )
        if operator not in _OPERATORS_WITH_VALUES and values:
            raise ValueError(f"operator {operator.value} takes no values (remove values, or use In/NotIn)")
        return values

    def matches(self, labels: dict[str, str]) -> bool:
        """Kubernetes semantics: NotIn and DoesNotExist match objects without the key."""
        present = self.key in labels
        match self.operator:
            case SelectorOperator.IN:
                return present and labels[self.key] in (self.values or [])
            case SelectorOperator.NOT_IN:
                return not present or labels[self.key] not in (self.values or [])
            case SelectorOperator.EXISTS:
                return present
            case SelectorOperator.DOES_NOT_EXIST:
                return not present


class LabelSelector(_Model):
    """A metav1.LabelSelector; the empty selector matches everything."""

    match_labels: Annotated[dict[LabelKey, LabelValue], Field(max_length=MAX_SELECTOR_TERMS)] | None = None
    """Labels an object must carry with exactly these values."""
    match_expressions: (
        Annotated[list[LabelSelectorRequirement], Field(max_length=MAX_SELECTOR_TERMS)] | None
    ) = None
    """Requirements an object's labels must all meet."""

    def matches(self, labels: dict[str, str]) -> bool:
        """True when every matchLabels pair and every matchExpressions requirement holds."""
        for key, value in (self.match_labels or {}).items():
            if labels.get(key) != value:
                return False
        return all(req.matches(labels) for req in self.match_expressions or [])


class ClusterTargets(_Model):
    """Which Argo CD cluster Secrets a stage may take, by their labels."""

    selector: LabelSelector
    """Selects cluster Secrets by their labels; {} selects every cluster."""


class ApplicationTargets(_Model):
    """Which clusters a stage may take, by the labels of the ApplicationSet's Applications on them."""

    selector: LabelSelector
    """Selects Applications by their labels: a cluster qualifies when one of its Applications matches."""


# The one wording of a stage without any selector, offline and on apply.
NO_STAGE_SELECTOR = (
    "a stage needs a selector to know its clusters"
    " (give targets.clusters.selector, targets.applications.selector or both; {} selects every cluster)"
)


class StageTargets(_Model):
    """What a stage targets: clusters by their Secrets' labels, by their Applications' labels, or both."""

    model_config = ConfigDict(
        json_schema_extra=_validations(
            cel(
                "has(self.clusters) || has(self.applications)",
                NO_STAGE_SELECTOR,
                reason="FieldValueRequired",
            )
        )
    )

    clusters: ClusterTargets | None = None
    """The Argo CD clusters this stage may update, by their cluster Secrets' labels."""
    applications: ApplicationTargets | None = None
    """Only clusters with an Application of the ApplicationSet that this matches (AND with clusters)."""

    @model_validator(mode="after")
    def _some_selector(self) -> StageTargets:
        if self.clusters is None and self.applications is None:
            raise ValueError(NO_STAGE_SELECTOR)
        return self


def selector_text(selector: LabelSelector) -> str:
    """The selector as `kubectl get -l` writes one (`env=prod,tier in (a,b),!hold`); "(everything)"
    for the empty selector. For people: `plan` and `render` show a stage's selectors this way."""
    parts = [f"{key}={value}" for key, value in (selector.match_labels or {}).items()]
    for requirement in selector.match_expressions or []:
        values = ",".join(requirement.values or [])
        match requirement.operator:
            case SelectorOperator.IN:
                parts.append(f"{requirement.key} in ({values})")
            case SelectorOperator.NOT_IN:
                parts.append(f"{requirement.key} notin ({values})")
            case SelectorOperator.EXISTS:
                parts.append(requirement.key)
            case SelectorOperator.DOES_NOT_EXIST:
                parts.append(f"!{requirement.key}")
    return ",".join(parts) or "(everything)"


def describe_targets(targets: StageTargets) -> str:
    """What a stage's targets select, in words: `Applications labelled env=staging, on clusters
    labelled region=eu`."""
    clusters = f"clusters labelled {selector_text(targets.clusters.selector)}" if targets.clusters else ""
    if targets.applications is None:
        return clusters
    apps = f"clusters with an Application labelled {selector_text(targets.applications.selector)}"
    return f"{apps}, among {clusters}" if clusters else apps
