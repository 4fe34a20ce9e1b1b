"""The one Kubernetes adapter: every API call of progressive-sync goes through `Kube`.

It owns the request timeouts, the mapping of HTTP status codes to the error types below, the
bounded retry loop for temporary errors, and the reading of Argo CD cluster Secrets (whose
credentials it never decodes). Objects go in and come out as plain JSON dicts. The HTTP is
`orchestrator.kube.transport` (urllib3); where the API server is and who we are,
`orchestrator.kube.endpoint`, which imports the `kubernetes` package only for a kubeconfig with
an auth plugin: no step, CLI command or watcher imports it otherwise.

Callers: the steps, the watcher, the local executor, the simulator, the CLI and the test fixtures.
Nothing else talks to the API server.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import quote

import urllib3

from orchestrator.core.errors import PermanentError, TemporaryError

# Cluster Secrets are read in their own module, which does not import `kubernetes`.
from orchestrator.kube.cluster_secrets import CLUSTER_SECRET_LABEL, ClusterSecret, cluster_secret_from_object
from orchestrator.kube.endpoint import EndpointError, endpoint_for
from orchestrator.kube.transport import Transport

log = logging.getLogger(__name__)

T = TypeVar("T")

# --- errors ----------------------------------------------------------------------------------


class KubeError(Exception):
    """An API call failed; `status` is the HTTP status (0 when no answer came); `retry_after` the
    seconds the server asked to wait (`Retry-After`, sent with 429 by API Priority and Fairness)."""

    def __init__(
        self, message: str, *, status: int = 0, reason: str = "", retry_after: float | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.retry_after = retry_after


class NotFound(KubeError):
    """404: the object (or its kind) does not exist."""


class Conflict(KubeError):
    """409 on update: the resourceVersion we sent is stale; re-read and decide again."""


class AlreadyExists(KubeError):
    """409 on create: an object of that name exists."""


class Gone(KubeError):
    """410: the resourceVersion a watch or list asked for was compacted; re-list."""


class Forbidden(KubeError):
    """403: RBAC denied the call. Permanent until someone changes the RBAC."""


class Invalid(KubeError):
    """422 (or 400): the object does not pass validation. Permanent."""


class Retryable(KubeError):
    """A temporary failure: timeouts, dropped connections, 429, 5xx. Safe to try again."""


class NotLeader(KubeError):
    """A write was refused before it was sent: this process does not hold the leader lease."""


# API errors a retry cannot cure: RBAC, a missing object or CRD, an object the API server refuses.
PERMANENT_ERRORS: tuple[type[KubeError], ...] = (Forbidden, Invalid, NotFound)


def temporary_or_permanent(exc: KubeError) -> TemporaryError | PermanentError:
    """What an API error says about trying again: the one place that decides it.

    Permanent: `PERMANENT_ERRORS` (a person must change a permission, an object or a CRD). Everything
    else is temporary (timeouts, dropped connections, 429, 5xx, conflicts that kept coming, an
    unexpected status): the caller may run again, after the server's `Retry-After` when it sent one.
    """
    if isinstance(exc, PERMANENT_ERRORS):
        return PermanentError(str(exc))
    return TemporaryError(str(exc), delay=exc.retry_after)


def error_from_answer(status: int, body: bytes, headers: Mapping[str, str], what: str) -> KubeError:
    """The error an answer of `status` (400 or above) is: its type, and the API's own message.

    The API server answers errors with a Status object (`reason`, `message`); a body that is not one
    (a proxy's page) keeps the status alone.
    """
    reason = ""
    message = ""
    try:
        document = json.loads(body or b"{}")
        if isinstance(document, dict):
            reason = str(document.get("reason", ""))
            message = str(document.get("message", ""))
    except (ValueError, TypeError):
        pass
    text = f"{what}: {message}" if message else f"{what}: HTTP {status}"
    if status == 404:
        return NotFound(text, status=status, reason=reason)
    if status == 409:
        cls = AlreadyExists if reason == "AlreadyExists" else Conflict
        return cls(text, status=status, reason=reason)
    if status == 410:
        return Gone(text, status=status, reason=reason)
    if status == 403:
        return Forbidden(text, status=status, reason=reason)
    if status in (400, 422):
        return Invalid(text, status=status, reason=reason)
    if status == 429 or status >= 500:
        return Retryable(text, status=status, reason=reason, retry_after=_retry_after(headers))
    return KubeError(text, status=status, reason=reason)


# A server asking for a longer wait than this is waited for this long (then asked again).
MAX_RETRY_AFTER_SECONDS = 30.0


def _retry_after(headers: Mapping[str, str]) -> float | None:
    """The `Retry-After` header in seconds (the API server sends whole seconds), capped; None without one."""
    value = headers.get("Retry-After")
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None
    return None if seconds is None or seconds < 0 else min(seconds, MAX_RETRY_AFTER_SECONDS)


def retry_after_note(exc: KubeError) -> str:
    """What a retry's log line says of the server's `Retry-After` (nothing when it sent none)."""
    return "" if exc.retry_after is None else f" (HTTP {exc.status}, Retry-After {exc.retry_after:g}s)"


# --- resources -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Resource:
    """A namespaced API resource: where its objects live in the REST API."""

    group: str
    version: str
    plural: str
    kind: str

    @property
    def api_version(self) -> str:
        """`group/version`, or just `version` for the core group."""
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None, name: str | None = None, subresource: str | None = None) -> str:
        """The REST path of the collection, or of one object and its subresource."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if namespace is not None:
            base += f"/namespaces/{quote(namespace, safe='')}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{quote(name, safe='')}"
        if subresource:
            base += f"/{subresource}"
        return base


PROGRESSIVE_SYNCS = Resource("progressivesync.io", "v1alpha1", "progressivesyncs", "ProgressiveSync")
PROGRESSIVE_SYNC_STAGES = Resource(
    "progressivesync.io", "v1alpha1", "progressivesyncstages", "ProgressiveSyncStage"
)
APPLICATIONS = Resource("argoproj.io", "v1alpha1", "applications", "Application")
APPLICATION_SETS = Resource("argoproj.io", "v1alpha1", "applicationsets", "ApplicationSet")
APP_PROJECTS = Resource("argoproj.io", "v1alpha1", "appprojects", "AppProject")
WORKFLOWS = Resource("argoproj.io", "v1alpha1", "workflows", "Workflow")
WORKFLOW_TEMPLATES = Resource("argoproj.io", "v1alpha1", "workflowtemplates", "WorkflowTemplate")
# Argo Rollouts' analysis (analysis gates, steps/analyze.py).
ANALYSIS_RUNS = Resource("argoproj.io", "v1alpha1", "analysisruns", "AnalysisRun")
ANALYSIS_TEMPLATES = Resource("argoproj.io", "v1alpha1", "analysistemplates", "AnalysisTemplate")
CLUSTER_ANALYSIS_TEMPLATES = Resource(
    "argoproj.io", "v1alpha1", "clusteranalysistemplates", "ClusterAnalysisTemplate"
)
SECRETS = Resource("", "v1", "secrets", "Secret")
CONFIG_MAPS = Resource("", "v1", "configmaps", "ConfigMap")
NAMESPACES = Resource("", "v1", "namespaces", "Namespace")
EVENTS = Resource("", "v1", "events", "Event")
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease")
CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition")


# --- settings --------------------------------------------------------------------------------


@dataclass(frozen=True)
class KubeSettings:
    """Timeouts and retry backoffs of every call; built once by the caller's settings."""

    connect_timeout: float = 5.0
    read_timeout: float = 30.0
    # One sleep per retry, in seconds; the number of entries bounds the attempts (len + 1).
    retry_backoffs: tuple[float, ...] = (0.2, 0.5, 1.0, 2.0, 4.0)


@dataclass(frozen=True)
class WatchEvent:
    """One event of a watch stream: ADDED, MODIFIED, DELETED, BOOKMARK or ERROR."""

    type: str
    object: dict[str, Any]

    @property
    def resource_version(self) -> str:
        """The object's resourceVersion (for a BOOKMARK, the point to resume from)."""
        return str(self.object.get("metadata", {}).get("resourceVersion", ""))


# --- the adapter -----------------------------------------------------------------------------


class Kube:
    """Every Kubernetes API call, with timeouts and typed errors. Thread-safe like the raw client."""

    def __init__(
        self,
        transport: Transport,
        settings: KubeSettings | None = None,
        *,
        write_gate: Callable[[], bool] | None = None,
    ) -> None:
        self._transport = transport
        self.settings = settings or KubeSettings()
        self._write_gate = write_gate

    def with_settings(self, settings: KubeSettings) -> Kube:
        """The same connection (and write gate) with other timeouts and retries (close the original)."""
        return Kube(self._transport, settings, write_gate=self._write_gate)

    def gated(self, write_gate: Callable[[], bool]) -> Kube:
        """The same connection, with every write (anything but GET) sent only while `write_gate()`
        is true, else refused with NotLeader before it leaves the process. Leader election gives
        the watcher such a view, so a process that lost its lease writes nothing more. Closing the
        returned adapter closes the shared connection pool: close only the original."""
        return Kube(self._transport, self.settings, write_gate=write_gate)

    @classmethod
    def from_kubeconfig(
        cls, kubeconfig: str | None = None, context: str | None = None, settings: KubeSettings | None = None
    ) -> Kube:
        """Load the kubeconfig (or, without one, the in-cluster service account)."""
        try:
            endpoint = endpoint_for(kubeconfig, context)
        except EndpointError as exc:
            raise KubeError(str(exc)) from exc
        return cls(Transport(endpoint), settings)

    @property
    def host(self) -> str:
        """The API server URL this adapter talks to."""
        return self._transport.host

    def close(self) -> None:
        """Release the connection pool."""
        self._transport.close()

    # -- low level ------------------------------------------------------------------------

    def _call(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | None = None,
        stream: bool = False,
    ) -> Any:
        what = f"{method} {path}"
        if method != "GET" and self._write_gate is not None and not self._write_gate():
            raise NotLeader(f"{what}: not sent: this process no longer holds the leader lease")
        read_timeout = timeout if timeout is not None else self.settings.read_timeout
        try:
            response = self._transport.request(
                method,
                path,
                query=[(k, v) for k, v in (query or {}).items() if v is not None],
                headers={"Accept": "application/json", "Content-Type": content_type},
                body=body,
                timeout=(self.settings.connect_timeout, read_timeout),
                stream=stream,
            )
            if response.status >= 400:
                data = response.data  # a stream's error answer is read whole
                if stream:
                    response.release_conn()
                raise error_from_answer(response.status, data, response.headers, what)
            if stream:
                return response
            data = response.data
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise Retryable(f"{what}: {exc}") from exc
        return json.loads(data) if data else {}

    def retrying(self, what: str, call: Callable[[], T]) -> T:
        """Run `call`, retrying Retryable errors with the configured backoffs; re-raise the rest."""
        backoffs = self.settings.retry_backoffs
        attempts = len(backoffs) + 1
        for attempt in range(1, attempts + 1):
            try:
                return call()
            except Retryable as exc:
                if attempt == attempts:
                    raise
                delay = max(backoffs[attempt - 1], exc.retry_after or 0.0)  # the server's Retry-After wins
                log.warning(
                    "%s: attempt %d/%d failed: %s%s; retrying in %.1fs",
                    what,
                    attempt,
                    attempts,
                    exc,
                    retry_after_note(exc),
                    delay,
                )
                time.sleep(delay)
        raise AssertionError("unreachable")

    # -- objects --------------------------------------------------------------------------

    def get(self, resource: Resource, namespace: str | None, name: str) -> dict[str, Any]:
        """Read one object; NotFound when it does not exist."""
        return self.retrying(
            f"get {resource.plural}/{name}", lambda: self._call("GET", resource.path(namespace, name))
        )

    def list(
        self,
        resource: Resource,
        namespace: str | None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resource_version: str | None = None,
        limit: int = 500,
        transform: Callable[[dict[str, Any]], Any] | None = None,
    ) -> tuple[list[Any], str]:
        """List all objects (following `continue` pages); returns the items and the list's resourceVersion.

        `transform`, when given, is applied to each item as its page arrives and items it maps to
        None are dropped: a caller that keeps a few fields of 10,000 objects never holds them all.
        """
        items: list[Any] = []
        continue_token: str | None = None
        list_rv = ""
        while True:
            query = {
                "labelSelector": label_selector,
                "fieldSelector": field_selector,
                "limit": limit,
                "continue": continue_token,
                "resourceVersion": resource_version if continue_token is None else None,
            }
            page = self.retrying(
                f"list {resource.plural}",
                lambda q=query: self._call("GET", resource.path(namespace), query=q),  # type: ignore[misc]
            )
            kind = resource.kind
            for item in page.get("items") or []:
                # Lists omit apiVersion/kind on items; put them back so items look like gets.
                item.setdefault("apiVersion", resource.api_version)
                item.setdefault("kind", kind)
                if transform is None:
                    items.append(item)
                elif (kept := transform(item)) is not None:
                    items.append(kept)
            page.pop("items", None)  # the next page must not stack on this one
            meta = page.get("metadata") or {}
            list_rv = str(meta.get("resourceVersion", list_rv))
            continue_token = meta.get("continue") or None
            if not continue_token:
                return items, list_rv

    def create(self, resource: Resource, namespace: str | None, body: dict[str, Any]) -> dict[str, Any]:
        """Create an object; AlreadyExists when the name is taken.

        Not retried: a create whose answer was lost may have happened, so the caller decides
        (deterministic names make that safe: the second attempt gets AlreadyExists).
        """
        return self._call("POST", resource.path(namespace), body=body)

    def replace(
        self,
        resource: Resource,
        namespace: str | None,
        body: dict[str, Any],
        *,
        subresource: str | None = None,
    ) -> dict[str, Any]:
        """PUT the object; the body's resourceVersion makes it conditional (Conflict when stale)."""
        name = body["metadata"]["name"]
        return self.retrying(
            f"replace {resource.plural}/{name}",
            lambda: self._call("PUT", resource.path(namespace, name, subresource), body=body),
        )

    def patch(
        self,
        resource: Resource,
        namespace: str | None,
        name: str,
        patch: Any,
        *,
        patch_type: str = "merge",
        subresource: str | None = None,
    ) -> dict[str, Any]:
        """PATCH the object. patch_type: merge (RFC 7386) or json (RFC 6902, with `test` ops)."""
        content_type = {
            "merge": "application/merge-patch+json",
            "json": "application/json-patch+json",
        }[patch_type]
        return self.retrying(
            f"patch {resource.plural}/{name}",
            lambda: self._call(
                "PATCH", resource.path(namespace, name, subresource), body=patch, content_type=content_type
            ),
        )

    def delete(self, resource: Resource, namespace: str | None, name: str, *, uid: str | None = None) -> None:
        """Delete the object (only the one with `uid` when given); NotFound when already gone."""
        body: dict[str, Any] = {
            "kind": "DeleteOptions",
            "apiVersion": "v1",
            "propagationPolicy": "Background",
        }
        if uid:
            body["preconditions"] = {"uid": uid}
        self.retrying(
            f"delete {resource.plural}/{name}",
            lambda: self._call("DELETE", resource.path(namespace, name), body=body),
        )

    def watch(
        self,
        resource: Resource,
        namespace: str | None,
        *,
        resource_version: str,
        timeout_seconds: int = 300,
        label_selector: str | None = None,
        field_selector: str | None = None,
        on_open: Callable[[Callable[[], None]], None] | None = None,
        read_timeout: float | None = None,
    ) -> Iterator[WatchEvent]:
        """Stream events after `resource_version` until the server ends the stream.

        Bookmarks are requested. An ERROR event with code 410 raises Gone (the caller re-lists);
        other ERROR events raise KubeError. The caller owns the list-then-watch loop.
        `on_open`, when given, receives a function that ends the stream from another thread (a
        clean stop must not wait for the next event or for `timeout_seconds`).
        `read_timeout` bounds the silence on the stream (default: `timeout_seconds` + 30); a
        half-open connection then raises Retryable instead of hanging.
        """
        query = {
            "watch": "true",
            "allowWatchBookmarks": "true",
            "resourceVersion": resource_version,
            "timeoutSeconds": timeout_seconds,
            "labelSelector": label_selector,
            "fieldSelector": field_selector,
        }
        # The read timeout bounds silence on the stream: the server sends bookmarks about once a
        # minute and closes at timeoutSeconds, so a longer silence means a dead connection.
        silence = read_timeout if read_timeout is not None else timeout_seconds + 30
        response = self._call("GET", resource.path(namespace), query=query, timeout=silence, stream=True)
        if on_open is not None:
            on_open(lambda: _shutdown_stream(response))
        try:
            for event in watch_events(response.stream(amt=None, decode_content=True)):
                event_type = event.get("type", "")
                obj = event.get("object") or {}
                if event_type == "ERROR":
                    code = int(obj.get("code", 0))
                    message = f"watch {resource.plural}: {obj.get('message', obj)}"
                    if code == 410:
                        raise Gone(message, status=410, reason=str(obj.get("reason", "")))
                    raise KubeError(message, status=code, reason=str(obj.get("reason", "")))
                yield WatchEvent(event_type, obj)
        except (urllib3.exceptions.HTTPError, OSError, TruncatedEvent) as exc:
            raise Retryable(f"watch {resource.plural}: {exc}") from exc
        finally:
            response.release_conn()

    def discovery(self, group: str, version: str) -> dict[str, Any]:
        """The APIResourceList of one group/version (NotFound until the API server serves it)."""
        path = f"/apis/{group}/{version}" if group else f"/api/{version}"
        return self.retrying(f"discover {group}/{version}", lambda: self._call("GET", path))

    # -- Argo CD cluster Secrets ----------------------------------------------------------

    # `builtins.list`: inside this class `list` names the method Kube.list (mypy reads it so).
    def list_cluster_secrets(self, namespace: str) -> builtins.list[ClusterSecret]:
        """The Argo CD clusters in `namespace`: labels, `name` and `server` only.

        `data.config` holds the cluster's credentials: it is dropped here, before anything else
        sees the object, and never decoded.
        """
        items, _ = self.list(SECRETS, namespace, label_selector=CLUSTER_SECRET_LABEL)
        return [cluster_secret_from_object(item) for item in items]


def _shutdown_stream(response: Any) -> None:
    """Unblock a read in progress on `response` (urllib3 2.3+); a stream already ended is fine."""
    with contextlib.suppress(ValueError, RuntimeError, OSError, AttributeError):
        response.shutdown()


class TruncatedEvent(ValueError):
    """A watch stream ended inside an event: the response was cut (a proxy, a reset)."""


def watch_events(chunks: Iterable[bytes]) -> Iterator[dict[str, Any]]:
    """The events of a watch response body, one per line, each as soon as its line is complete.

    The API server ends every event with a newline, so text after the last newline, or a line that
    is not JSON (cut inside a multi-byte character, say), is a truncated response: TruncatedEvent,
    which the caller retries like a dropped connection.
    """
    pending = b""
    for chunk in chunks:
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            if line.strip():
                yield _event(line)
    if pending.strip():
        raise TruncatedEvent(f"the stream ended inside an event ({len(pending)} bytes without a newline)")


def _event(line: bytes) -> dict[str, Any]:
    try:
        event = json.loads(line)
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        raise TruncatedEvent(f"an event that is not JSON ({exc})") from exc
    if not isinstance(event, dict):
        raise TruncatedEvent(f"an event that is not an object: {line[:80]!r}")
    return event
