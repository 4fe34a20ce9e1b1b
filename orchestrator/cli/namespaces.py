"""Which namespace a command acts on when `-n` is not given: kubectl's answer, then ours.

The order, the same for every command (issue 34): `-n/--namespace`, then the namespace of the
kubeconfig's current context (or of `--context`), then `$PROGRESSIVE_SYNC_NAMESPACE`, then `argocd`.
`resolve_namespace` decides it from values (pure, table-tested); `kubeconfig_paths` and
`context_namespace` say which kubeconfig files count and what their context names, the way kubectl
merges them (`--kubeconfig`, else every file of `$KUBECONFIG`, else `~/.kube/config`; the first file
that sets a current context or defines a context wins). `namespace_for` reads the files and calls
them. The kubeconfig is read as plain YAML here: the CLI does not import the Kubernetes client
(only the adapter does), and a file it cannot read simply names no namespace.

Callers: orchestrator.cli.conventions (every command's `-n`), and through it each command.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

import yaml

DEFAULT_NAMESPACE = "argocd"
NAMESPACE_VARIABLE = "PROGRESSIVE_SYNC_NAMESPACE"
KUBECONFIG_VARIABLE = "KUBECONFIG"


class NamespaceSource(StrEnum):
    """Where the namespace a command uses came from (said with `-v`)."""

    FLAG = "-n/--namespace"
    CONTEXT = "the kubeconfig context"
    ENVIRONMENT = f"${NAMESPACE_VARIABLE}"
    DEFAULT = "the default"


@dataclass(frozen=True)
class ResolvedNamespace:
    """The namespace a command acts on, and why that one."""

    namespace: str
    source: NamespaceSource


def resolve_namespace(
    flag: str | None, context_namespace: str | None, environment: str | None
) -> ResolvedNamespace:
    """`-n`, else the kubeconfig context's namespace, else $PROGRESSIVE_SYNC_NAMESPACE, else argocd.

    An empty value counts as unset at every level (kubectl treats `namespace: ""` as none).
    """
    if flag:
        return ResolvedNamespace(flag, NamespaceSource.FLAG)
    if context_namespace:
        return ResolvedNamespace(context_namespace, NamespaceSource.CONTEXT)
    if environment:
        return ResolvedNamespace(environment, NamespaceSource.ENVIRONMENT)
    return ResolvedNamespace(DEFAULT_NAMESPACE, NamespaceSource.DEFAULT)


def kubeconfig_paths(flag: str | None, environ: Mapping[str, str], home: Path) -> tuple[Path, ...]:
    """The kubeconfig files a command reads, in kubectl's order of precedence."""
    if flag:
        return (Path(flag),)
    listed = [part for part in environ.get(KUBECONFIG_VARIABLE, "").split(os.pathsep) if part]
    if listed:
        return tuple(Path(part) for part in listed)
    return (home / ".kube" / "config",)


def context_namespace(configs: Sequence[Any], context: str | None) -> str | None:
    """The namespace of `context` (else of the current context) in these parsed kubeconfigs.

    Merged as kubectl merges `$KUBECONFIG`: the first file that sets `current-context` names it,
    and the first file that defines a context of that name defines it. None when there is no such
    context or it sets no namespace.
    """
    mappings = [config for config in configs if isinstance(config, Mapping)]
    name = context or next((c["current-context"] for c in mappings if c.get("current-context")), None)
    if not name:
        return None
    for config in mappings:
        for entry in config.get("contexts") or ():
            if isinstance(entry, Mapping) and entry.get("name") == name:
                body = entry.get("context")
                namespace = body.get("namespace") if isinstance(body, Mapping) else None
                return str(namespace) if namespace else None
    return None


def read_kubeconfigs(paths: Sequence[Path]) -> list[Any]:
    """Each file parsed; one that is missing or not YAML is left out (the adapter reports it)."""
    configs = []
    for path in paths:
        try:
            configs.append(yaml.safe_load(path.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            continue
    return configs


def namespace_for(
    flag: str | None,
    *,
    kubeconfig: str | None,
    context: str | None,
    environ: Mapping[str, str],
    home: Path | None = None,
) -> ResolvedNamespace:
    """The namespace a command acts on: `resolve_namespace` over the kubeconfig files it would use.

    The kubeconfig is read only when `-n` is not given.
    """
    if flag:
        return resolve_namespace(flag, None, None)
    paths = kubeconfig_paths(kubeconfig, environ, home if home is not None else Path.home())
    from_context = context_namespace(read_kubeconfigs(paths), context)
    return resolve_namespace(None, from_context, environ.get(NAMESPACE_VARIABLE))
