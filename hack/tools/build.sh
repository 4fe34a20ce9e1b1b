#!/usr/bin/env bash
# Builds the real Kubernetes tools the tests and the demo need (etcd, kube-apiserver, kubectl, helm)
# from Go modules into a cache keyed by version, and prints the folder that holds them.
#
#   hack/tools/build.sh            build what the cache lacks, print the assets folder
#   hack/tools/build.sh --print    print the assets folder without building
#
# When KUBEBUILDER_ASSETS names a folder that already holds etcd, kube-apiserver and kubectl,
# nothing is built and that folder is printed (the envtest convention).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
K8S_VERSION=v1.35.4
ETCD_VERSION=v3.6.16
HELM_VERSION=v3.22.0
cache="${PROGRESSIVE_SYNC_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/progressive-sync/tools}"
assets="$cache/k8s-$K8S_VERSION-etcd-$ETCD_VERSION-helm-$HELM_VERSION"

has_core_tools() { [[ -x "$1/etcd" && -x "$1/kube-apiserver" && -x "$1/kubectl" ]]; }

if [[ -n "${KUBEBUILDER_ASSETS:-}" ]] && has_core_tools "$KUBEBUILDER_ASSETS"; then
  echo "$KUBEBUILDER_ASSETS"
  exit 0
fi
if [[ "${1:-}" == "--print" ]]; then
  echo "$assets"
  exit 0
fi

log() { echo "[tools] $*" >&2; }

# build MODULE_DIR OUTPUT PACKAGE [LDFLAGS]: go build one command unless the cache has it.
build() {
  local module_dir="$1" output="$2" package="$3" ldflags="${4:-}"
  if [[ -x "$assets/$output" ]]; then
    return 0
  fi
  log "building $output from $package (first run on a machine takes minutes)"
  local started=$SECONDS
  (cd "$here/$module_dir" && GOFLAGS=-buildvcs=false CGO_ENABLED=0 \
    go build -trimpath -ldflags "-s -w $ldflags" -o "$assets/$output.partial" "$package")
  mv "$assets/$output.partial" "$assets/$output"
  log "built $output in $((SECONDS - started))s"
}

mkdir -p "$assets"
k8s_minor="${K8S_VERSION#v1.}"; k8s_minor="${k8s_minor%%.*}"
k8s_ldflags="-X k8s.io/component-base/version.gitVersion=$K8S_VERSION"
k8s_ldflags+=" -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$k8s_minor"
k8s_ldflags+=" -X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION"
k8s_ldflags+=" -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$k8s_minor"

build etcd etcd go.etcd.io/etcd/server/v3
build kubernetes kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "$k8s_ldflags"
build kubernetes kubectl k8s.io/kubernetes/cmd/kubectl "$k8s_ldflags"
build helm helm helm.sh/helm/v3/cmd/helm "-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
echo "$assets"
