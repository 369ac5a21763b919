//go:build tools

// Package tools pins the commands `make cluster` runs so that `go mod tidy`
// keeps their dependencies; build each with `go build k8s.io/kubernetes/cmd/<name>`.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
