"""What a dev node may change on the machine, read before and after, to prove it left nothing.

`MachineState.take()` reads: the sysctls the node or the kubelet touch, the network links, the
iptables rules (without counters), the mount points, our cgroup folders, the folders the kubelet
makes at fixed paths, and the processes naming the node's root. `differences(before)` lists what
changed, one readable line each.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, fields
from pathlib import Path

from orchestrator.devenv import host, machine

SYSCTLS = (*machine.KERNEL_TUNABLES, "net.ipv4.ip_forward", "net.ipv4.conf.all.route_localnet")


def _iptables_rules() -> tuple[str, ...]:
    rules = []
    for table in ("nat", "filter"):
        result = subprocess.run(
            ["iptables", "-w", "5", "-t", table, "-S"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        rules += [f"{table}: {line}" for line in result.stdout.splitlines()]
    return tuple(rules)


@dataclass(frozen=True)
class MachineState:
    """One reading of the machine (see the module doc)."""

    sysctls: tuple[tuple[str, str], ...]
    links: tuple[str, ...]
    iptables: tuple[str, ...]
    mounts: tuple[str, ...]
    cgroups: tuple[str, ...]
    folders: tuple[str, ...]
    processes: tuple[int, ...]

    @classmethod
    def take(cls) -> MachineState:
        """Read the machine now."""
        mounts = sorted(
            host.unescape_mount_path(line.split()[4])
            for line in Path("/proc/self/mountinfo").read_text().splitlines()
        )
        return cls(
            sysctls=tuple(
                (name, host.read_sysctl(name)) for name in SYSCTLS if host.sysctl_path(name).exists()
            ),
            links=tuple(sorted(entry.name for entry in Path("/sys/class/net").iterdir())),
            iptables=_iptables_rules(),
            mounts=tuple(mounts),
            cgroups=tuple(str(p) for p in host.cgroup_folders()),
            folders=tuple(str(p) for p in (*machine.KUBELET_FIXED_FOLDERS, machine.NODE_ROOT) if p.exists()),
            processes=tuple(host.processes_naming(machine.NODE_ROOT)),
        )

    def differences(self, before: MachineState) -> list[str]:
        """What differs from `before` ('' when nothing)."""
        changes = []
        for item in fields(self):
            now, then = getattr(self, item.name), getattr(before, item.name)
            if now != then:
                added = sorted(set(now) - set(then))
                removed = sorted(set(then) - set(now))
                changes.append(f"{item.name}: added {added}, removed {removed}")
        return changes
