"""tools/gpu_check.py (`npm run gpu-check`) without a GPU run: the step plan, the time limit of a step,
the flag-set choice and the summary / exit status from a recorded result. The whole check is not
run here (minutes); tools/gpu_check.sh is run by hand on a GPU machine."""
import importlib.util
import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT

spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "tools" / "gpu_check.py")
gc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gc)


def test_dry_run_lists_every_step_and_runs_nothing(tmp_path):
    out = tmp_path / "out"
    p = subprocess.run(["bash", str(ROOT / "tools" / "gpu_check.sh"), "--dry-run", "--out", str(out),
                        "--skip", "setup", "--time-scale", "0.5"],
                       capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable})
    assert p.returncode == 0, p.stderr
    names = [ln.split()[0] for ln in p.stdout.splitlines()[:-1]]
    assert names == [n for n in gc.STEPS if n != "setup"]
    assert "native-kernels      150 s" in p.stdout            # the limit scaled
    assert not out.exists()


def test_bad_arguments_are_refused():
    with pytest.raises(SystemExit):
        gc.parse_args(["--tokens", "0"])
    with pytest.raises(SystemExit):
        gc.parse_args(["--skip", "no-such-step"])


def test_a_hung_step_is_killed_with_a_failure_line():
    r = gc.run_step("sleeper", ["bash", "-c", "echo started; sleep 30"], limit=1)
    assert not r["ok"] and r["seconds"] < 10
    assert r["failure"] == "sleeper: timed out after 1 s (killed); last output: started"
    r = gc.run_step("exits", [sys.executable, "-c", "print('boom'); raise SystemExit(3)"], limit=30)
    assert r["failure"] == "exits: exit status 3; last output: boom"


def test_a_long_json_line_survives_noise_on_stderr():
    """The bench commands print one long JSON line; warnings on stderr must not hide it."""
    code = ("import json, sys; print('warning', file=sys.stderr); "
            "print(json.dumps({'results': [{'kernel': 'I2_S', 'median_ms': i} for i in range(500)]}))")
    r = gc.run_step("bench", [sys.executable, "-c", code], limit=30)
    assert r["ok"] and len(r["stdout"]) > 10_000
    assert gc._json_tail(r["stdout"])["results"][499] == {"kernel": "I2_S", "median_ms": 499}


def _adapter(vendor, arch, fallback=False):
    return {"adapter": {"info": {"vendor": vendor, "architecture": arch}, "features": ["subgroups"],
                        "isFallbackAdapter": fallback}}


def test_flag_set_prefers_a_hardware_adapter():
    sw = _adapter("google", "swiftshader", True)
    assert gc.pick_flag_set({"vulkan": _adapter("nvidia", "hopper"), "e2e": sw}) == "vulkan"
    assert gc.pick_flag_set({"vulkan": _adapter("google", "swiftshader"), "e2e": sw}) == "e2e"
    assert gc.pick_flag_set({"vulkan": {"error": "no adapter"}, "e2e": sw}) == "e2e"
    assert gc.pick_flag_set({"vulkan": _adapter("mesa", "llvmpipe"), "e2e": {"error": "crashed"}}) == "vulkan"


def test_auto_presets_and_scope_follow_the_native_adapter():
    a = gc.parse_args([])
    assert gc.models_wanted(a, {"software": True}) == [("small", "i2_s"), ("small", "tq2_0")]
    assert [m[0] for m in gc.models_wanted(a, {"software": False})] == ["small", "small", "2b4t", "2b4t"]
    assert gc.models_wanted(a, None) == [("small", "i2_s"), ("small", "tq2_0")]


def _record(browser_ok=True):
    case = lambda name, ok: {"name": name, "ok": ok, "checks": [  # noqa: E731
        {"buffer": "y", "ok": ok, "max_abs_err": 0.0 if ok else 0.5, "worst_index": 3, "n_bad": 0 if ok else 2, "n": 64}]}
    steps = {
        "native-adapters": {"ok": True, "seconds": 1.0, "result": {"adapters": [
            {"info": {"vendor": "NVIDIA", "device": "H100", "backend_type": "Vulkan", "adapter_type": "DiscreteGPU"},
             "features": ["shader-f16", "subgroup"], "software": False}],
            "bitweb": {"describe": "native: NVIDIA H100", "features": ["subgroups"], "software": False}}},
        "native-kernels": {"ok": True, "seconds": 2.0, "result": {"adapter": "native: NVIDIA H100", "expected": 2,
                                                                "results": [case("gemv a", True), case("gemv b", True)]}},
        "browser-kernels": {"ok": browser_ok, "seconds": 3.0, "failure": None if browser_ok else "browser-kernels: exit status 1",
                            "result": {"adapter": "browser: nvidia", "expected": 2,
                                       "results": [case("gemv a", True), case("gemv b", browser_ok)]}},
        "bench-decode": {"ok": True, "seconds": 4.0, "runs": [{"model": "small i2_s", "ok": True, "seconds": 4.0, "result": {
            "prompt_tokens": 64, "prefill_tok_s": 600.0, "decode_ms_per_token": 2.5, "decode_tok_s": 400.0}}]},
        "bench-load": {"ok": True, "seconds": 5.0, "runs": [{"model": "small i2_s", "ok": True, "seconds": 5.0, "result": {
            "ready_s": 1.25, "load_s": 1.0, "upload_s": 0.5, "compile_s": 0.5, "pipelines": 21, "prefill_kernels_s": 2.0}}]},
        "bench-floor": {"ok": True, "seconds": 6.0, "runs": [{"model": "small i2_s", "ok": True, "seconds": 6.0, "result": {
            "dispatches_per_token": 63, "wall_ms": 2.5, "wall_serial_ms": 3.0, "gpu_ms": 1.5, "overhead_share": 0.4,
            "floor_ms": 1.2, "per_dispatch_us": 15.0}}]},
        "bench-kernels": {"ok": False, "seconds": 240.0, "failure": "bench-kernels: timed out after 240 s (killed); last output: x"},
    }
    return {"started": "2025-01-01 00:00:00", "host": {"platform": "Linux", "cpus": 16, "loadavg": [0.1, 0.1, 0.1]},
            "steps": steps, "browser_adapters": {"vulkan": _adapter("nvidia", "hopper"), "e2e": {"error": "TimeoutError"}},
            "wall_s": 12.0}


def test_summary_counts_cases_and_sets_the_exit_status(tmp_path):
    assert gc.write_summary(_record(browser_ok=True), tmp_path) == 2        # only bench-kernels failed
    s = json.loads((tmp_path / "summary.json").read_text())
    assert s["kernels"]["native"] == {"passed": 2, "failed": 0, "expected": 2, "failing": [], "adapter": "native: NVIDIA H100"}
    md = (tmp_path / "summary.md").read_text()
    assert "| small i2_s | 64 | 600.0 | 2.5 | 400.0 | 1.5 |" in md
    assert "| small i2_s | 1.25 | 1.0 | 0.5 | 0.5 | 21 | 2.0 |" in md                # ready
    assert "| small i2_s | 63 | 2.5 | 3.0 | 1.5 | 0.4 | 1.2 | 15.0 |" in md          # the per-token floor
    assert "| Chromium `vulkan` | nvidia hopper | False |" in md and "| Chromium `e2e` | none: TimeoutError |" in md
    assert "bench-kernels: timed out after 240 s" in md

    assert gc.write_summary(_record(browser_ok=False), tmp_path) == 1       # a kernel case failed
    s = json.loads((tmp_path / "summary.json").read_text())
    assert s["kernels"]["browser"]["failed"] == 1 and s["kernels"]["browser"]["passed"] == 1
    assert "browser kernel case failed: gemv b (y: 2/64 bad, max abs err 0.5)" in s["failures"]
    assert "- browser FAILED gemv b: y: 2/64 bad, max abs err 0.5" in (tmp_path / "summary.md").read_text()


def test_cases_that_did_not_run_count_as_a_failure(tmp_path):
    rec = _record()
    rec["steps"]["native-kernels"]["result"]["results"].pop()     # 1 of 2 expected cases reported
    rec["steps"]["bench-kernels"] = {"ok": True, "seconds": 1.0}
    assert gc.write_summary(rec, tmp_path) == 1


def test_model_benches_run_each_model_and_report_a_missing_json(tmp_path, monkeypatch):
    """bench-decode / bench-load / bench-floor: one `bitweb bench WHAT MODEL --json` per model; a run
    that prints no JSON is a failure naming the model."""
    calls = []

    def fake(name, cmd, limit, env=None):
        calls.append(cmd)
        ok = "bad.gguf" not in cmd
        return {"ok": True, "seconds": 1.0, "tail": "", "stdout": json.dumps({"bench": cmd[4]}) if ok else "nothing"}
    monkeypatch.setattr(gc, "run_step", fake)
    a = gc.parse_args(["--tokens", "5"])
    r = gc.bench_models("bench-floor", [{"name": "m", "path": "m.gguf"}, {"name": "b", "path": "bad.gguf"}], 10, a)
    assert [c[3:6] for c in calls] == [["bench", "floor", "m.gguf"], ["bench", "floor", "bad.gguf"]]
    assert calls[0][-2:] == ["--tokens", "5"]
    assert r["runs"][0]["result"] == {"bench": "floor"} and not r["ok"]
    assert r["failure"] == "bench-floor b: printed no JSON"
    assert gc.bench_models("bench-load", [], 10, a)["failure"] == "bench-load: no generated models (make-models failed or skipped)"
