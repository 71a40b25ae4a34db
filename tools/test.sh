#!/usr/bin/env bash
# Every test, as `npm test` runs it (after tools/setup.sh --test), in three pytest lanes side by
# side so both cores of a small machine stay busy while one waits on another process (a browser's
# GPU process, a subprocess):
#   lane 1: the app's browser tests and the real SmolLM2 file in Chromium (tests/e2e/test_app.py,
#           tests/e2e/test_real_model.py without its soak; one Chromium), then the native kernel
#           cases (tests/test_kernels.py: wgpu-py on lavapipe), structured output on the SmolLM2
#           file (tests/test_structured_real.py) and a quarter of the split tests;
#   lane 2: a quarter of the split tests and the SmolLM2 file natively (tests/test_smollm2.py),
#           then the other browser tests (the rest of tests/e2e, another Chromium);
#   lane 3: the other tests (wgpu-py on lavapipe, numpy, PyTorch) and half of the split tests.
# The split tests (tests/test_engine.py, tests/test_structured.py: tests/conftest.py SPLIT) are
# dealt out by cost with `--part K/N`. The lanes were balanced by each test's time in a full run
# (each run prints its slowest tests). The SmolLM2 soak is left out (8 minutes on SwiftShader; the
# same soak runs on the default model in tests/e2e/test_app_reliability.py): `npm run real` runs it
# short, `npm run soak` the full 200 turns.
# The browser lanes' output is printed after the others', then each lane's time; the exit status
# is non-zero if any run failed. Arguments go to every run (e.g. -x, -k name). Each lane's native
# pipeline compiles are counted (test-results/pipelines-*.json).
#
# --quick (`npm run test:quick`): the tests marked quick (tests/conftest.py QUICK_*: unit tests,
# a few native kernel cases per family, the engine against numpy on one model, one WebGPU page in
# Chromium), in two lanes: native, and the browser smoke.
set -uo pipefail
cd "$(dirname "$0")/.."
mkdir -p test-results
py=.venv/bin/python
pytest=("$py" -m pytest -p no:cacheprovider --durations=12)  # each run names its slowest tests
export BITWEB_PIPELINES_JSON="$PWD/test-results/pipelines-{pid}.json"

if [ "${1:-}" = "--quick" ]; then
  shift
  export BITWEB_TEST_LANE=quick
  read -r -a native <<<"$("$py" -c 'from tests.conftest import quick_paths; print(" ".join(quick_paths(False)))')"
  read -r -a browser <<<"$("$py" -c 'from tests.conftest import quick_paths; print(" ".join(quick_paths(True)))')"
  log=test-results/quick-browser.log
  start=$SECONDS
  ("${pytest[@]}" -m quick "${browser[@]}" "$@" >"$log" 2>&1; echo "$? $((SECONDS - start))" >"$log.rc") &
  b=$!
  trap 'kill $b 2>/dev/null' INT TERM
  "${pytest[@]}" -m quick "${native[@]}" "$@"
  rc=$?
  t_native=$((SECONDS - start))
  wait $b
  read -r b_rc t_browser <"$log.rc"
  echo "================================ browser smoke ($log) ================================"
  cat "$log"
  echo "quick lanes: native ${t_native} s (exit $rc), browser ${t_browser} s (exit $b_rc); ${SECONDS} s in all"
  [ "$rc" = 0 ] && [ "$b_rc" = 0 ]
  exit
fi

app_log=test-results/lane1-app-kernels.log
e2e_log=test-results/lane2-e2e.log
kernels=tests/test_kernels.py
real=tests/e2e/test_real_model.py
soak="$real::test_soak_no_growth_then_answers_like_a_fresh_page"
smollm2=tests/test_smollm2.py
structured_real=tests/test_structured_real.py
read -r -a split <<<"$("$py" -c 'from tests.conftest import SPLIT; print(" ".join(sorted(SPLIT)))')"
start=$SECONDS
(trap 'kill $run 2>/dev/null; exit 143' INT TERM
 "${pytest[@]}" tests/e2e/test_app.py "$real" --deselect "$soak" "$@" & run=$!
 wait $run; app_rc=$?
 "${pytest[@]}" "$kernels" "$structured_real" "${split[@]}" --part 1/4 "$@" & run=$!
 wait $run; kernels_rc=$?
 echo "$((SECONDS - start))" >"$app_log.time"
 [ "$app_rc" = 0 ] && [ "$kernels_rc" = 0 ]) >"$app_log" 2>&1 &
app=$!
("${pytest[@]}" "${split[@]}" --part 2/4 "$smollm2" tests/e2e --ignore=tests/e2e/test_app.py --ignore="$real" "$@"
 rc=$?; echo "$((SECONDS - start))" >"$e2e_log.time"; exit $rc) >"$e2e_log" 2>&1 &
e2e=$!
trap 'kill $app $e2e 2>/dev/null' INT TERM
"${pytest[@]}" tests --ignore=tests/e2e --ignore="$kernels" --ignore="$smollm2" --ignore="$structured_real" --part 3,4/4 "$@"
rest=$?
t_rest=$((SECONDS - start))
echo "(lane 3, the other tests: $t_rest s)"
wait $app
app_rc=$?
wait $e2e
e2e_rc=$?
for log in "$app_log" "$e2e_log"; do
  echo "================================ browser tests ($log) ================================"
  cat "$log"
done
echo "lane 1 (tests/e2e/test_app.py, $real, $kernels, $structured_real, split 1/4): $(cat "$app_log.time" 2>/dev/null || echo ?) s, exit $app_rc"
echo "lane 2 (split 2/4, $smollm2, the other tests/e2e): $(cat "$e2e_log.time" 2>/dev/null || echo ?) s, exit $e2e_rc"
echo "lane 3 (the other tests, split 3,4/4): $t_rest s, exit $rest"
echo "$((SECONDS - start)) s in all"
[ "$rest" = 0 ] && [ "$app_rc" = 0 ] && [ "$e2e_rc" = 0 ]
