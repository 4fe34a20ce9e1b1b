//go:build tools

// Package tools pins the Argo Rollouts controller that `make tools` builds (hack/tools/build.sh, group
// rollouts): the dev stack and the analysis tests run it for its analysis controller only.
package tools

import _ "github.com/argoproj/argo-rollouts/cmd/rollouts-controller"
