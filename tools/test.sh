#!/usr/bin/env bash
# Every test, as `npm test` runs it (after tools/setup.sh --test), in three pytest processes side
# by side so both cores of a small machine stay busy while one waits on another process (a
# browser's GPU process, a subprocess): the app's browser tests (tests/e2e/test_app.py, one
# Chromium), the other browser tests (the rest of tests/e2e, another Chromium), and the other
# tests (wgpu-py on lavapipe, numpy, PyTorch). The browser runs' output is printed after the
# others'; the exit status is non-zero if any run failed. Arguments go to every run (e.g. -x, -k name).
set -uo pipefail
cd "$(dirname "$0")/.."
mkdir -p test-results
app_log=test-results/e2e-app.log
e2e_log=test-results/e2e.log
.venv/bin/python -m pytest tests/e2e/test_app.py -p no:cacheprovider "$@" >"$app_log" 2>&1 &
app=$!
.venv/bin/python -m pytest tests/e2e --ignore=tests/e2e/test_app.py -p no:cacheprovider "$@" >"$e2e_log" 2>&1 &
e2e=$!
trap 'kill $app $e2e 2>/dev/null' INT TERM
start=$SECONDS
.venv/bin/python -m pytest tests --ignore=tests/e2e -p no:cacheprovider "$@"
rest=$?
echo "(other tests: $((SECONDS - start)) s)"
wait $app
app_rc=$?
wait $e2e
e2e_rc=$?
for log in "$app_log" "$e2e_log"; do
  echo "================================ browser tests ($log) ================================"
  cat "$log"
done
echo "other tests: exit $rest; browser tests: app exit $app_rc, the rest exit $e2e_rc ($((SECONDS - start)) s in all)"
[ "$rest" = 0 ] && [ "$app_rc" = 0 ] && [ "$e2e_rc" = 0 ]
