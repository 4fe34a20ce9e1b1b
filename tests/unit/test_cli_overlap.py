"""`orchestrator.cli.overlap.in_child`: the answer is `work()`'s whichever process computes it.

Each case runs in a fresh interpreter (a fork is only taken when the process has one thread, and a
test worker may have more): the script prints a JSON line saying what `result()` gave, which
process computed it, and whether a child was started and is gone afterwards.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest

from orchestrator.cli.overlap import NO_FORK_VARIABLE

PRELUDE = """
import json, os, sys, threading
import click
from orchestrator.cli.overlap import in_child

PARENT = os.getpid()

def in_parent():
    return os.getpid() == PARENT

def report(pending, **more):
    gone = True
    if pending.child_pid is not None:
        try:
            os.waitpid(pending.child_pid, os.WNOHANG)
            gone = False
        except ChildProcessError:
            pass
    print(json.dumps({"forked": pending.child_pid is not None, "ran_in_child": pending.ran_in_child,
                      "child_gone": gone, **more}))
"""

CASES = [
    pytest.param(
        """
        with in_child(lambda: ("computed", in_parent())) as pending:
            value = pending.result()
        report(pending, value=value)
        """,
        {"forked": True, "ran_in_child": True, "child_gone": True, "value": ["computed", False]},
        id="value-computed-in-the-child",
    ),
    pytest.param(
        """
        def refuse():
            error = click.ClickException("the fleet file is bad: fix line 3")
            error.exit_code = 3
            raise error
        with in_child(refuse) as pending:
            try:
                pending.result()
            except click.ClickException as error:
                report(pending, refused=error.format_message(), code=error.exit_code)
        """,
        {
            "forked": True,
            "ran_in_child": True,
            "child_gone": True,
            "refused": "the fleet file is bad: fix line 3",
            "code": 3,
        },
        id="click-refusal-carried-with-its-message-and-exit-code",
    ),
    pytest.param(
        """
        def dies_in_child():
            if not in_parent():
                os._exit(9)
            return "from the parent"
        with in_child(dies_in_child) as pending:
            value = pending.result()
        report(pending, value=value)
        """,
        {"forked": True, "ran_in_child": False, "child_gone": True, "value": "from the parent"},
        id="a-child-that-dies-is-replaced-by-the-parent",
    ),
    pytest.param(
        """
        def bug():
            raise ValueError("in the child" if not in_parent() else "in the parent")
        with in_child(bug) as pending:
            try:
                pending.result()
            except ValueError as error:
                report(pending, raised=str(error))
        """,
        {"forked": True, "ran_in_child": False, "child_gone": True, "raised": "in the parent"},
        id="another-exception-is-raised-again-by-the-parent-with-its-own-traceback",
    ),
    pytest.param(
        """
        stop = threading.Event()
        thread = threading.Thread(target=stop.wait)
        thread.start()
        with in_child(in_parent) as pending:
            value = pending.result()
        stop.set(); thread.join()
        report(pending, value=value)
        """,
        {"forked": False, "ran_in_child": False, "child_gone": True, "value": True},
        id="no-fork-while-another-thread-runs",
    ),
    pytest.param(
        f"""
        os.environ["{NO_FORK_VARIABLE}"] = "1"
        with in_child(in_parent) as pending:
            value = pending.result()
        report(pending, value=value)
        """,
        {"forked": False, "ran_in_child": False, "child_gone": True, "value": True},
        id="no-fork-when-turned-off",
    ),
    pytest.param(
        """
        never = os.pipe()[0]
        try:
            with in_child(lambda: os.read(never, 1)) as pending:
                raise KeyboardInterrupt
        except KeyboardInterrupt:
            report(pending)
        """,
        {"forked": True, "ran_in_child": False, "child_gone": True},
        id="leaving-early-kills-and-reaps-a-child-still-working",
    ),
    pytest.param(
        """
        print("printed before the fork")  # buffered (stdout is a pipe): the child holds a copy
        with in_child(lambda: 1) as pending:
            pending.result()
        report(pending)
        """,
        {"forked": True, "ran_in_child": True, "child_gone": True},
        id="output-buffered-before-the-fork-is-written-once",
    ),
]


def run_script(body: str) -> tuple[list[str], dict[str, Any]]:
    script = PRELUDE + textwrap.dedent(body)
    env = {k: v for k, v in os.environ.items() if k != NO_FORK_VARIABLE}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False, env=env
    )
    assert done.returncode == 0, done.stderr
    *before, last = done.stdout.splitlines()
    return before, json.loads(last)


@pytest.mark.parametrize(("body", "expected"), CASES)
def test_the_answer_is_works_own_whichever_process_computes_it(body: str, expected: dict[str, Any]) -> None:
    before, outcome = run_script(body)
    assert outcome == expected
    assert before == (["printed before the fork"] if "printed before" in body else [])
