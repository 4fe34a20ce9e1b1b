"""A real local Kubernetes control plane: etcd + kube-apiserver on loopback, no kubelet.

Used by the pytest fixtures, `progressive-sync dev-cluster up`, the demo and the benchmarks. It
starts the real binaries (built by `make tools`, found as `find_tools_dir` says) on free
loopback ports with generated certificates, RBAC authorization, an audit log of every write (so
tests can count writes made by any process), an admin kubeconfig, and client certificates minted
on demand for restricted users. `stop()` ends both process groups and removes the temp dir.

On its own there is no scheduler, controller-manager or kubelet: Pods never run, garbage collection
never happens and namespaces are never finalized; callers clean up by deleting what they created.
`DevCluster.start(node_ready=True)` prepares it for the real node of `orchestrator.devenv.node`:
the ServiceAccount admission plugin on (pods get their tokens), the Node authorizer and
NodeRestriction (the kubelet's own credentials, as in a real cluster), serving-cert SANs for the
`kubernetes` Service IP and `kubernetes.default.svc` (pods reach the API server through a DNAT of
that IP), and the kubelet client wiring (`--kubelet-preferred-address-types=InternalIP`, a client
certificate for logs/exec, the kubelet's serving cert checked against our CA).
"""

from __future__ import annotations

import contextlib
import ctypes
import datetime as dt
import ipaddress
import json
import logging
import os
import random
import re
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from orchestrator.devenv import tools
from orchestrator.devenv.health import DeadProgram, exited_programs, program_name

log = logging.getLogger(__name__)

REQUIRED_TOOLS = ("etcd", "kube-apiserver", "kubectl")
SERVICE_CIDR = "10.0.0.0/24"
# The `kubernetes` Service's ClusterIP (the first address of SERVICE_CIDR) and its DNS names.
SERVICE_IP = "10.0.0.1"
SERVICE_DNS_NAMES = (
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)

# Every write (and watch-free read) by anyone, at Metadata level: enough to count writes per
# object and per user without logging request bodies (which could hold secrets).
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {"level": "Metadata", "verbs": ["create", "update", "patch", "delete", "deletecollection"]},
        {"level": "None"},
    ],
}


# Go's garbage collector settings for kube-apiserver, unless the environment already sets them. At
# Go's default (GOGC=100) the collector takes a seventh of the API server's CPU
# (docs/design/dev-stack.md), and the API servers of the dev stack and the tests are the largest
# CPU user of the suite. GOGC=400 collects at five times the live heap instead of twice, and
# GOMEMLIMIT makes it collect sooner whenever the heap nears 1200 MiB. Measured side by side, on the
# same real-stack and control-plane tests: 20 % less kube-apiserver CPU. The peak RSS went from
# ~0.95 to ~1.25 GB (GOGC=400 alone: 2.5 GB).
APISERVER_GO_ENVIRONMENT = {"GOGC": "400", "GOMEMLIMIT": "1200MiB"}


def apiserver_environment(
    base: dict[str, str] | None = None, *, memory_limit: str | None = None
) -> dict[str, str]:
    """kube-apiserver's environment: `base` (this process's by default) with the GC settings added
    where `base` does not set them (a `GOGC` of the caller's wins). `memory_limit` (a GOMEMLIMIT
    value) replaces the default limit, for an API server that may use more memory to collect less
    often (the test session's planes: `DevCluster.start`)."""
    environment = dict(os.environ if base is None else base)
    defaults = dict(APISERVER_GO_ENVIRONMENT)
    if memory_limit is not None:
        defaults["GOMEMLIMIT"] = memory_limit
    for name, value in defaults.items():
        environment.setdefault(name, value)
    return environment


_REQUEST_SERIES = re.compile(r"^apiserver_request_total(?:\{(?P<labels>[^}]*)\})? (?P<value>\S+)$")
_LABEL = re.compile(r'(\w+)="([^"]*)"')


def api_requests(metrics_text: str, **labels: str) -> float:
    """The requests kube-apiserver counted (`apiserver_request_total` in its /metrics text): the
    sum of the series whose labels include `labels` (every series without), e.g. `verb="GET",
    resource="appprojects"`."""
    total = 0.0
    for line in metrics_text.splitlines():
        series = _REQUEST_SERIES.match(line)
        if series is None:
            continue
        have = dict(_LABEL.findall(series.group("labels") or ""))
        if all(have.get(name) == value for name, value in labels.items()):
            total += float(series.group("value"))
    return total


class ControlPlaneError(RuntimeError):
    """The control plane could not be started, or its tools could not be found."""


# --- tools -----------------------------------------------------------------------------------


def find_tools_dir(explicit: str | os.PathLike[str] | None = None) -> Path:
    """The folder holding etcd, kube-apiserver and kubectl.

    Explicit, else KUBEBUILDER_ASSETS, else the folder `make tools` built (`tools.tools_dir()`), else PATH.
    """
    candidates: list[Path] = []
    if explicit:
        candidates.append(Path(explicit))
    if os.environ.get("KUBEBUILDER_ASSETS"):
        candidates.append(Path(os.environ["KUBEBUILDER_ASSETS"]))
    with contextlib.suppress(tools.ToolsMissing):
        candidates.append(tools.tools_dir())
    on_path = shutil.which("kube-apiserver")
    if on_path:
        candidates.append(Path(on_path).parent)
    for folder in candidates:
        if all((folder / tool).is_file() and os.access(folder / tool, os.X_OK) for tool in REQUIRED_TOOLS):
            return folder
    looked = ", ".join(str(c) for c in candidates) or "nowhere (KUBEBUILDER_ASSETS is unset, no tools built)"
    raise ControlPlaneError(
        f"etcd, kube-apiserver and kubectl not found (looked in {looked}). "
        "Run `make tools` (it builds them into a cache where this finds them)."
    )


# --- certificates ----------------------------------------------------------------------------


@dataclass
class _KeyPair:
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def key_pem(self) -> bytes:
        return self.key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )


def _new_ca(common_name: str, now: dt.datetime) -> _KeyPair:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return _KeyPair(cert, key)


def _issue(
    ca: _KeyPair,
    now: dt.datetime,
    *,
    common_name: str,
    organizations: Sequence[str] = (),
    server_sans: Sequence[str] = (),
) -> _KeyPair:
    key = ec.generate_private_key(ec.SECP256R1())
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    attributes += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name(attributes))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
    )
    if server_sans:
        sans: list[x509.GeneralName] = []
        for san in server_sans:
            try:
                sans.append(x509.IPAddress(ipaddress.ip_address(san)))
            except ValueError:
                sans.append(x509.DNSName(san))
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        usage = ExtendedKeyUsageOID.SERVER_AUTH
    else:
        usage = ExtendedKeyUsageOID.CLIENT_AUTH
    builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    return _KeyPair(builder.sign(ca.key, hashes.SHA256()), key)


# --- processes -------------------------------------------------------------------------------


# Where `free_port` looks: below the kernel's ephemeral range, which it hands out as the local port
# of every outgoing connection (a port found free by binding port 0 is in that range, and a client
# connecting anywhere could take it before our component listens: "bind: address already in use").
PORT_FLOOR = 20000
EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
PORT_ATTEMPTS = 200
# A port `free_port` found free can be taken by another process before kube-apiserver listens on it
# (it starts seconds later, after etcd and its certificates): it exits with "bind: address already
# in use", and is started again on another port, at most this many times in all.
APISERVER_PORT_ATTEMPTS = 3
PORT_TAKEN = "address already in use"


def ephemeral_port_floor(range_file: Path = EPHEMERAL_RANGE_FILE) -> int:
    """The lowest port the kernel gives outgoing connections (32768 when it does not say)."""
    try:
        return int(range_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now and that no outgoing connection
    will take: a random one between PORT_FLOOR and the ephemeral range, checked by binding it
    (random, so processes choosing at the same time rarely pick the same one)."""
    ceiling = ephemeral_port_floor()
    chooser = random.SystemRandom()
    if ceiling - PORT_FLOOR >= PORT_ATTEMPTS:
        for _ in range(PORT_ATTEMPTS):
            port = chooser.randrange(PORT_FLOOR, ceiling)
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                try:
                    sock.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
    # No room below the ephemeral range (or all taken): let the kernel choose.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def host_address() -> str:
    """This host's own non-loopback IPv4 address, for kube-apiserver's --advertise-address.

    kube-apiserver refuses a loopback advertise address for the `kubernetes` Service endpoints and,
    left alone, derives one from the default route. It only records the address in an Endpoints
    object; nothing is ever sent to it. With no such address at all we fall back to a documentation
    address (TEST-NET-1), which is never routed.
    """
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            # connect() on UDP sends nothing; it only asks the kernel which source address it would use.
            sock.connect(("192.0.2.1", 9))
            address = str(sock.getsockname()[0])
            if not ipaddress.ip_address(address).is_loopback:
                return address
    except OSError:
        pass
    return "192.0.2.10"


_PR_SET_PDEATHSIG = 1


def _load_prctl() -> Any:
    # Resolved in the parent, once: the child between fork and exec must not load libraries.
    try:
        return ctypes.CDLL("libc.so.6", use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_prctl = _load_prctl()


def die_with_parent() -> None:
    """In the child before exec: SIGKILL when the parent dies, so a killed test run leaves no orphans.

    Only one already-resolved system call runs here (no imports, no locks), which is what makes a
    preexec_fn safe enough in a threaded parent. The kernel sends the signal when the *thread* that
    started the child exits, so start control planes from a long-lived thread (tests, the CLI and
    the demo all start them from the main thread).
    """
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def spawn_logged(
    name: str, argv: Sequence[str], log_dir: Path, *, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start `argv` in its own process group, output to `log_dir/<name>.log`, dying with this thread."""
    log_file = (log_dir / f"{name}.log").open("ab")
    try:
        return subprocess.Popen(
            list(argv),
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # its own process group, stopped as a whole
            preexec_fn=die_with_parent,  # noqa: PLW1509 - see die_with_parent
            close_fds=True,
        )
    finally:
        log_file.close()


def _stop_process_group(process: subprocess.Popen[bytes], grace_seconds: float = 10.0) -> None:
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=grace_seconds)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=grace_seconds)


# --- the control plane -----------------------------------------------------------------------


def _unfinished_tail(path: Path, size: int, chunk: int = 65536) -> int:
    """How many of the first `size` bytes of `path` come after its last newline: the part of a
    line still being written. A rotation renames a file with only whole lines in it (lumberjack
    rotates before a write), so only the current file can end mid-line."""
    with path.open("rb") as handle:
        end = size
        while end > 0:
            start = max(0, end - chunk)
            handle.seek(start)
            newline = handle.read(end - start).rfind(b"\n")
            if newline >= 0:
                return size - (start + newline + 1)
            end = start
    return size


@dataclass
class AuditEvent:
    """One write the API server answered, from its audit log."""

    verb: str
    user: str
    resource: str
    namespace: str
    name: str
    subresource: str
    code: int
    # Which credential authenticated it (`JTI=<token id>` for a service-account token), when said.
    credential: str = ""

    @classmethod
    def from_json(cls, line: dict[str, Any]) -> AuditEvent:
        """Parse one audit.k8s.io/v1 Event (ResponseComplete stage)."""
        ref = line.get("objectRef") or {}
        return cls(
            verb=str(line.get("verb", "")),
            user=str((line.get("user") or {}).get("username", "")),
            resource=str(ref.get("resource", "")),
            namespace=str(ref.get("namespace", "")),
            name=str(ref.get("name", "")),
            subresource=str(ref.get("subresource", "")),
            code=int((line.get("responseStatus") or {}).get("code", 0)),
            credential=str(
                (
                    ((line.get("user") or {}).get("extra") or {}).get(
                        "authentication.kubernetes.io/credential-id"
                    )
                    or [""]
                )[0]
            ),
        )


@dataclass
class DevCluster:
    """A running etcd + kube-apiserver. Create with `DevCluster.start()`; always `stop()` it."""

    workdir: Path
    tools_dir: Path
    api_url: str
    etcd_url: str
    kubeconfig: Path
    node_ready: bool = False
    apiserver_memory_limit: str | None = None  # GOMEMLIMIT instead of APISERVER_GO_ENVIRONMENT's
    _processes: list[subprocess.Popen[bytes]] = field(default_factory=list, repr=False)
    _ca: _KeyPair | None = field(default=None, repr=False)
    _apiserver_argv: list[str] = field(default_factory=list, repr=False)
    _apiserver_log_offset: int = field(default=0, repr=False)  # where its log stood when it was started
    _owns_workdir: bool = True

    @classmethod
    def start(
        cls,
        tools_dir: str | os.PathLike[str] | None = None,
        *,
        workdir: str | os.PathLike[str] | None = None,
        extra_apiserver_args: Sequence[str] = (),
        ready_timeout: float = 90.0,
        node_ready: bool = False,
        apiserver_memory_limit: str | None = None,
    ) -> DevCluster:
        """Start etcd and kube-apiserver and wait until they serve; stops everything on failure.

        `node_ready`: configure the API server for a real node (see the module doc).
        `apiserver_memory_limit`: kube-apiserver's GOMEMLIMIT instead of `APISERVER_GO_ENVIRONMENT`'s
        (the environment's own still wins).
        """
        tools = find_tools_dir(tools_dir)
        owns_workdir = workdir is None
        root = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="progressive-sync-devcluster-"))
        root.mkdir(parents=True, exist_ok=True)
        now = dt.datetime.now(dt.UTC)
        ca = _new_ca("progressive-sync dev-cluster CA", now)
        api_port = free_port()
        cluster = cls(
            workdir=root,
            tools_dir=tools,
            api_url=f"https://127.0.0.1:{api_port}",
            etcd_url="",
            kubeconfig=root / "admin.kubeconfig",
            node_ready=node_ready,
            apiserver_memory_limit=apiserver_memory_limit,
            _ca=ca,
            _owns_workdir=owns_workdir,
        )
        try:
            cluster._start_etcd()
            cluster._start_apiserver(api_port, ca, now, extra_apiserver_args)
            for attempt in range(1, APISERVER_PORT_ATTEMPTS + 1):
                cluster.kubeconfig = cluster.mint_user(
                    "admin", ["system:masters"], filename="admin.kubeconfig"
                )
                try:
                    cluster._wait_ready(ready_timeout)
                    break
                except ControlPlaneError:
                    if attempt == APISERVER_PORT_ATTEMPTS or not cluster._apiserver_lost_its_port():
                        raise
                    cluster._respawn_apiserver_on(free_port())
        except BaseException:
            cluster.stop()
            raise
        return cluster

    # -- start-up -------------------------------------------------------------------------

    def _spawn(
        self, name: str, argv: list[str], env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        process = spawn_logged(name, argv, self.workdir, env=env)
        self._processes.append(process)
        return process

    def _start_etcd(self) -> None:
        client_port, peer_port = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{client_port}"
        self._spawn(
            "etcd",
            [
                str(self.tools_dir / "etcd"),
                "--name=devcluster",
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={self.etcd_url}",
                f"--advertise-client-urls={self.etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-cluster=devcluster=http://127.0.0.1:{peer_port}",
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
        )
        self._wait_http(f"{self.etcd_url}/health", "etcd", timeout=30.0, context=None)

    def _start_apiserver(self, port: int, ca: _KeyPair, now: dt.datetime, extra: Sequence[str]) -> None:
        certs = self.workdir / "certs"
        certs.mkdir()
        sans = ["localhost", "127.0.0.1"]
        if self.node_ready:
            sans += [SERVICE_IP, *SERVICE_DNS_NAMES]
        serving = _issue(ca, now, common_name="kube-apiserver", server_sans=sans)
        sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        files = {
            "ca.crt": ca.cert_pem(),
            "apiserver.crt": serving.cert_pem(),
            "apiserver.key": serving.key_pem(),
            "sa.key": sa_key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            ),
            "sa.pub": sa_key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            ),
        }
        for filename, content in files.items():
            (certs / filename).write_bytes(content)
            (certs / filename).chmod(0o600)
        (self.workdir / "audit-policy.yaml").write_text(yaml.safe_dump(AUDIT_POLICY))
        self._spawn_apiserver(port, certs, now, extra)

    def _node_args(self, certs: Path, now: dt.datetime) -> list[str]:
        """What kube-apiserver needs to serve a real node (see the module doc)."""
        if not self.node_ready:
            # No pod ever runs: no token to mount, so ServiceAccount admission would only get in the way.
            return ["--authorization-mode=RBAC", "--disable-admission-plugins=ServiceAccount"]
        assert self._ca is not None
        client = _issue(
            self._ca, now, common_name="kube-apiserver-kubelet-client", organizations=["system:masters"]
        )
        (certs / "kubelet-client.crt").write_bytes(client.cert_pem())
        (certs / "kubelet-client.key").write_bytes(client.key_pem())
        (certs / "kubelet-client.key").chmod(0o600)
        return [
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
            "--kubelet-preferred-address-types=InternalIP",
            f"--kubelet-client-certificate={certs / 'kubelet-client.crt'}",
            f"--kubelet-client-key={certs / 'kubelet-client.key'}",
            f"--kubelet-certificate-authority={certs / 'ca.crt'}",
        ]

    def _spawn_apiserver(self, port: int, certs: Path, now: dt.datetime, extra: Sequence[str]) -> None:
        self._apiserver_argv = [
            str(self.tools_dir / "kube-apiserver"),
            f"--etcd-servers={self.etcd_url}",
            f"--cert-dir={certs}",
            f"--tls-cert-file={certs / 'apiserver.crt'}",
            f"--tls-private-key-file={certs / 'apiserver.key'}",
            f"--client-ca-file={certs / 'ca.crt'}",
            f"--secure-port={port}",
            "--bind-address=127.0.0.1",
            f"--advertise-address={host_address()}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={certs / 'sa.pub'}",
            f"--service-account-signing-key-file={certs / 'sa.key'}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            *self._node_args(certs, now),
            "--allow-privileged=true",
            f"--audit-policy-file={self.workdir / 'audit-policy.yaml'}",
            f"--audit-log-path={self.audit_log_path}",
            "--audit-log-format=json",
            "--audit-log-mode=blocking",
            "--profiling=false",
            *extra,
        ]
        self._spawn_apiserver_argv()

    def _apiserver_process(self) -> subprocess.Popen[bytes]:
        return next(p for p in self._processes if p.args == self._apiserver_argv)

    def _apiserver_lost_its_port(self) -> bool:
        """True when kube-apiserver exited because its port was taken since `free_port` chose it."""
        process = self._apiserver_process()
        if process.poll() is None:
            return False
        log = self.workdir / "kube-apiserver.log"
        with log.open("rb") as f:
            f.seek(self._apiserver_log_offset)
            return PORT_TAKEN in f.read().decode(errors="replace")

    def _respawn_apiserver_on(self, port: int) -> None:
        """Start kube-apiserver again, with the same flags but `port`, after it lost its port."""
        self._processes.remove(self._apiserver_process())
        flag = next(arg for arg in self._apiserver_argv if arg.startswith("--secure-port="))
        self._apiserver_argv = [
            f"--secure-port={port}" if arg == flag else arg for arg in self._apiserver_argv
        ]
        self.api_url = f"https://127.0.0.1:{port}"
        self._spawn_apiserver_argv()

    def _spawn_apiserver_argv(self) -> None:
        log = self.workdir / "kube-apiserver.log"
        self._apiserver_log_offset = log.stat().st_size if log.exists() else 0
        self._spawn(
            "kube-apiserver",
            self._apiserver_argv,
            env=apiserver_environment(memory_limit=self.apiserver_memory_limit),
        )

    def _ssl_context(self, user: str = "admin") -> ssl.SSLContext:
        certs = self.workdir / "certs"
        context = ssl.create_default_context(cafile=str(certs / "ca.crt"))
        context.load_cert_chain(
            str(self.workdir / "users" / f"{user}.crt"), str(self.workdir / "users" / f"{user}.key")
        )
        return context

    def _wait_http(self, url: str, what: str, *, timeout: float, context: ssl.SSLContext | None) -> None:
        deadline = time.monotonic() + timeout
        last_error = "no answer yet"
        while time.monotonic() < deadline:
            for process in self._processes:
                if process.poll() is not None:
                    raise ControlPlaneError(
                        f"{what} exited with code {process.returncode} while starting; "
                        f"its log is in {self.workdir}:\n{self._log_tail()}"
                    )
            try:
                with urllib.request.urlopen(url, timeout=2.0, context=context) as response:
                    if response.status == 200:
                        return
                    last_error = f"HTTP {response.status}"
            except OSError as exc:
                last_error = str(exc)
            time.sleep(0.1)
        raise ControlPlaneError(
            f"{what} not ready at {url} after {timeout:.0f}s ({last_error}):\n{self._log_tail()}"
        )

    def _wait_ready(self, timeout: float) -> None:
        context = self._ssl_context()
        self._wait_http(f"{self.api_url}/healthz", "kube-apiserver", timeout=timeout, context=context)
        self._wait_http(f"{self.api_url}/readyz", "kube-apiserver", timeout=timeout, context=context)
        self._wait_http(
            f"{self.api_url}/api/v1/namespaces/default",
            "the default namespace",
            timeout=timeout,
            context=context,
        )

    def _log_tail(self, lines: int = 30) -> str:
        tails = []
        for name in ("etcd", "kube-apiserver"):
            path = self.workdir / f"{name}.log"
            if path.exists():
                text = path.read_text(errors="replace").splitlines()[-lines:]
                tails.append(f"--- {name}.log ---\n" + "\n".join(text))
        return "\n".join(tails)

    # -- users and certificates ------------------------------------------------------------

    @property
    def ca_cert_path(self) -> Path:
        """The CA that signed the API server's serving cert and every client cert minted here."""
        return self.workdir / "certs" / "ca.crt"

    @property
    def service_account_key_path(self) -> Path:
        """The private key that signs service-account tokens (kube-controller-manager needs it)."""
        return self.workdir / "certs" / "sa.key"

    @property
    def api_port(self) -> int:
        """The loopback port kube-apiserver listens on."""
        return int(self.api_url.rsplit(":", 1)[1])

    def issue_serving_cert(self, name: str, sans: Sequence[str], folder: Path) -> tuple[Path, Path]:
        """A serving certificate for `sans` signed by our CA, written to `folder`; (cert, key) paths."""
        if self._ca is None:
            raise ControlPlaneError("this DevCluster has no CA to sign certificates with")
        pair = _issue(self._ca, dt.datetime.now(dt.UTC), common_name=name, server_sans=sans)
        folder.mkdir(parents=True, exist_ok=True)
        cert, key = folder / f"{name}.crt", folder / f"{name}.key"
        cert.write_bytes(pair.cert_pem())
        key.write_bytes(pair.key_pem())
        key.chmod(0o600)
        return cert, key

    def mint_user(self, user: str, groups: Sequence[str] = (), *, filename: str | None = None) -> Path:
        """A kubeconfig for `user` in `groups`, by a client certificate the API server trusts."""
        if self._ca is None:
            raise ControlPlaneError("this DevCluster has no CA to sign users with")
        users = self.workdir / "users"
        users.mkdir(exist_ok=True)
        pair = _issue(self._ca, dt.datetime.now(dt.UTC), common_name=user, organizations=groups)
        (users / f"{user}.crt").write_bytes(pair.cert_pem())
        (users / f"{user}.key").write_bytes(pair.key_pem())
        (users / f"{user}.key").chmod(0o600)
        path = self.workdir / (filename or f"{user}.kubeconfig")
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "devcluster",
                    "cluster": {
                        "server": self.api_url,
                        "certificate-authority": str(self.workdir / "certs" / "ca.crt"),
                    },
                }
            ],
            "users": [
                {
                    "name": user,
                    "user": {
                        "client-certificate": str(users / f"{user}.crt"),
                        "client-key": str(users / f"{user}.key"),
                    },
                }
            ],
            "contexts": [{"name": user, "context": {"cluster": "devcluster", "user": user}}],
            "current-context": user,
        }
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)
        return path

    # -- audit ----------------------------------------------------------------------------

    @property
    def audit_log_path(self) -> Path:
        """Where kube-apiserver writes one JSON line per answered write."""
        return self.workdir / "audit.log"

    def audit_events(self) -> list[AuditEvent]:
        """Every write answered so far (blocking audit mode: a returned call is already logged)."""
        return self.audit_events_since(0)

    def _audit_files(self) -> list[Path]:
        """The audit log's files, oldest first: kube-apiserver rotates `audit.log` at 100 MB
        (lumberjack's default for `--audit-log-maxsize` 0) into `audit-<timestamp>.log` backups,
        whose names sort by time; a long test session's shared control plane gets there."""
        backups = sorted(self.workdir.glob("audit-*.log"))
        return [*backups, self.audit_log_path]

    def audit_mark(self) -> int:
        """A position in the audit log, counted over its rotated files too; pass it to
        `audit_events_since` to see only later writes. It is the start of a line: a line still
        being written when the mark is taken (its request not yet answered) counts as later, since
        a file's size can grow a page at a time within the one write of a line."""
        while True:
            files = self._audit_files()
            sizes = [path.stat().st_size if path.exists() else 0 for path in files]
            unfinished = _unfinished_tail(files[-1], sizes[-1]) if sizes[-1] else 0
            if self._audit_files() == files:  # no rotation while counting
                return sum(sizes) - unfinished

    def audit_events_since(self, mark: int) -> list[AuditEvent]:
        """The writes answered after `mark` (from `audit_mark`), across rotations."""
        return [AuditEvent.from_json(line) for line in self.audit_lines_since(mark)]

    def audit_lines_since(self, mark: int) -> list[dict[str, Any]]:
        """The audit log's lines (JSON objects, as kube-apiserver wrote them) after `mark` (from
        `audit_mark`), across rotations: a rotation only renames the file and starts a new one, so
        the files in order hold the same bytes."""
        lines: list[dict[str, Any]] = []
        skip = mark
        for path in self._audit_files():
            if not path.exists():
                continue
            with path.open() as handle:
                size = os.fstat(handle.fileno()).st_size
                if skip >= size:
                    skip -= size
                    continue
                handle.seek(skip)
                skip = 0
                lines.extend(json.loads(line) for line in handle if line.endswith("\n"))
        return lines

    # -- metrics --------------------------------------------------------------------------

    def metrics_text(self, timeout: float = 10.0) -> str:
        """kube-apiserver's `/metrics` (Prometheus text), read as admin: e.g. API Priority and
        Fairness's `apiserver_flowcontrol_rejected_requests_total` per flow schema."""
        with urllib.request.urlopen(
            f"{self.api_url}/metrics", timeout=timeout, context=self._ssl_context()
        ) as r:
            return str(r.read().decode())

    # -- teardown -------------------------------------------------------------------------

    def restart_apiserver(self, ready_timeout: float = 90.0) -> None:
        """Stop kube-apiserver (SIGTERM, its whole group) and start it again with the same flags, port
        and etcd; returns once it serves again. Every open connection and watch stream breaks."""
        process = self._apiserver_process()
        _stop_process_group(process)
        self._processes.remove(process)
        self._spawn_apiserver_argv()
        self._wait_ready(ready_timeout)

    @property
    def pids(self) -> list[int]:
        """The process ids of etcd and kube-apiserver (each the leader of its own group)."""
        return [process.pid for process in self._processes]

    def exited(self) -> list[DeadProgram]:
        """etcd or kube-apiserver, when it exited since it started (with its log's telling lines)."""
        return exited_programs(
            (name, process, self.workdir / f"{name}.log")
            for process in self._processes
            for name in [program_name(process)]
        )

    def stop(self) -> None:
        """Stop kube-apiserver then etcd (whole process groups) and remove the work dir."""
        for process in reversed(self._processes):
            _stop_process_group(process)
        self._processes.clear()
        if self._owns_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> DevCluster:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


@contextlib.contextmanager
def running(tools_dir: str | os.PathLike[str] | None = None, **kwargs: Any) -> Iterator[DevCluster]:
    """`with running() as cluster:` start a control plane and always stop it."""
    cluster = DevCluster.start(tools_dir, **kwargs)
    try:
        yield cluster
    finally:
        cluster.stop()
