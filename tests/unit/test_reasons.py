"""The reason catalog: complete, documented, used by name everywhere, and the troubleshooting page
generated from it with the phases, states and cluster failures of `orchestrator.api.troubleshooting`
(golden, like the CRD): every value a person can read there has an entry. Pure: no API server."""

from __future__ import annotations

import ast
import os
import re
import string
from pathlib import Path

import pytest

from orchestrator.api import troubleshooting
from orchestrator.api.conditions import ConditionType
from orchestrator.api.models import CONDITION_REASON_PATTERN
from orchestrator.api.phases import FINISHED_ROLLOUT_PHASES, RolloutPhase, StagePhase
from orchestrator.api.reasons import ROLLOUT_ENDED, Reason, Section
from orchestrator.api.rollback import RollbackTrigger
from orchestrator.api.stage_records import ClusterState, RollbackState
from orchestrator.argocd.assess import Notice
from orchestrator.kube import watchloop
from orchestrator.planning.planner import IssueCode
from orchestrator.watcher.transitions import TransitionKind

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "troubleshooting.md"
SOURCES = sorted([*(REPO / "orchestrator").rglob("*.py"), *(REPO / "steps").rglob("*.py")])

# Calls that set a condition or record an Event, and where their reason goes (keyword, position).
REASON_ARGUMENT = {
    "set_condition": ("reason", None),
    "ConditionPatch": ("reason", 2),
    "condition": ("reason", 2),
    "RecordEvent": ("reason", 1),
    "Refusal": ("reason", 0),
    "Blocked": ("reason", 0),
}


@pytest.mark.parametrize("reason", list(Reason), ids=lambda r: r.value)
def test_every_reason_is_a_camel_case_word_with_a_meaning_and_a_fix(reason: Reason) -> None:
    assert re.fullmatch(CONDITION_REASON_PATTERN, reason.value), reason.value
    assert reason.value[0].isupper(), "CamelCase"
    assert reason.meaning.strip() and reason.meaning.endswith("."), reason.meaning
    assert reason.fix.strip() and reason.fix.endswith("."), reason.fix
    assert reason.condition.strip()
    assert isinstance(reason.section, Section)


def test_reason_names_are_unique() -> None:
    values = [reason.value for reason in Reason]
    assert len(values) == len(set(values)), "an Enum alias: two members with one value"


@pytest.mark.parametrize("reason", [r for r in Reason if r.message], ids=lambda r: r.value)
def test_every_message_template_fills_in(reason: Reason) -> None:
    fields = {name for _, name, _, _ in string.Formatter().parse(reason.message) if name}
    numeric = {name for _, name, spec, _ in string.Formatter().parse(reason.message) if name and spec}
    said = reason.say(**{name: (1.5 if name in numeric else f"<{name}>") for name in fields})
    assert "{" not in said and said.strip()


@pytest.mark.parametrize(
    ("codes", "what"),
    [
        pytest.param(IssueCode, "plan issue codes", id="plan-issues"),
        pytest.param(Notice, "cluster notices", id="cluster-notices"),
        pytest.param(TransitionKind, "status transitions (Event reasons)", id="transitions"),
        pytest.param(ConditionType, "condition types (FleetCompared is also a reason)", id="condition-types"),
    ],
)
def test_every_enum_of_reasons_is_in_the_catalog(codes: type, what: str) -> None:
    catalog = {reason.value for reason in Reason}
    values = {member.value for member in codes}  # type: ignore[attr-defined]
    if codes is ConditionType:
        values = {ConditionType.FLEET_COMPARED.value}
    missing = sorted(values - catalog)
    assert not missing, f"{what} without a catalog entry (orchestrator/api/reasons.py): {missing}"


def test_the_watch_loops_reasons_are_in_the_catalog() -> None:
    assert Reason.named(watchloop.FORBIDDEN) is Reason.WATCH_FORBIDDEN
    assert Reason.named(watchloop.CRD_MISSING) is Reason.CRD_MISSING


def test_every_finished_rollout_phase_has_its_reason() -> None:
    assert set(ROLLOUT_ENDED) == FINISHED_ROLLOUT_PHASES
    assert all(reason.value == f"Rollout{phase.value}" for phase, reason in ROLLOUT_ENDED.items())
    assert RolloutPhase.PROGRESSING not in ROLLOUT_ENDED


def test_a_name_outside_the_catalog_is_refused() -> None:
    with pytest.raises(ValueError, match="not a reason of the catalog"):
        Reason.named("SomethingElse")


def _literal_reasons(source: str, where: str) -> list[str]:
    """`where:line: call` for each reason written as a string literal where a catalog member belongs."""
    found = []
    for node in ast.walk(ast.parse(source, filename=where)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name not in REASON_ARGUMENT:
            continue
        keyword, position = REASON_ARGUMENT[name]
        args = [kw.value for kw in node.keywords if kw.arg == keyword]
        if position is not None and len(node.args) > position:
            args.append(node.args[position])
        if any(isinstance(arg, ast.Constant | ast.JoinedStr) for arg in args):
            found.append(f"{where}:{node.lineno}: {name}(...)")
    return found


def test_no_condition_or_event_reason_is_written_as_a_string() -> None:
    literal = [
        hit for path in SOURCES for hit in _literal_reasons(path.read_text(), str(path.relative_to(REPO)))
    ]
    assert not literal, "use a member of orchestrator.api.reasons.Reason: " + "; ".join(literal)


def test_the_scan_finds_a_literal_reason() -> None:
    """The scan above would see one (so its silence means something)."""
    sample = "\n".join(
        [
            'RecordEvent("Normal", "Anything", "m")',
            'set_condition(s, t, reason=f"R{x}")',
            'condition(t, s, Reason.VALID, "")',
        ]
    )
    assert _literal_reasons(sample, "sample.py") == [
        "sample.py:1: RecordEvent(...)",
        "sample.py:2: set_condition(...)",
    ]


def test_the_troubleshooting_page_is_generated_from_the_catalog() -> None:
    rendered = troubleshooting.render()
    if os.environ.get("REGENERATE") == "1":
        PAGE.write_text(rendered)
    assert PAGE.read_text() == rendered, (
        "docs/troubleshooting.md differs from orchestrator/api/reasons.py and troubleshooting.py: run "
        "`make docs` "
        f"(or REGENERATE=1 pytest {__file__})"
    )


def test_the_page_documents_every_reason_and_condition_type() -> None:
    page = troubleshooting.render()
    assert all(f"### {reason.value}\n" in page for reason in Reason)
    assert all(f"**{ctype.value}**" in page for ctype in ConditionType)


def test_write_mode_writes_the_page(tmp_path: Path) -> None:
    target = tmp_path / "troubleshooting.md"
    assert troubleshooting.main(["--write", str(target)]) == 0
    assert target.read_text() == troubleshooting.render()


@pytest.mark.parametrize(
    ("values", "table", "what"),
    [
        pytest.param(
            set(RolloutPhase), troubleshooting.ROLLOUT_PHASES, "rollout phases", id="rollout-phases"
        ),
        pytest.param(set(StagePhase), troubleshooting.STAGE_PHASES, "stage phases", id="stage-phases"),
        pytest.param(
            {*ClusterState, troubleshooting.NOT_STARTED},
            troubleshooting.CLUSTER_STATES,
            "cluster states",
            id="cluster-states",
        ),
        pytest.param(
            {*RollbackTrigger, troubleshooting.MANUAL_TRIGGER},
            troubleshooting.ROLLBACK_TRIGGERS,
            "rollback triggers",
            id="rollback-triggers",
        ),
        pytest.param(
            set(RollbackState), troubleshooting.ROLLBACK_STATES, "rollback states", id="rollback-states"
        ),
    ],
)
def test_every_phase_and_state_a_person_reads_has_an_entry(values: set[str], table: dict, what: str) -> None:
    assert {str(value) for value in values} == {str(key) for key in table}, f"{what}: entries differ"
    page = troubleshooting.render()
    assert all(f"| `{key}` |" in page for key in table)
    assert all(entry.meaning.endswith(".") and entry.fix.endswith(".") for entry in table.values())


# Where the steps word why a cluster failed: (file, the calls whose message is a failure).
FAILURE_SOURCES = {
    "orchestrator/argocd/assess.py": {"Verdict", "ClusterVerdict"},
    "orchestrator/argocd/appsync.py": {"RevisionError"},
    "steps/wait_healthy.py": {"WaitResult"},
    "steps/sync.py": {"_fail", "SyncResult", "_Busy"},
    "steps/cluster.py": {"ClusterResult"},
    "steps/common.py": {"stopped_reason"},
}


def _template(node: ast.expr) -> str | None:
    """A string or f-string as a template with `{}` for each blank; None for anything else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(part.value if isinstance(part, ast.Constant) else "{}" for part in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return (_template(node.left) or "{}") + (_template(node.right) or "{}")
    return None


def _failure_templates() -> dict[str, str]:
    """`file:line` -> the template of every failure message the steps can write for a cluster."""
    found = {}
    for path, calls in FAILURE_SOURCES.items():
        tree = ast.parse((REPO / path).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name == "stopped_reason" and node.name in calls:
                for inner in ast.walk(node):
                    if isinstance(inner, ast.JoinedStr):
                        found[f"{path}:{inner.lineno}"] = _template(inner) or ""
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = (
                func.attr
                if isinstance(func, ast.Attribute)
                else func.id
                if isinstance(func, ast.Name)
                else ""
            )
            if name not in calls or name == "stopped_reason":
                continue
            if name in {"Verdict", "ClusterVerdict", "WaitResult", "ClusterResult"} and not any(
                isinstance(arg, ast.Attribute) and arg.attr == "FAILED" for arg in node.args
            ):
                continue
            args = [*node.args, *(kw.value for kw in node.keywords if kw.arg in ("reason", "failure"))]
            for arg in args:
                template = _template(arg)
                # A message passed on from elsewhere (`reason`, `str(exc)`) is catalogued where it is made.
                if template is not None and template.replace("{}", "").strip(" :") not in ("", "cluster"):
                    found[f"{path}:{node.lineno}"] = template
    return found


def test_every_way_a_cluster_fails_has_an_entry() -> None:
    templates = _failure_templates()
    assert len(templates) >= 15, f"the scan found too little to mean anything: {templates}"
    fragments = [failure.fragment for failure in troubleshooting.CLUSTER_FAILURES]
    missing = {where: text for where, text in templates.items() if not any(f in text for f in fragments)}
    assert not missing, f"cluster failures without an entry in troubleshooting.CLUSTER_FAILURES: {missing}"


def test_every_cluster_failure_entry_is_still_written_somewhere() -> None:
    sources = [
        _template(node) or ""
        for path in SOURCES
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.JoinedStr | ast.Constant)
    ]
    stale = [
        f.fragment for f in troubleshooting.CLUSTER_FAILURES if not any(f.fragment in s for s in sources)
    ]
    assert not stale, f"entries no code writes any more: {stale}"
