"""Peak extra memory while the app downloads and loads a model: bytes stream from the network
into OPFS, and from the cached File to queue.writeBuffer through one reused chunk buffer; they
never pass through the wasm heap.

Both engines: the shared one (the app's default: a SharedWorker in a renderer process of its own,
fed the cached file's bytes over a MessagePort by the page's download worker, web/reads.mjs) and
the tab's own (?share=0: a dedicated worker in the page's renderer, reading the file itself).
Measured from outside, on the real processes: Chromium's renderers (the page's, with its workers,
and the shared worker's) and GPU process (which holds SwiftShader's buffers). Before each phase,
each process's
peak RSS is reset (`echo 5 > /proc/PID/clear_refs`); after it, VmHWM - VmRSS(before) is the
extra memory it needed at its peak. The model is ~35 MB of I2_S weights (tensors up to 0.72 MB);
the download is a 256 MiB file. If a file went through the renderer whole, its peak would grow
by the file size.
Results go to test-results/load-memory-{shared,dedicated}.json.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil

import pytest

from tests.conftest import ROOT
from tests.e2e.conftest import new_page, settle
from tests.e2e.app_driver import READY_MS, App, boot_snapshot_saved

MiB = 1 << 20


def status(pid):
    out = {}
    for line in open(f"/proc/{pid}/status"):
        k, _, v = line.partition(":")
        if k in ("VmHWM", "VmRSS"):
            out[k] = int(v.split()[0]) * 1024
    return out


class Peak:
    """Peak RSS growth of some processes over a block of code."""

    def __init__(self, pids):
        self.pids = pids

    def __enter__(self):
        self.before = {}
        for name, pid in self.pids.items():
            with open(f"/proc/{pid}/clear_refs", "w") as f:
                f.write("5")
            self.before[name] = status(pid)["VmRSS"]
        return self

    def __exit__(self, *exc):
        self.extra = {name: status(pid)["VmHWM"] - self.before[name] for name, pid in self.pids.items()}


# The shared worker's first load after the UI's (download + load) needs one-time memory that
# is not the model's bytes: with two CPU burners its renderer's peak grew 23-25 MB on that load in 6
# runs of 7 (4 MB in the other), then 0-1 MB on each of 3 more loads of the same 35 MB through the
# same MessagePort; its RSS after that load was back within 1-2 MB (a transient, not a copy kept).
# Splitting the reads into 128 KiB messages left it at 16-25 MB; with V8's optimizing tiers off
# (--js-flags=--liftoff-only) it was 8 MB in 3 runs of 3: V8 compiling the hot code of the load
# (Pyodide's wasm) in that process, once. On a busier box it reached into the second load (10-15 MB
# there; with the burners and another browser test beside, 25 then 22 MB, then 1.2 MB measured).
# So unmeasured loads from the cache warm the engine first, until one stays under the bound (at
# most WARM_LOADS: were it the model's bytes, every load would pass it, the measured one too).
# Dedicated: 1-7 MB on each load, the first too.
WARM_LOADS = 4


@pytest.mark.parametrize("engine", ["shared", "dedicated"])
def test_download_and_load_stream_with_small_peak_memory(browser, server, tmp_path, engine):
    from bitweb.authoring import makemodel
    models = {}
    for name, preset, layers in (("tiny", "tiny", None), ("mid", "small", 12)):
        args = argparse.Namespace(arch="bitnet-b1.58", format="i2_s", preset=preset, layers=layers,
                                  vocab="bytes", seed=0, scale_tensors="auto")
        models[name] = tmp_path / f"{name}.gguf"
        makemodel.write_model(makemodel.spec_from_args(args), makemodel.load_vocab("bytes"), models[name])
    size = models["mid"].stat().st_size
    assert size > 30 * MiB
    # big files come from the app's own server (real HTTP downloads), under build/web/
    served = ROOT / "build" / "web" / f"test-{os.getpid()}"
    served.mkdir(parents=True, exist_ok=True)
    os.replace(models["mid"], served / "mid.gguf")
    (served / "big.bin").write_bytes(os.urandom(BIG))
    try:
        result = measure(browser, server, models, served, size, engine == "shared")
    finally:
        shutil.rmtree(served)
    print(json.dumps(result))
    out = ROOT / "test-results"
    out.mkdir(exist_ok=True)
    (out / f"load-memory-{engine}.json").write_text(json.dumps(result, indent=1))
    # loading: the weights never entered the wasm heap (it never shrinks, so a pass would show),
    # and each renderer's peak grew by less than 16 MiB (under half the file): what uploadBlob keeps
    # in flight, two 4 MiB settle windows of writeBuffer bytes waiting for the GPU process and a
    # chunk (here each tensor, at most 0.7 MB, is one), with the JS garbage of the load itself; a
    # shared engine adds one chunk in flight over the MessagePort (one read at a time, transferred).
    # Measured 0-8 MB (both engines, also with two CPU burners); 18.4 MB once on a loaded 2-core run
    # when it waited only every 64 MiB.
    assert result["wasm_heap_after"] - result["wasm_heap_before"] < 4 * MiB, result
    assert result["header_read"] <= 256 << 10, result
    assert result["load_from_cache"]["renderer_peak_extra"] < BOUND, result
    # downloading: bounded by Chrome's fetch buffering, not by the file (256 MiB): measured 8 MB on
    # a quiet machine, 161 MB on a loaded 2-core CI run (the network outpaces the OPFS writes)
    assert result["download"]["renderer_peak_extra"] < BIG * 3 / 4, result


BIG = 256 * MiB
BOUND = 16 * MiB         # a renderer's peak growth while loading from the cache (see the test)


def renderer(extra):
    """The most any renderer grew, of a Peak's `extra`."""
    return max(v for k, v in extra.items() if k.startswith("renderer"))


def measure(browser, server, models, served, size, shared):
    base = server + "build/web/" + served.name + "/"
    # No service worker: its one-time install (web/sw.js, about 15 MB read and hashed in a renderer)
    # is not the model's bytes, and could land in a measured phase.
    ctx = browser.new_context(service_workers="block")
    # Python boots fresh here, as it did before set-up shipped a boot snapshot: with a worker restored
    # from the shipped snapshot the renderer's peak grew by 23-27 MB during the load from the cache
    # (5 MB booted fresh). The wasm heap's size does not change, so it is not the model's bytes; not
    # investigated further (a guess: pages of the restored heap touched for the first time). It
    # would hide what this test measures, the model's bytes passing through the renderer.
    ctx.route("**/build/web/boot-snapshot.*", lambda route: route.fulfill(status=404, body="not found"))
    try:
        page = new_page(ctx)
        app = App(page, server, models)
        app.serve_models(ctx)
        # Python booted, a tiny model on the GPU
        app.open("?" + ("" if shared else "share=0&") + "model=test-models/tiny.gguf")
        # the worker stores its boot snapshot (31 MB) once idle: done before anything is measured, so
        # that write never lands in a measured phase (a loaded run once measured 32 MB there)
        boot_snapshot_saved(page)
        # the renderers: the page's with its download worker, which reads the cached model for the
        # shared engine (the app's default), and the shared worker's (Pyodide's heap), where it runs
        # in a process of its own; "renderer" below is the most any of them grew
        procs = browser.new_browser_cdp_session().send("SystemInfo.getProcessInfo")["processInfo"]
        gpu = next(q["id"] for q in procs if q["type"] == "GPU")
        pids = {f"renderer {q['id']}": q["id"] for q in procs if q["type"] == "renderer"}
        pids["gpu"] = gpu

        # the app's download code (web/models.mjs fromUrl: fetch -> OPFS), in the app's worker
        worker = page.workers[0]
        with Peak(pids) as download:
            got = settle(worker, """async ([app, url]) => {
                const m = await import(app + 'models.mjs');
                const { file, pending } = await m.fromUrl(url, 'big.gguf', (done, total, info) => {
                    globalThis.__settleNote = { done, total, ...(info || {}) }; });
                const n = file.size; await pending.discard(); return n; }""", [server, base + "big.bin"],
                         seconds=READY_MS / 1000, what="the 256 MiB download into the cache (models.fromUrl)")
        assert got == BIG

        page.fill("#url-input", base + "mid.gguf")           # download + load through the UI
        page.click("#url-form button")
        first = app.wait_ready("mid.gguf")

        def load_cached():                                 # load again from the OPFS copy
            page.evaluate("window.__old = window.bitwebApp.state.engine")
            page.click("#cache-list li:has-text('mid.gguf') button:text('Load')")
            page.wait_for_function("window.bitwebApp.state.engine !== window.__old"
                                   " || !document.getElementById('error').hidden", timeout=READY_MS)
            return app.wait_ready("mid.gguf")
        warm = []
        for _ in range(WARM_LOADS):                        # (see WARM_LOADS)
            with Peak(pids) as w:
                load_cached()
            warm.append(w.extra)
            if renderer(w.extra) < BOUND:
                break
        with Peak(pids) as cached:
            info = load_cached()
        assert page.errors == []
    finally:
        ctx.close()

    assert first["fileSize"] == info["fileSize"] == size
    assert first["shared"] == info["shared"] == shared, (first["sharedNote"], info["sharedNote"])
    load = info["load"]
    return {"engine": "shared" if shared else "dedicated", "model_bytes": size, "largest_tensor": 720928, "download_bytes": BIG,
            "download": {"renderer_peak_extra": renderer(download.extra), "gpu_process_peak_extra": download.extra["gpu"]},
            "load_from_cache": {"renderer_peak_extra": renderer(cached.extra), "gpu_process_peak_extra": cached.extra["gpu"],
                                "each_process": cached.extra},
            "warm_loads": [{"renderer_peak_extra": renderer(w), "each_process": w} for w in warm],
            "renderers": len(pids) - 1,
            "wasm_heap_before": load["wasm_before"], "wasm_heap_after": load["wasm_after"],
            "header_read": load["header_read"], "load_ms": load["ms"],
            "gpu_buffer_bytes": load.get("gpu_bytes")}
