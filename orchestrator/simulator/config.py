"""The simulator's behaviour per cluster: what Argo CD does to one cluster's Applications.

`Behaviour` is the set of switches (docs/simulator.md describes each one); `SimulatorConfig` is the
`--config` file: `defaults`, then `clusters` entries matched by fnmatch pattern in file order, then the
ApplicationSet controller's preserved keys. At run time `simulator.progressivesync.io/<key>`
annotations override the file: first the cluster Secret's, then the Application's (the ApplicationSet
controller simulated here never removes these, so tests can steer one Application).

Pure: parsing and merging only. Callers: the controller loop (`appcontroller`), the CLI, the tests.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

import yaml

# Worker threads writing Applications (each Application is one worker's at a time: the controller's
# `_DelayQueue`). One kept up with 12 clusters, not with thousands of Applications released together
# (issue 33's 200 ApplicationSets x 20 clusters): each write is a round trip. Argo CD's own
# application controller runs 20 status and 10 operation processors by default.
DEFAULT_WORKERS = 4

ANNOTATION_PREFIX = "simulator.progressivesync.io/"


class Health(StrEnum):
    """Where an Application's health settles after a sync (Argo CD's health codes)."""

    HEALTHY = "Healthy"
    DEGRADED = "Degraded"
    SUSPENDED = "Suspended"
    MISSING = "Missing"
    UNKNOWN = "Unknown"


class SyncWindow(StrEnum):
    """The sync window in force for a cluster's Applications."""

    NONE = "none"  # no window: syncs run
    DENY = "deny"  # a deny window is active: syncs stay Running until it is lifted


@dataclass(frozen=True)
class Behaviour:
    """How one cluster's Applications behave. Every field has a YAML key and an annotation suffix
    (`_KEYS`); the defaults are the plain happy path: every sync succeeds, health turns Healthy."""

    sync_seconds: float = 1.0  # each sync attempt runs this long ("one or more tasks are running")
    health_seconds: float = 1.0  # Progressing this long after the post-sync comparison
    health: Health = Health.HEALTHY  # where health settles after a sync
    recover_seconds: float = 0.0  # > 0: a Degraded health turns Healthy this long after it was set
    fail: bool = False  # every sync attempt fails (phase Failed)
    fail_attempts: int = 0  # the first N attempts of each operation fail, later ones succeed
    error: bool = False  # every sync attempt ends in phase Error
    hang: bool = False  # the operation stays Running until someone terminates it
    pick_up_seconds: float = 0.0  # the controller's queue: how long until a requested operation starts
    stale_seconds: float = 0.0  # > 0: the post-sync comparison comes this late; the stale state meanwhile
    refresh_seconds: float = 0.0  # > 0: compare again when reconciledAt is this old (Argo CD: ~120 s)
    app_set_controller: bool = False  # the ApplicationSet controller rewrites annotations and labels
    sync_window: SyncWindow = SyncWindow.NONE  # a deny window blocks syncs while it is in force
    sync_window_manual_sync: bool = False  # the deny window lets manual (not automated) syncs through
    require_sync_options: tuple[
        str, ...
    ] = ()  # syncs without these syncOptions fail (e.g. CreateNamespace=true)
    removed_resource: bool = False  # the release removed a resource: without prune it stays, OutOfSync
    deletion_seconds: float = 0.0  # how long Argo CD's resources finalizer holds an Application being deleted
    degrade: bool = False  # the old spelling of `health: Degraded`
    # A sync to one of these revisions settles Degraded (a bad release), whatever `health` says;
    # any other revision settles as `health` says (so a rollback to an earlier one turns Healthy).
    bad_revisions: tuple[str, ...] = ()

    @property
    def settled_health(self) -> Health:
        """Where health settles after a sync (`degrade` is the old spelling of Degraded)."""
        return Health.DEGRADED if self.degrade and self.health == Health.HEALTHY else self.health

    def health_after(self, revisions: list[str]) -> Health:
        """Where health settles after a sync to `revisions`: Degraded for a bad revision."""
        if self.bad_revisions and any(revision in self.bad_revisions for revision in revisions):
            return Health.DEGRADED
        return self.settled_health


# YAML key -> (field, annotation suffix)
_KEYS: dict[str, tuple[str, str]] = {
    "syncSeconds": ("sync_seconds", "sync-seconds"),
    "healthSeconds": ("health_seconds", "health-seconds"),
    "health": ("health", "health"),
    "recoverSeconds": ("recover_seconds", "recover-seconds"),
    "fail": ("fail", "fail"),
    "failAttempts": ("fail_attempts", "fail-attempts"),
    "error": ("error", "error"),
    "hang": ("hang", "hang"),
    "pickUpSeconds": ("pick_up_seconds", "pick-up-seconds"),
    "staleSeconds": ("stale_seconds", "stale-seconds"),
    "refreshSeconds": ("refresh_seconds", "refresh-seconds"),
    "appSetController": ("app_set_controller", "appset-controller"),
    "syncWindow": ("sync_window", "sync-window"),
    "syncWindowManualSync": ("sync_window_manual_sync", "sync-window-manual-sync"),
    "requireSyncOptions": ("require_sync_options", "require-sync-options"),
    "removedResource": ("removed_resource", "removed-resource"),
    "deletionSeconds": ("deletion_seconds", "deletion-seconds"),
    "degrade": ("degrade", "degrade"),
    "badRevisions": ("bad_revisions", "bad-revisions"),
}
_ANNOTATION_KEYS = {suffix: field_name for field_name, suffix in _KEYS.values()}
_YAML_KEYS = {key: field_name for key, (field_name, _) in _KEYS.items()}
_FIELD_TYPES = {f.name: f.type for f in fields(Behaviour)}


class ConfigError(ValueError):
    """The simulator config file (or an annotation) is not valid; the message says where."""


def _coerce(attribute: str, value: Any, where: str) -> Any:
    kind = _FIELD_TYPES[attribute]
    if kind == "bool":
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("true", "yes", "1"):
            return True
        if text in ("false", "no", "0"):
            return False
        raise ConfigError(f"{where}: {value!r} is not true/false")
    if kind in ("Health", "SyncWindow"):
        choices = Health if kind == "Health" else SyncWindow
        for choice in choices:
            if str(value).strip().lower() == choice.value.lower():
                return choice
        raise ConfigError(f"{where}: {value!r} is not one of {', '.join(c.value for c in choices)}")
    if kind == "tuple[str, ...]":
        items = value.split(",") if isinstance(value, str) else value
        if not isinstance(items, list | tuple):
            raise ConfigError(f"{where}: {value!r} is not a list (YAML list, or comma-separated)")
        return tuple(str(item).strip() for item in items if str(item).strip())
    if kind == "int":
        try:
            number = int(str(value).strip())
        except ValueError as exc:
            raise ConfigError(f"{where}: {value!r} is not a whole number") from exc
        if number < 0:
            raise ConfigError(f"{where}: {value!r} is negative")
        return number
    if isinstance(value, bool):
        raise ConfigError(f"{where}: {value!r} is not a number of seconds")
    try:
        seconds = float(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: {value!r} is not a number of seconds") from exc
    if seconds < 0:
        raise ConfigError(f"{where}: {value!r} is negative")
    return seconds


def _overrides(values: Mapping[str, Any], keys: Mapping[str, str], where: str) -> dict[str, Any]:
    result = {}
    for key, value in values.items():
        if key not in keys:
            raise ConfigError(f"{where}: unknown key {key!r} (known: {', '.join(keys)})")
        result[keys[key]] = _coerce(keys[key], value, f"{where}.{key}")
    return result


def overrides_from_annotations(annotations: Mapping[str, str], where: str) -> dict[str, Any]:
    """`simulator.progressivesync.io/<key>` annotations as Behaviour overrides."""
    picked = {
        key[len(ANNOTATION_PREFIX) :]: value
        for key, value in annotations.items()
        if key.startswith(ANNOTATION_PREFIX)
    }
    return _overrides(picked, _ANNOTATION_KEYS, where)


def _string_list(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ConfigError(f"{where}: expected a list of strings")
    return tuple(value)


@dataclass(frozen=True)
class SimulatorConfig:
    """Behaviour per cluster: `defaults`, then each `clusters` entry whose pattern matches.

    ```yaml
    defaults: {syncSeconds: 0.5, healthSeconds: 0.5}
    clusters:
      "*-eu-west-1a": {syncSeconds: 3}       # fnmatch patterns on the cluster name, in file order
      cells-7-us-east-1b: {health: Degraded} # later entries win
    preservedAnnotations: [team.example.com/owner]   # the ApplicationSet controller's flags
    preservedLabels: []
    ```

    Annotations override the file: first the cluster Secret's, then the Application's.
    """

    defaults: Behaviour = Behaviour()
    clusters: tuple[tuple[str, Mapping[str, Any]], ...] = ()
    # `--preserved-annotations` / `--preserved-labels` of the simulated ApplicationSet controller.
    preserved_annotations: tuple[str, ...] = ()
    preserved_labels: tuple[str, ...] = ()

    @classmethod
    def from_yaml(cls, text: str, where: str = "config") -> SimulatorConfig:
        """Parse the YAML form; ConfigError names the bad key."""
        try:
            document = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{where}: not YAML: {exc}") from exc
        if not isinstance(document, Mapping):
            raise ConfigError(f"{where}: expected a mapping with 'defaults' and 'clusters'")
        known = ("defaults", "clusters", "preservedAnnotations", "preservedLabels")
        unknown = set(document) - set(known)
        if unknown:
            raise ConfigError(
                f"{where}: unknown key(s) {', '.join(sorted(unknown))} (known: {', '.join(known)})"
            )
        defaults_doc = document.get("defaults") or {}
        if not isinstance(defaults_doc, Mapping):
            raise ConfigError(f"{where}.defaults: expected a mapping")
        defaults = replace(Behaviour(), **_overrides(defaults_doc, _YAML_KEYS, f"{where}.defaults"))
        clusters_doc = document.get("clusters") or {}
        if not isinstance(clusters_doc, Mapping):
            raise ConfigError(f"{where}.clusters: expected a mapping of cluster pattern -> behaviour")
        entries = []
        for pattern, values in clusters_doc.items():
            if not isinstance(values, Mapping):
                raise ConfigError(f"{where}.clusters.{pattern}: expected a mapping")
            entries.append((str(pattern), _overrides(values, _YAML_KEYS, f"{where}.clusters.{pattern}")))
        return cls(
            defaults,
            tuple(entries),
            _string_list(document.get("preservedAnnotations"), f"{where}.preservedAnnotations"),
            _string_list(document.get("preservedLabels"), f"{where}.preservedLabels"),
        )

    @classmethod
    def load(cls, path: str | Path) -> SimulatorConfig:
        """Read the YAML file."""
        return cls.from_yaml(Path(path).read_text(), str(path))

    def behaviour_for(
        self,
        cluster: str,
        *,
        secret_annotations: Mapping[str, str] | None = None,
        app_annotations: Mapping[str, str] | None = None,
        app: str = "",
    ) -> Behaviour:
        """The behaviour of `cluster`'s Application: defaults < file entries < Secret < Application."""
        behaviour = self.defaults
        for pattern, values in self.clusters:
            if fnmatch.fnmatchcase(cluster, pattern):
                behaviour = replace(behaviour, **values)
        behaviour = replace(
            behaviour, **overrides_from_annotations(secret_annotations or {}, f"cluster Secret of {cluster}")
        )
        return replace(behaviour, **overrides_from_annotations(app_annotations or {}, f"Application {app}"))


def yaml_keys() -> list[str]:
    """The YAML keys of a behaviour, in documentation order."""
    return list(_KEYS)


def annotation_suffixes() -> list[str]:
    """The annotation suffixes of a behaviour, in documentation order."""
    return [suffix for _, suffix in _KEYS.values()]
