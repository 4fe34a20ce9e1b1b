#!/usr/bin/env bash
# Builds every real component the dev stack and the tests run, from Go modules and npm packages only,
# into a cache keyed by version, and prints the folder that holds all of them.
#
#   hack/tools/build.sh              build what the cache lacks (every group), print the tools folder
#   hack/tools/build.sh GROUP...     only these groups (the folder then holds only what is built)
#   hack/tools/build.sh --print      print the tools folder without building
#   hack/tools/build.sh --missing GROUP...
#                                    print those of the groups not built yet, one a line; build nothing
#
# Groups, with roughly what each costs cold on 2 cores (a cold build of all of them: see CONTRIBUTING.md,
# Prerequisites; the measured figures are in the Makefile, above `tools`). `make test`, `make tools`
# and `make bench` build every group; `make demo` only core and crds, and `progressive-sync demo`
# builds the others its options need before it starts (orchestrator/devenv/demo_tools.py, which keeps
# the same figures):
#   packages  the Debian packages the stack runs, installed when missing (debian-packages.sh; root);
#             ~1-2 min of apt
#   core      etcd, kube-apiserver, kubectl (the control plane), helm; ~5-8 min
#   crds      Argo Workflows', Argo CD's and Argo Rollouts' own CRDs, from their modules (nothing to
#             compile); ~1 min of downloads
#   node      kubelet, kube-scheduler, kube-controller-manager (the real node); ~3-5 min; beside the
#             compiles, the step image's base layers (the Debian root filesystem, the pause program;
#             ~1 min, mostly downloads) into the cache's images/, which the node would build otherwise
#   argo      Argo Workflows: workflow-controller, argoexec, the argo CLI with the Argo UI built
#             from the module's ui/ sources and embedded (it is also `argo server`); ~5-8 min (the
#             UI, beside the Go compile: yarn install ~1 min, webpack ~35 s with esbuild's minifier,
#             hack/tools/argo/ui-webpack.config.js)
#   argocd    Argo CD: one binary `argocd` answering as application-controller, applicationset-
#             controller and repo-server (symlinks), the git/gpg wrapper scripts the repo-server runs;
#             ~25-40 min (1561-2274 s measured, ~1.7 GB of modules)
#   rollouts  Argo Rollouts: rollouts-controller (the analysis gates run it as `--controllers analysis`);
#             ~6-10 min (385 s with its modules already downloaded)
#
# The printed folder (also the cache's `current` symlink) holds every binary, the wrapper scripts and
# crds/argo-workflows/, crds/argocd/ and crds/argo-rollouts/; `make` passes it to the tests as PROGRESSIVE_SYNC_TOOLS_DIR
# (and KUBEBUILDER_ASSETS). Each component lives in its own versioned folder of the cache and the
# printed folder links to them, so a version bump rebuilds only that component.
#
# Environment:
#   KUBEBUILDER_ASSETS             a folder with etcd, kube-apiserver and kubectl: used for those
#                                  three instead of building them (the envtest convention)
#   PROGRESSIVE_SYNC_TOOLS_CACHE   the cache (default ~/.cache/progressive-sync/tools)
#   PROGRESSIVE_SYNC_VENDOR_DIR    a folder holding the argo-ui archive (see /work/shared/vendor's
#                                  README): the UI build then takes argo-ui from yarn's offline mirror
#                                  instead of GitHub, for machines that reach only the registries
#
# Measuring a cold build without emptying the shared caches: point all of them at a scratch folder,
# e.g. S=$(mktemp -d); PROGRESSIVE_SYNC_TOOLS_CACHE=$S/tools GOMODCACHE=$S/gomod GOCACHE=$S/gobuild
# npm_config_cache=$S/npm YARN_CACHE_FOLDER=$S/yarn nice -n 10 hack/tools/build.sh argocd; the log's
# "built NAME in Ns" lines are the figures. Afterwards `chmod -R u+w $S && rm -rf $S` (Go writes its
# module cache read-only).
#
# Concurrent callers are safe: building happens under a lock (flock on the cache's .lock), a second
# caller waits; every result is written under a .partial name and renamed into place, so a failed or
# killed build leaves nothing half-made where a reader looks. Scratch space is the cache's work/.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

K8S_VERSION=v1.35.4
ETCD_VERSION=v3.6.16
HELM_VERSION=v3.22.0
ARGO_VERSION=v3.7.18
# The commit of the v3.7.18 tag (the Go module proxy's .info says so): with it `argo version` and the
# UI say v3.7.18, as a release build does.
ARGO_COMMIT=66e32e5cc367f223e2ecf4fbe852b95eaed83034
ARGOCD_VERSION=v3.6.1
ARGOCD_GO=go1.27.0
YARN_VERSION=1.22.22
# v1.10.1 declares go 1.26.1, which the machine's Go runs; v1.10.2 and v1.9.3 need a newer one. Bump
# hack/tools/rollouts/go.mod (its replace block is copied from this release's go.mod) together.
ROLLOUTS_VERSION=v1.10.1
ALL_GROUPS=(packages core crds node argo argocd rollouts)

argo_module=github.com/argoproj/argo-workflows/v3
argocd_module=github.com/argoproj/argo-cd/v3
rollouts_module=github.com/argoproj/argo-rollouts

cache="${PROGRESSIVE_SYNC_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/progressive-sync/tools}"
core_dir="$cache/k8s-$K8S_VERSION-etcd-$ETCD_VERSION-helm-$HELM_VERSION"
node_dir="$cache/node-k8s-$K8S_VERSION"
argo_dir="$cache/argo-workflows-$ARGO_VERSION"
ui_dir="$cache/argo-ui-$ARGO_VERSION"
argocd_dir="$cache/argocd-$ARGOCD_VERSION"
argo_crds_dir="$cache/argo-workflows-crds-$ARGO_VERSION"
argocd_crds_dir="$cache/argocd-crds-$ARGOCD_VERSION"
rollouts_dir="$cache/argo-rollouts-$ROLLOUTS_VERSION"
rollouts_crds_dir="$cache/argo-rollouts-crds-$ROLLOUTS_VERSION"
work="$cache/work"

CORE_BINARIES=(etcd kube-apiserver kubectl)
NODE_BINARIES=(kubelet kube-scheduler kube-controller-manager)
ARGO_BINARIES=(workflow-controller argoexec argo)
ARGOCD_COMPONENTS=(argocd-application-controller argocd-applicationset-controller argocd-repo-server)
ARGOCD_WRAPPERS=(git-verify-wrapper.sh gpg-wrapper.sh)
# Only the analysis kinds: the controller runs as the analysis controller alone, and every CRD costs
# the API server its schema at each start (each of these is ~650 kB of YAML).
ROLLOUTS_CRDS=(analysis-run-crd analysis-template-crd cluster-analysis-template-crd)

log() { echo "[tools] $*" >&2; }
die() {
  log "error: $*"
  exit 1
}

# --- where the control plane's three binaries come from ------------------------------------------

mkdir -p "$cache"
cache_real="$(cd "$cache" && pwd -P)"
core_source="$core_dir" # the folder etcd, kube-apiserver and kubectl are linked from
if [[ -n "${KUBEBUILDER_ASSETS:-}" && -d "$KUBEBUILDER_ASSETS" ]]; then
  assets_real="$(cd "$KUBEBUILDER_ASSETS" && pwd -P)"
  # A folder of this cache (e.g. what an earlier run printed) is not an outside source.
  if [[ "$assets_real" != "$cache_real"/* ]] \
    && [[ -x "$assets_real/etcd" && -x "$assets_real/kube-apiserver" && -x "$assets_real/kubectl" ]]; then
    core_source="$assets_real"
  fi
fi

# The printed folder: named by everything it links to, so each combination of versions (and an
# outside KUBEBUILDER_ASSETS) gets its own and concurrent checkouts never fight over one.
toolset_key="$(printf '%s\n' "$core_source" "$core_dir" "$node_dir" "$argo_dir" "$argocd_dir" \
  "$argo_crds_dir" "$argocd_crds_dir" "$rollouts_dir" "$rollouts_crds_dir" | sha256sum | cut -c1-12)"
toolset="$cache/toolset-$toolset_key"

if [[ "${1:-}" == "--print" ]]; then
  echo "$toolset"
  exit 0
fi

missing_only=false
if [[ "${1:-}" == "--missing" ]]; then
  missing_only=true
  shift
fi
groups=("$@")
if [[ ${#groups[@]} -eq 0 ]]; then
  groups=("${ALL_GROUPS[@]}")
fi
for group in "${groups[@]}"; do
  [[ " ${ALL_GROUPS[*]} " == *" $group "* ]] || die "unknown group '$group' (known: ${ALL_GROUPS[*]})"
done
wants() { [[ " ${groups[*]} " == *" $1 "* ]]; }

# --- what is complete --------------------------------------------------------------------------

# has DIR ENTRY...: every entry exists in DIR (each was renamed into place whole).
has() {
  local dir="$1" entry
  shift
  for entry in "$@"; do
    [[ -e "$dir/$entry" ]] || return 1
  done
}

core_done() {
  has "$core_dir" helm || return 1
  [[ "$core_source" != "$core_dir" ]] || has "$core_dir" "${CORE_BINARIES[@]}"
}
node_done() { has "$node_dir" "${NODE_BINARIES[@]}"; }
packages_done() { "$here/debian-packages.sh" --check >/dev/null; }
crds_done() {
  has "$argo_crds_dir" argoproj.io_workflows.json minimal/argoproj.io_workflows.json &&
    has "$argocd_crds_dir" application-crd.json &&
    has "$rollouts_crds_dir" "${ROLLOUTS_CRDS[@]/%/.json}"
}
argo_done() { has "$argo_dir" "${ARGO_BINARIES[@]}"; }
ui_done() { has "$ui_dir" app/index.html; }
argocd_done() { has "$argocd_dir" argocd "${ARGOCD_COMPONENTS[@]}" "${ARGOCD_WRAPPERS[@]}"; }
rollouts_done() { has "$rollouts_dir" rollouts-controller; }

# The links of the printed folder: "name target" lines, target relative to the folder.
toolset_links() {
  local name
  if wants core; then
    for name in "${CORE_BINARIES[@]}"; do
      if [[ "$core_source" == "$core_dir" ]]; then
        echo "$name ../${core_dir##*/}/$name"
      else
        echo "$name $core_source/$name"
      fi
    done
    echo "helm ../${core_dir##*/}/helm"
  fi
  if wants crds; then
    echo "crds/argo-workflows ../../${argo_crds_dir##*/}"
    echo "crds/argocd ../../${argocd_crds_dir##*/}"
    echo "crds/argo-rollouts ../../${rollouts_crds_dir##*/}"
  fi
  if wants node; then
    for name in "${NODE_BINARIES[@]}"; do echo "$name ../${node_dir##*/}/$name"; done
  fi
  if wants argo; then
    for name in "${ARGO_BINARIES[@]}"; do echo "$name ../${argo_dir##*/}/$name"; done
  fi
  if wants argocd; then
    for name in argocd "${ARGOCD_COMPONENTS[@]}" "${ARGOCD_WRAPPERS[@]}"; do
      echo "$name ../${argocd_dir##*/}/$name"
    done
  fi
  if wants rollouts; then
    echo "rollouts-controller ../${rollouts_dir##*/}/rollouts-controller"
  fi
}

toolset_done() {
  local name target
  while read -r name target; do
    [[ "$(readlink "$toolset/$name" 2>/dev/null)" == "$target" && -e "$toolset/$name" ]] || return 1
  done < <(toolset_links)
}

all_done() {
  local group
  for group in "${groups[@]}"; do
    "${group}_done" || return 1
  done
  toolset_done
}

# group_linked GROUP: the printed folder links GROUP's results (bash's dynamic scope: toolset_links
# reads this local `groups`).
group_linked() {
  local groups=("$1")
  toolset_done
}

# --missing: which of the groups asked for are not built (or not linked into the printed folder yet).
if [[ "$missing_only" == true ]]; then
  for group in "${groups[@]}"; do
    if ! "${group}_done" || ! group_linked "$group"; then
      echo "$group"
    fi
  done
  exit 0
fi

# Fast path (no lock): everything already in place. Readers never see partial results, so this is safe.
if all_done; then
  log "everything is built: $toolset"
  echo "$toolset"
  exit 0
fi

# Something is to be built: the programs the requested groups need (CONTRIBUTING.md, Prerequisites), before
# anything starts.
need=()
for group in "${groups[@]}"; do
  "${group}_done" && continue
  case "$group" in
    core | crds | node | argocd | rollouts) need+=(go) ;;
    argo) need+=(go node npm) ;;
  esac
done
for program in $(printf '%s\n' "${need[@]}" | sort -u); do
  command -v "$program" >/dev/null || die "$program is not on PATH (make tools needs Go 1.26+ and Node 20+: see CONTRIBUTING.md, Prerequisites)"
done

exec 9>"$cache/.lock"
if ! flock -n 9; then
  log "another build holds $cache/.lock; waiting for it"
  flock 9
fi

started=$SECONDS
timings=()
# timed NAME COMMAND...: run it, log and remember how long it took.
timed() {
  local name="$1" t0=$SECONDS
  shift
  "$@"
  timings+=("$name $((SECONDS - t0))s")
  log "built $name in $((SECONDS - t0))s"
}

# A build killed half-way leaves .partial names and scratch space; nobody else builds now (we hold
# the lock), so remove them (only in the folders this script writes).
rm -rf "$work"
for dir in "$core_dir" "$node_dir" "$argo_dir" "$ui_dir" "$argocd_dir" "$rollouts_dir" "$toolset" "$toolset/crds" "$cache"; do
  if [[ -d "$dir" ]]; then
    find "$dir" -mindepth 1 -maxdepth 1 -name '*.partial' -exec rm -rf {} +
  fi
done
mkdir -p "$work"

# install SRC DEST: move a finished file or folder into place in one rename (a folder that is
# already there is first moved aside: a rename cannot replace a non-empty folder).
install_result() {
  local src="$1" dest="$2"
  mkdir -p "$(dirname "$dest")"
  rm -rf "$dest.partial" "$dest.old.partial"
  mv "$src" "$dest.partial"
  if [[ -d "$dest" && ! -L "$dest" ]]; then
    mv -T "$dest" "$dest.old.partial"
  fi
  mv -T "$dest.partial" "$dest"
  rm -rf "$dest.old.partial"
}

# Every binary is linked with -s -w (no symbol table, no DWARF), so the compiler need not write DWARF
# either (-gcflags=all=-dwarf=false): the same binaries, ~6 % less compile CPU (etcd with an empty Go
# cache, three runs each: docs/design/dev-stack.md, "The cold tools build"). The step image's pause
# program is built with the same flags (orchestrator/devenv/images.py, GO_BUILD_FLAGS), so it reuses
# these compiles of the standard library.
go_build() { GOFLAGS=-buildvcs=false CGO_ENABLED=0 go build -trimpath -gcflags=all=-dwarf=false "$@"; }

# --- background jobs: the UI build and module downloads run while Go compiles -------------------

background_pids=()
stop_background() {
  local pid
  for pid in "${background_pids[@]}"; do
    kill -TERM -- "-$pid" 2>/dev/null || true
  done
}
trap stop_background EXIT

# start NAME COMMAND...: run a function in the background in its own process group (so that a
# failure here can stop all of it); output in $work/NAME.log, its duration in $work/NAME.seconds.
start() {
  local name="$1"
  shift
  set -m
  (
    t0=$SECONDS
    "$@"
    echo "$((SECONDS - t0))" >"$work/$name.seconds"
  ) >"$work/$name.log" 2>&1 &
  set +m
  background_pids+=($!)
  printf -v "${name//-/_}_pid" %s "$!"
}

# finish NAME: wait for a background job (once); on failure show the end of its log and stop.
finish() {
  local name="$1" pid_var="${1//-/_}_pid"
  [[ -n "${!pid_var:-}" ]] || return 0
  if ! wait "${!pid_var}"; then
    tail -n 40 "$work/$name.log" >&2
    die "$name failed (log above; whole log: $work/$name.log)"
  fi
  printf -v "$pid_var" %s ""
  timings+=("$name $(cat "$work/$name.seconds")s (in parallel)")
  log "built $name in $(cat "$work/$name.seconds")s (in parallel)"
}

# Downloads every module a Go group needs, so the network wait overlaps the compiles before it.
prefetch_modules() {
  local module
  for module in "$@"; do
    case "$module" in
      argocd) (cd "$here/argocd" && GOTOOLCHAIN=$ARGOCD_GO go mod download) ;;
      *) (cd "$here/$module" && go mod download) ;;
    esac
  done
}

# module_dir MODULE@VERSION [TOOLCHAIN]: download one module (from outside any module, so no go.mod
# or go.sum changes) and print its folder. Argo CD's needs its Go version even to be unpacked.
module_dir() {
  local json dir
  if ! json="$(cd "$work" && GOTOOLCHAIN="${2:-${GOTOOLCHAIN:-auto}}" go mod download -json "$1")"; then
    echo "$json" >&2
    die "cannot download $1"
  fi
  dir="$(sed -n 's/^\t"Dir": "\(.*\)",$/\1/p' <<<"$json")"
  [[ -n "$dir" ]] || die "go mod download $1 printed no folder: $json"
  echo "$dir"
}

# A writable copy of the argo-workflows module, as the UI build (webpack reads ../api) and the Go
# build (a file the zip lacks, the built UI) need.
copy_argo_module() {
  local dest="$1"
  cp -r "$(module_dir "$argo_module@$ARGO_VERSION")" "$dest"
  chmod -R u+w "$dest"
}

# The Argo UI from the module's ui/ sources: yarn 1 from npm (corepack fails on signatures here),
# `yarn install --frozen-lockfile` (install scripts on: esbuild fetches its binary in one), `yarn build`.
build_ui() {
  local src="$work/ui-src"
  copy_argo_module "$src"
  npm install --silent --no-audit --no-fund --prefix "$work/yarn" "yarn@$YARN_VERSION"
  local yarn="$work/yarn/node_modules/.bin/yarn"
  if [[ -n "${PROGRESSIVE_SYNC_VENDOR_DIR:-}" ]]; then
    # ui/yarn.lock pins argo-ui to a GitHub commit; yarn's offline mirror serves it instead, from a
    # scratch folder (yarn copies every tarball it fetches into the mirror) under the name yarn 1
    # looks for: <repository basename>-<commit>, without the archive's .tar.
    local archive
    archive="$(find "$PROGRESSIVE_SYNC_VENDOR_DIR"/ -maxdepth 1 -name 'argo-ui.git-*.tar' | head -n 1)"
    [[ -n "$archive" ]] || die "PROGRESSIVE_SYNC_VENDOR_DIR=$PROGRESSIVE_SYNC_VENDOR_DIR holds no argo-ui.git-*.tar"
    mkdir -p "$work/yarn-offline-mirror"
    cp "$archive" "$work/yarn-offline-mirror/$(basename "$archive" .tar)"
    export YARN_YARN_OFFLINE_MIRROR="$work/yarn-offline-mirror"
    echo "argo-ui from $archive (yarn offline mirror)"
  fi
  if ! (cd "$src/ui" && "$yarn" install --frozen-lockfile --non-interactive --network-timeout 600000); then
    if [[ -z "${PROGRESSIVE_SYNC_VENDOR_DIR:-}" ]]; then
      echo "hint: where GitHub is out of reach (argo-ui comes from there), set PROGRESSIVE_SYNC_VENDOR_DIR" \
        "to a folder holding argo-ui.git-<commit>.tar (see the header of hack/tools/build.sh)"
    fi
    return 1
  fi
  # Argo's webpack configuration with esbuild's minifier and no source maps (see the file's header).
  cp "$here/argo/ui-webpack.config.js" "$src/ui/progressive-sync.webpack.config.js"
  (cd "$src/ui" && "$yarn" build --config progressive-sync.webpack.config.js)
  [[ -f "$src/ui/dist/app/index.html" ]] || die "yarn build made no ui/dist/app/index.html"
  install_result "$src/ui/dist/app" "$ui_dir/app"
  rm -rf "$src" "$work/yarn" "$work/yarn-offline-mirror"
}

# The step image's base layers: the Debian root filesystem (mmdebstrap) and the pause program. They
# depend on nothing the virtualenv holds, so they are built beside the compiles with the machine's
# python3 and only the standard library, and the first real-stack test finds them cached instead of
# waiting for them (orchestrator/devenv/images.py, build_base_layers: cached under the same lock).
build_base_layers() {
  (cd "$here/../.." && PROGRESSIVE_SYNC_TOOLS_CACHE="$cache" python3 -m orchestrator.devenv.images)
}

# with_json DIR: add FILE.json next to each FILE.yaml in DIR (the CRDs are megabytes of YAML: Python
# parses them in seconds, their JSON in milliseconds), with our small yamltojson.
with_json() {
  if [[ ! -x "$work/yamltojson" ]]; then
    (cd "$here/yamltojson" && go_build -o "$work/yamltojson" .)
  fi
  "$work/yamltojson" "$1"/*.yaml
}

# --- core and node: one go invocation for every missing k8s.io/kubernetes command ---------------

# The k8s.io/kubernetes commands the requested groups lack, one per line.
kubernetes_missing() {
  local name
  if wants core && [[ "$core_source" == "$core_dir" ]]; then
    for name in kube-apiserver kubectl; do
      [[ -x "$core_dir/$name" ]] || echo "$name"
    done
  fi
  if wants node; then
    for name in "${NODE_BINARIES[@]}"; do
      [[ -x "$node_dir/$name" ]] || echo "$name"
    done
  fi
}

build_kubernetes() {
  local names=() name minor ldflags pkg packages=()
  mapfile -t names < <(kubernetes_missing)
  for name in "${names[@]}"; do packages+=("k8s.io/kubernetes/cmd/$name"); done
  minor="${K8S_VERSION#v1.}"
  minor="${minor%%.*}"
  ldflags="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  done
  log "building ${names[*]} from k8s.io/kubernetes@$K8S_VERSION"
  mkdir -p "$work/kubernetes"
  (cd "$here/kubernetes" && go_build -ldflags "$ldflags" -o "$work/kubernetes/" "${packages[@]}")
  for name in "${names[@]}"; do
    if [[ " ${NODE_BINARIES[*]} " == *" $name "* ]]; then
      install_result "$work/kubernetes/$name" "$node_dir/$name"
    else
      install_result "$work/kubernetes/$name" "$core_dir/$name"
    fi
  done
}

build_etcd() {
  (cd "$here/etcd" && go_build -ldflags "-s -w" -o "$work/etcd" go.etcd.io/etcd/server/v3)
  install_result "$work/etcd" "$core_dir/etcd"
}

build_helm() {
  (cd "$here/helm" && go_build -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
    -o "$work/helm" helm.sh/helm/v3/cmd/helm)
  install_result "$work/helm" "$core_dir/helm"
}

# --- Argo Workflows ----------------------------------------------------------------------------

# Built from a copy of the module: the zip drops workflow/executor/osspecific/signal_linux.go (a
# symlink to signal_darwin.go in Argo's repository) and has no built UI for ui/embed.go. One go
# invocation builds the three commands, so they share one module graph and one compile.
build_argo() {
  local src="$work/argo-src" ui_ready=true ldflags
  copy_argo_module "$src"
  cp "$src/workflow/executor/osspecific/signal_darwin.go" "$src/workflow/executor/osspecific/signal_linux.go"
  mkdir -p "$src/ui/dist"
  if ui_done; then
    cp -r "$ui_dir/app" "$src/ui/dist/app"
  else
    # The UI is still building (in the background): compile everything now against a placeholder
    # page, relink argo once the UI is there (only the ui package and the link are redone).
    ui_ready=false
    mkdir -p "$src/ui/dist/app"
    echo "placeholder: replaced by the built Argo UI before argo is installed" >"$src/ui/dist/app/index.html"
  fi
  cp "$here/argo/go.mod" "$work/argo.mod"
  cp "$here/argo/go.sum" "$work/argo.sum"
  (cd "$here/argo" && go mod edit -modfile="$work/argo.mod" -replace="$argo_module=$src")
  ldflags="-s -w -X $argo_module.version=$ARGO_VERSION -X $argo_module.gitTag=$ARGO_VERSION"
  ldflags+=" -X $argo_module.gitCommit=$ARGO_COMMIT -X $argo_module.gitTreeState=clean"
  log "building ${ARGO_BINARIES[*]} from $argo_module@$ARGO_VERSION"
  mkdir -p "$work/argo-bin"
  (cd "$here/argo" && go_build -modfile="$work/argo.mod" -ldflags "$ldflags" -o "$work/argo-bin/" \
    "$argo_module/cmd/workflow-controller" "$argo_module/cmd/argoexec" "$argo_module/cmd/argo")
  install_result "$work/argo-bin/workflow-controller" "$argo_dir/workflow-controller"
  install_result "$work/argo-bin/argoexec" "$argo_dir/argoexec"
  if ! $ui_ready; then
    log "waiting for the Argo UI build to embed it into argo"
    finish argo-ui
    rm -rf "$src/ui/dist/app"
    cp -r "$ui_dir/app" "$src/ui/dist/app"
    (cd "$here/argo" && go_build -modfile="$work/argo.mod" -ldflags "$ldflags" -o "$work/argo-bin/argo" \
      "$argo_module/cmd/argo")
  fi
  install_result "$work/argo-bin/argo" "$argo_dir/argo"
  rm -rf "$src" "$work/argo-bin" "$work/argo.mod" "$work/argo.sum"
}

# --- Argo CD -----------------------------------------------------------------------------------

build_argocd() {
  local module name
  log "building argocd from $argocd_module@$ARGOCD_VERSION (Go ${ARGOCD_GO#go}, fetched as a toolchain)"
  (cd "$here/argocd" && GOTOOLCHAIN=$ARGOCD_GO go_build \
    -ldflags "-s -w -X $argocd_module/common.version=${ARGOCD_VERSION#v}" -o "$work/argocd" .)
  install_result "$work/argocd" "$argocd_dir/argocd"
  for name in "${ARGOCD_COMPONENTS[@]}"; do
    ln -s argocd "$work/$name"
    install_result "$work/$name" "$argocd_dir/$name"
  done
  module="$(module_dir "$argocd_module@$ARGOCD_VERSION" "$ARGOCD_GO")"
  # The repo-server runs these by name from PATH (util/git, util/sourceintegrity).
  for name in "${ARGOCD_WRAPPERS[@]}"; do
    cp "$module/hack/$name" "$work/$name"
    chmod 0755 "$work/$name"
    install_result "$work/$name" "$argocd_dir/$name"
  done
}

# --- Argo Rollouts ------------------------------------------------------------------------------

# Only the controller (cmd/rollouts-controller; no kubectl plugin, no dashboard), from the wrapper
# module hack/tools/rollouts, whose go.mod carries the release's replace block. The tag's commit is
# not known to the module proxy, so the binary says v1.10.1+unknown, as any build from the module.
build_rollouts() {
  local ldflags="-s -w -X $rollouts_module/utils/version.version=${ROLLOUTS_VERSION#v}"
  ldflags+=" -X $rollouts_module/utils/version.buildDate=1970-01-01T00:00:00Z"
  log "building rollouts-controller from $rollouts_module@$ROLLOUTS_VERSION"
  (cd "$here/rollouts" && go_build -ldflags "$ldflags" -o "$work/rollouts-controller" \
    "$rollouts_module/cmd/rollouts-controller")
  install_result "$work/rollouts-controller" "$rollouts_dir/rollouts-controller"
}

# --- the peers' CRDs ---------------------------------------------------------------------------

# Argo Workflows' CRDs with their full schemas (manifests/base/crds/full: structural, so the API
# server validates and prunes what we write), except the three big kinds nothing of ours writes
# (ClusterWorkflowTemplate, CronWorkflow, WorkflowTaskSet: 1.2, 1.3 and 0.6 MB of schema), which take
# the minimal variant Argo's own install uses for every kind: every control plane start pays for each
# CRD's schema (measured: 12 CRDs with all full 34.5 s of apiserver CPU; without those three 22.5 s).
# And Argo CD's Application, ApplicationSet and AppProject (it ships only full ones).
# Beside them, in minimal/, the minimal Workflow CRD, which Argo's install manifests apply
# (manifests/cluster-install takes base/crds/minimal): bench/bench_scale.py measures the rollout's
# writes against the API server as an installation validates them.
ARGO_MINIMAL_CRDS=(clusterworkflowtemplates cronworkflows workflowtasksets)
build_crds() {
  local module kind
  if ! has "$argo_crds_dir" argoproj.io_workflows.json minimal/argoproj.io_workflows.json; then
    module="$(module_dir "$argo_module@$ARGO_VERSION")"
    mkdir -p "$work/argo-crds/minimal"
    cp "$module"/manifests/base/crds/full/argoproj.io_*.yaml "$work/argo-crds/"
    for kind in "${ARGO_MINIMAL_CRDS[@]}"; do
      cp "$module/manifests/base/crds/minimal/argoproj.io_$kind.yaml" "$work/argo-crds/"
    done
    cp "$module/manifests/base/crds/minimal/argoproj.io_workflows.yaml" "$work/argo-crds/minimal/"
    chmod -R u+w "$work"/argo-crds
    with_json "$work/argo-crds"
    with_json "$work/argo-crds/minimal"
    install_result "$work/argo-crds" "$argo_crds_dir"
  fi
  if ! has "$argocd_crds_dir" application-crd.json; then
    module="$(module_dir "$argocd_module@$ARGOCD_VERSION" "$ARGOCD_GO")"
    mkdir -p "$work/argocd-crds"
    cp "$module"/manifests/crds/{application,applicationset,appproject}-crd.yaml "$work/argocd-crds/"
    chmod u+w "$work"/argocd-crds/*
    with_json "$work/argocd-crds"
    install_result "$work/argocd-crds" "$argocd_crds_dir"
  fi
  if ! has "$rollouts_crds_dir" "${ROLLOUTS_CRDS[@]/%/.json}"; then
    module="$(module_dir "$rollouts_module@$ROLLOUTS_VERSION")"
    mkdir -p "$work/rollouts-crds"
    for kind in "${ROLLOUTS_CRDS[@]}"; do
      cp "$module/manifests/crds/$kind.yaml" "$work/rollouts-crds/"
    done
    chmod u+w "$work"/rollouts-crds/*
    with_json "$work/rollouts-crds"
    install_result "$work/rollouts-crds" "$rollouts_crds_dir"
  fi
}

# --- the build ---------------------------------------------------------------------------------

# First, before anything starts: a package that cannot be installed (not root) stops the build before
# any compile, and git (which yarn fetches argo-ui with) is there for the UI build.
if wants packages && ! packages_done; then
  timed packages "$here/debian-packages.sh"
fi
if wants argo && ! ui_done; then
  start argo-ui build_ui
  log "building the Argo UI in the background (yarn; log: $work/argo-ui.log)"
fi
if wants node && command -v mmdebstrap >/dev/null && command -v python3 >/dev/null; then
  start images build_base_layers
fi
prefetch=()
wants argo && ! argo_done && prefetch+=(argo)
wants argocd && ! argocd_done && prefetch+=(argocd)
wants rollouts && ! rollouts_done && prefetch+=(rollouts)
if [[ ${#prefetch[@]} -gt 0 ]]; then
  start prefetch prefetch_modules "${prefetch[@]}"
fi

if wants core && ! core_done; then
  if [[ "$core_source" == "$core_dir" && ! -x "$core_dir/etcd" ]]; then
    timed etcd build_etcd
  fi
  if [[ ! -x "$core_dir/helm" ]]; then
    timed helm build_helm
  fi
fi
if wants crds && ! crds_done; then
  timed crds build_crds
fi
if [[ -n "$(kubernetes_missing)" ]]; then
  timed kubernetes build_kubernetes
fi
if wants argo && ! argo_done; then
  timed argo-workflows build_argo
fi
if wants argocd && ! argocd_done; then
  timed argocd build_argocd
fi
if wants rollouts && ! rollouts_done; then
  timed rollouts build_rollouts
fi
finish argo-ui
if [[ -n "${images_pid:-}" ]]; then
  if wait "$images_pid"; then
    images_seconds="$(cat "$work/images.seconds")"
    timings+=("images ${images_seconds}s (in parallel)")
    log "built the step image's base layers in ${images_seconds}s (in parallel)"
  else
    # Only a head start as well: the real node builds what is missing when it starts.
    log "note: the step image's base layers were not built ahead (the node builds them): $(tail -n 1 "$work/images.log")"
  fi
fi
if [[ -n "${prefetch_pid:-}" ]] && ! wait "$prefetch_pid"; then
  # Only a head start: the builds download what they need themselves, and they did.
  log "note: downloading modules ahead failed (see nothing wrong if the builds passed): $(tail -n 1 "$work/prefetch.log")"
fi

# --- the printed folder ------------------------------------------------------------------------

mkdir -p "$toolset/crds"
while read -r name target; do
  ln -sfn "$target" "$toolset/$name.partial"
  mv -T "$toolset/$name.partial" "$toolset/$name"
done < <(toolset_links)
ln -sfn "${toolset##*/}" "$cache/current.partial"
mv -T "$cache/current.partial" "$cache/current"
rm -rf "$work"

all_done || die "the build finished but $toolset is incomplete"
summary="nothing to build"
if [[ ${#timings[@]} -gt 0 ]]; then
  summary="built $(printf '%s, ' "${timings[@]}")"
  summary="${summary%, }"
fi
log "ready in $((SECONDS - started))s ($summary): $toolset"
echo "$toolset"
