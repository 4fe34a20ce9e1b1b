#!/usr/bin/env bash
# Builds the argo CLI (optional: only `argo lint --offline` and the argo e2e tests use it) from Go
# modules into the same cache folder as the Kubernetes tools, and prints the binary's path.
#
#   hack/tools/build-argo.sh          build argo unless the cache has it, print its path
#   hack/tools/build-argo.sh --print  print the path without building
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ARGO_VERSION=v3.7.18
assets="$("$here/build.sh" --print)"
binary="$assets/argo"

if [[ "${1:-}" == "--print" || -x "$binary" ]]; then
  echo "$binary"
  exit 0
fi
mkdir -p "$assets"
echo "[tools] building argo $ARGO_VERSION from github.com/argoproj/argo-workflows/v3/cmd/argo" >&2
started=$SECONDS
module=github.com/argoproj/argo-workflows/v3
cd "$here/argo"
go mod download "$module"
# The module zip lacks the built UI that ui/embed.go embeds (`pattern dist/app: no matching
# files`); the CLI does not serve it, so build from a copy of the module with a placeholder page,
# as Argo's own Makefile does for CLI builds. The copy and the modfile stay in the cache folder.
work="$assets/argo-build-$ARGO_VERSION"
if [[ ! -d "$work/src" ]]; then
  rm -rf "$work" && mkdir -p "$work"
  cp -r "$(go env GOMODCACHE)/$module@$ARGO_VERSION" "$work/src.partial"
  chmod -R u+w "$work/src.partial"
  mkdir -p "$work/src.partial/ui/dist/app"
  echo "argo CLI build: the UI is not embedded" > "$work/src.partial/ui/dist/app/index.html"
  mv "$work/src.partial" "$work/src"
fi
cp go.mod "$work/build.mod" && cp go.sum "$work/build.sum"
go mod edit -modfile="$work/build.mod" -replace="$module=$work/src"
GOFLAGS=-buildvcs=false CGO_ENABLED=0 go build -modfile="$work/build.mod" -trimpath \
  -ldflags "-s -w -X $module.version=$ARGO_VERSION" -o "$binary.partial" "$module/cmd/argo"
mv "$binary.partial" "$binary"
echo "[tools] built argo in $((SECONDS - started))s" >&2
echo "$binary"
