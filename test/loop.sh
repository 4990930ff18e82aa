#!/usr/bin/env bash
# Runs the given vitest files N times in a row and stops at the first failure, so a
# flaky e2e test shows up as "failed on run k" instead of a lucky pass. Builds once
# first: the spawned node processes run dist/.
#
#   test/loop.sh 20 test/e2e/cluster-nats-failover.test.ts test/e2e/actors-sigkill.test.ts
#
# Each run's output goes to $LOOP_LOG_DIR/run-<k>.log (default: a temp dir, printed);
# set KOVA_KEEP_E2E=1 to keep the node logs of the cluster tests as well.
set -uo pipefail
cd "$(dirname "$0")/.."

if [ "$#" -lt 2 ] || ! [[ "$1" =~ ^[0-9]+$ ]]; then
  echo "usage: test/loop.sh N test-file [test-file ...]" >&2
  exit 2
fi
runs="$1"
shift
logs="${LOOP_LOG_DIR:-$(mktemp -d -t kova-loop-XXXXXX)}"
mkdir -p "$logs"

npm run --silent build || exit 1
echo "loop: $runs runs of $*; logs in $logs"
passed=0
for ((k = 1; k <= runs; k++)); do
  start=$(date +%s)
  if npx vitest run "$@" >"$logs/run-$k.log" 2>&1; then
    passed=$((passed + 1))
    echo "loop: run $k passed ($(( $(date +%s) - start )) s)"
  else
    echo "loop: run $k FAILED ($(( $(date +%s) - start )) s); output in $logs/run-$k.log"
    tail -n 40 "$logs/run-$k.log"
    echo "loop: $passed of $runs passed before the first failure"
    exit 1
  fi
done
echo "loop: $passed of $runs passed"
