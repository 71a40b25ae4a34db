"""The benchmarks in headless Chromium (SwiftShader) through Pyodide: web/dev/bench.html, and ready time
against wllama: web/dev/bench-ready.html.

By default (the test suite) one small kernel shape (default variants) and a short decode of a tiny generated
model, checked for well-formed JSON like the native ones (tests/test_bench.py); no timed
assertions. `npm run bench` sets BITWEB_BENCH=full: the 2B4T kernel shapes and a decode of the
generated `small` model (BITWEB_BENCH_MODEL=preset or path to change it), and prints the JSON.
Speculative decoding (test_speculative_in_browser): tokens/s with and without prompt-lookup drafting
and the acceptance, per task, on the default model and the SmolLM2 Q4_1 file (full) or a short check
that drafting keeps the tokens (the suite).

Ready time (test_ready_time_against_wllama): bitweb (this library) and wllama (npm @wllama/wllama:
llama.cpp in WebAssembly, one thread, CPU) load the same TQ2_0 file from page start in a fresh
browser context (nothing cached: a first visit), then answer two chat messages greedily (the first right after ready: its first token is
"first reply"; the second gives prefill and decode tokens/s: bitweb's is asked again until its
prefill kernels, compiling after ready, read the prompt); the file
is the default model with its I2_S linears written as TQ2_0 and its architecture named `bitnet`
(what llama.cpp reads; that architecture's FFN is SiLU where the default model's is ReLU², so
both engines run the same, slightly different, model). The engines take turns (interleaved);
printed: ready time, first reply, prefill and decode tokens/s per engine and the ratios
(bitweb / wllama for times). The suite runs one round of first visits and times the loads only
(replies=0); BITWEB_READY_MODEL=path: another file for both (the SmolLM2 Q4_1 file: issue 26's
figures); BITWEB_BENCH=full runs BITWEB_READY_ROUNDS (default 3) rounds, each a first visit
and a second (cached) one, with the replies. Without
wllama installed it says so and runs bitweb alone (in CI wllama must be there: it is a
devDependency). Stage times are checked as tests/e2e/test_app.py checks the app's.
"""
import json
import os
import pathlib
import shutil
import statistics

import pytest

from bitweb import bench
from bitweb.authoring.makemodel import PRESETS, ModelSpec, load_vocab, write_model
from tests.conftest import IN_CI, ROOT
from tests.e2e.conftest import new_page
from tests.e2e.app_driver import check_stages
from tests.test_bench import KERNEL_FIELDS, check_kernel_results

FULL = os.environ.get("BITWEB_BENCH", "") == "full"
DEFAULT_MODEL = ROOT / "web" / "models" / "bitweb-chat-i2_s.gguf"


def bench_copy(path) -> str:
    """URL path (build/web/bench/NAME) of a copy of the file path there (made when missing)."""
    dst = ROOT / "build" / "web" / "bench" / os.path.basename(path)
    if not dst.exists():
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, dst)
    return "build/web/bench/" + dst.name


def bench_results(page, url: str, long: bool) -> dict:
    """Open a dev/bench.html URL and wait for its results (an hour when long, else 10 minutes); they
    hold no error."""
    page.goto(url)
    page.wait_for_function("window.benchResults !== undefined", timeout=(3_600_000 if long else 600_000))
    res = page.evaluate("window.benchResults")
    assert "error" not in res, res.get("error")
    return res


def bench_model() -> str:
    """URL path (under /build/web/bench/) of the model the decode benchmark runs."""
    d = ROOT / "build" / "web" / "bench"
    d.mkdir(parents=True, exist_ok=True)
    want = os.environ.get("BITWEB_BENCH_MODEL", "small" if FULL else "tiny")
    if want not in PRESETS:
        return bench_copy(want)
    path = d / f"{want}-i2_s.gguf"
    if not path.exists():
        write_model(ModelSpec(arch="bitnet-b1.58", fmt="i2_s", preset=want, seed=0, scale_tensors=False,
                              **PRESETS[want]), load_vocab("bytes" if want != "2b4t" else "llama3"), path)
    return "build/web/bench/" + path.name


def test_bench_in_browser(server, page):
    model = bench_model()
    query = f"model=/{model}" + ("" if FULL else "&quick=1&shapes=256x256&tokens=5&prompt=8&repeats=1")
    res = bench_results(page, server + "dev/bench.html?" + query, FULL or bool(os.environ.get("BITWEB_BENCH_MODEL")))
    k, d = res["kernels"], res["decode"]
    assert k["device"].startswith("browser"), k["device"]
    assert all(set(r) == KERNEL_FIELDS for r in k["results"])
    check_kernel_results(k, bench.SHAPES if FULL else ((256, 256),))
    assert d["bench"] == "decode" and d["decoded_tokens"] == (31 if FULL else 4)
    assert d["dispatches_per_layer"] > 0 and d["host_calls_per_token"] > 0
    assert 0 <= d["host_share"] <= 1 and d["bytes_per_token"] > 0 and d["roofline_ms"] > 0
    assert page.errors == []
    if FULL or os.environ.get("BITWEB_BENCH_PRINT"):
        print(json.dumps({"kernels": k, "decode": d}, indent=1))


@(pytest.mark.timeout(4 * 3600) if FULL else (lambda test: test))
def test_speculative_in_browser(server, page):
    """Speculative decoding's benchmark (bitweb.speculative_bench) in Chromium: dev/bench.html?speculative=1.
    The suite: the default model, copy and recall, 16 tokens, one trial: every drafting run's tokens
    equal plain decoding's, the fields well formed. `npm run bench` (BITWEB_BENCH=full): all five tasks
    on the default model (128 tokens, 3 trials) and the SmolLM2 Q4_1 file (BITWEB_SPEC_SMOLLM2, default
    build/assets/SmolLM2-135M-Instruct.Q4_1.gguf; 48 tokens, 1 trial: SwiftShader runs it at a few
    tokens/s), each printed as a table."""
    from bitweb.speculative_bench import TASKS, describe
    runs = [("/models/bitweb-chat-i2_s.gguf", "&tokens=128&trials=3" if FULL else "&tokens=16&trials=1&tasks=copy,recall")]
    if FULL:
        smol = os.environ.get("BITWEB_SPEC_SMOLLM2", str(ROOT / "build" / "assets" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
        runs.append(("/" + bench_copy(smol), "&tokens=48&trials=1"))
    for model, extra in runs:
        load0 = os.getloadavg()
        sp = bench_results(page, server + f"dev/bench.html?speculative=1&model={model}{extra}", FULL)["speculative"]
        assert sp["device"].startswith("browser") and sp["activations"] == "a8", sp
        assert list(sp["tasks"]) == (list(TASKS) if FULL else ["copy", "recall"])
        for name, t in sp["tasks"].items():
            assert t["lookup_same"] is True, (name, t)               # drafting never changes greedy tokens
            assert 0 <= t["lookup_accepted"] <= t["lookup_drafted"] and t["generated"] > 0, (name, t)
            assert t["plain_tps"] > 0 and t["lookup_tps"] > 0 and t["lookup_ratio"] > 0, (name, t)
        assert page.errors == []
        if FULL or os.environ.get("BITWEB_BENCH_PRINT"):
            load1 = os.getloadavg()
            print(f"\n{describe(sp)}\nload average {load0[0]:.1f} before, {load1[0]:.1f} after\n{json.dumps(sp)}")


@(pytest.mark.timeout(3600) if FULL else (lambda test: test))
def test_floor_in_browser(server, page):
    """The per-token floor (bitweb.floor) in Chromium: dev/bench.html?floor=1, fields checked as natively
    (tests/test_floor.py). The suite: the default model, 4 tokens; `npm run bench` (BITWEB_BENCH=full):
    the default model (32 tokens) and the SmolLM2 Q4_1 file (BITWEB_FLOOR_SMOLLM2; 12 tokens), printed."""
    from bitweb.floor import describe_floor
    from bitweb.gguf import open_gguf
    from tests.test_floor import check_floor
    runs = [(DEFAULT_MODEL, "&tokens=32&prompt=16" if FULL else "&tokens=4&prompt=6&repeats=1")]
    if FULL:
        runs.append((pathlib.Path(os.environ.get("BITWEB_FLOOR_SMOLLM2", ROOT / "build" / "assets" / "SmolLM2-135M-Instruct.Q4_1.gguf")),
                     "&tokens=12&prompt=16"))
    for path, extra in runs:
        load0 = os.getloadavg()
        f = bench_results(page, server + f"dev/bench.html?floor=1&model=/{bench_copy(path)}{extra}", FULL)["floor"]
        assert f["device"].startswith("browser"), f["device"]
        check_floor(f, open_gguf(path).get("block_count"))
        assert f["decoded_tokens"] == (31 if FULL and path == DEFAULT_MODEL else 11 if FULL else 3)
        assert page.errors == []
        if FULL or os.environ.get("BITWEB_BENCH_PRINT"):
            print(f"\n{describe_floor(f)}\nload average {load0[0]:.1f} before, {os.getloadavg()[0]:.1f} after\n{json.dumps(f)}")


def tq2_0_twin() -> str:
    """URL path of the default model as a `bitnet` TQ2_0 file (written when missing or older than
    the default model): I2_S codes unchanged, the tensor scale as every block's f16 d."""
    import numpy as np
    from bitweb import formats, gguf
    from bitweb.authoring.gguf_writer import Value, write_gguf
    path = ROOT / "build" / "web" / "bench" / "bitweb-chat-tq2_0-bitnet.gguf"
    if path.exists() and path.stat().st_mtime >= DEFAULT_MODEL.stat().st_mtime:
        return "build/web/bench/" + path.name
    path.parent.mkdir(parents=True, exist_ok=True)
    gf = gguf.open_gguf(DEFAULT_MODEL)
    old, arch = gf.arch, "bitnet"
    md = []
    for k, v in gf.metadata.items():
        vt, sub = gf.metadata_types[k]
        md.append((arch + k[len(old):] if k.startswith(old + ".") else k,
                   Value(vt, arch if k == "general.architecture" else v, sub)))
    tensors = []
    for ti in gf.tensors.values():
        data = gf.tensor_data(ti.name)
        if ti.format is formats.I2_S:
            t, scale, _ = formats.I2_S.unpack(data, ti.n_elements)
            d = np.full(ti.n_elements // 256, float(scale[0]), np.float32)
            tensors.append((ti.name, ti.shape, formats.TQ2_0, formats.TQ2_0.pack(t, d)))
        else:
            tensors.append((ti.name, ti.shape, ti.format, data))
    tmp = path.with_suffix(".tmp")
    write_gguf(tmp, md, tensors, alignment=gf.alignment)
    os.replace(tmp, path)
    return "build/web/bench/" + path.name


def ready_visits(browser, server, engine: str, model: str, visits: int, replies: bool) -> list:
    """`visits` loads of web/dev/bench-ready.html in one fresh browser context (the first: nothing
    cached): window.readyResult of each."""
    ctx = browser.new_context()
    out = []
    try:
        page = new_page(ctx)
        for _ in range(visits):
            page.goto(server + f"dev/bench-ready.html?engine={engine}&model=/{model}&max_tokens=32"
                      + ("" if replies else "&replies=0"))
            page.wait_for_function("window.readyResult !== undefined", timeout=600_000)
            r = page.evaluate("window.readyResult")
            r["console_errors"] = list(page.errors)
            out.append(r)
    finally:
        ctx.close()
    return out


def ready_model() -> str:
    """URL path of the file both engines load: BITWEB_READY_MODEL (a path, e.g. the SmolLM2 Q4_1 file
    in build/assets, copied under build/web/bench/) or the default model's TQ2_0 twin."""
    want = os.environ.get("BITWEB_READY_MODEL")
    if not want:
        return tq2_0_twin()
    return bench_copy(want)


def test_ready_time_against_wllama(browser, server):
    model = ready_model()
    rounds = int(os.environ.get("BITWEB_READY_ROUNDS", "3")) if FULL else 1
    visits = 2 if FULL else 1
    load0 = os.getloadavg()
    runs = {"bitweb": [], "wllama": []}
    missing = None
    for r in range(rounds):
        for engine in (("bitweb", "wllama") if r % 2 == 0 else ("wllama", "bitweb")):
            if engine == "wllama" and missing:
                continue
            for v, res in enumerate(ready_visits(browser, server, engine, model, visits, replies=FULL)):
                assert "error" not in res, res
                if res.get("missing"):
                    missing = res["missing"]
                    break
                res["visit"] = "first" if v == 0 else "cached"
                runs[engine].append(res)
    load1 = os.getloadavg()
    if missing:
        print(f"\nwllama: {missing}; bitweb alone")
        assert not IN_CI, f"required in CI but missing: {missing}"
    for res in runs["bitweb"]:                    # bitweb: stage times present and consistent
        check_stages(res["stages"], download=res["visit"] == "first")
        assert res["software"] == "SwiftShader" and res["console_errors"] == [], res
        assert res["ready_ms"] >= res["stages"]["ready"][1] - 1
        assert not FULL or (res["completion_tokens"] > 0 and res["text"] and res["speed_prefill_plan"] == "prefill")
        if res["visit"] == "cached":              # the first visit's boot snapshot and pipeline manifest were used
            assert res["boot"]["from"] == "snapshot" and res["prepared"]["taken"] > 0, (res["boot"], res["prepared"])
    for res in runs["wllama"]:
        assert res["threads"] == 1 and res["ready_ms"] > 0
        if FULL:                                  # the same file: the same prompt tokens
            assert res["completion_tokens"] > 0 and res["prompt_tokens"] == runs["bitweb"][0]["prompt_tokens"], res
    print("\n" + describe_ready(runs, model, load0, load1))


def describe_ready(runs: dict, model: str, load0, load1) -> str:
    """The benchmark's table: per engine and visit, the medians over the rounds, and the ratios."""
    def med(rows, key):
        vals = [r[key] for r in rows if r.get(key) is not None]
        return statistics.median(vals) if vals else None

    def first_reply(r):                            # page start -> the first reply's first token
        return r["ready_ms"] + r["ttft_ms"] if r.get("ttft_ms") is not None else None
    lines = [f"ready time (page start -> model loaded); first reply: page start -> its first token; speeds: "
             f"a second reply; {model}; "
             f"load average {load0[0]:.1f} before, {load1[0]:.1f} after",
             "| engine | visit | rounds | ready ms | first reply ms | prefill tok/s | decode tok/s | stages (bitweb, ms) |",
             "|---|---|---:|---:|---:|---:|---:|---|"]
    table = {}
    for engine, rows in runs.items():
        for visit in ("first", "cached"):
            rs = [r for r in rows if r["visit"] == visit]
            if not rs:
                continue
            for r in rs:
                r["first_reply_ms"] = first_reply(r)
            row = {k: med(rs, k) for k in ("ready_ms", "first_reply_ms", "prefill_tok_s", "decode_tok_s")}
            table[engine, visit] = row
            st = ""
            if engine == "bitweb":
                spans = {k: statistics.median(r["stages"][k][1] - r["stages"][k][0] for r in rs)
                         for k in ("boot", "download", "header", "upload", "compile", "plans") if all(k in r["stages"] for r in rs)}
                st = ", ".join(f"{k} {v:.0f}" for k, v in spans.items())
            fmt = lambda x: "-" if x is None else f"{x:.1f}"           # noqa: E731
            lines.append(f"| {engine} | {visit} | {len(rs)} | {fmt(row['ready_ms'])} | {fmt(row['first_reply_ms'])} | "
                         f"{fmt(row['prefill_tok_s'])} | {fmt(row['decode_tok_s'])} | {st} |")
    boots = [f"{r['visit']}: {r['boot']['from']} ({', '.join(f'{k} {v}' for k, v in r['boot']['ms'].items())} ms)"
             + (f", kernels prepared {r['prepared']['taken']}/{r['prepared']['offered']}" if r.get("prepared") else "")
             for r in runs["bitweb"] if r.get("boot")]
    if boots:
        lines.append("bitweb's Python boot: " + "; ".join(boots))
    plans = [f"{r['visit']} {r['first_prefill_plan']}" for r in runs["bitweb"] if r.get("first_prefill_plan")]
    if plans:
        lines.append("bitweb's first replies read their prompts with the plan: " + ", ".join(plans)
                     + " (decode: token by token, the prefill kernels still compiling)")
    for visit in ("first", "cached"):
        b, w = table.get(("bitweb", visit)), table.get(("wllama", visit))
        if b and w:
            names = {"ready_ms": "ready", "first_reply_ms": "first reply", "prefill_tok_s": "prefill tok/s",
                     "decode_tok_s": "decode tok/s"}
            parts = [f"{n} {b[k] / w[k]:.2f}x" for k, n in names.items() if b[k] and w[k]]
            lines.append(f"{visit} visit, bitweb / wllama: " + ", ".join(parts))
    return "\n".join(lines)


STATS_JS = "window.bitwebApp.bitweb.stats().then((s) => ({live_bytes: s.live_bytes, engines: s.engines}))"


def two_tabs(browser, server, query: str) -> dict:
    """The app's default model in two tabs of one fresh context, the second opened once the first is
    ready: each tab's time from its navigation to ready (performance.now() once the app is ready:
    it includes the driver's poll, a frame or so) and the GPU buffers its engine holds (stats
    live_bytes). (The GPU process's resident memory is no measure of it here: it moved by -100 to
    +80 MB from tab to tab, with the page's compositing and an earlier context's teardown.)"""
    from tests.e2e.app_driver import App
    ctx = browser.new_context()
    out = {"query": query, "tabs": []}
    try:
        for _ in range(2):
            app = App(new_page(ctx), server, None)
            info = app.open(query)
            tab = {"ready_ms": app.page.evaluate("performance.now()"), "shared": info["shared"],
                   "attached": bool(info["load"].get("attached")), "sharedBy": info["sharedBy"],
                   **app.page.evaluate(STATS_JS), "console_errors": list(app.page.errors)}
            out["tabs"].append(tab)
    finally:
        ctx.close()
    return out


def test_second_tab_ready_and_gpu_memory(browser, server):
    """A second tab of the app: its time to ready and the GPU memory of two tabs against one, with
    the app's shared engine (default) and with each tab's own (?share=0). No timed assertion; the
    GPU buffers are exact: two tabs sharing hold one engine's, two of their own twice that."""
    rounds = int(os.environ.get("BITWEB_READY_ROUNDS", "3")) if FULL else 1
    load0 = os.getloadavg()
    runs = [two_tabs(browser, server, q) for _ in range(rounds) for q in ("", "?share=0")]
    load1 = os.getloadavg()
    for r in runs:
        one, two = r["tabs"]
        assert one["console_errors"] == [] and two["console_errors"] == [], r
        if r["query"] == "":
            assert one["shared"] and two["shared"] and two["attached"] and two["sharedBy"] == 2, r
            assert two["engines"] == 1 and two["live_bytes"] == one["live_bytes"], r      # one engine, seen from both
        else:
            assert not one["shared"] and not two["shared"] and not two["attached"], r
            assert one["engines"] == two["engines"] == 1 and two["live_bytes"] == one["live_bytes"], r    # each its own
    med = lambda rows, f: statistics.median(f(r) for r in rows)     # noqa: E731
    mib = lambda b: f"{b / (1 << 20):.1f}"                           # noqa: E731
    lines = [f"two tabs of the app (default model), the second opened once the first is ready; medians of {rounds} "
             f"round(s); load average {load0[0]:.1f} before, {load1[0]:.1f} after",
             "| engine | first tab ready ms | second tab ready ms | GPU buffers, 1 tab / 2 tabs MiB |",
             "|---|---:|---:|---:|"]
    for q, name in (("", "shared (default)"), ("?share=0", "each tab's own (?share=0)")):
        rows = [r for r in runs if r["query"] == q]
        one_b = med(rows, lambda r: r["tabs"][0]["live_bytes"])
        two_b = one_b if q == "" else med(rows, lambda r: r["tabs"][0]["live_bytes"] + r["tabs"][1]["live_bytes"])
        lines.append(f"| {name} | {med(rows, lambda r: r['tabs'][0]['ready_ms']):.0f} | {med(rows, lambda r: r['tabs'][1]['ready_ms']):.0f} | "
                     f"{mib(one_b)} / {mib(two_b)} |")
    print("\n" + "\n".join(lines))
