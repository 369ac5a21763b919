#!/usr/bin/env bash
# Builds what `make cluster` runs besides the control plane that build.sh
# builds: kube-controller-manager, kube-scheduler, kubelet, kube-proxy and
# kubectl (module kube-node: the same k8s.io/kubernetes release and staging
# replacements as kube-apiserver, so go's build cache shares their packages),
# containerd, its runc shim and ctr (module containerd), CoreDNS (module
# coredns, only the plugins the cluster uses) and Kubernetes' pause, compiled
# from build/pause/linux/pause.c of the same k8s.io/kubernetes module.
#
# Each binary lands in the per-user cache next to build.sh's, keyed by
# version, and is reused only if it runs and reports that version. The host's
# runc, iptables, conntrack and CNI plugins come from Debian packages, installed
# here when missing (as root). Nothing is downloaded but Go modules and those
# packages. Versions come from hack/versions/versions.env; each module must
# require its pin, and pause's must be the tag of the Kubernetes release's own
# build/pause, or this stops before building anything.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../versions/versions.env
. "$here/../versions/versions.env"
home=${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}
cache_root=${TRIPSWITCH_CACHE_DIR:-${XDG_CACHE_HOME:-$home/.cache}/tripswitch}
k8s="$cache_root/k8s/$KUBE_VERSION"
ctrd="$cache_root/containerd/$CONTAINERD_VERSION"
dns="$cache_root/coredns/$COREDNS_VERSION"
pause="$cache_root/pause/$PAUSE_VERSION"
mkdir -p "$k8s" "$ctrd" "$dns" "$pause"

# Debian packages the node needs from the host.
need=()
command -v runc >/dev/null || need+=(runc)
command -v iptables >/dev/null || need+=(iptables)
command -v conntrack >/dev/null || need+=(conntrack)
[ -x /usr/lib/cni/bridge ] || need+=(containernetworking-plugins)
command -v gcc >/dev/null || need+=(gcc libc6-dev)
if [ ${#need[@]} -gt 0 ]; then
	if [ "$(id -u)" != 0 ]; then
		echo "the cluster needs the Debian packages ${need[*]}; install them as root (apt-get install -y ${need[*]})" >&2
		exit 3
	fi
	echo "installing ${need[*]} (Debian packages)..."
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

reports() { local v; v=$("$1" "${@:3}" 2>/dev/null) && grep -q -- "$2" <<<"$v"; }
# built_from BINARY MODULE VERSION: the binary's build info names MODULE at
# VERSION (as its main module, "mod", when the command is MODULE's own).
built_from() { local v; v=$(go version -m "$1" 2>/dev/null) && grep -qE "^[[:space:]]+(mod|dep)[[:space:]]+$2[[:space:]]+$3([[:space:]]|$)" <<<"$v"; }

# requires MODULE_DIR MODULE WANT: fail unless the module selects WANT of MODULE.
requires() {
	local got
	got=$(cd "$here/$1" && go list -m -f '{{.Version}}' "$2") || { echo "build-cluster.sh: go list -m $2 in hack/tools/$1 failed" >&2; exit 1; }
	if [ "$got" != "$3" ]; then
		echo "build-cluster.sh: hack/tools/$1/go.mod requires $2 $got, but hack/versions/versions.env pins $3" >&2
		exit 1
	fi
}
requires kube-node k8s.io/kubernetes "$KUBE_VERSION"
requires containerd github.com/containerd/containerd/v2 "$CONTAINERD_VERSION"
requires coredns github.com/coredns/coredns "$COREDNS_VERSION"
kube_src=$(cd "$here/kube-node" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)
pause_tag=$(sed -n 's/^TAG ?= //p' "$kube_src/build/pause/Makefile")
if [ "$pause_tag" != "$PAUSE_VERSION" ]; then
	echo "build-cluster.sh: Kubernetes $KUBE_VERSION's build/pause is tagged $pause_tag, but hack/versions/versions.env pins PAUSE_VERSION=$PAUSE_VERSION" >&2
	exit 1
fi

# build MODULE_DIR OUT PKG LDFLAGS [TAGS]: into a temporary file, then rename,
# so an interrupted build never leaves a binary that looks valid.
build() {
	local dir=$1 out=$2 pkg=$3 ldflags=$4 tags=${5:-}
	(cd "$here/$dir" && go build -trimpath ${tags:+-tags "$tags"} -ldflags "$ldflags" -o "$out.tmp" "$pkg")
	mv -f "$out.tmp" "$out"
}

minor=${KUBE_VERSION#v1.}; minor=${minor%%.*}
kube_ld="-s -w -X k8s.io/component-base/version.gitVersion=$KUBE_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
for c in kube-controller-manager kube-scheduler kubelet kube-proxy kubectl; do
	flag=--version; [ $c = kubectl ] && flag="version --client"
	# shellcheck disable=SC2086
	if [ -x "$k8s/$c" ] && reports "$k8s/$c" "$KUBE_VERSION" $flag && built_from "$k8s/$c" k8s.io/kubernetes "$KUBE_VERSION"; then
		echo "$c $KUBE_VERSION: cached in $k8s"
	else
		echo "building $c $KUBE_VERSION (first time: about 4 minutes each on 2 cores, less once kube-apiserver's packages are in go's cache)..."
		build kube-node "$k8s/$c" "k8s.io/kubernetes/cmd/$c" "$kube_ld"
	fi
done

# containerd's own static build: no cgo, no btrfs; the version it reports.
ctrd_ld="-s -w -X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION"
for c in containerd containerd-shim-runc-v2 ctr; do
	flag=--version; [ $c = containerd-shim-runc-v2 ] && flag=-v
	if [ -x "$ctrd/$c" ] && reports "$ctrd/$c" "$CONTAINERD_VERSION" $flag; then
		echo "$c $CONTAINERD_VERSION: cached in $ctrd"
	else
		echo "building $c $CONTAINERD_VERSION..."
		CGO_ENABLED=0 build containerd "$ctrd/$c" "github.com/containerd/containerd/v2/cmd/$c" "$ctrd_ld" no_btrfs,osusergo,netgo
	fi
done

if [ -x "$dns/coredns" ] && reports "$dns/coredns" "CoreDNS-${COREDNS_VERSION#v}" -version; then
	echo "coredns $COREDNS_VERSION: cached in $dns"
else
	echo "building coredns $COREDNS_VERSION..."
	CGO_ENABLED=0 build coredns "$dns/coredns" . "-s -w"
fi

if [ -x "$pause/pause" ] && reports "$pause/pause" "pause.c v$PAUSE_VERSION" -v; then
	echo "pause $PAUSE_VERSION: cached in $pause"
else
	echo "building pause $PAUSE_VERSION from k8s.io/kubernetes@$KUBE_VERSION's build/pause/linux/pause.c..."
	src=$kube_src/build/pause/linux/pause.c
	gcc -Os -Wall -Werror -static -DVERSION="v$PAUSE_VERSION" -o "$pause/pause.tmp" "$src"
	strip "$pause/pause.tmp"
	mv -f "$pause/pause.tmp" "$pause/pause"
fi
