"""The fleet simulator's pure parts: behaviour config, events-log arithmetic, fleet naming."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from orchestrator.simulator.config import Behaviour, ConfigError, Health, SimulatorConfig, SyncWindow
from orchestrator.simulator.events import EventsLog, read_events
from orchestrator.simulator.seed import seed_clusters
from tests.support.simulator_events import max_in_flight, sync_order

CONFIG = SimulatorConfig.from_yaml(
    """
defaults: {syncSeconds: 0.5, healthSeconds: 0.25}
clusters:
  "*-eu-west-1?": {syncSeconds: 3}
  cells-2-eu-west-1b: {degrade: true}
"""
)


@pytest.mark.parametrize(
    ("cluster", "secret", "app", "expected"),
    [
        pytest.param("cells-9-us-east-1a", {}, {}, Behaviour(0.5, 0.25), id="defaults"),
        pytest.param("cells-1-eu-west-1a", {}, {}, Behaviour(3, 0.25), id="glob-entry"),
        pytest.param(
            "cells-2-eu-west-1b", {}, {}, Behaviour(3, 0.25, degrade=True), id="later-entries-add-up"
        ),
        pytest.param(
            "cells-9-us-east-1a",
            {"simulator.progressivesync.io/fail": "true", "simulator.progressivesync.io/sync-seconds": "2"},
            {},
            Behaviour(2, 0.25, fail=True),
            id="secret-annotations",
        ),
        pytest.param(
            "cells-9-us-east-1a",
            {"simulator.progressivesync.io/fail": "true"},
            {"simulator.progressivesync.io/fail": "false", "simulator.progressivesync.io/hang": "yes"},
            Behaviour(0.5, 0.25, hang=True),
            id="application-annotations-win",
        ),
        pytest.param(
            "cells-9-us-east-1a",
            {"team": "payments"},
            {},
            Behaviour(0.5, 0.25),
            id="other-annotations-ignored",
        ),
    ],
)
def test_behaviour_precedence(
    cluster: str, secret: dict[str, str], app: dict[str, str], expected: Behaviour
) -> None:
    assert CONFIG.behaviour_for(cluster, secret_annotations=secret, app_annotations=app) == expected


@pytest.mark.parametrize(
    ("text", "error"),
    [
        pytest.param("defaults: {syncSecs: 1}", "unknown key 'syncSecs'", id="typo"),
        pytest.param("defaults: {syncSeconds: -1}", "negative", id="negative"),
        pytest.param("defaults: {fail: maybe}", "not true/false", id="not-a-bool"),
        pytest.param("clusters: {a: 3}", "expected a mapping", id="entry-not-a-mapping"),
        pytest.param("cluster: {}", "unknown key(s) cluster", id="top-level-typo"),
        pytest.param("defaults: {health: Sick}", "not one of Healthy, Degraded", id="not-a-health"),
        pytest.param("defaults: {syncWindow: maybe}", "not one of none, deny", id="not-a-window"),
        pytest.param("defaults: {failAttempts: 1.5}", "not a whole number", id="not-a-count"),
        pytest.param("defaults: {requireSyncOptions: 3}", "not a list", id="not-a-list"),
        pytest.param("preservedAnnotations: a", "expected a list of strings", id="preserved-not-a-list"),
        pytest.param("defaults: [", "not YAML", id="not-yaml"),
    ],
)
def test_config_errors_name_the_key(text: str, error: str) -> None:
    with pytest.raises(ConfigError, match=error.replace("(", r"\(").replace(")", r"\)")):
        SimulatorConfig.from_yaml(text)


def test_a_bad_annotation_is_named() -> None:
    with pytest.raises(ConfigError, match=r"Application web\.sync-seconds: .soon. is not a number"):
        CONFIG.behaviour_for(
            "c", app_annotations={"simulator.progressivesync.io/sync-seconds": "soon"}, app="web"
        )


def ev(event: str, cluster: str, time: float, phase: str | None = None) -> dict[str, Any]:
    record: dict[str, Any] = {"event": event, "cluster": cluster, "time": time}
    if phase:
        record["phase"] = phase
    return record


@pytest.mark.parametrize(
    ("events", "expected"),
    [
        pytest.param([], 0, id="nothing"),
        pytest.param(
            [
                ev("sync-start", "a", 0),
                ev("healthy", "a", 2),
                ev("sync-start", "b", 2),
                ev("healthy", "b", 4),
            ],
            1,
            id="one-after-another-touching",
        ),
        pytest.param(
            [
                ev("sync-start", "a", 0),
                ev("sync-start", "b", 1),
                ev("healthy", "a", 2),
                ev("healthy", "b", 3),
            ],
            2,
            id="overlapping",
        ),
        pytest.param(
            [ev("sync-start", "a", 0), ev("sync-finish", "a", 1, "Failed"), ev("sync-start", "b", 1.5)],
            1,
            id="a-failed-sync-ends-the-cluster",
        ),
        pytest.param(
            [ev("sync-start", "a", 0), ev("sync-finish", "a", 1, "Succeeded"), ev("sync-start", "b", 1.5)],
            2,
            id="succeeded-but-not-yet-healthy-is-still-busy",
        ),
    ],
)
def test_max_in_flight(events: list[dict[str, Any]], expected: int) -> None:
    assert max_in_flight(events) == expected


def test_sync_order_is_by_first_start() -> None:
    events = [
        ev("sync-start", "b", 1),
        ev("sync-start", "a", 2),
        ev("sync-start", "b", 3),
        ev("healthy", "c", 0),
    ]
    assert sync_order(events) == ["b", "a"]


def test_seed_clusters_spread_over_regions_then_zones() -> None:
    clusters = seed_clusters(7, ["eu-west-1", "us-east-1"])
    assert [(c.name, c.region, c.zone) for c in clusters] == [
        ("cells-1-eu-west-1a", "eu-west-1", "eu-west-1a"),
        ("cells-2-us-east-1a", "us-east-1", "us-east-1a"),
        ("cells-3-eu-west-1b", "eu-west-1", "eu-west-1b"),
        ("cells-4-us-east-1b", "us-east-1", "us-east-1b"),
        ("cells-5-eu-west-1c", "eu-west-1", "eu-west-1c"),
        ("cells-6-us-east-1c", "us-east-1", "us-east-1c"),
        ("cells-7-eu-west-1a", "eu-west-1", "eu-west-1a"),
    ]


def test_every_behaviour_has_a_yaml_key_and_an_annotation() -> None:
    config = SimulatorConfig.from_yaml(
        """
defaults:
  health: suspended
  recoverSeconds: 4
  failAttempts: 2
  syncWindow: deny
  requireSyncOptions: [CreateNamespace=true]
preservedAnnotations: [corp/owner]
"""
    )
    behaviour = config.behaviour_for(
        "c",
        secret_annotations={"simulator.progressivesync.io/require-sync-options": "A=1, B=2"},
        app_annotations={"simulator.progressivesync.io/sync-window": "none"},
    )
    assert behaviour == Behaviour(
        health=Health.SUSPENDED,
        recover_seconds=4.0,
        fail_attempts=2,
        sync_window=SyncWindow.NONE,
        require_sync_options=("A=1", "B=2"),
    )
    assert config.preserved_annotations == ("corp/owner",)


def test_the_events_log_makes_its_folder(tmp_path: Path) -> None:
    """A missing folder used to fail the first event after the pick-up had landed, stopping the
    simulator with that operation Running for ever (the parity test's simulator side hung on it)."""
    path = tmp_path / "not" / "made" / "events.jsonl"
    log = EventsLog(path)
    log.write("sync-start", app="web-a", cluster="a", when=datetime(2026, 11, 30, tzinfo=UTC), revision="r")
    events = read_events(path)
    assert [(e["event"], e["app"], e["revision"]) for e in events] == [("sync-start", "web-a", "r")]
