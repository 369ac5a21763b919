#!/usr/bin/env bash
# Builds the test control plane (kube-apiserver and etcd) from Go modules.
#
# The binaries live in a per-user cache keyed by version, and bin/k8s links to
# it, so a fresh clone on the same machine (CI's case) reuses them instead of
# spending ~10 minutes rebuilding. A binary is reused only if it runs and
# reports the expected version; anything else is rebuilt. Nothing is downloaded
# except Go modules through the module proxy.
set -euo pipefail

KUBE_VERSION=${KUBE_VERSION:-v1.37.2}
ETCD_VERSION=${ETCD_VERSION:-v3.6.16}

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
home=${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}
cache_root=${TRIPSWITCH_CACHE_DIR:-${XDG_CACHE_HOME:-${home:-$top/bin}/.cache}/tripswitch}
out="$cache_root/k8s/$KUBE_VERSION"
mkdir -p "$out" "$top/bin"

# bin/k8s -> cache; replace a stale link or an old directory without following it.
if [ "$(readlink "$top/bin/k8s" 2>/dev/null || true)" != "$cache_root/k8s" ]; then
	rm -rf "$top/bin/k8s"
	ln -s "$cache_root/k8s" "$top/bin/k8s"
fi

# Capture the version first: with pipefail, `bin --version | grep -q` fails
# whenever grep exits before the binary has written everything (SIGPIPE).
reports() { local v; v=$("$1" --version 2>/dev/null) && grep -qx "$2" <<<"$v"; }
kube_ok() { [ -x "$out/kube-apiserver" ] && reports "$out/kube-apiserver" "Kubernetes $KUBE_VERSION"; }
etcd_ok() { [ -x "$out/etcd" ] && reports "$out/etcd" "etcd Version: ${ETCD_VERSION#v}"; }

# build DIR PKG BINARY LDFLAGS: go build into a temporary file, then rename, so
# an interrupted build never leaves a binary that looks valid.
build() {
	local dir=$1 pkg=$2 bin=$3 ldflags=$4
	(cd "$here/$dir" && go build -trimpath -ldflags "$ldflags" -o "$out/$bin.tmp" "$pkg")
	mv -f "$out/$bin.tmp" "$out/$bin"
}

if kube_ok; then
	echo "kube-apiserver $KUBE_VERSION: cached in $out"
else
	echo "building kube-apiserver $KUBE_VERSION (first time, ~10 min on 2 cores)..."
	minor=${KUBE_VERSION#v1.}; minor=${minor%%.*}
	build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver kube-apiserver \
		"-s -w -X k8s.io/component-base/version.gitVersion=$KUBE_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
	kube_ok || { echo "kube-apiserver built but does not report Kubernetes $KUBE_VERSION" >&2; exit 1; }
fi

if etcd_ok; then
	echo "etcd $ETCD_VERSION: cached in $out"
else
	echo "building etcd $ETCD_VERSION (first time, ~2 min on 2 cores)..."
	build etcd . etcd "-s -w"
	etcd_ok || { echo "etcd built but does not report version ${ETCD_VERSION#v}" >&2; exit 1; }
fi
