#!/usr/bin/env bash
# Runs a GoogleTest binary; tests that fail are run once more on their own. A test that passes
# only on the second run is reported loudly as FLAKY (and still fails the run if it fails twice).
# Usage: rerun_failed.sh GTEST_BINARY
set -uo pipefail
bin=${1:?usage: rerun_failed.sh GTEST_BINARY}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
"$bin" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
[[ $rc == 0 ]] && exit 0
failed=$(sed -n 's/^\[  FAILED  \] \([A-Za-z0-9_]*\.[A-Za-z0-9_/]*\) (.*/\1/p' "$log" | sort -u | paste -sd: -)
if [[ -z $failed ]]; then
  echo "rerun_failed: the binary failed (exit $rc) without a failed test to rerun"
  exit "$rc"
fi
echo "rerun_failed: running again on their own: $failed"
if "$bin" --gtest_filter="$failed"; then
  echo "FLAKY (failed once, passed on rerun): $failed"
  exit 0
fi
exit 1
