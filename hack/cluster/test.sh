#!/usr/bin/env bash
# make test-cluster: test/cluster against the local cluster of `make cluster`.
#
# CLUSTER=auto (the default) uses a cluster that is running, or brings one up
# and takes it down afterwards, checking that it left nothing behind. use
# requires a running one. skip runs nothing and says so. A machine that cannot
# run the cluster (not root, no runc, a port taken) fails with the reason and
# the way to run every other test without it: never a silent skip.
set -euo pipefail
cd "$(dirname "$0")/../.."
mode=${CLUSTER:-auto}
case "$mode" in
skip)
	echo "== test/cluster: not run (CLUSTER=skip): nothing that needs Pods, Services, cluster DNS, the kubelet or the controller manager was tested"
	exit 0 ;;
auto|use) ;;
*) echo "CLUSTER=$mode: want auto, use or skip" >&2; exit 2 ;;
esac

started=
if ! bin/cluster running >/dev/null 2>&1; then
	if [ "$mode" = use ]; then
		echo "CLUSTER=use, but no cluster is running: start one with make cluster" >&2
		exit 1
	fi
	if ! bin/cluster hostcheck; then
		echo "make test: test/cluster needs the local cluster and this machine cannot run it (see above)." >&2
		echo "Run make test as root on a machine with runc (hack/tools/build-cluster.sh installs it on Debian), or CLUSTER=skip make test to run every other test without test/cluster." >&2
		exit 1
	fi
	bin/cluster up
	started=1
fi

KUBECACHEDIR=$(bin/cluster kubecachedir)
export KUBECACHEDIR
echo "== module test, package cluster (on the local cluster)"
rc=0
(cd test && go test -race -count=1 -timeout 40m ${GO_TEST_FLAGS:-} ./cluster/...) || rc=$?
if [ -n "$started" ]; then
	bin/cluster down || rc=1
fi
exit $rc
