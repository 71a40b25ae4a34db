#!/usr/bin/env bash
# Every test, as `npm test` runs it (after tools/setup.sh --test): the browser tests
# (tests/e2e, one Chromium) and the other tests (wgpu-py on lavapipe, numpy, PyTorch) in two
# pytest processes side by side, so both cores of a small machine stay busy. The browser run's
# output is printed after the other's; the exit status is non-zero if either run failed.
# Arguments go to both runs (e.g. -x, -k name).
set -uo pipefail
cd "$(dirname "$0")/.."
mkdir -p test-results
log=test-results/e2e.log
.venv/bin/python -m pytest tests/e2e -p no:cacheprovider "$@" >"$log" 2>&1 &
e2e=$!
trap 'kill $e2e 2>/dev/null' INT TERM
.venv/bin/python -m pytest tests --ignore=tests/e2e -p no:cacheprovider "$@"
rest=$?
wait $e2e
browser=$?
echo "================================ browser tests (tests/e2e, $log) ================================"
cat "$log"
echo "other tests: exit $rest; browser tests: exit $browser"
[ "$rest" = 0 ] && [ "$browser" = 0 ]
