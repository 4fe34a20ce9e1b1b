"""Where the API server is and how to prove who we are: an `Endpoint`, from a kubeconfig or a pod.

Two sources, in kubectl's order (`endpoint_for`):

- a kubeconfig (`--kubeconfig`, else `$KUBECONFIG`, else `~/.kube/config`): read by the
  `kubernetes` package's loader, which knows every way a kubeconfig can authenticate (client
  certificates, tokens, `tokenFile`, exec plugins, auth providers). It is imported here, and only
  when a kubeconfig is read;
- the pod's service account (no kubeconfig found, or none that loads): read here, from the files
  the kubelet mounts and the `KUBERNETES_SERVICE_*` environment, without the `kubernetes` package.
  Every step pod and the watcher's Deployment take this path: importing that package costs a
  process ~0.45 s of CPU (it loads every generated model), paid once per step pod.

A token read from a file (the pod's projected token, a kubeconfig's `tokenFile`) is read again
whenever the file changes (`TokenFile`): credentials rotated in place are used at the next request.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

log = logging.getLogger(__name__)

# Where the kubelet mounts a pod's service-account token and the cluster's CA.
SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class EndpointError(Exception):
    """No API server to talk to: the kubeconfig does not load and this is not a pod."""


def _no_authorization() -> str | None:
    return None


@dataclass(frozen=True)
class Endpoint:
    """An API server URL and the TLS and credentials to reach it.

    `authorization` returns the `Authorization` header's value (or None), asked before every
    request, so a token that rotates or expires is renewed by whoever supplies it.
    """

    host: str
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    verify: bool = True
    server_name: str | None = None
    authorization: Callable[[], str | None] = field(default=_no_authorization, compare=False)


class TokenFile:
    """A bearer token kept in a file, read again when the file changes (a rotated credential).

    Called before every request: one stat(), and a read only when the file changed. A file that
    cannot be read, or is empty, keeps the token we have (it is being replaced; the next request
    looks again).
    """

    def __init__(self, path: Path, *, initial: str | None = None) -> None:
        self.path = path
        self._stamp: tuple[int, int, int] | None = None
        self._header = f"Bearer {initial}" if initial else None
        self._lock = threading.Lock()

    def __call__(self) -> str | None:
        """`Bearer <token>` as the file holds it now."""
        try:
            stat = self.path.stat()
        except OSError:
            return self._header
        stamp = (stat.st_mtime_ns, stat.st_size, stat.st_ino)
        if stamp == self._stamp:
            return self._header
        with self._lock:
            if stamp == self._stamp:
                return self._header
            try:
                token = self.path.read_text().strip()
            except OSError:
                return self._header
            if not token:
                return self._header
            if self._stamp is not None:
                log.info("the token in %s changed; using the new one", self.path)
            self._header = f"Bearer {token}"
            self._stamp = stamp
            return self._header


def in_cluster(directory: Path = SERVICE_ACCOUNT_DIR, environ: Mapping[str, str] | None = None) -> Endpoint:
    """The API server as a pod sees it: its Service's address and the mounted service account."""
    env = os.environ if environ is None else environ
    host, port = env.get("KUBERNETES_SERVICE_HOST", ""), env.get("KUBERNETES_SERVICE_PORT", "")
    if not host or not port:
        raise EndpointError("KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set")
    token, ca = directory / "token", directory / "ca.crt"
    for path in (token, ca):
        try:
            if not path.read_bytes().strip():
                raise EndpointError(f"{path} is empty")
        except OSError as exc:
            raise EndpointError(f"cannot read {path}: {exc.strerror or exc}") from exc
    address = f"[{host}]" if ":" in host else host  # an IPv6 address goes in brackets
    return Endpoint(host=f"https://{address}:{port}", ca_file=str(ca), authorization=TokenFile(token))


def from_kubeconfig(kubeconfig: str | None, context: str | None) -> Endpoint:
    """The endpoint a kubeconfig names (`kubeconfig` None: `$KUBECONFIG`, else ~/.kube/config).

    EndpointError when it is missing or does not load.
    """
    from kubernetes import client as k8s_client  # noqa: PLC0415 - slow to import; see the docstring
    from kubernetes import config as k8s_config  # noqa: PLC0415

    configuration = k8s_client.Configuration()
    try:
        k8s_config.load_kube_config(
            config_file=kubeconfig, context=context, client_configuration=configuration
        )
    except (k8s_config.ConfigException, FileNotFoundError, TypeError) as exc:
        raise EndpointError(str(exc)) from exc
    token_file = _token_file_of(kubeconfig, context)
    authorization: Callable[[], str | None]
    if token_file is not None:
        # The loader reads `tokenFile` once; this reads it again whenever it changes.
        authorization = TokenFile(token_file, initial=_bearer_token(configuration))
    else:
        # Tokens from exec plugins and auth providers expire: the loader's hook renews them.
        authorization = lambda: configuration.get_api_key_with_prefix("authorization")  # noqa: E731
    return Endpoint(
        host=str(configuration.host),
        ca_file=configuration.ssl_ca_cert,
        cert_file=configuration.cert_file,
        key_file=configuration.key_file,
        verify=bool(configuration.verify_ssl),
        server_name=getattr(configuration, "tls_server_name", None),
        authorization=authorization,
    )


def endpoint_for(kubeconfig: str | None = None, context: str | None = None) -> Endpoint:
    """The kubeconfig's endpoint, else (none given and none found, or none that loads) the pod's."""
    if kubeconfig or _default_kubeconfig_exists():
        try:
            return from_kubeconfig(kubeconfig, context)
        except EndpointError as exc:
            if kubeconfig:
                raise EndpointError(f"cannot load kubeconfig {kubeconfig}: {exc}") from exc
            failure = str(exc)
    else:
        failure = f"no kubeconfig at {_default_kubeconfig()}"
    try:
        return in_cluster()
    except EndpointError as exc:
        raise EndpointError(
            f"no usable kubeconfig ({failure}) and not in a cluster ({exc}); "
            "set KUBECONFIG or pass --kubeconfig"
        ) from exc


def _default_kubeconfig() -> str:
    """What kubectl reads without --kubeconfig: `$KUBECONFIG` (a list of files), else ~/.kube/config."""
    return os.environ.get("KUBECONFIG") or str(Path("~/.kube/config").expanduser())


def _default_kubeconfig_exists() -> bool:
    return any(Path(part).expanduser().is_file() for part in _default_kubeconfig().split(os.pathsep) if part)


def _bearer_token(configuration: Any) -> str | None:
    header = configuration.api_key.get("authorization") or ""
    return header.removeprefix("Bearer ").strip() or None


def _token_file_of(kubeconfig: str | None, context: str | None) -> Path | None:
    """The `tokenFile` of the kubeconfig's user (of `context`, else the current context), if any.

    Only a kubeconfig given as one file is read here (a merged KUBECONFIG list keeps the token
    loaded at start).
    """
    if not kubeconfig:
        return None
    path = Path(kubeconfig).expanduser()
    try:
        document = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError):
        return None
    name = context or document.get("current-context")
    contexts = {c.get("name"): c.get("context") or {} for c in document.get("contexts") or []}
    users = {u.get("name"): u.get("user") or {} for u in document.get("users") or []}
    token_file = users.get(contexts.get(name, {}).get("user"), {}).get("tokenFile")
    if not token_file:
        return None
    return (path.parent / token_file) if not Path(token_file).is_absolute() else Path(token_file)
