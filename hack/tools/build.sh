#!/usr/bin/env bash
# Builds the test control plane (kube-apiserver and etcd) from Go modules.
#
# usage: hack/tools/build.sh [KUBE_RELEASE]
#
# Without an argument it builds KUBE_VERSION of hack/versions/versions.env
# from the module hack/tools/kube-apiserver, whose go.mod must require that
# release: a pin bumped in versions.env alone stops here instead of building
# the old release under the new name. Any other release (the compatibility
# matrix, `make test-versions`) is built from a module kube-module.sh writes
# for it into the cache, from the same template.
#
# The binaries live in a per-user cache keyed by version, and bin/k8s links to
# it, so a fresh clone on the same machine (CI's case) reuses them instead of
# spending ~10 minutes rebuilding. A binary is reused only if it reports the
# expected version and was built from that release's module (its build info);
# anything else is rebuilt. Nothing is downloaded except Go modules through
# the module proxy, their checksums verified against Go's checksum database.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
# shellcheck source=../versions/versions.env
. "$top/hack/versions/versions.env"
release=${1:-$KUBE_VERSION}
case "$release" in
v1.[0-9]*.[0-9]*) ;;
*) echo "build.sh: Kubernetes release $release: want v1.<minor>.<patch>" >&2; exit 2 ;;
esac

home=${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}
cache_root=${TRIPSWITCH_CACHE_DIR:-${XDG_CACHE_HOME:-${home:-$top/bin}/.cache}/tripswitch}
out="$cache_root/k8s/$release"
mkdir -p "$out" "$top/bin"

# bin/k8s -> cache; replace a stale link or an old directory without following it.
if [ "$(readlink "$top/bin/k8s" 2>/dev/null || true)" != "$cache_root/k8s" ]; then
	rm -rf "$top/bin/k8s"
	ln -s "$cache_root/k8s" "$top/bin/k8s"
fi

# requires DIR MODULE WANT HOWTO: fail unless DIR's module graph selects WANT
# of MODULE, saying how to bring the module to it.
requires() {
	local got
	got=$(cd "$1" && go list -m -f '{{.Version}}' "$2") || { echo "build.sh: go list -m $2 in $1 failed" >&2; exit 1; }
	if [ "$got" != "$3" ]; then
		echo "build.sh: ${1#"$top"/}/go.mod requires $2 $got, but hack/versions/versions.env pins $3; $4" >&2
		exit 1
	fi
}
# The committed modules must require the pins, whatever is cached.
requires "$here/etcd" go.etcd.io/etcd/server/v3 "$ETCD_VERSION" \
	"run: cd hack/tools/etcd && go get go.etcd.io/etcd/server/v3@$ETCD_VERSION && go mod tidy"
if [ "$release" = "$KUBE_VERSION" ]; then
	moddir="$here/kube-apiserver"
	requires "$moddir" k8s.io/kubernetes "$release" \
		"run: hack/tools/kube-module.sh $release hack/tools/kube-apiserver (and the same for hack/tools/kube-node)"
else
	# Any other release: a module written from the same template, on demand.
	moddir="$out/module"
fi

# Capture the version first: with pipefail, `bin --version | grep -q` fails
# whenever grep exits before the binary has written everything (SIGPIPE).
reports() { local v; v=$("$1" --version 2>/dev/null) && grep -qx "$2" <<<"$v"; }
# built_from BINARY MODULE VERSION: the binary's build info names MODULE at
# VERSION (as its main module, "mod", when the command is MODULE's own).
built_from() { local v; v=$(go version -m "$1" 2>/dev/null) && grep -qE "^[[:space:]]+(mod|dep)[[:space:]]+$2[[:space:]]+$3([[:space:]]|$)" <<<"$v"; }
kube_ok() { [ -x "$out/kube-apiserver" ] && reports "$out/kube-apiserver" "Kubernetes $release" && built_from "$out/kube-apiserver" k8s.io/kubernetes "$release"; }
etcd_ok() { [ -x "$out/etcd" ] && reports "$out/etcd" "etcd Version: ${ETCD_VERSION#v}" && built_from "$out/etcd" go.etcd.io/etcd/server/v3 "$ETCD_VERSION"; }

# build DIR PKG BINARY LDFLAGS: go build into a temporary file, then rename, so
# an interrupted build never leaves a binary that looks valid.
build() {
	local dir=$1 pkg=$2 bin=$3 ldflags=$4
	(cd "$dir" && go build -trimpath -ldflags "$ldflags" -o "$out/$bin.tmp" "$pkg")
	mv -f "$out/$bin.tmp" "$out/$bin"
}

if kube_ok; then
	echo "kube-apiserver $release: cached in $out"
else
	echo "building kube-apiserver $release (first time: ~10 min on 2 cores, ~3.5 min for another release once one is in Go's build cache)..."
	if [ "$moddir" = "$out/module" ]; then
		"$here/kube-module.sh" "$release" "$moddir" k8s.io/kubernetes/cmd/kube-apiserver
		requires "$moddir" k8s.io/kubernetes "$release" "hack/tools/kube-module.sh wrote a module that does not"
	fi
	minor=${release#v1.}; minor=${minor%%.*}
	build "$moddir" k8s.io/kubernetes/cmd/kube-apiserver kube-apiserver \
		"-s -w -X k8s.io/component-base/version.gitVersion=$release -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
	kube_ok || { echo "kube-apiserver built but does not report Kubernetes $release, or was not built from k8s.io/kubernetes $release" >&2; exit 1; }
fi

# Every release's control plane runs the same etcd: copy one already built.
if ! etcd_ok; then
	for other in "$cache_root"/k8s/*/etcd; do
		if [ "$other" != "$out/etcd" ] && [ -x "$other" ] && reports "$other" "etcd Version: ${ETCD_VERSION#v}" && built_from "$other" go.etcd.io/etcd/server/v3 "$ETCD_VERSION"; then
			cp -p "$other" "$out/etcd.tmp" && mv -f "$out/etcd.tmp" "$out/etcd"
			break
		fi
	done
fi
if etcd_ok; then
	echo "etcd $ETCD_VERSION: cached in $out"
else
	echo "building etcd $ETCD_VERSION (first time, ~2 min on 2 cores)..."
	build "$here/etcd" . etcd "-s -w"
	etcd_ok || { echo "etcd built but does not report version ${ETCD_VERSION#v}" >&2; exit 1; }
fi
