"""Host operations of the dev node: the fixed names it uses on the machine, and the low-level acts
on them (finding and killing processes, unmounting, sysctls, iptables chains, the bridge, cgroups,
files other programs leave outside the node's root).

`machine` decides what to do with them (the lock, the ledger, `clean_up`); `networking` and `node`
make the things these functions remove. Everything here runs as root and touches nothing that is not
named by these constants or found under the node's root.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import logging
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

# The fixed names of everything the node makes on the machine (one node per machine).
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


# --- sysctls ---------------------------------------------------------------------------------------


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


# The kernel's CPU weights of a cgroup that sets none: cgroup v1 `cpu.shares`, v2 `cpu.weight`.
DEFAULT_CPU_SHARES = 1024
DEFAULT_CPU_WEIGHT = 100


def make_cgroup_root(*, cpu_shares: int | None = None, mount: Path = CGROUP_MOUNT) -> None:
    """Create our cgroup root in every v1 hierarchy (the kubelet's `cgroupRoot` must exist), with
    `cpu_shares` as the CPU weight of everything the node runs against the machine's other programs
    (None: the kernel's default). Written each start, so a root left by an earlier node does not keep
    another value."""
    shares = DEFAULT_CPU_SHARES if cpu_shares is None else cpu_shares
    weight = DEFAULT_CPU_WEIGHT if cpu_shares is None else cpu_weight(cpu_shares)
    for hierarchy in sorted(mount.iterdir()):
        if not (hierarchy / "cgroup.procs").exists() or hierarchy.is_symlink():
            continue
        folder = hierarchy / CGROUP_ROOT
        folder.mkdir(exist_ok=True)
        for name in ("cpuset.cpus", "cpuset.mems"):  # an empty cpuset admits no process
            parent_value = hierarchy / name
            if parent_value.exists() and not (folder / name).read_text().strip():
                (folder / name).write_text(parent_value.read_text())
        if (folder / "cpu.shares").exists():
            (folder / "cpu.shares").write_text(f"{shares}\n")
        if (folder / "cpu.weight").exists():  # cgroup v2 with the cpu controller
            (folder / "cpu.weight").write_text(f"{weight}\n")


def cpu_weight(cpu_shares: int) -> int:
    """cgroup v2's `cpu.weight` (1-10000) for a v1 `cpu.shares` (2-262144), as the kubelet maps them."""
    shares = min(max(cpu_shares, 2), 262144)
    return 1 + (shares - 2) * 9999 // 262142


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
