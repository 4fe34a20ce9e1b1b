"""A small fault-injecting TCP proxy to put in front of the real API server (tests of outages).

The client talks TLS to the API server through it (the serving certificate names 127.0.0.1, so a
kubeconfig whose `server` is the proxy's address works unchanged otherwise: `kubeconfig_via`). The
proxy never reads what passes; it only decides, chunk by chunk, whether bytes go through:

- `PASS`: everything goes through (the start);
- `REFUSE`: every open connection is reset and new ones are refused (the API server is down);
- `BLACKHOLE`: connections stay open and silent both ways (a half-open network: timeouts must fire);
- `LOSE_WRITE_ANSWERS`: a request that carried a body over `WRITE_BYTES` (a write: an Application
  PUT is ~3 KB) reaches the server, its answer is dropped and the connection reset (a write that
  landed while its answer was lost); reads and TLS handshakes (under 1.3 KB) go through. The proxy
  cannot read TLS, so it goes by the size of what the client sent since the server last spoke;
- `cut()`: reset every open connection once (streams closed abruptly), the mode unchanged;
- `stall_open()`: the connections open now go silent for ever, both ways, without closing (a
  half-open connection: a NAT or a peer that vanished); new connections work;
- `truncate_open()`: each connection open now delivers half of the next chunk the server sends,
  then is reset (a response or watch event truncated mid-chunk); new connections work.

`bytes_to_client` counts what was delivered to clients: wait on it to know a watch event went
through. Threads only; `stop()` closes everything. Used by the simulator's outage tests and meant for
issue 18's fault suite.
"""

from __future__ import annotations

import contextlib
import enum
import socket
import struct
import threading
from collections.abc import Iterator
from pathlib import Path

import yaml

from orchestrator.devenv.controlplane import free_port

CHUNK = 65536
POLL_SECONDS = 0.1
# Client bytes since the server last spoke above which a request counts as a write (measured: a TLS
# handshake's client flights 517 + 968 bytes, a GET ~270, an Application PUT ~2,900).
WRITE_BYTES = 2048


class Mode(enum.Enum):
    """What the proxy does with traffic."""

    PASS = "pass"
    REFUSE = "refuse"
    BLACKHOLE = "blackhole"
    LOSE_WRITE_ANSWERS = "lose-write-answers"


def _reset(sock: socket.socket) -> None:
    """Close with an RST (SO_LINGER 0), the way a crashed peer or a dropped route looks."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.close()


class _Connection:
    def __init__(self, proxy: FaultProxy, client: socket.socket, server: socket.socket) -> None:
        self.proxy = proxy
        self.client = client
        self.server = server
        self.closed = threading.Event()
        self.stalled = False
        self.truncate = False
        self._unanswered = 0  # client bytes since the server last sent something
        for sock in (client, server):
            sock.settimeout(POLL_SECONDS)

    def start(self) -> None:
        threading.Thread(target=self._pump, args=(self.client, self.server, False), daemon=True).start()
        threading.Thread(target=self._pump, args=(self.server, self.client, True), daemon=True).start()

    def close(self) -> None:
        if not self.closed.is_set():
            self.closed.set()
            _reset(self.client)
            _reset(self.server)
            self.proxy._forget(self)

    def _pump(self, source: socket.socket, sink: socket.socket, to_client: bool) -> None:
        while not self.closed.is_set():
            mode = self.proxy.mode
            if mode == Mode.BLACKHOLE or self.stalled:
                self.closed.wait(POLL_SECONDS)  # neither read nor answer: the peer hears nothing
                continue
            try:
                data = source.recv(CHUNK)
            except TimeoutError:
                continue
            except OSError:
                break
            if not data:
                break
            mode = self.proxy.mode
            if mode == Mode.BLACKHOLE or self.stalled:
                continue
            if to_client and self.truncate:
                with contextlib.suppress(OSError):
                    sink.sendall(data[: max(1, len(data) // 2)])
                self.proxy._count("truncated")
                break
            if to_client:
                if mode == Mode.LOSE_WRITE_ANSWERS and self.proxy._take_loss(self._unanswered):
                    self.proxy._count("answers_dropped")
                    break  # the server answered a write; the client never hears it
                self._unanswered = 0
            else:
                self._unanswered += len(data)
            try:
                sink.sendall(data)
            except OSError:
                break
            if to_client:
                self.proxy._delivered(len(data))
        self.close()


class FaultProxy:
    """A TCP proxy from a free loopback port to `upstream` (host, port), with switchable faults."""

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self._mode = Mode.PASS
        self._lock = threading.Lock()
        self._connections: set[_Connection] = set()
        self._listener: socket.socket | None = None
        self._stopped = threading.Event()
        self._bytes_to_client = 0
        # What the faults did, for tests to show they happened: connections reset by `cut()`,
        # responses truncated, answers to writes dropped.
        self.counts = {"cut": 0, "truncated": 0, "answers_dropped": 0}
        self._losses_left: int | None = None  # LOSE_WRITE_ANSWERS: None for every answer, else how many
        self._write_bytes = WRITE_BYTES  # requests over this many bytes are writes
        self.port = free_port()

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> FaultProxy:
        self._listen()
        return self

    def stop(self) -> None:
        self._stopped.set()
        self._close_listener()
        self.cut()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    # -- faults -------------------------------------------------------------------------------

    @property
    def mode(self) -> Mode:
        return self._mode

    def set_mode(self, mode: Mode) -> None:
        """Switch what happens to traffic from now on."""
        with self._lock:
            previous, self._mode = self._mode, mode
            self._losses_left, self._write_bytes = None, WRITE_BYTES
        if mode == Mode.REFUSE:
            self._close_listener()
            self.cut()
        elif previous == Mode.REFUSE:
            self._listen()

    def lose_write_answers(self, count: int, *, over_bytes: int = WRITE_BYTES) -> None:
        """Drop the answers to the next `count` writes, then pass everything (Mode.PASS again): a
        write whose answer was lost, deterministically followed by its retry. `over_bytes`: what
        counts as a write (an Event's create with a long message is ~1,950 bytes; a TLS handshake
        flight up to ~970, a GET ~290)."""
        assert count > 0 and self._mode != Mode.REFUSE
        with self._lock:
            self._losses_left, self._write_bytes, self._mode = count, over_bytes, Mode.LOSE_WRITE_ANSWERS

    def _take_loss(self, request_bytes: int) -> bool:
        """Whether to drop the answer to a request of that many bytes (a write's answer; taken from
        the budget when there is one)."""
        with self._lock:
            if request_bytes <= self._write_bytes:
                return False
            if self._losses_left is None:
                return True
            self._losses_left -= 1
            if self._losses_left == 0:
                self._losses_left, self._mode = None, Mode.PASS
            return True

    def cut(self) -> None:
        """Reset every open connection once."""
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            connection.close()
        self._count("cut", len(connections))

    def stall_open(self) -> int:
        """Make every open connection silent for ever (half-open); returns how many."""
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            connection.stalled = True
        return len(connections)

    def truncate_open(self) -> int:
        """Cut every open connection in the middle of the next chunk the server sends; returns how many."""
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            connection.truncate = True
        return len(connections)

    @property
    def bytes_to_client(self) -> int:
        """Bytes delivered to clients so far."""
        with self._lock:
            return self._bytes_to_client

    @property
    def open_connections(self) -> int:
        with self._lock:
            return len(self._connections)

    # -- internals ------------------------------------------------------------------------------

    def _listen(self) -> None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        listener.settimeout(POLL_SECONDS)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def _close_listener(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.close()

    def _accept(self, listener: socket.socket) -> None:
        while not self._stopped.is_set() and self._listener is listener:
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                _reset(client)
                continue
            connection = _Connection(self, client, server)
            with self._lock:
                self._connections.add(connection)
            connection.start()

    def _forget(self, connection: _Connection) -> None:
        with self._lock:
            self._connections.discard(connection)

    def _count(self, what: str, count: int = 1) -> None:
        with self._lock:
            self.counts[what] += count

    def _delivered(self, count: int) -> None:
        with self._lock:
            self._bytes_to_client += count


def kubeconfig_via(proxy: FaultProxy, kubeconfig: Path, dest: Path) -> Path:
    """A copy of `kubeconfig` whose clusters talk to the API server through `proxy`."""
    config = yaml.safe_load(kubeconfig.read_text())
    for cluster in config.get("clusters") or []:
        cluster["cluster"]["server"] = proxy.url
    dest.write_text(yaml.safe_dump(config))
    dest.chmod(0o600)
    return dest


@contextlib.contextmanager
def proxied(api_url: str) -> Iterator[FaultProxy]:
    """`with proxied(control_plane.api_url) as proxy:` a started proxy in front of that API server."""
    host, _, port = api_url.removeprefix("https://").rpartition(":")
    proxy = FaultProxy(host, int(port)).start()
    try:
        yield proxy
    finally:
        proxy.stop()
