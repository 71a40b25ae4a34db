#!/usr/bin/env bash
# Every test, as `npm test` runs it (after tools/setup.sh --test), in three pytest lanes side by
# side so both cores of a small machine stay busy while one waits on another process (a browser's
# GPU process, a subprocess): the app's browser tests (tests/e2e/test_app.py, one Chromium) and
# then the native kernel cases (tests/test_kernels.py: wgpu-py on lavapipe; the app's tests end
# first, so this lane takes them), the other browser tests (the rest of tests/e2e, another
# Chromium), and the other tests (wgpu-py on lavapipe, numpy, PyTorch). The browser lanes' output
# is printed after the others'; the exit status is non-zero if any run failed. Arguments go to
# every run (e.g. -x, -k name). tests/e2e/test_real_model.py (the real SmolLM2 file in Chromium)
# is in the second lane with its short soak; `npm run soak` runs the full 200-turn soak.
set -uo pipefail
cd "$(dirname "$0")/.."
mkdir -p test-results
app_log=test-results/e2e-app.log
e2e_log=test-results/e2e.log
kernels=tests/test_kernels.py
(trap 'kill $run 2>/dev/null; exit 143' INT TERM
 .venv/bin/python -m pytest tests/e2e/test_app.py -p no:cacheprovider "$@" & run=$!
 wait $run; app_rc=$?
 .venv/bin/python -m pytest "$kernels" -p no:cacheprovider "$@" & run=$!
 wait $run; kernels_rc=$?
 [ "$app_rc" = 0 ] && [ "$kernels_rc" = 0 ]) >"$app_log" 2>&1 &
app=$!
.venv/bin/python -m pytest tests/e2e --ignore=tests/e2e/test_app.py -p no:cacheprovider "$@" >"$e2e_log" 2>&1 &
e2e=$!
trap 'kill $app $e2e 2>/dev/null' INT TERM
start=$SECONDS
.venv/bin/python -m pytest tests --ignore=tests/e2e --ignore="$kernels" -p no:cacheprovider "$@"
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
echo "other tests: exit $rest; browser tests: app (+ $kernels) exit $app_rc, the rest exit $e2e_rc ($((SECONDS - start)) s in all)"
[ "$rest" = 0 ] && [ "$app_rc" = 0 ] && [ "$e2e_rc" = 0 ]
