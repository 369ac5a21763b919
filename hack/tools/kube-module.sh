#!/usr/bin/env bash
# Writes a Go module that builds Kubernetes commands of one release from Go
# modules: the template both hack/tools/kube-apiserver (and kube-node) and
# every release of the compatibility matrix are made from.
#
# usage: hack/tools/kube-module.sh RELEASE DIR [PACKAGE...]
#   e.g. hack/tools/kube-module.sh v1.30.14 /tmp/kube k8s.io/kubernetes/cmd/kube-apiserver
# The packages go into DIR/tools.go when DIR has none; an existing one is kept.
#
# k8s.io/kubernetes replaces its ~30 staging modules (k8s.io/api,
# k8s.io/apiserver, ...) with local paths, which a module that requires it
# cannot use; the module written here requires k8s.io/kubernetes RELEASE and
# replaces each staging module that release's own go.mod names with its
# published v0.<minor>.<patch>. It takes the release's GODEBUG defaults
# (its godebug line, else its go line), so the binary behaves as the
# release's own build did. `go mod tidy` then resolves the rest by minimal
# version selection, which is deterministic, and checks every download
# against Go's checksum database. An existing go.mod's leading comment and
# module path are kept: to bump the pinned modules, set KUBE_VERSION in
# hack/versions/versions.env and run this on hack/tools/kube-apiserver and
# hack/tools/kube-node.
set -euo pipefail

if [ $# -lt 2 ] || { [ $# -lt 3 ] && [ ! -f "$2/tools.go" ]; }; then
	echo "usage: $0 RELEASE DIR [PACKAGE...] (packages required when DIR has no tools.go)" >&2
	exit 2
fi
release=$1 dir=$2
shift 2
case "$release" in
v1.[0-9]*.[0-9]*) ;;
*) echo "kube-module.sh: Kubernetes release $release: want v1.<minor>.<patch>" >&2; exit 2 ;;
esac
staging=v0.${release#v1.}
mkdir -p "$dir"
cd "$dir"

# The release's own go.mod, from the module proxy (or Go's module cache).
upstream=$(GOFLAGS=-mod=mod GOWORK=off go mod download -json "k8s.io/kubernetes@$release" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
[ -r "$upstream" ] || { echo "kube-module.sh: no go.mod for k8s.io/kubernetes@$release from the module proxy" >&2; exit 1; }
# Staging modules: `k8s.io/x => ./staging/src/k8s.io/x`, in a block or alone.
mapfile -t modules < <(awk '$1 == "replace" { $1 = "" ; $0 = substr($0, 2) } $2 == "=>" && $3 ~ /^\.\/staging\// { print $1 }' "$upstream" | sort -u)
[ ${#modules[@]} -gt 0 ] || { echo "kube-module.sh: k8s.io/kubernetes@$release's go.mod replaces no staging module" >&2; exit 1; }
godebug=$(sed -n 's/^godebug[[:space:]]\+\(default=.*\)$/\1/p' "$upstream")
if [ -z "$godebug" ]; then
	gover=$(sed -n 's/^go[[:space:]]\+\([0-9]\+\.[0-9]\+\).*/\1/p' "$upstream")
	godebug="default=go$gover"
fi

# A new module: this toolchain's language version; an existing one keeps its
# comment, module path and go line.
gotool=$(go env GOVERSION)
gotool=${gotool#go}
header="// Module kube-$release builds Kubernetes $release's commands from Go modules
// (written by hack/tools/kube-module.sh).
module github.com/tripswitch-dev/tripswitch/hack/tools/kube-apiserver"
goline="go ${gotool%.*}.0"
if [ -f go.mod ]; then
	header=$(sed -n '1,/^module /p' go.mod)
	goline=$(grep -m1 '^go ' go.mod)
fi
{
	printf '%s\n\n%s\n\ngodebug %s\n\nrequire k8s.io/kubernetes %s\n\n// k8s.io/kubernetes resolves its staging modules from ./staging; point each at its published release.\nreplace (\n' "$header" "$goline" "$godebug" "$release"
	for m in "${modules[@]}"; do printf '\t%s => %s %s\n' "$m" "$m" "$staging"; done
	printf ')\n'
} >go.mod.tmp
mv -f go.mod.tmp go.mod

if [ ! -f tools.go ]; then
	{
		printf '//go:build tools\n\n// Package tools pins the commands this module builds, so that `go mod tidy`\n// keeps their dependencies.\npackage tools\n\nimport (\n'
		for p in "$@"; do printf '\t_ "%s"\n' "$p"; done
		printf ')\n'
	} >tools.go
fi
GOFLAGS=-mod=mod GOWORK=off go mod tidy
