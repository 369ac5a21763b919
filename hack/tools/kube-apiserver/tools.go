//go:build tools

// Package tools pins the kube-apiserver command so that `go mod tidy` keeps
// its dependencies; build it with `go build k8s.io/kubernetes/cmd/kube-apiserver`.
package tools

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
