//go:build tools

// Package tools pins the argo CLI that the Workflow validation tests use (`argo lint --offline`).
package tools

import _ "github.com/argoproj/argo-workflows/v3/cmd/argo"
