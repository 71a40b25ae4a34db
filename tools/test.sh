#!/usr/bin/env bash
# Every test, as `npm test` runs it (after tools/setup.sh --test), in four pytest processes side by
# side: the app's browser tests (tests/e2e/test_app.py, one Chromium), the other browser tests (the
# rest of tests/e2e, another Chromium), the GPU kernel and engine tests (wgpu-py on lavapipe) and the
# other tests (numpy, PyTorch, the CLI, the server). Each spends much of its time waiting on another
# process (a browser's GPU process, lavapipe's threads, a subprocess): side by side they keep both
# cores of a small machine busy. The other runs' output is printed after the first's, each with its
# wall time; the exit status is non-zero if any run failed. Arguments go to every run (e.g. -x, -k name).
set -uo pipefail
cd "$(dirname "$0")/.."
mkdir -p test-results
start=$SECONDS
names=(app browser gpu)
logs=(test-results/e2e-app.log test-results/e2e.log test-results/gpu.log)
GPU_TESTS=(tests/test_kernels.py tests/test_engine.py tests/test_gpu.py)
run() {    # run LOG ARGS...: pytest into LOG, then its wall time
  local log=$1 t0=$SECONDS
  shift
  .venv/bin/python -m pytest -p no:cacheprovider "$@" >"$log" 2>&1
  local rc=$?
  echo "($((SECONDS - t0)) s)" >>"$log"
  return $rc
}
run "${logs[0]}" tests/e2e/test_app.py "$@" &
pids=($!)
run "${logs[1]}" tests/e2e --ignore=tests/e2e/test_app.py "$@" &
pids+=($!)
run "${logs[2]}" "${GPU_TESTS[@]}" "$@" &
pids+=($!)
trap 'kill "${pids[@]}" 2>/dev/null' INT TERM
ignore=()
for f in "${GPU_TESTS[@]}"; do ignore+=(--ignore="$f"); done
.venv/bin/python -m pytest tests --ignore=tests/e2e "${ignore[@]}" -p no:cacheprovider "$@"
rest=$?
echo "(other tests: $((SECONDS - start)) s)"
status="other tests: exit $rest"
ok=$([ "$rest" = 0 ] && echo 1 || echo 0)
for i in 0 1 2; do
  wait "${pids[$i]}"
  rc=$?
  [ "$rc" = 0 ] || ok=0
  status="$status; ${names[$i]} tests: exit $rc"
  echo "================================ ${names[$i]} tests (${logs[$i]}) ================================"
  cat "${logs[$i]}"
done
echo "$status ($((SECONDS - start)) s in all)"
[ "$ok" = 1 ]
