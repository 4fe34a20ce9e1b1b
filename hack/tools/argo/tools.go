//go:build tools

// Package tools pins the Argo Workflows commands that `make tools` builds: the controller, the
// executor its pods run, and the argo CLI (which is also the Argo Server, with the UI embedded).
package tools

import (
	_ "github.com/argoproj/argo-workflows/v3/cmd/argo"
	_ "github.com/argoproj/argo-workflows/v3/cmd/argoexec"
	_ "github.com/argoproj/argo-workflows/v3/cmd/workflow-controller"
)
