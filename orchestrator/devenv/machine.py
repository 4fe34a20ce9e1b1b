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
  (deepest first, detached), the iptables chain and its jump, the bridge, the sysctls (old values
  from the ledger), the cgroup folders, the CNI plugins' cache files and the node's root itself.
  It works from the ledger and from the fixed names alike, so it also cleans what a killed run
  left behind; the next `Node.start` calls it first, under the lock.

Everything here runs as root; nothing is done to anything not named by these constants.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

log = logging.getLogger(__name__)

# The fixed names of everything the node makes on the machine (one node per machine).
NODE_ROOT = Path("/var/lib/progressive-sync/node")
LOCK_PATH = Path("/run/progressive-sync-node.lock")
BRIDGE = "psync0"
IPTABLES_CHAIN = "PSYNC-NODE"  # nat PREROUTING -i BRIDGE: the Service IP's DNAT
GUARD_CHAIN = "PSYNC-NODE-GUARD"  # filter INPUT: our all-interfaces ports, loopback only
IPTABLES_COMMENT = "progressive-sync dev node"
# (table, our chain, the built-in chain that jumps to it, the jump's match)
IPTABLES_JUMPS = (
    ("nat", IPTABLES_CHAIN, "PREROUTING", ("-i", BRIDGE)),
    ("filter", GUARD_CHAIN, "INPUT", ()),
)
CGROUP_ROOT = "progressive-sync-node"  # under each cgroup v1 hierarchy (and the v2 root, if any)
CGROUP_MOUNT = Path("/sys/fs/cgroup")
CNI_NETWORK = "progressive-sync"
CNI_CACHE = Path("/var/lib/cni/results")
# containerd 1.6 puts its shims' sockets here whatever its state dir (defaults.DefaultStateDir).
SHIM_SOCKETS = Path("/run/containerd/s")

_MNT_DETACH = 2


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
        }
        partial.write_text(json.dumps(document, indent=2, sort_keys=True))
        with partial.open("rb") as handle:
            os.fsync(handle.fileno())
        partial.rename(self.path)

    # -- recording changes ------------------------------------------------------------------

    def set_sysctl(self, name: str, value: str) -> None:
        """Set a sysctl, recording its old value first (only the first old value is kept)."""
        old = read_sysctl(name)
        if name not in self.sysctls:
            self.sysctls[name] = old
            self.save()
        if old != value:
            write_sysctl(name, value)

    def remember_sysctls(self, names: Iterable[str]) -> None:
        """Record the current values of sysctls that a child process (the kubelet) may change."""
        changed = False
        for name in names:
            if name not in self.sysctls and sysctl_path(name).exists():
                self.sysctls[name] = read_sysctl(name)
                changed = True
        if changed:
            self.save()

    def remember_new_folders(self, paths: Iterable[Path]) -> None:
        """Record which of `paths` do not exist yet (a child will make them; cleanup removes them)."""
        new = [str(path) for path in paths if not path.exists() and str(path) not in self.created]
        if new:
            self.created.extend(new)
            self.save()

    def mark(self, **flags: bool) -> None:
        """Record that a bridge, iptables chain or cgroup folder is about to be made."""
        for name, value in flags.items():
            setattr(self, name, value)
        self.save()


def sysctl_path(name: str) -> Path:
    """/proc/sys/... of a dotted sysctl name."""
    return Path("/proc/sys") / name.replace(".", "/")


def read_sysctl(name: str) -> str:
    """A sysctl's value as the kernel prints it (whitespace-normalized)."""
    return " ".join(sysctl_path(name).read_text().split())


def write_sysctl(name: str, value: str) -> None:
    """Set a sysctl."""
    sysctl_path(name).write_text(value + "\n")


# --- processes -----------------------------------------------------------------------------------


# The programs a node runs whose command lines name its root; nothing else is ever killed by name
# (a shell tailing a log under the root is left alone).
NODE_PROGRAMS = frozenset(
    {
        "containerd",
        "containerd-shim-runc-v2",
        "runc",
        "kubelet",
        "kube-scheduler",
        "kube-controller-manager",
        "workflow-controller",
        "argo",
    }
)


def _argv(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def _all_pids() -> list[int]:
    return [int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit()]


def processes_naming(root: Path, *, exclude: Iterable[int] = ()) -> list[int]:
    """Every node program (`NODE_PROGRAMS`) whose command line mentions `root`: containerd, its
    shims, the kubelet, the Argo controller, ... of a node at `root`, this one or a killed one."""
    excluded = {os.getpid(), *exclude}
    needle = str(root)
    found = []
    for pid in _all_pids():
        argv = _argv(pid)
        if pid in excluded or not argv or Path(argv[0]).name not in NODE_PROGRAMS:
            continue
        if any(needle in part for part in argv[1:]):
            found.append(pid)
    return found


def cgroup_folders() -> list[Path]:
    """Our cgroup root in every mounted hierarchy that has it."""
    if not CGROUP_MOUNT.is_dir():
        return []
    found = []
    for hierarchy in sorted(CGROUP_MOUNT.iterdir()):
        candidate = hierarchy / CGROUP_ROOT
        if candidate.is_dir():
            found.append(candidate)
    if (CGROUP_MOUNT / CGROUP_ROOT).is_dir():  # a cgroup v2 machine
        found.append(CGROUP_MOUNT / CGROUP_ROOT)
    return found


def processes_in_cgroups() -> list[int]:
    """Every process in our cgroups (the containers; the shims live outside them)."""
    pids: set[int] = set()
    for folder in cgroup_folders():
        for procs in folder.rglob("cgroup.procs"):
            with contextlib.suppress(OSError, ValueError):
                pids.update(int(line) for line in procs.read_text().split())
    pids.discard(os.getpid())
    return sorted(pids)


def kill_all(find: Any, what: str, *, timeout: float = 15.0) -> None:
    """SIGTERM then SIGKILL every pid `find()` returns until it returns none, within `timeout`."""
    deadline = time.monotonic() + timeout
    terminate_until = time.monotonic() + min(3.0, timeout / 3)
    while True:
        pids = find()
        if not pids:
            return
        sig = signal.SIGTERM if time.monotonic() < terminate_until else signal.SIGKILL
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        _reap()
        if time.monotonic() > deadline:
            log.warning("%s still running after %.0fs: pids %s", what, timeout, pids)
            return
        time.sleep(0.1)


def _reap() -> None:
    """Collect our own exited children so they do not linger as zombies that look alive."""
    with contextlib.suppress(ChildProcessError):
        while True:
            pid, _ = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                return


def stop_process_group(process: subprocess.Popen[bytes], grace: float = 10.0) -> None:
    """SIGTERM a child's whole process group, SIGKILL it after `grace` seconds."""
    if process.poll() is not None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # stragglers of a group whose leader exited
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=grace)


# --- mounts ----------------------------------------------------------------------------------------


def unescape_mount_path(text: str) -> str:
    """A path as /proc/self/mountinfo prints it, with its octal escapes (\\040 for space) decoded."""
    return re.sub(r"\\([0-7]{3})", lambda match: chr(int(match.group(1), 8)), text)


def mounts_under(root: Path) -> list[Path]:
    """Mount points at or under `root`, deepest first."""
    prefix = str(root).rstrip("/")
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        if len(fields) > 4:
            point = unescape_mount_path(fields[4])
            if point == prefix or point.startswith(prefix + "/"):
                found.append(Path(point))
    return sorted(set(found), key=lambda p: (len(p.parts), str(p)), reverse=True)


_libc = ctypes.CDLL("libc.so.6", use_errno=True)


def unmount(point: Path) -> None:
    """Detach a mount (lazy: it goes when its last user does)."""
    if _libc.umount2(str(point).encode(), _MNT_DETACH) != 0:
        error = ctypes.get_errno()
        if error not in (errno.EINVAL, errno.ENOENT):  # not a mount (any more)
            raise OSError(error, f"umount {point}: {os.strerror(error)}")


def unmount_all(root: Path, *, rounds: int = 5) -> None:
    """Unmount everything under `root` (repeated: unmounting can reveal stacked mounts)."""
    for _ in range(rounds):
        points = mounts_under(root)
        if not points:
            return
        for point in points:
            try:
                unmount(point)
            except OSError as exc:
                log.warning("%s", exc)
    left = mounts_under(root)
    if left:
        log.warning("mounts left under %s: %s", root, [str(p) for p in left])


# --- network ---------------------------------------------------------------------------------------


def _quiet(command: list[str], timeout: float = 15.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)


def iptables_jump(table: str, chain: str, parent: str, match: tuple[str, ...]) -> list[str]:
    """The rule spec (after -A/-I/-D PARENT) of the jump from a built-in chain to ours."""
    del table, parent
    return [*match, "-j", chain, "-m", "comment", "--comment", IPTABLES_COMMENT]


def iptables_remove_chains(iptables: str = "iptables") -> list[str]:
    """Remove our chains and every jump to them (repeated: a jump may have been added twice)."""
    removed = []
    for table, chain, parent, match in IPTABLES_JUMPS:
        if _quiet([iptables, "-w", "5", "-t", table, "-S", chain]).returncode != 0:
            continue
        for _ in range(10):
            jump = iptables_jump(table, chain, parent, match)
            if _quiet([iptables, "-w", "5", "-t", table, "-D", parent, *jump]).returncode != 0:
                break
        _quiet([iptables, "-w", "5", "-t", table, "-F", chain])
        _quiet([iptables, "-w", "5", "-t", table, "-X", chain])
        removed.append(f"{table}/{chain}")
    return removed


def iptables_chains(iptables: str = "iptables") -> list[str]:
    """Which of our chains exist ("table/chain")."""
    return [
        f"{table}/{chain}"
        for table, chain, _, _ in IPTABLES_JUMPS
        if _quiet([iptables, "-w", "5", "-t", table, "-S", chain]).returncode == 0
    ]


def bridge_exists() -> bool:
    """True when our bridge exists."""
    return Path(f"/sys/class/net/{BRIDGE}").exists()


def delete_bridge() -> None:
    """Delete our bridge (its per-device sysctls go with it)."""
    if bridge_exists():
        result = _quiet(["ip", "link", "delete", BRIDGE])
        if result.returncode != 0 and bridge_exists():
            log.warning("could not delete bridge %s: %s", BRIDGE, result.stderr.strip())


def veths_on_bridge() -> list[str]:
    """The host ends of pod veths still attached to our bridge."""
    folder = Path(f"/sys/class/net/{BRIDGE}/brif")
    return sorted(entry.name for entry in folder.iterdir()) if folder.is_dir() else []


# --- cgroups ---------------------------------------------------------------------------------------


def make_cgroup_root() -> None:
    """Create our cgroup root in every v1 hierarchy (the kubelet's `cgroupRoot` must exist)."""
    for hierarchy in sorted(CGROUP_MOUNT.iterdir()):
        if not (hierarchy / "cgroup.procs").exists() or hierarchy.is_symlink():
            continue
        folder = hierarchy / CGROUP_ROOT
        folder.mkdir(exist_ok=True)
        for name in ("cpuset.cpus", "cpuset.mems"):  # an empty cpuset admits no process
            parent_value = hierarchy / name
            if parent_value.exists() and not (folder / name).read_text().strip():
                (folder / name).write_text(parent_value.read_text())


def remove_cgroups() -> None:
    """Remove our cgroup folders, deepest first (each must be empty of processes)."""
    for top in cgroup_folders():
        folders = sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True)
        for folder in [*folders, top]:
            for _ in range(20):
                try:
                    folder.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError as exc:
                    if exc.errno != errno.EBUSY:
                        log.warning("could not remove cgroup %s: %s", folder, exc)
                        break
                    time.sleep(0.1)


# --- files outside the root ------------------------------------------------------------------------


def remove_cni_cache() -> None:
    """The CNI library's cached results of our network (libcni's default cache dir)."""
    if CNI_CACHE.is_dir():
        for entry in CNI_CACHE.glob(f"{CNI_NETWORK}-*"):
            entry.unlink(missing_ok=True)


def remove_dead_shim_sockets() -> None:
    """Shim sockets nobody listens on (the shims we killed left them); live ones are left alone."""
    if not SHIM_SOCKETS.is_dir():
        return
    listening = _listening_unix_sockets()
    for entry in SHIM_SOCKETS.iterdir():
        if entry.is_socket() and str(entry) not in listening:
            entry.unlink(missing_ok=True)


def _listening_unix_sockets() -> set[str]:
    paths = set()
    with contextlib.suppress(OSError):
        for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
            fields = line.split()
            if len(fields) >= 8:
                paths.add(fields[7].lstrip("@"))
    return paths


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


def clean_up(root: Path = NODE_ROOT, *, children: Iterable[subprocess.Popen[bytes]] = ()) -> list[str]:
    """Undo everything a node (this one, or a killed one) did to the machine; returns what it did.

    Call it holding the `NodeLock`. Order matters: processes first (they hold mounts and cgroups),
    then mounts, network, sysctls, cgroups, files.
    """
    done: list[str] = []
    for process in reversed(list(children)):
        stop_process_group(process)
    if processes_naming(root):
        kill_all(lambda: processes_naming(root), "node processes")
        done.append("killed node processes")
    if processes_in_cgroups():
        kill_all(processes_in_cgroups, "containers")
        done.append("killed containers")
    if mounts_under(root):
        unmount_all(root)
        done.append("unmounted")
    ledger = Ledger.load(root / "ledger.json")
    removed_chains = iptables_remove_chains()
    if removed_chains:
        done.append(f"removed iptables chains {', '.join(removed_chains)}")
    if bridge_exists():
        delete_bridge()
        done.append(f"deleted bridge {BRIDGE}")
    for name, old in ledger.sysctls.items():
        with contextlib.suppress(OSError):
            if sysctl_path(name).exists() and read_sysctl(name) != old:
                write_sysctl(name, old)
                done.append(f"restored {name}={old}")
    if cgroup_folders():
        remove_cgroups()
        done.append("removed cgroups")
    remove_cni_cache()
    remove_dead_shim_sockets()
    for folder in map(Path, ledger.created):
        if folder.is_dir() and not mounts_under(folder):
            shutil.rmtree(folder, ignore_errors=True)
            done.append(f"removed {folder}")
    if root.exists():
        if mounts_under(root):
            log.warning("not removing %s: mounts are left under it", root)
        else:
            shutil.rmtree(root, ignore_errors=True)
    with contextlib.suppress(OSError):
        root.parent.rmdir()  # only when empty
    return done


def leftovers(root: Path = NODE_ROOT) -> list[str]:
    """What of a node is still on the machine (empty after a clean stop); used by tests and `down`."""
    found = []
    if processes_naming(root):
        found.append(f"processes naming {root}: {processes_naming(root)}")
    if processes_in_cgroups():
        found.append(f"processes in cgroup {CGROUP_ROOT}: {processes_in_cgroups()}")
    if mounts_under(root):
        found.append(f"mounts under {root}: {[str(p) for p in mounts_under(root)]}")
    if iptables_chains():
        found.append(f"iptables chains {iptables_chains()}")
    if bridge_exists():
        found.append(f"bridge {BRIDGE}")
    if cgroup_folders():
        found.append(f"cgroups {[str(p) for p in cgroup_folders()]}")
    if root.exists():
        found.append(f"folder {root}")
    return found


# --- the queue ---------------------------------------------------------------------------------------

# On a machine shared by several people (or CI jobs), runs that need the node queue here for their
# turn (waiting), before they take the node lock (which fails at once).
QUEUE_PATH = Path(os.environ.get("PROGRESSIVE_SYNC_NODE_QUEUE", "/tmp/progressive-sync-realstack.lock"))


def _held_by_an_ancestor(path: Path) -> bool:
    """True when this process inherited an open file of `path` (from `flock FILE command`)."""
    for entry in Path("/proc/self/fd").iterdir():
        with contextlib.suppress(OSError):
            if Path(os.readlink(entry)) == path:
                return True
    return False


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
        deadline = time.monotonic() + timeout
        told = False
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise NodeBusy(f"waited {timeout:g}s for the node queue {path}") from None
                if not told and say is not None:
                    say(f"waiting for the node queue {path} (another run uses this machine's node)")
                    told = True
                time.sleep(1.0)
        yield


@contextlib.contextmanager
def node_lock(path: Path = LOCK_PATH) -> Iterator[NodeLock]:
    """`with node_lock():` hold the machine's node lock (fails at once if taken)."""
    lock = NodeLock(path)
    lock.acquire()
    try:
        yield lock
    finally:
        lock.release()
