#!/usr/bin/env bash
# Runs `make test` RUNS times (default 5), each from a fresh clone of this
# repository, while two CPU hogs keep both cores of a 2-core machine busy:
# the suite must stay green on a busy machine. Prints each run's wall time
# and result; the logs stay in the printed directory.
#
#   hack/loaded-test.sh            # 5 runs
#   RUNS=1 HOGS=4 hack/loaded-test.sh
set -uo pipefail
runs=${RUNS:-5}
hogs=${HOGS:-2}
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d -t tripswitch-loaded-XXXX)
pids=()
for _ in $(seq 1 "$hogs"); do
  ( while :; do :; done ) &
  pids+=($!)
done
trap 'kill "${pids[@]}" 2>/dev/null' EXIT
echo "$hogs CPU hogs running; logs in $work"
failed=0
for i in $(seq 1 "$runs"); do
  rm -rf "$work/clone"
  git clone -q "$repo" "$work/clone"
  start=$(date +%s)
  if (cd "$work/clone" && make test) >"$work/run-$i.log" 2>&1; then result=green; else result=RED; failed=$((failed + 1)); fi
  echo "run $i: $result in $(( $(date +%s) - start )) s (load average $(cut -d' ' -f1 /proc/loadavg))"
done
echo "$((runs - failed)) of $runs green"
exit $(( failed > 0 ))
