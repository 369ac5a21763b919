// Package e2e tests tripswitch end to end: the controller binary runs as a
// separate OS process against a real kube-apiserver and etcd, is killed with
// SIGKILL at random points, and runs as two replicas under leader election.
package e2e
