"""The shared ground of the API models: name patterns and bounds, the CEL twin helper, the base model,
the int-or-percent size.

`orchestrator.api.models` (the ProgressiveSync), `orchestrator.api.analysis` (its analysis gates) and
`orchestrator.api.rollback` (its rollback) all build on it; `models` re-exports every name here, so
callers keep importing them from there.
Pure data: no client, no clock.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, PlainValidator, WithJsonSchema, model_validator
from pydantic.alias_generators import to_camel

# A stage name is what people read in the Argo UI and in `status`; it becomes a DAG task name only
# after sanitizing (workflow_templates), so spaces are allowed here.
STAGE_NAME_PATTERN = r"^[A-Za-z0-9]([A-Za-z0-9 ._-]*[A-Za-z0-9])?$"
STAGE_NAME_MAX_LENGTH = 63
# A stage of another ProgressiveSync (spec.dependsOn[].stage): a stage name, or one group's stage of
# a grouped one, "<group>/<stage>" (docs/groups.md): a label value, or "(none)", the group of the
# clusters without the label.
DEPENDENCY_STAGE_PATTERN = (
    r"^((\(none\)|[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)/)?[A-Za-z0-9]([A-Za-z0-9 ._-]*[A-Za-z0-9])?$"
)
DEPENDENCY_STAGE_MAX_LENGTH = 63 + 1 + STAGE_NAME_MAX_LENGTH  # a label value, "/", a stage name
# Kubernetes qualified name (label key), optionally prefixed by a DNS subdomain.
LABEL_KEY_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
LABEL_KEY_MAX_LENGTH = 316  # 253 (prefix) + "/" + 63 (name)
LABEL_VALUE_PATTERN = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
LABEL_VALUE_MAX_LENGTH = 63
# Kubernetes object name (DNS subdomain) for references such as appSetRef.name.
OBJECT_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
OBJECT_NAME_MAX_LENGTH = 253
NAMESPACE_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
NAMESPACE_MAX_LENGTH = 63
PERCENT_PATTERN = r"^([1-9][0-9]?|100)%$"
SYNC_OPTION_PATTERN = r"^[A-Za-z]+=[^\s]+$"
CONDITION_REASON_PATTERN = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"
MAX_DEADLINE_SECONDS = 7 * 24 * 3600
MAX_BAKE_SECONDS = 7 * 24 * 3600
# A manual gate's approval window (stages[].approvalWindowSeconds): a minute to a month.
MIN_APPROVAL_WINDOW_SECONDS = 60
MAX_APPROVAL_WINDOW_SECONDS = 30 * 24 * 3600
MAX_STAGES = 50
# Bounds on selector sizes. Real selectors have a handful of terms; the bounds exist because the API
# server estimates the cost of every CEL rule from the largest list it may see, and refuses a CRD
# whose rules could be too expensive.
MAX_SELECTOR_TERMS = 32
MAX_SELECTOR_VALUES = 128

# What each pattern means, in words: used for error messages offline and in the CRD's CEL rules.
PATTERN_HINTS: dict[str, str] = {
    STAGE_NAME_PATTERN: (
        "use letters, digits, spaces, '.', '_' or '-', starting and ending with a letter or digit"
    ),
    DEPENDENCY_STAGE_PATTERN: (
        "use a stage name of that ProgressiveSync (such as canary), or one group's stage of a grouped"
        " one: <group>/<stage> (such as eu-west-1/canary), the group a label value or (none)"
    ),
    LABEL_KEY_PATTERN: "use a label key such as region or topology.kubernetes.io/zone",
    LABEL_VALUE_PATTERN: (
        "use a label value: letters, digits, '-', '_' or '.', starting and ending with a letter or digit"
    ),
    OBJECT_NAME_PATTERN: "use a lowercase name of letters, digits, '-' and '.', such as my-service",
    NAMESPACE_PATTERN: "use a namespace name of lowercase letters, digits and '-', such as argocd",
    PERCENT_PATTERN: 'use a percentage from "1%" to "100%"',
    SYNC_OPTION_PATTERN: "use an Argo CD sync option such as ServerSideApply=true",
    CONDITION_REASON_PATTERN: "use a CamelCase reason such as RolloutStarted",
}


def cel(
    rule: str,
    message: str,
    *,
    field_path: str | None = None,
    reason: str | None = None,
    message_expression: str | None = None,
) -> dict[str, str]:
    """One CRD `x-kubernetes-validations` entry: the API server's twin of a validator here.

    `message` must name the field and the fix; `field_path` (e.g. ".maxParallel") points the
    error at the field that has to change; `reason` is FieldValueInvalid, FieldValueRequired,
    FieldValueForbidden or FieldValueDuplicate.
    """
    entry = {"rule": rule, "message": message}
    if message_expression:
        entry["messageExpression"] = message_expression
    if field_path:
        entry["fieldPath"] = field_path
    if reason:
        entry["reason"] = reason
    return entry


def _validations(*rules: dict[str, str]) -> dict[str, Any]:
    return {"x-kubernetes-validations": list(rules)}


def _integral_float_to_int(value: Any) -> Any:
    # JSON has one number type: the API server takes 600.0 as the integer 600 (and rejects 1.5).
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


class _Model(BaseModel):
    """Base for API models: camelCase on the wire, unknown fields rejected like strict kubectl."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        validate_assignment=False,
        use_attribute_docstrings=True,
    )

    @model_validator(mode="before")
    @classmethod
    def _read_like_the_api_server(cls, data: Any) -> Any:
        # The API server prunes `field: null` and then applies the default (`maxTargets: null` is
        # "100%", `appSetRef: null` is missing), and takes 600.0 for the integer 600.
        if isinstance(data, dict):
            return {key: _integral_float_to_int(value) for key, value in data.items() if value is not None}
        return data

    def to_api(self) -> dict[str, Any]:
        """Serialize the way the API server stores it: camelCase, unset optionals omitted."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


# --- sizes -----------------------------------------------------------------------------------

INT_OR_PERCENT_HINT = (
    'use a whole number >= 1 without quotes, like 5, or a percentage from "1%" to "100%", like "5%"'
)


def _parse_int_or_percent(value: Any) -> int | str:
    # One validator for both forms, so an error names the field once, without union branch noise.
    # bool is an int in Python but `true` is not a size; the API server rejects it too.
    value = _integral_float_to_int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 1:
            raise ValueError(f"{value} is below 1 ({INT_OR_PERCENT_HINT})")
        return value
    if isinstance(value, str):
        if re.fullmatch(PERCENT_PATTERN, value):
            return value
        if value.strip().isdigit():
            raise ValueError(
                f'"{value}" is a number in quotes (write {value.strip()} without quotes for a count, '
                f'or "{value.strip()}%" for a percentage)'
            )
        raise ValueError(f'"{value}" is not a size ({INT_OR_PERCENT_HINT})')
    raise ValueError(f"{type(value).__name__} {value!r} is not a size ({INT_OR_PERCENT_HINT})")


IntOrPercent = Annotated[
    int | str,
    PlainValidator(_parse_int_or_percent),
    WithJsonSchema(
        {
            "anyOf": [{"type": "integer", "minimum": 1}, {"type": "string", "pattern": PERCENT_PATTERN}],
            "x-kubernetes-int-or-string": True,
            # Bounds the CEL cost estimate ("100%" is the longest valid string); ignored for ints.
            "maxLength": 4,
            **_validations(
                cel(
                    "type(self) == int ? self >= 1 : "
                    f"(type(self) == string && self.matches(r'{PERCENT_PATTERN}'))",
                    f"must be a whole number >= 1 or a percentage ({INT_OR_PERCENT_HINT})",
                )
            ),
        }
    ),
]
"""A stage size: an integer >= 1, or a percentage string "N%" with 1 <= N <= 100.

In the CRD it is `x-kubernetes-int-or-string` with a CEL rule for the range and the percent form.
"""
