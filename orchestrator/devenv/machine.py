"""The machine-wide state of the dev node: its lock, its ledger of changes, and undoing them.

A real node changes the machine, not just a folder: a bridge, an iptables chain, sysctls (the kubelet
sets kernel tunables such as `vm.overcommit_memory` and `kernel.panic_on_oops` at start-up), cgroups,
mounts (containerd's overlay root filesystems, the kubelet's volume mounts, network namespaces) and
processes that outlive their parent (containerd's shims and the containers under them). So:

- One node per machine: `NodeLock` takes an exclusive `flock` on a fixed file and fails at once,
  naming the holder, when another process has it. The kernel drops the lock when its owner dies,
  however it dies, so a SIGKILLed owner never blocks the next start.
- Every change is written to a ledger (`ledger.json` in the node's root) *before* it is made,
  with what to restore (a sysctl's old value).
- `clean_up` undoes all of it: processes (by PID, by process group, every process whose command
  line names the node's root, every process in the node's cgroups), mounts under the root
  (deepest first, detached), the iptables chains and their jumps, the bridge, the sysctls (old values
  from the ledger), the cgroup folders, the CNI plugins' cache files and the node's root itself.
  It works from the ledger and from the fixed names alike (`host`), so it also cleans what a
  killed run left behind; the next `Node.start` calls it first, under the lock.
- `queue_turn`: on a machine several people share, runs wait for their turn on the node here.

The acts themselves (kill, unmount, delete a chain, ...) are in `host`.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from orchestrator.devenv import host

log = logging.getLogger(__name__)

# The node's root and its lock (the other fixed names: `host`).
NODE_ROOT = Path("/var/lib/progressive-sync/node")
LOCK_PATH = Path("/run/progressive-sync-node.lock")


class MachineError(RuntimeError):
    """The machine is not fit for a node, or another node owns it; the message says what to do."""


class NodeBusy(MachineError):
    """Another process holds the node lock: a second node on this machine cannot start."""


# --- the lock ----------------------------------------------------------------------------------


class NodeLock:
    """The machine-wide node lock: `acquire()` fails at once when another process holds it."""

    def __init__(self, path: Path = LOCK_PATH) -> None:
        self.path = path
        self._handle: IO[str] | None = None

    def acquire(self) -> None:
        """Take the lock without waiting; raise `NodeBusy` naming the holder when it is taken."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = self.path.open("a+")  # opened close-on-exec: children never inherit the lock
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            handle.seek(0)
            holder = handle.read().strip() or "unknown"
            handle.close()
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                raise NodeBusy(
                    f"a dev node is already running on this machine ({holder}; lock {self.path}). "
                    "Only one node can run per machine: stop it (`progressive-sync dev-cluster down`, or "
                    "end the test run that started it) and try again."
                ) from None
            raise
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}, started {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
        handle.flush()
        self._handle = handle

    def release(self) -> None:
        """Give the lock back (the kernel also does when this process dies)."""
        if self._handle is None:
            return
        with contextlib.suppress(OSError):
            self._handle.seek(0)
            self._handle.truncate()
        fcntl.flock(self._handle, fcntl.LOCK_UN)
        self._handle.close()
        self._handle = None

    @property
    def held(self) -> bool:
        """True while this object holds the lock."""
        return self._handle is not None


# --- the ledger ----------------------------------------------------------------------------------


@dataclass
class Ledger:
    """What this node changed on the machine, written before each change (see the module doc)."""

    path: Path
    sysctls: dict[str, str] = field(default_factory=dict)  # name -> value before we changed it
    iptables: bool = False
    bridge: bool = False
    cgroups: bool = False
    # Folders outside the root that the kubelet makes at fixed paths, which did not exist before.
    created: list[str] = field(default_factory=list)
    # Folders the stack that owns the node made for itself (its control plane's temporary workdir,
    # ~130 MB of etcd data and logs): removed by the next start when that owner was killed.
    owned: list[str] = field(default_factory=list)

    @classmethod
    def load(cls, path: Path) -> Ledger:
        """The ledger at `path`, or an empty one when there is none (or it cannot be read)."""
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return cls(path)
        return cls(
            path,
            sysctls={str(k): str(v) for k, v in (data.get("sysctls") or {}).items()},
            iptables=bool(data.get("iptables")),
            bridge=bool(data.get("bridge")),
            cgroups=bool(data.get("cgroups")),
            created=[str(p) for p in data.get("created") or []],
            owned=[str(p) for p in data.get("owned") or []],
        )

    def save(self) -> None:
        """Write the ledger atomically (a crash leaves the old or the new one, never half)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_suffix(".partial")
        document = {
            "sysctls": self.sysctls,
            "iptables": self.iptables,
            "bridge": self.bridge,
            "cgroups": self.cgroups,
            "created": self.created,
            "owned": self.owned,
        }
        partial.write_text(json.dumps(document, indent=2, sort_keys=True))
        with partial.open("rb") as handle:
            os.fsync(handle.fileno())
        partial.rename(self.path)

    # -- recording changes ------------------------------------------------------------------

    def set_sysctl(self, name: str, value: str) -> None:
        """Set a sysctl, recording its old value first (only the first old value is kept)."""
        old = host.read_sysctl(name)
        if name not in self.sysctls:
            self.sysctls[name] = old
            self.save()
        if old != value:
            host.write_sysctl(name, value)

    def remember_sysctls(self, names: Iterable[str]) -> None:
        """Record the current values of sysctls that a child process (the kubelet) may change."""
        changed = False
        for name in names:
            if name not in self.sysctls and host.sysctl_path(name).exists():
                self.sysctls[name] = host.read_sysctl(name)
                changed = True
        if changed:
            self.save()

    def remember_new_folders(self, paths: Iterable[Path]) -> None:
        """Record which of `paths` do not exist yet (a child will make them; cleanup removes them)."""
        new = [str(path) for path in paths if not path.exists() and str(path) not in self.created]
        if new:
            self.created.extend(new)
            self.save()

    def remember_owned_folders(self, paths: Iterable[Path]) -> None:
        """Record folders the node's owner made for itself, for a start after its death to remove."""
        new = [str(path) for path in paths if str(path) not in self.owned]
        if new:
            self.owned.extend(new)
            self.save()

    def mark(self, **flags: bool) -> None:
        """Record that a bridge, iptables chain or cgroup folder is about to be made."""
        for name, value in flags.items():
            setattr(self, name, value)
        self.save()


# --- undoing everything ----------------------------------------------------------------------------


# Folders the kubelet makes at fixed paths whatever its root dir: the device plugin socket's folder
# (pluginapi.DevicePluginPath) and the container log symlinks' folder.
KUBELET_FIXED_FOLDERS = (Path("/var/lib/kubelet"), Path("/var/log/containers"))

KERNEL_TUNABLES = (
    # What the kubelet's container manager sets at start-up (setupKernelTunables) when they differ.
    "vm.overcommit_memory",
    "vm.panic_on_oom",
    "kernel.panic",
    "kernel.panic_on_oops",
    "kernel.keys.root_maxkeys",
    "kernel.keys.root_maxbytes",
)


def clean_up(
    root: Path = NODE_ROOT, *, children: Iterable[subprocess.Popen[bytes]] = (), owner_gone: bool = False
) -> list[str]:
    """Undo everything a node (this one, or a killed one) did to the machine; returns what it did.

    Call it holding the `NodeLock`. Order matters: processes first (they hold mounts and cgroups),
    then mounts, network, sysctls, cgroups, files. `owner_gone`: a start cleaning up after a node
    whose owner died; the folders that owner made for itself (`Ledger.owned`) go too (at a stop,
    the owner removes its own, after the node).
    """
    done: list[str] = []
    for process in reversed(list(children)):
        host.stop_process_group(process)
    if host.processes_naming(root):
        host.kill_all(lambda: host.processes_naming(root), "node processes")
        done.append("killed node processes")
    if host.processes_in_cgroups():
        host.kill_all(host.processes_in_cgroups, "containers")
        done.append("killed containers")
    if host.mounts_under(root):
        host.unmount_all(root)
        done.append("unmounted")
    ledger = Ledger.load(root / "ledger.json")
    removed_chains = host.iptables_remove_chains()
    if removed_chains:
        done.append(f"removed iptables chains {', '.join(removed_chains)}")
    if host.bridge_exists():
        host.delete_bridge()
        done.append(f"deleted bridge {host.BRIDGE}")
    for name, old in ledger.sysctls.items():
        with contextlib.suppress(OSError):
            if host.sysctl_path(name).exists() and host.read_sysctl(name) != old:
                host.write_sysctl(name, old)
                done.append(f"restored {name}={old}")
    if host.cgroup_folders():
        host.remove_cgroups()
        done.append("removed cgroups")
    host.remove_cni_cache()
    host.remove_dead_shim_sockets()
    for folder in map(Path, ledger.created + (ledger.owned if owner_gone else [])):
        if folder.is_dir() and not host.mounts_under(folder):
            shutil.rmtree(folder, ignore_errors=True)
            done.append(f"removed {folder}")
    if root.exists():
        if host.mounts_under(root):
            log.warning("not removing %s: mounts are left under it", root)
        else:
            shutil.rmtree(root, ignore_errors=True)
    with contextlib.suppress(OSError):
        root.parent.rmdir()  # only when empty
    return done


def leftovers(root: Path = NODE_ROOT) -> list[str]:
    """What of a node is still on the machine (empty after a clean stop); used by tests and `down`."""
    found = []
    if host.processes_naming(root):
        found.append(f"processes naming {root}: {host.processes_naming(root)}")
    if host.processes_in_cgroups():
        found.append(f"processes in cgroup {host.CGROUP_ROOT}: {host.processes_in_cgroups()}")
    if host.mounts_under(root):
        found.append(f"mounts under {root}: {[str(p) for p in host.mounts_under(root)]}")
    if host.iptables_chains():
        found.append(f"iptables chains {host.iptables_chains()}")
    if host.bridge_exists():
        found.append(f"bridge {host.BRIDGE}")
    if host.cgroup_folders():
        found.append(f"cgroups {[str(p) for p in host.cgroup_folders()]}")
    if root.exists():
        found.append(f"folder {root}")
    return found


# --- the queue ---------------------------------------------------------------------------------------

# On a machine shared by several people (or CI jobs), runs that need the node queue here for their
# turn (waiting), before they take the node lock (which fails at once).
QUEUE_PATH = Path(os.environ.get("PROGRESSIVE_SYNC_NODE_QUEUE", "/tmp/progressive-sync-realstack.lock"))


def _held_by_an_ancestor(path: Path) -> bool:
    """True when this process or one of its ancestors holds `path`'s flock (`flock FILE command`).

    An inherited open file is not enough to tell: pytest-xdist's workers (execnet) and other
    spawners close inherited files, so a worker under `flock FILE make test` has none, yet its
    ancestor `flock` holds the lock (waiting for it would wait for ever: the holder waits for us).
    So the kernel's table of locks (/proc/locks) is read for a lock on the file's inode taken by
    this process or an ancestor.
    """
    for entry in Path("/proc/self/fd").iterdir():
        with contextlib.suppress(OSError):
            if Path(os.readlink(entry)) == path:
                return True
    try:
        status = path.stat()
        table = Path("/proc/locks").read_text()
    except OSError:
        return False
    holders = _flock_holders(table, (os.major(status.st_dev), os.minor(status.st_dev), status.st_ino))
    return any(pid in holders for pid in _ancestry(os.getpid()))


def _flock_holders(table: str, file: tuple[int, int, int]) -> set[int]:
    """The pids holding a granted flock on `file` (device major, minor, inode) in /proc/locks'
    text (waiters, `->`, left out)."""
    holders: set[int] = set()
    for line in table.splitlines():
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 4242 fe:00:1234 0 EOF" (device in hex); a waiter: "1: -> FLOCK".
        if len(fields) < 6 or fields[1] != "FLOCK":
            continue
        with contextlib.suppress(ValueError):
            major, minor, inode = fields[5].split(":")
            if (int(major, 16), int(minor, 16), int(inode)) == file:
                holders.add(int(fields[4]))
    return holders


def _ancestry(pid: int, limit: int = 64) -> list[int]:
    """`pid` and its ancestors up to init (from /proc/PID/stat), at most `limit` of them."""
    chain: list[int] = []
    while pid > 1 and len(chain) < limit:
        chain.append(pid)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        pid = int(stat.rsplit(")", 1)[1].split()[1])  # the command may hold spaces and parentheses
    return chain


@contextlib.contextmanager
def queue_turn(path: Path = QUEUE_PATH, *, timeout: float = 7200.0, say: Any = None) -> Iterator[None]:
    """Wait (up to `timeout`) for this run's turn on the machine's node; give it back after.

    When an ancestor already holds the queue (`flock -w 7200 FILE pytest`), this is the turn.
    `say(text)` is told once when the wait begins.
    """
    if _held_by_an_ancestor(path):
        yield
        return
    with path.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if say is not None:
                say(f"waiting for the node queue {path} (another run uses this machine's node)")
            _wait_for_flock(handle, timeout, path)
        yield


class _QueueTimeout(Exception):
    pass


def _wait_for_flock(handle: IO[str], timeout: float, path: Path) -> None:
    """Block in the kernel for the lock, like `flock -w` does, so waiters are served alike.

    From the main thread an interval timer bounds the wait (its handler's exception interrupts
    the call); elsewhere, where signals cannot be used, or while someone else's timer runs (e.g.
    pytest-timeout's), poll.
    """
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getitimer(signal.ITIMER_REAL)[0] > 0
    ):
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise NodeBusy(f"waited {timeout:g}s for the node queue {path}") from None
                time.sleep(1.0)

    def give_up(signum: int, frame: Any) -> None:
        raise _QueueTimeout

    previous = signal.signal(signal.SIGALRM, give_up)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
    except _QueueTimeout:
        raise NodeBusy(f"waited {timeout:g}s for the node queue {path}") from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@contextlib.contextmanager
def node_lock(path: Path = LOCK_PATH) -> Iterator[NodeLock]:
    """`with node_lock():` hold the machine's node lock (fails at once if taken)."""
    lock = NodeLock(path)
    lock.acquire()
    try:
        yield lock
    finally:
        lock.release()
