"""Retry nodes: a template with a `retryStrategy` runs as attempts `name(0)`, `name(1)`, ... under
one Retry node; after each finished attempt the backoff, the retry policy, the limit and the
expression decide, in the order of Argo's `processNodeRetries`, whether another attempt starts.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from orchestrator.core.clock import parse_time
from orchestrator.engine.expressions import parse_duration, retry_expression_holds, substitute
from orchestrator.engine.pods import PodNodes
from orchestrator.workflows.phases import FULFILLED, NodePhase, NodeType


def go_time(moment: datetime) -> str:
    """A UTC time as Go prints a time.Time (`2026-01-01 00:00:30 +0000 UTC`), as Argo's messages do."""
    text = moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")
    if moment.microsecond:
        text += f".{moment.microsecond:06d}".rstrip("0")
    return f"{text} +0000 UTC"


class RetryNodes(PodNodes):
    """Retry nodes and their attempts (Pod nodes)."""

    def execute_retry(
        self,
        name: str,
        template: Mapping[str, Any],
        inputs: dict[str, str],
        *,
        boundary_id: str | None,
        display_name: str,
        attempt_display_name: str | None = None,
    ) -> dict[str, Any]:
        """Advance (or create) a Retry node: run its last attempt, then end it, wait out the
        backoff, or start the next attempt."""
        strategy = template["retryStrategy"]
        node = self.node_by_name(name) or self.new_node(
            name,
            NodeType.RETRY,
            display_name=display_name,
            template_name=str(template["name"]),
            boundary_id=boundary_id,
            inputs=inputs,
        )
        # Children are the attempts `name(0)`, `name(1)`, ... and, once it is done, the tasks after it.
        attempts = [
            self.nodes[child]
            for child in node.get("children") or []
            if child in self.nodes
            and re.fullmatch(re.escape(name) + r"\(\d+\)", str(self.nodes[child]["name"]))
        ]
        last = attempts[-1] if attempts else None
        if last is not None and self.phase_of(last) not in FULFILLED:
            last = self.execute_pod(
                str(last["name"]),
                template,
                inputs,
                boundary_id=boundary_id,
                display_name=str(last["displayName"]),
            )
        if last is not None and self.phase_of(last) in FULFILLED:
            verdict = self.retry_verdict(strategy, attempts, inputs)
            if isinstance(verdict, datetime):
                # The same text on every pass: a countdown would rewrite the status every second.
                wait = self.backoff_seconds(strategy, attempts=len(attempts))
                node["message"] = f"Backoff for {math.ceil(wait)} seconds"
                self.wake(verdict)
                return node
            if verdict is not None:
                phase, message = verdict
                node["outputs"] = copy.deepcopy(last.get("outputs"))
                self.finish(node, phase, message)
                return node
        if last is None or self.phase_of(last) in FULFILLED:
            if last is not None and not self.can_start(boundary_id, limits=False):
                return node
            node.pop("message", None)
            attempt_name = f"{name}({len(attempts)})"
            attempt = self.execute_pod(
                attempt_name,
                template,
                inputs,
                boundary_id=boundary_id,
                display_name=f"{attempt_display_name or display_name}({len(attempts)})",
            )
            self.add_child(node, str(attempt["id"]))
        return node

    def retry_verdict(
        self, strategy: Mapping[str, Any], attempts: list[dict[str, Any]], inputs: Mapping[str, str]
    ) -> tuple[NodePhase, str] | datetime | None:
        """After a finished attempt: the Retry node's end (phase, message), a time to wait until, or
        None to start the next attempt now.

        The order is Argo's (v3.7 `processNodeRetries`), and it matters: shutdown and the deadline
        end it first; then the backoff is waited out
        before the retry policy, the limit and the expression are looked at, so even a failure that
        will not be retried waits its backoff first; the last allowed attempt waits for nothing.
        """
        last = attempts[-1]
        phase = NodePhase(last["phase"])
        if phase in (NodePhase.SUCCEEDED, NodePhase.SKIPPED):
            return NodePhase.SUCCEEDED, ""
        # A stopped Workflow, or one past its deadline, retries nothing, not even in its exit handler
        # (whose nodes still run then): Argo ends the Retry node before looking at the backoff.
        if self.shutdown:
            return phase, f"Stopped with strategy '{self.shutdown}'"
        deadline = self.workflow_deadline()
        if deadline is not None and self.now > deadline:
            return phase, f"retry exceeded workflow deadline {go_time(deadline)}"
        limit = int(substitute(str(strategy["limit"]), self.scope(inputs)))
        if strategy.get("backoff"):
            wait = self.backoff_seconds(strategy, attempts=len(attempts))
            not_before = (parse_time(last.get("finishedAt")) or self.now) + timedelta(seconds=wait)
            if self.now < not_before and len(attempts) <= limit:
                return not_before
        policy = strategy.get("retryPolicy") or "OnFailure"
        retried = {"Always": {"Failed", "Error"}, "OnFailure": {"Failed"}, "OnError": {"Error"}}[policy]
        if phase.value not in retried:
            return phase, str(last.get("message", phase.value))
        if len(attempts) > limit:
            return phase, "No more retries left"
        expression = strategy.get("expression")
        if expression:
            # Argo's `lastRetry.exitCode` is "-1" when the attempt has no exit code (a lost pod).
            exit_code = int((last.get("outputs") or {}).get("exitCode") or -1)
            if not retry_expression_holds(str(expression), exit_code=exit_code, status=phase.value):
                return phase, "retryStrategy.expression evaluated to false"
        return None

    @staticmethod
    def backoff_seconds(strategy: Mapping[str, Any], *, attempts: int) -> float:
        """The wait after the `attempts`-th attempt: duration * factor^(attempts-1), at most `cap`."""
        backoff = strategy.get("backoff") or {}
        seconds = parse_duration(backoff["duration"])
        factor = int(backoff.get("factor") or 0)
        if factor > 0:
            seconds *= factor ** (attempts - 1)
        if backoff.get("cap"):
            seconds = min(seconds, parse_duration(backoff["cap"]))
        return seconds
