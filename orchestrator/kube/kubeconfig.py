"""A kubeconfig whose user is a certificate or a token, read without the `kubernetes` package.

Most kubeconfigs progressive-sync reads (the CLI's, the watcher's outside a cluster, the dev stack's,
every test's, CI's) name a server, its CA and a client certificate or a bearer token. Reading
those here spares every such process the `kubernetes` package's import (~0.45 s of CPU: every
generated model), which is paid once per CLI command, watcher, and step forked by the local
engine. `read` returns None for anything else (an exec plugin, an auth provider, a password, a
proxy, a KUBECONFIG list of several files): the caller then uses the `kubernetes` package's own
loader, which knows all of them. tests/unit/test_kubeconfig.py checks both give the same endpoint.

What is read, as kubectl reads it: the context (`context`, else `current-context`), its cluster's
`server`, `certificate-authority` (a path, relative to the kubeconfig's folder) or
`certificate-authority-data`, `insecure-skip-tls-verify`, `tls-server-name`; its user's
`client-certificate`/`client-key` (or their `-data`), and `token` or else `tokenFile`. Data is
written to files only this user can read (the TLS library takes certificates from files),
removed when the process that wrote them exits (not when a process forked from it does).
"""

from __future__ import annotations

import atexit
import base64
import binascii
import contextlib
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from orchestrator.kube.token_file import TokenFile

# What the reader understands; a cluster or a user with any other key goes to the full loader.
CLUSTER_KEYS = frozenset(
    {
        "server",
        "certificate-authority",
        "certificate-authority-data",
        "insecure-skip-tls-verify",
        "tls-server-name",
        "extensions",
    }
)
USER_KEYS = frozenset(
    {"client-certificate", "client-certificate-data", "client-key", "client-key-data", "token", "tokenFile"}
)


class KubeconfigError(Exception):
    """The kubeconfig cannot be used as it is: the message names the field."""


def read(path: Path, context: str | None) -> dict[str, Any] | None:
    """The endpoint's fields (`Endpoint(**fields)`) from one kubeconfig file; None: not one for us.

    KubeconfigError when the file cannot be read or is not a kubeconfig, or its context or the
    context's cluster is missing (what the full loader refuses too).
    """
    try:
        document = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise KubeconfigError(f"cannot read {path}: {exc}") from exc
    if not isinstance(document, dict):
        raise KubeconfigError(f"{path} is not a kubeconfig")
    name = context or document.get("current-context")
    if not name:
        raise KubeconfigError(f"{path}: no current-context, and no context given")
    entry = _required(document, "contexts", name, path)
    if not isinstance(entry, dict) or not entry.get("cluster"):
        raise KubeconfigError(f"{path}: context {name!r} names no cluster")
    cluster = _required(document, "clusters", entry["cluster"], path)
    # A user the file does not define: the full loader's business (it goes on without one).
    user = _named(document, "users", entry["user"]) if entry.get("user") else {}
    if not isinstance(cluster, dict) or not isinstance(user, dict):
        return None
    if set(cluster) - CLUSTER_KEYS or set(user) - USER_KEYS or "proxy-url" in cluster:
        return None
    server = str(cluster.get("server") or "").rstrip("/")
    if not server:
        raise KubeconfigError(f"{path}: cluster {entry['cluster']!r} has no server")
    folder = path.parent.resolve()
    fields: dict[str, Any] = {"host": server}
    if server.startswith("https"):
        fields["ca_file"] = _file_or_data(cluster, "certificate-authority", folder)
        fields["cert_file"] = _file_or_data(user, "client-certificate", folder)
        fields["key_file"] = _file_or_data(user, "client-key", folder)
    if "insecure-skip-tls-verify" in cluster:
        fields["verify"] = not cluster["insecure-skip-tls-verify"]
    if "tls-server-name" in cluster:
        fields["server_name"] = cluster["tls-server-name"]
    if user.get("token"):
        header = f"Bearer {user['token']}"
        fields["authorization"] = lambda: header
    elif user.get("tokenFile"):
        # Read again whenever the file changes: a token rotated in place is used at once.
        fields["authorization"] = TokenFile(_resolve(folder, user["tokenFile"]))
    return fields


def _named(document: Mapping[str, Any], section: str, name: str) -> Any:
    """The entry `name` of a section (`contexts`, `clusters`, `users`); None when absent."""
    for item in document.get(section) or []:
        if isinstance(item, dict) and item.get("name") == name:
            return item.get(section[:-1]) or {}
    return None


def _required(document: Mapping[str, Any], section: str, name: str, path: Path) -> Any:
    found = _named(document, section, name)
    if found is None:
        raise KubeconfigError(f"{path}: no {section[:-1]} named {name!r} in `{section}`")
    return found


def _resolve(folder: Path, value: str) -> Path:
    candidate = Path(value).expanduser()
    return candidate if candidate.is_absolute() else folder / candidate


def _file_or_data(section: Mapping[str, Any], key: str, folder: Path) -> str | None:
    """`key-data` (base64) written to a private file, else `key` as a path; None when neither."""
    data = section.get(f"{key}-data")
    if data:
        try:
            content = base64.b64decode(data, validate=False)
        except (binascii.Error, ValueError) as exc:
            raise KubeconfigError(f"{key}-data is not base64: {exc}") from exc
        return str(_private_file(content))
    value = section.get(key)
    return str(_resolve(folder, value)) if value else None


_private_folder: Path | None = None
# The process that made the folder. The local engine's warm launcher forks steps from a process
# that may have made it: a forked step inherits the exit hook and must not remove its parent's files.
_private_folder_owner = 0


def _private_file(content: bytes) -> Path:
    """A file only this user can read, in a folder removed when the process that made it exits."""
    global _private_folder, _private_folder_owner  # noqa: PLW0603 - one folder per process, made on first use
    if _private_folder is None:
        _private_folder = Path(tempfile.mkdtemp(prefix="progressive-sync-kubeconfig-"))  # mode 0700
        _private_folder_owner = os.getpid()
        atexit.register(_remove_private_folder)
    handle, name = tempfile.mkstemp(dir=_private_folder)
    with open(handle, "wb") as out:
        out.write(content)
    return Path(name)


def _remove_private_folder() -> None:
    if _private_folder is not None and os.getpid() == _private_folder_owner:
        with contextlib.suppress(OSError):
            shutil.rmtree(_private_folder)
