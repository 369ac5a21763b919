#!/usr/bin/env bash
# make demo-cluster: `make demo`'s experiment in the local cluster. Uses a
# cluster that is running (and leaves it running), or brings one up and takes
# it down afterwards, checking that it left nothing behind. Builds and imports
# the images (make cluster-images), installs tripswitch with the pinned Helm
# from charts/tripswitch, then runs tripswitch-demo --cluster: the webhook a
# Deployment of 2 behind a Service with a PodDisruptionBudget.
set -euo pipefail
cd "$(dirname "$0")/../.."
began=$(date +%s)
started=
if ! bin/cluster running >/dev/null 2>&1; then
	bin/cluster hostcheck
	bin/cluster up
	started=1
fi
down() { if [ -n "$started" ]; then bin/cluster down; fi; }
trap down EXIT
KUBECONFIG=$(bin/cluster kubeconfig) KUBECACHEDIR=$(bin/cluster kubecachedir)
export KUBECONFIG KUBECACHEDIR
make --no-print-directory cluster-images
bin/helm upgrade --install tripswitch charts/tripswitch -n tripswitch-system --create-namespace \
	-f hack/cluster/values-local.yaml --wait --timeout 5m
(cd cmd/tripswitch-demo && go build -o ../../bin/tripswitch-demo .)
bin/tripswitch-demo --cluster --hook-image tripswitch.test/hookserver:local --out out/demo-cluster
echo "make demo-cluster: $(( $(date +%s) - began )) s"
