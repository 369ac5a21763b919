// Package cluster runs a single-node Kubernetes cluster as local processes on
// this machine, the way Kubernetes' own hack/local-up-cluster.sh does: etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler, containerd (with
// the host's runc), the kubelet and kube-proxy, CoreDNS as a Pod behind the
// cluster DNS Service, and a bridge network for Pods that nothing leaves the
// machine from. Every binary is built from its Go module by hack/tools and
// cached by version; images are built here with go-containerregistry and
// imported into containerd (there is no registry).
//
// `make cluster` (Up) returns once the node is Ready and the DNS answers; the
// processes go on until `make cluster-down` (Down), which removes everything
// the cluster made, and Leftovers checks that.
package cluster
