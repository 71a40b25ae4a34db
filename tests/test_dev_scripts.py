"""Every dev script (dev/**/*.py) still starts: `--help` prints its argparse usage and exits 0, with
no GPU, browser or model work before the arguments are parsed. So a script whose imports or
arguments rot (a renamed module, a removed function at import) fails here, not when someone next
needs it. Helper modules the scripts import (not run themselves) are listed in HELPERS."""
from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT

HELPERS = {"dev/chromium.py"}          # the headless-Chromium page helper the browser scripts import
SCRIPTS = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "dev").rglob("*.py")
                 if str(p.relative_to(ROOT)) not in HELPERS)


def test_the_helpers_exist_and_every_dev_python_file_is_one_or_a_script():
    assert all((ROOT / h).exists() for h in HELPERS)
    assert len(SCRIPTS) >= 30, SCRIPTS


@pytest.mark.parametrize("script", SCRIPTS)
def test_dev_script_help(script):
    r = subprocess.run([sys.executable, script, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, (script, r.stderr[-2000:])
    assert r.stdout.lstrip().startswith("usage:"), (script, r.stdout[:500])
