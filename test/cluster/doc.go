// Package cluster holds the tests that run tripswitch where users run it: in
// the single-node cluster of `make cluster` (hack/cluster), installed by
// Helm's Go SDK from charts/tripswitch with the image `make release` builds,
// against a Service-backed webhook Deployment reached through the cluster's
// DNS, Services and Pods. They need that cluster: without one they fail and
// say how to start it (`make test` brings one up; CLUSTER=skip leaves this
// package out).
package cluster
