#!/usr/bin/env bash
# `npm run gpu-check`: adapters, kernel cases (native + headless Chromium) and benchmarks on this
# machine's GPU (or its CPU adapters), summary under test-results/gpu-check/. The steps, their
# time limits and the options: tools/gpu_check.py (`bash tools/gpu_check.sh --dry-run`, `--help`).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
command -v "$PY" >/dev/null || { echo "[gpu-check] $PY not found: install Python 3.11+ (or set PYTHON)" >&2; exit 2; }
exec "$PY" tools/gpu_check.py "$@"
