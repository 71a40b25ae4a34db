#!/usr/bin/env bash
# One-step set-up, idempotent: run by `npm start` and `npm test` (and .ci/run).
#   tools/setup.sh          node_modules (pyodide), .venv with bitweb (editable), web archive
#   tools/setup.sh --test   also the test extras, the test assets (build/assets) and, as root, Debian
#                           chromium + lavapipe; with them the web build also makes the boot
#                           snapshot shipped with the app
# Installs only what is missing; a second run takes about a second.
set -euo pipefail
cd "$(dirname "$0")/.."
want_test=0
[ "${1:-}" = "--test" ] && want_test=1

say() { printf '[setup] %s\n' "$*" >&2; }

# 1. System packages the tests need (headless Chromium with WebGPU, Mesa lavapipe for wgpu-py).
if [ "$want_test" = 1 ]; then
  missing=()
  [ -x /usr/bin/chromium ] || missing+=(chromium)
  ls /usr/share/vulkan/icd.d/lvp_icd*.json >/dev/null 2>&1 || missing+=(mesa-vulkan-drivers)
  if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      say "installing ${missing[*]} with apt-get"
      apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    else
      say "missing system packages: ${missing[*]} (Debian: sudo apt-get install ${missing[*]})"
      exit 1
    fi
  fi
fi

# 2. npm dependencies (pyodide, markdown-it, hash-wasm; axe-core and wllama for the tests and the bench; pinned exactly in package.json /
#    package-lock.json).
if [ ! -f node_modules/pyodide/pyodide.mjs ] || [ ! -f node_modules/markdown-it/dist/browser/markdown-it.esm.min.mjs ] \
   || [ ! -f node_modules/axe-core/axe.min.js ] || [ ! -f node_modules/@wllama/wllama/esm/index.js ] \
   || [ ! -f node_modules/hash-wasm/dist/index.esm.min.js ]; then
  say "npm ci"
  if [ -f package-lock.json ]; then npm ci --no-audit --no-fund >&2; else npm install --no-audit --no-fund >&2; fi
fi

# 3. Python virtual environment with bitweb installed editable.
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  say "creating .venv"
  "$PY" -m venv .venv
fi
stamp=.venv/.bitweb-installed
extras=""
[ "$want_test" = 1 ] && extras="[test]"
if [ ! -f "$stamp$extras" ] || [ pyapp/pyproject.toml -nt "$stamp$extras" ]; then
  say "pip install -e pyapp$extras"
  # (pip's notes about this machine's extra package indexes are filtered out)
  .venv/bin/python -m pip install -q --disable-pip-version-check -e "pyapp$extras" 2>&1 \
    | { grep -v '^WARNING: Location .* is ignored' || true; } >&2
  [ "${PIPESTATUS[0]}" = 0 ] || { say "pip install failed"; exit 1; }
  touch "$stamp$extras"
fi

# 3b. With --test: the real assets the tests read (tools/fetch_test_assets.py: a trained model and
#     llama.cpp's tokenizer vectors, grammars and chat templates, pinned and hash-checked in tools/test-assets.txt,
#     downloaded once into build/; later runs need no network).
if [ "$want_test" = 1 ]; then
  .venv/bin/python tools/fetch_test_assets.py >&2
fi

# 4. The Python archive the browser loads (pure-Python bitweb + shaders + jinja2 / markupsafe),
#    rebuilt every run. jinja2 / markupsafe: pinned, hash-checked `pip download` from PyPI into
#    build/pydeps on the first run (tools/web-requirements.txt); later runs need no network.
#    Then the boot snapshot (tools/boot_snapshot.py, headless Chromium via Playwright: 8-20 s,
#    only when Pyodide or the archive changed; without Playwright / Chromium one line says so).
.venv/bin/python tools/build_web.py >&2
