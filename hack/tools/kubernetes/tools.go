//go:build tools

// Package tools pins the Kubernetes commands that `make tools` builds: the control plane the tests
// and the demo start (kube-apiserver, kubectl) and the real node (kubelet, kube-scheduler,
// kube-controller-manager).
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
