#!/usr/bin/env bash
# Runs .ci/run as a machine with no caches would: in a fresh clone of HEAD
# (the committed state only), with HOME, GOPATH, GOCACHE, GOMODCACHE and the
# control planes' cache (TRIPSWITCH_CACHE_DIR) pointed at empty directories
# under one temporary directory. The Go toolchain and the Debian packages
# stay the machine's. It prints how long .ci/run took; with WARM=1 it then
# runs .ci/run again, in another fresh clone, on the caches the first run
# filled (the warm figure).
# Logs and caches stay in the directory it prints; remove it when done (Go
# leaves its module cache read-only: chmod -R u+w DIR && rm -rf DIR).
#
#   hack/ci-cold.sh            # cold
#   WARM=1 hack/ci-cold.sh     # cold, then warm
set -euo pipefail
top=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
work=$(mktemp -d "${TMPDIR:-/tmp}/tripswitch-ci.XXXXXX")
export HOME="$work/home" GOPATH="$work/gopath" GOCACHE="$work/gocache" GOMODCACHE="$work/gomodcache" \
	TRIPSWITCH_CACHE_DIR="$work/tripswitch-cache"
unset XDG_CACHE_HOME
mkdir -p "$HOME"
echo "commit $(git -C "$top" rev-parse --short HEAD); clones, caches and logs in $work"

# run NAME: .ci/run in a fresh clone of HEAD (as CI has), timed.
run() {
	local start rc=0
	git clone -q "$top" "$work/$1"
	start=$(date +%s)
	(cd "$work/$1" && .ci/run) >"$work/$1.log" 2>&1 || rc=$?
	local took=$(($(date +%s) - start))
	printf '%s .ci/run: exit %d after %d min %02d s (log: %s)\n' "$1" "$rc" $((took / 60)) $((took % 60)) "$work/$1.log"
	return "$rc"
}
run cold
if [ "${WARM:-}" = 1 ]; then
	run warm
fi
