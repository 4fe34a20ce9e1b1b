"""Pod networking of the dev node: a CNI bridge, and the `kubernetes` Service reached by DNAT.

Pods are ordinary pods (no hostNetwork): each gets a veth on our bridge and an address of
`POD_CIDR` from the CNI `bridge` + `host-local` plugins. There is no kube-proxy; the only Service
pods need is the API server's (`kubernetes`, `SERVICE_IP`:443, what in-cluster clients use through
`KUBERNETES_SERVICE_HOST`), so one iptables rule in a chain of our own DNATs it to the API server's
loopback port. Reaching a loopback address from another interface needs `route_localnet`, set on
our bridge only (it goes away with the bridge; nothing global changes).

We make the bridge ourselves, with the gateway address, before anything starts: the kubelet binds
its server to that address (`NODE_IP`: a non-loopback node IP that exists only on this machine and
only while the node runs), and the CNI plugin runs with `isGateway: false`, because with `true` it
also turns on `net.ipv4.ip_forward` for the whole machine, which we do not need (nothing is
forwarded: pods talk to local addresses only). No masquerade rules, no port maps.

Every change is recorded in the node's ledger first; `machine.clean_up` undoes it.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
from pathlib import Path
from typing import Any

from orchestrator.devenv import host, machine
from orchestrator.devenv.controlplane import SERVICE_IP

POD_CIDR = "10.217.0.0/24"
NODE_IP = "10.217.0.1"  # the bridge's address: the pods' gateway and the kubelet's address
CNI_VERSION = "1.0.0"


class NetworkError(machine.MachineError):
    """The node's network could not be set up."""


def cni_config(*, ipam_dir: Path) -> dict[str, Any]:
    """The CNI network list containerd reads (bridge + host-local IPAM, default route via us)."""
    prefix = ipaddress.ip_network(POD_CIDR).prefixlen
    return {
        "cniVersion": CNI_VERSION,
        "name": host.CNI_NETWORK,
        "plugins": [
            {
                "type": "bridge",
                "bridge": host.BRIDGE,
                "isGateway": False,
                "isDefaultGateway": False,
                "ipMasq": False,
                "hairpinMode": False,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": POD_CIDR, "gateway": NODE_IP}]],
                    "routes": [{"dst": "0.0.0.0/0", "gw": NODE_IP}],
                    "dataDir": str(ipam_dir),
                },
            }
        ],
        "_comment": f"progressive-sync dev node: {POD_CIDR} on bridge {host.BRIDGE} ({NODE_IP}/{prefix})",
    }


def dnat_rule(api_port: int) -> list[str]:
    """The rule in our chain: pods' connections to the Service IP:443 go to the API server."""
    return [
        "-d",
        f"{SERVICE_IP}/32",
        "-p",
        "tcp",
        "--dport",
        "443",
        "-j",
        "DNAT",
        "--to-destination",
        f"127.0.0.1:{api_port}",
    ]


def _run(command: list[str], what: str) -> None:
    result = subprocess.run(command, capture_output=True, text=True, timeout=30, check=False)
    if result.returncode != 0:
        raise NetworkError(
            f"{what} failed: {' '.join(command)}: {result.stderr.strip() or result.stdout.strip()}"
        )


def _check_free_subnet() -> None:
    """Refuse to start when the machine already routes our pod subnet (it would be hijacked)."""
    result = subprocess.run(
        ["ip", "-json", "route", "show"], capture_output=True, text=True, timeout=10, check=False
    )
    if result.returncode != 0:
        return
    ours = ipaddress.ip_network(POD_CIDR)
    for route in json.loads(result.stdout or "[]"):
        destination = route.get("dst", "")
        if destination in ("default", "") or route.get("dev") == host.BRIDGE:
            continue
        try:
            if ipaddress.ip_network(destination, strict=False).overlaps(ours):
                raise NetworkError(
                    f"this machine already routes {destination} (dev {route.get('dev')}), which overlaps the "
                    f"dev node's pod network {POD_CIDR}"
                )
        except ValueError:
            continue


def set_up_bridge(ledger: machine.Ledger, *, cni_conf_dir: Path, ipam_dir: Path) -> None:
    """Make the bridge (with `route_localnet`) and the CNI config, each recorded in `ledger` first."""
    _check_free_subnet()
    prefix = ipaddress.ip_network(POD_CIDR).prefixlen
    ledger.mark(bridge=True)
    _run(["ip", "link", "add", host.BRIDGE, "type", "bridge"], "creating the bridge")
    _run(["ip", "addr", "add", f"{NODE_IP}/{prefix}", "dev", host.BRIDGE], "addressing the bridge")
    _run(["ip", "link", "set", host.BRIDGE, "up"], "bringing the bridge up")
    ledger.set_sysctl(f"net.ipv4.conf.{host.BRIDGE}.route_localnet", "1")
    cni_conf_dir.mkdir(parents=True, exist_ok=True)
    ipam_dir.mkdir(parents=True, exist_ok=True)
    config = json.dumps(cni_config(ipam_dir=ipam_dir), indent=2)
    (cni_conf_dir / "10-progressive-sync.conflist").write_text(config)


def set_up_service_dnat(ledger: machine.Ledger, *, api_port: int) -> None:
    """The chain that DNATs the `kubernetes` Service IP:443 to the API server's loopback port."""
    ledger.mark(iptables=True)
    _add_chain("nat", host.IPTABLES_CHAIN, [dnat_rule(api_port)])


def _add_chain(table: str, chain: str, rules: list[list[str]]) -> None:
    """Create our chain in `table` with `rules`, and the jump to it from its built-in chain."""
    _, _, parent, match = next(jump for jump in host.IPTABLES_JUMPS if jump[1] == chain)
    iptables = ["iptables", "-w", "5", "-t", table]
    _run([*iptables, "-N", chain], f"creating iptables chain {table}/{chain}")
    for rule in rules:
        _run([*iptables, "-A", chain, *rule], f"adding a rule to {table}/{chain}")
    _run([*iptables, "-I", parent, *host.iptables_jump(table, chain, parent, match)], f"jumping to {chain}")


def guard_rule(port: int) -> list[str]:
    """Reject TCP connections to `port` that do not come from this machine (the loopback device)."""
    return ["-p", "tcp", "--dport", str(port), "!", "-i", "lo", "-j", "REJECT", "--reject-with", "tcp-reset"]


def guard_loopback_ports(ledger: machine.Ledger, ports: list[int]) -> None:
    """Only this machine may reach `ports`, for programs that listen on every interface."""
    ledger.mark(iptables=True)
    existing = subprocess.run(
        ["iptables", "-w", "5", "-t", "filter", "-S", host.GUARD_CHAIN],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    if existing.returncode != 0:
        _add_chain("filter", host.GUARD_CHAIN, [])
    for port in ports:
        _run(
            ["iptables", "-w", "5", "-t", "filter", "-A", host.GUARD_CHAIN, *guard_rule(port)],
            "guarding a port",
        )
