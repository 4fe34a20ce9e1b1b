"""Where the API server is and how to prove who we are: an `Endpoint`, from a kubeconfig or a pod.

Two sources, in kubectl's order (`endpoint_for`):

- a kubeconfig (`--kubeconfig`, else `$KUBECONFIG`, else `~/.kube/config`): one whose user is a
  certificate or a token is read by `orchestrator.kube.kubeconfig`; any other (exec plugins, auth
  providers, several files merged) by the `kubernetes` package's loader, imported only then;
- the pod's service account (no kubeconfig found, or none that loads): read here, from the files
  the kubelet mounts and the `KUBERNETES_SERVICE_*` environment. Every step pod and the watcher's
  Deployment take this path.

Importing the `kubernetes` package costs a process ~0.45 s of CPU (it loads every generated model):
once per step pod, CLI command, watcher, and step forked by the local engine, none of which need
it now. A token read from a file (the pod's projected token, a kubeconfig's `tokenFile`) is read
again whenever the file changes (`TokenFile`): credentials rotated in place are used at once.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.kube import kubeconfig as kubeconfig_file
from orchestrator.kube.token_file import TokenFile

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
    files = [Path(kubeconfig).expanduser()] if kubeconfig else _default_kubeconfig_files()
    if len(files) == 1:
        path = files[0]
        try:
            fields = kubeconfig_file.read(path, context)
        except kubeconfig_file.KubeconfigError as exc:
            raise EndpointError(str(exc)) from exc
        if fields is not None:
            return Endpoint(**fields)
    return _from_kubernetes_loader(kubeconfig, context)


def _from_kubernetes_loader(kubeconfig: str | None, context: str | None) -> Endpoint:
    """The `kubernetes` package's reading of a kubeconfig: every auth plugin, merged files."""
    from kubernetes import client as k8s_client  # noqa: PLC0415 - slow to import; see the docstring
    from kubernetes import config as k8s_config  # noqa: PLC0415

    configuration = k8s_client.Configuration()
    try:
        # The list is passed on: the package reads $KUBECONFIG once, when it is first imported.
        k8s_config.load_kube_config(
            config_file=kubeconfig or _default_kubeconfig(),
            context=context,
            client_configuration=configuration,
        )
    except (k8s_config.ConfigException, FileNotFoundError, TypeError) as exc:
        raise EndpointError(str(exc)) from exc
    return Endpoint(
        host=str(configuration.host),
        ca_file=configuration.ssl_ca_cert,
        cert_file=configuration.cert_file,
        key_file=configuration.key_file,
        verify=bool(configuration.verify_ssl),
        server_name=getattr(configuration, "tls_server_name", None),
        # Tokens from exec plugins and auth providers expire: the loader's hook renews them.
        authorization=lambda: configuration.get_api_key_with_prefix("authorization"),
    )


def endpoint_for(kubeconfig: str | None = None, context: str | None = None) -> Endpoint:
    """The kubeconfig's endpoint, else (none given and none found, or none that loads) the pod's."""
    if kubeconfig or _default_kubeconfig_files():
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


def _default_kubeconfig_files() -> list[Path]:
    """The files of `_default_kubeconfig()` that exist (kubectl skips the others)."""
    paths = (Path(part).expanduser() for part in _default_kubeconfig().split(os.pathsep) if part)
    return [path for path in paths if path.is_file()]
