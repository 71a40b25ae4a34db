"""The e2e fixtures' retry after a dead / hung GPU process (tests/e2e/conftest.py), on a real one:
an inner pytest session, with the same fixtures and hooks, whose tests stop Chromium's GPU
process (SIGSTOP: it stays alive and answers nothing, as SwiftShader's once did mid-suite).

    test_hang_once     hangs the GPU on its first attempt   -> retried in a new browser, passes
    test_hang_twice    hangs it on every attempt            -> retried once, fails; the browser is
                                                               restarted for the next test too
    test_real_failure  fails with the GPU fine              -> not retried, fails
    test_fine          passes                               -> not retried
and the retries are reported: a line during the run, the terminal summary, the warnings, the JSON."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.conftest import ROOT

INNER = r'''
import json, os, pathlib, signal

STATE = pathlib.Path(os.environ["RETRY_STATE"])


def attempt(name, **extra):
    d = json.loads(STATE.read_text()) if STATE.exists() else {}
    d.setdefault(name, []).append(extra)
    STATE.write_text(json.dumps(d))
    return len(d[name])


def hang_gpu(browser):
    assert browser.probe(timeout=30)[0]          # the GPU process starts with the first WebGPU page
    pid = browser.processes()["GPU"]
    os.kill(pid, signal.SIGSTOP)
    return pid


def test_hang_once(browser):
    n = attempt("hang_once", launch=browser.launches)
    if n == 1:
        attempt("stopped", pid=hang_gpu(browser))
    ok, detail = browser.probe(timeout=5)        # what the app's worker waits for
    assert ok, "No answer from the worker: " + detail


def test_hang_twice(browser):
    attempt("hang_twice", launch=browser.launches)
    attempt("stopped", pid=hang_gpu(browser))
    ok, detail = browser.probe(timeout=5)
    assert ok, detail


def test_real_failure(browser):
    attempt("real_failure", launch=browser.launches)
    assert 1 + 1 == 3, "a real bug"


def test_fine(browser):
    attempt("fine", launch=browser.launches)
    ok, detail = browser.probe(timeout=30)
    assert ok, detail
'''


def test_dead_gpu_process_is_retried_once_and_reported(tmp_path):
    (tmp_path / "conftest.py").write_text("from tests.e2e.conftest import *  # noqa: F401,F403\n")
    (tmp_path / "test_inner.py").write_text(INNER)
    state = tmp_path / "state.json"
    env = dict(os.environ, PYTHONPATH=f"{ROOT}:{ROOT / 'pyapp'}", RETRY_STATE=str(state), BITWEB_GPU_PROBE_S="8",
               BITWEB_GPU_RETRIES_JSON=str(tmp_path / "retries.json"))
    p = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rA", "test_inner.py"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    out = p.stdout + p.stderr
    print(out)
    assert p.returncode == 1, out
    assert "2 failed, 2 passed" in out, out
    for name, outcome in (("hang_once", "PASSED"), ("hang_twice", "FAILED"), ("real_failure", "FAILED"),
                          ("fine", "PASSED")):
        assert f"{outcome} test_inner.py::test_{name}" in out, out
    runs = json.loads(state.read_text())
    # one retry each for the hangs, in a new browser; none for the real failure or the pass
    assert [r["launch"] for r in runs["hang_once"]] == [1, 2], runs
    assert [r["launch"] for r in runs["hang_twice"]] == [2, 3], runs
    assert [r["launch"] for r in runs["real_failure"]] == [4] and [r["launch"] for r in runs["fine"]] == [4], runs
    # reported: at once, in the summary, as a warning, in the JSON
    assert "GPU RETRY test_inner.py::test_hang_once: WebGPU liveness probe failed" in out, out
    assert "GPU RETRY test_inner.py::test_hang_once: passed on retry" in out, out
    assert ("GPU RETRY test_inner.py::test_hang_twice: failed again; the browser was restarted again for the "
            "next test") in out, out
    assert "e2e retries after a dead or hung GPU process" in out, out
    assert "PytestWarning: GPU RETRY: test_inner.py::test_hang_once passed on retry" in out, out
    assert "test_real_failure" not in out.split("e2e retries after a dead or hung GPU process")[1].split("short test summary")[0]
    retries = json.loads((tmp_path / "retries.json").read_text())
    assert [(r["test"], r["retry"]) for r in retries] == [("test_inner.py::test_hang_once", "passed on retry"),
                                                          ("test_inner.py::test_hang_twice", "failed again; the browser "
                                                           "was restarted again for the next test")]
    gpu = retries[0]["evidence"]["gpu_process"]
    assert gpu["pid"] == runs["stopped"][0]["pid"] and gpu["state"].startswith("T"), gpu     # the stopped one
    # the stopped GPU processes were killed, not left behind
    for s in runs["stopped"]:
        try:
            with open(f"/proc/{s['pid']}/status") as f:
                state_line = next(ln for ln in f if ln.startswith("State:"))
            assert "Z" in state_line, state_line                    # at most a zombie awaiting its parent
        except FileNotFoundError:
            pass
