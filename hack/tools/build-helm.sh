#!/usr/bin/env bash
# Builds the Helm CLI from its Go module, the way Helm's own Makefile builds a
# release (CGO off, -trimpath, the version stamped with -ldflags), in the
# module's own directory so that its go.mod and go.sum pin every dependency
# exactly as for `go install helm.sh/helm/v4/cmd/helm@VERSION`.
#
# The binary lives in the per-user cache keyed by version
# (~/.cache/tripswitch/helm/<version>/helm) and bin/helm links to it; it is
# reused only if it reports that version. HELM_VERSION comes from
# hack/versions/versions.env, which the tests and the release tool's go.mod
# are held to (helm.sh/helm/v4 there is the same release). The module proxy
# serves no VCS information, so the commit is stamped only when HELM_COMMIT
# is given.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../versions/versions.env
. "$here/../versions/versions.env"
HELM_COMMIT=${HELM_COMMIT:-}

top=$(cd "$here/../.." && pwd)
home=${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}
cache_root=${TRIPSWITCH_CACHE_DIR:-${XDG_CACHE_HOME:-$home/.cache}/tripswitch}
out="$cache_root/helm/$HELM_VERSION"
mkdir -p "$out" "$top/bin"

ok() { local v; [ -x "$out/helm" ] && v=$("$out/helm" version --template '{{.Version}}' 2>/dev/null) && [ "$v" = "$HELM_VERSION" ]; }

if ok; then
	echo "helm $HELM_VERSION: cached in $out"
else
	echo "building helm $HELM_VERSION from helm.sh/helm/v4 (first time: about 10-15 minutes on 2 busy cores)..."
	dir=$(cd "$here" && go mod download -json "helm.sh/helm/v4@$HELM_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	[ -d "$dir" ] || { echo "go mod download helm.sh/helm/v4@$HELM_VERSION gave no directory" >&2; exit 1; }
	ld="-w -s -X helm.sh/helm/v4/internal/version.version=$HELM_VERSION -X helm.sh/helm/v4/internal/version.metadata= -X helm.sh/helm/v4/internal/version.gitTreeState=clean"
	[ -n "$HELM_COMMIT" ] && ld="$ld -X helm.sh/helm/v4/internal/version.gitCommit=$HELM_COMMIT"
	(cd "$dir" && CGO_ENABLED=0 go build -trimpath -ldflags "$ld" -o "$out/helm.tmp" ./cmd/helm)
	mv -f "$out/helm.tmp" "$out/helm"
	ok || { echo "helm built but does not report $HELM_VERSION" >&2; exit 1; }
fi
ln -sfn "$out/helm" "$top/bin/helm"
"$top/bin/helm" version
