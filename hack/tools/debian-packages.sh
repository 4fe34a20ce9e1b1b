#!/usr/bin/env bash
# Installs the Debian packages the dev stack runs, when missing, and says which.
#
#   hack/tools/debian-packages.sh           install what is missing (needs root); quiet when all present
#   hack/tools/debian-packages.sh --check   list what is missing and exit 1, install nothing
#
# `make tools` (hack/tools/build.sh) runs it first. Idempotent: with everything present it only asks
# dpkg (well under a second) and installs nothing.
set -euo pipefail

PACKAGES=(
  # The real node: the container runtime (its ctr loads the locally built images), the OCI runtime,
  # the CNI bridge plugins, iptables for the DNAT of the Service IP to the local apiserver.
  containerd runc containernetworking-plugins iptables iproute2
  # Images are built here, never pulled: a Debian rootfs with python3, and a busybox one.
  mmdebstrap busybox-static
  # Argo CD: its cache, and what its repo-server runs (git; gpg through gpg-wrapper.sh).
  redis-server git gnupg
  # The virtualenv `make venv` creates (Debian's python3 lacks the venv module without it).
  python3-venv
  # Headless screenshots of the Argo UI (driven over the DevTools protocol).
  chromium chromium-driver
  # The analysis gates' metrics: the stack runs /usr/bin/prometheus itself (never Debian's service).
  prometheus
)

if ! command -v dpkg-query >/dev/null; then
  echo "[tools] note: not a Debian system (no dpkg-query): make sure these, or what your system calls" \
    "them, are installed: ${PACKAGES[*]}" >&2
  exit 0
fi

missing=()
for package in "${PACKAGES[@]}"; do
  status="$(dpkg-query -W -f='${Status}' "$package" 2>/dev/null || true)"
  [[ "$status" == "install ok installed" ]] || missing+=("$package")
done

if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi
if [[ "${1:-}" == "--check" ]]; then
  echo "missing Debian packages: ${missing[*]}"
  exit 1
fi
if [[ "$(id -u)" != 0 ]]; then
  echo "[tools] error: missing Debian packages: ${missing[*]}" >&2
  echo "[tools] install them as root: sudo $0 (or sudo apt-get install --no-install-recommends ${missing[*]})" >&2
  exit 1
fi

echo "[tools] installing Debian packages: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
log="$(mktemp -t progressive-sync-apt.XXXXXX)"
# Another apt-get or dpkg (e.g. unattended upgrades) may hold dpkg's lock: wait for it, bounded.
apt=(apt-get -q -o DPkg::Lock::Timeout=300)
# The packages are programs the stack starts itself: no service may start on install (Debian's
# prometheus and redis-server would, on a machine with no policy-rc.d, e.g. a CI runner; a running
# prometheus holds :9090). invoke-rc.d asks /usr/sbin/policy-rc.d; exit 101 means "not allowed".
# (Where the folder is not ours to write, apt-get cannot install either: it says so below.)
policy=/usr/sbin/policy-rc.d
if [[ ! -e "$policy" && -w "$(dirname "$policy")" ]]; then
  printf '#!/bin/sh\n# progressive-sync: hack/tools/debian-packages.sh, during apt-get install\nexit 101\n' >"$policy"
  chmod 0755 "$policy"
  trap 'rm -f "$policy"' EXIT
fi
if ! { "${apt[@]}" update && "${apt[@]}" install -y --no-install-recommends "${missing[@]}"; } >"$log" 2>&1; then
  tail -n 30 "$log" >&2
  echo "[tools] error: apt-get failed (whole log: $log)" >&2
  exit 1
fi
rm -f "$log"
echo "[tools] installed ${missing[*]}" >&2
