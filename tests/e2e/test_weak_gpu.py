"""A weak GPU in the browser: headless Chromium's SwiftShader has subgroups, dot4I8Packed and
32 KiB of workgroup memory, so the fallbacks would otherwise run only natively. Here the device is
requested the way a phone's would be (bitweb.gpu.request_device mask_features / cap_limits; the
app's `?cap=`): the masked features are not asked for (the kernels take their fallbacks) and the
limits are requested at WebGPU's guaranteed minimum, which the browser then enforces.

  - the browser kernel cases whose WGSL changes without subgroups, dot4I8Packed, shader-f16 and
    timestamp queries, on such a device, against the numpy references' bytes;
  - the mobile set (MOBILE: 128 MiB bindings, 256 MiB buffers, 16 KiB of workgroup memory, 256
    invocations, no shader-f16, no subgroups): every weight format, the four architectures among
    them, loads and gives the numpy model's greedy tokens (tests/test_engine.py's check);
  - the app with `?cap=mobile`: the device it made, the WGSL it compiled (no `enable subgroups`),
    the CLI's reply; and a limit the model cannot meet fails at the header with a `limits` error
    naming it, before any weight is uploaded, and leaves nothing in the cache.
Runs on the session's shared Pyodide page (py_page) and one app context.
"""
from __future__ import annotations

import json

import pytest

from bitweb import formats, gpu
from bitweb.gguf import open_gguf
from bitweb.numpy_model import NumpyModel
from bitweb.sampling import SamplingParams
from tests.conftest import ROOT
from tests.e2e.conftest import new_page
from tests.test_engine import check_same_greedy

MOBILE = dict(gpu.WEBGPU_MINIMUM)
MOBILE_MASK = ["shader-f16", "subgroups"]
ALL_MASKED = list(gpu.MASKABLE)
READY_MS = 240_000

DEVICE = """
if "_weak_devs" not in globals():
    _weak_devs = {}
async def weak_device(mask, caps):
    key = json.dumps([sorted(mask), sorted(caps.items())])
    if key not in _weak_devs:
        _weak_devs[key] = await gpu.request_device("browser", mask_features=mask, cap_limits=caps)
    return _weak_devs[key]
"""

KERNELS = DEVICE + r"""
import js, json, re, time
from bitweb import formats, gpu, kernel_check, shaders
a = json.loads(args_json)
dev = await weak_device(a["mask"], a["caps"])
full = await weak_device([], {})
man = json.loads(await (await js.fetch(a["base"] + "build/web/kernel_vectors.json")).text())
blob = js.Uint8Array.new(await (await js.fetch(a["base"] + "build/web/kernel_vectors.bin")).arrayBuffer()).to_bytes()
code = lambda d, s: shaders.specialise(shaders.source(s["shader"]), d, s["defines"], s["shader"])
bare = lambda c: re.sub(r"//[^\n]*|/\*.*?\*/", "", c, flags=re.S)          # the code without its comments
out = {"full": full.describe(), "weak": dev.describe(), "full_caps": full.caps.summary(), "weak_caps": dev.caps.summary(),
       "weak_limits": dev.limits, "results": [], "unchanged": [],
       "device_limits": {k: int(getattr(dev.device.limits, k)) for k in a["caps"]}}    # the browser's own
for case in man["cases"]:
    weak = [code(dev, s) for s in case["steps"]]
    if weak == [code(full, s) for s in case["steps"]]:
        out["unchanged"].append(case["name"])
        continue
    t0 = time.perf_counter()
    try:
        r = await kernel_check.run_case(dev, case, blob)
    except Exception as e:
        r = {"name": case["name"], "ok": False, "error": f"{type(e).__name__}: {e}"}
    r["s"] = round(time.perf_counter() - t0, 2)
    r["uses"] = sorted(w for w in ("enable subgroups", "subgroupAdd", "subgroupMax", "subgroupBroadcast", "enable f16",
                                   "dot4I8Packed") if any(w in bare(c) for c in weak))
    out["results"].append(r)
# where WebGPU's workgroup-memory limit falls, against shaders.workgroup_use: one F16 LM-head gemv
# (no subgroups, no xdirect: x staged in workgroup memory) at the limit exactly, and 32 bytes over
out["boundary"] = []
for k in a["boundary_k"]:
    key = ("lmhead", "gemv", {"K": k, "WG": 64, "RPW": 16, "RB": 2, "LANES": 16}, {"FORMAT": formats.F16})
    src = dev._code(dev.pipeline_key(*key))
    b = {"K": k, "estimate": shaders.workgroup_use(src, "gemv", key[2])["storage"], "error": "", "refused": ""}
    try:
        await dev._pipeline(src, "gemv", key[2], "limit-probe")         # (bypasses the check: the browser decides)
    except Exception as e:
        b["error"] = str(e)[:400]
    try:
        dev.check_pipelines([key])
    except gpu.LimitsError as e:
        b["refused"] = str(e)
    out["boundary"].append(b)
json.dumps(out)
"""


def test_kernel_cases_without_each_feature(py_page):
    """Every browser kernel case whose WGSL changes when subgroups, dot4I8Packed, shader-f16 and
    timestamp queries are masked (on the mobile limits) runs that way and matches its numpy reference;
    the variants really change: the compiled code has no subgroup builtin, no `enable`, no dot4. And
    bitweb's count of a kernel's workgroup memory (shaders.workgroup_use: what Device.check_pipelines
    refuses before a load uploads anything) agrees with the browser's own at the limit."""
    res = json.loads(py_page.run(KERNELS, base=py_page.server, mask=ALL_MASKED, caps=MOBILE, boundary_k=[3776, 3784]))
    # SwiftShader has subgroups and dot4 (so masking them changes kernels) but not shader-f16 (every
    # browser test runs the f16 fallback already)
    assert "subgroups" in res["full_caps"] and "dot4" in res["full_caps"], res["full"]
    assert res["weak_caps"] == "none", res["weak"]
    assert all(res["weak_limits"][k] == v for k, v in MOBILE.items()), res["weak_limits"]
    assert res["device_limits"] == MOBILE, res["device_limits"]         # what the browser enforces
    ran = {r["name"]: r for r in res["results"]}
    assert len(ran) >= 30, sorted(ran)                 # (43 change without subgroups, 31 without dot4: in one run)
    for family in ("bitlinear.gemv", "bitlinear_tiled", "lmhead", "ops.attention", "ops.sampling", "dense."):
        assert any(n.startswith(family) for n in ran), (family, sorted(ran))
    bad = [r for r in ran.values() if not r["ok"]]
    assert not bad, json.dumps(bad, indent=1)[:4000]
    assert not [(n, r["uses"]) for n, r in ran.items() if r["uses"]]
    # bitweb's workgroup-memory count is the browser's: 4 K + 256 + 1024 bytes fits 16384 at K = 3776,
    # and K = 3784 (32 bytes over) is refused by both, with the limit named
    fit, over = res["boundary"]
    assert (fit["estimate"], fit["error"], fit["refused"]) == (16384, "", ""), fit
    assert over["estimate"] == 16416 and over["error"] and "maxComputeWorkgroupStorageSize = 16384" in over["refused"], over
    assert "short by 32 bytes" in over["refused"], over
    from bitweb.ref import build_cases
    assert sorted([*ran, *res["unchanged"]]) == sorted(c["name"] for c in build_cases("browser").cases)
    assert not py_page.errors, py_page.errors


# ---------------------------------------------------------------- models on the mobile set

N = 10
PROMPT = "A weak GPU agrees"
ROUTE = "/weak-models/"
# every weight format once, each architecture among them (the table, the vocabulary and the
# shapes are shared, so the embedding, LM head, sampling and attention pipelines compile once)
CASES = [("bitnet-b1.58", "i2_s"), ("bitnet", "tq2_0"), ("llama", "tq1_0"), ("qwen3", "q1_0"), ("qwen3", "q2_0"),
         ("llama", "q2_0_g128"), ("bitnet-b1.58", "f32"), ("bitnet", "f16"), ("llama", "bf16"), ("qwen3", "q8_0")]

MODEL = DEVICE + """
import js, json
from bitweb import engine, gpu, sampling, webapp
a = json.loads(args_json)
dev = await weak_device(a["mask"], a["caps"])
blob = await (await js.fetch(a["url"])).blob()
eng = await engine.Engine.load(dev, await webapp.parse_header(blob), blob, activations=a["act"], prefill_rows=1)
try:
    ids = eng.tokenizer.encode(a["prompt"])
    res = await eng.generate(ids, sampling.SamplingParams(), a["n"], ignore_eos=True)
    logits = await eng.forward_logits(ids + a["want"]) if res.ids != a["want"] else None
    out = {"device": dev.describe(), "caps": dev.caps.summary(), "limits": dev.limits, "prompt_ids": ids, "ids": res.ids,
           "text": res.text, "arch": eng.cfg.arch, "linear": eng.cfg.linear_type.name, "logits": logits}
finally:
    eng.close()
json.dumps(out)
"""


@pytest.fixture(scope="module")
def weak_models(py_page, tiny_model):
    files = {f"{arch}-{fmt}.gguf": tiny_model(arch=arch, fmt=fmt, seed=3, vocab="qwen", embd_fmt="q1_0", n_ff=256)
             for arch, fmt in CASES}
    match = lambda url: ROUTE in url                                     # noqa: E731
    py_page.context.route(match, lambda route: route.fulfill(
        path=files[route.request.url.split(ROUTE)[1]], headers={"content-type": "application/octet-stream"}))
    yield files
    py_page.context.unroute(match)


@pytest.mark.parametrize("arch,fmt", CASES)
def test_mobile_set_gives_the_numpy_greedy_tokens(py_page, weak_models, arch, fmt):
    path = weak_models[f"{arch}-{fmt}.gguf"]
    act = "a8" if formats.by_name(fmt).packed else "f32"       # (float linears: the same kernels in both)
    ref = NumpyModel.from_gguf(open_gguf(path), act)
    ids = ref.tokenizer.encode(PROMPT)
    want = ref.generate(ids, SamplingParams(), N, ignore_eos=True)
    got = json.loads(py_page.run(MODEL, url=py_page.server + ROUTE.lstrip("/") + f"{arch}-{fmt}.gguf", act=act,
                                 prompt=PROMPT, n=N, want=want.ids, mask=MOBILE_MASK, caps=MOBILE))
    assert "acting as a weaker GPU" in got["device"] and "subgroups" not in got["caps"] and "f16" not in got["caps"], got["device"]
    assert all(got["limits"][k] == v for k, v in MOBILE.items()), got["limits"]
    assert (got["arch"], got["linear"]) == (arch, fmt.upper())
    assert got["prompt_ids"] == ids
    check_same_greedy(ref, ids, want, got["ids"], got["text"], act, lambda seq: got["logits"])
    assert not py_page.errors, py_page.errors


# ---------------------------------------------------------------- the app with ?cap=

APP_ROUTE = "/weak-app-models/"


def native_reply(path, prompt: str, n: int) -> dict:
    """`python -m bitweb generate PATH --chat --temperature 0 --json` on the native backend (all features)."""
    import subprocess
    import sys
    p = subprocess.run([sys.executable, "-m", "bitweb", "generate", str(path), "--chat", "--prompt", prompt, "--temperature", "0",
                        "--max-tokens", str(n), "--json", "--backend", "native"], capture_output=True, text=True,
                       timeout=600, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    return json.loads([ln for ln in p.stdout.splitlines() if ln.startswith("{")][-1])


def app_state(page, timeout=READY_MS):
    """Wait until the app is ready or shows an error; (state, error kind, error text)."""
    page.wait_for_function("document.body.dataset.state === 'ready' || !document.getElementById('error').hidden"
                           " || document.body.dataset.state === 'failed'", timeout=timeout)
    return page.evaluate("[document.body.dataset.state, document.getElementById('error').dataset.kind || null,"
                         " document.getElementById('error').hidden ? '' : document.getElementById('error').innerText]")


# the code of every pipeline the last load compiled, from the worker's pipeline manifest (web/worker.mjs)
MANIFESTS_JS = """async () => {
  const c = await caches.open('bitweb-pipelines');
  return Promise.all((await c.keys()).map((k) => c.match(k).then((r) => r.json())));
}"""


def test_app_cap_mobile_chats_as_the_cli_and_a_limit_fails_at_the_header(browser, server, tmp_path):
    from tests.conftest import write_tiny
    import re
    models = {"tiny.gguf": write_tiny(tmp_path / "tiny.gguf", seed=1),
              "wide.gguf": write_tiny(tmp_path / "wide.gguf", fmt="f32", seed=1)}    # f32 linears: 512 KiB for ffn_up
    want = native_reply(models["tiny.gguf"], PROMPT, 8)
    ctx = browser.new_context()
    ctx.route(lambda url: APP_ROUTE in url, lambda route: route.fulfill(
        path=models[route.request.url.split(APP_ROUTE)[1].split("?")[0]], headers={"content-type": "application/octet-stream"}))
    try:
        page = new_page(ctx)
        page.goto(server + f"?model={APP_ROUTE.lstrip('/')}tiny.gguf&cap=mobile")
        assert app_state(page)[0] == "ready", app_state(page)
        info = page.evaluate("({...window.bitwebApp.state.engine.info})")
        ad = info["adapter"]
        assert "subgroups" not in ad["features"] and "shader-f16" not in ad["features"], ad
        assert "acting as a weaker GPU" in ad["description"] and "no subgroups" in ad["description"], ad["description"]
        assert all(ad["limits"][k] == v for k, v in MOBILE.items()), ad["limits"]
        assert "no subgroups" in page.inner_text("#adapter")           # the page says so
        # the kernels compiled are the fallbacks: no subgroup code anywhere
        man = [m for m in page.evaluate(MANIFESTS_JS) if "subgroups" not in m["features"]]
        assert len(man) == 1 and man[0]["caps"] == MOBILE and man[0]["pipelines"], man
        code = [re.sub(r"//[^\n]*", "", p["code"]) for p in man[0]["pipelines"]]
        assert not [c[:80] for c in code if "subgroup" in c or "enable f16" in c]
        # and it answers as the native engine with every feature does
        page.fill("#s-temperature", "0")
        page.fill("#s-max_tokens", "8")
        page.fill("#input", PROMPT)
        page.press("#input", "Enter")
        page.wait_for_function("(document.querySelectorAll('.msg.assistant[data-done]').length >= 1"
                               " && document.body.dataset.state === 'ready') || !document.getElementById('error').hidden",
                               timeout=READY_MS)
        assert page.locator(".msg.assistant").last.evaluate("e => e.raw") == want["text"]

        # a model the capped GPU cannot hold: refused after its header, before any weight is uploaded,
        # and not kept in the cache; here by the app's shared engine (its default), whose downloads
        # the page's own worker writes into the cache before the engine reads the header
        assert info["shared"] is True, info["sharedNote"]
        page.goto(server + f"?model={APP_ROUTE.lstrip('/')}wide.gguf&cap=mobile,maxStorageBufferBindingSize:262144")
        state, kind, text = app_state(page)
        assert kind == "limits", (state, kind, text)
        assert "maxStorageBufferBindingSize = 262144" in text and "short by" in text, text
        seen = page.evaluate("window.bitwebApp.state.seen")
        assert "header" in seen and "upload" not in seen and "compile" not in seen, seen
        cached = page.evaluate("window.bitwebApp.bitweb.cache.list().then((l) => l.map((m) => m.name))")
        assert "wide.gguf" not in cached and "tiny.gguf" in cached, cached
        assert page.errors == [], page.errors
    finally:
        ctx.close()
