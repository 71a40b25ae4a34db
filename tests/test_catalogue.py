"""The model catalogue (web/catalogue.json, web/catalogue.mjs; issue 24): its GPU figures are the
ones tools/catalogue.py computes from the shapes, the shapes and types give the published file
sizes, each entry says truthfully whether this bitweb runs it, and fit() (JavaScript, run in node)
gives the verdict the engine's own checks give (generation.fit_context, upload.estimate_bytes,
upload.check_limits, run here on the same limits) for each entry and each set of ?cap= limits."""
from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
from types import SimpleNamespace

import pytest

from tests.conftest import ROOT, need

MiB = 1 << 20
GiB = 1 << 30


def tool():
    spec = importlib.util.spec_from_file_location("catalogue_tool", ROOT / "tools" / "catalogue.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


CAT = tool()
MODELS = CAT.load()["models"]


def node(script: str, arg) -> object:
    """Run an ES module script in node with `arg` (JSON) as process.argv[2]; its stdout, parsed."""
    need(shutil.which("node") is not None, "node is not installed")
    p = subprocess.run(["node", "--no-warnings", "--input-type=module", "-e", script, json.dumps(arg)],
                       capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_gpu_figures_are_the_ones_the_shapes_give():
    assert CAT.main(["--check"]) == 0, "web/catalogue.json is stale: run tools/catalogue.py"


@pytest.mark.parametrize("m", MODELS, ids=lambda m: m["id"])
def test_fit_figures_equal_the_recomputation(m):
    """Each entry's fit figures are what tools/catalogue.py computes from its shapes now."""
    assert m["gpu"] == CAT.gpu_figures(m), m["id"]


def test_entries_are_well_formed():
    ids = [m["id"] for m in MODELS]
    assert len(set(ids)) == len(ids) >= 10
    for m in MODELS:
        assert m["sha256"] is None or re.fullmatch(r"[0-9a-f]{64}", m["sha256"]), m["id"]
        assert m["license"] and m["family"] and m["name"], m["id"]
        assert m["unconfirmed"] is None or len(m["unconfirmed"]) > 20, m["id"]
        if not m["sizeExact"]:                       # an estimated size is said to be one
            assert "size" in (m["unconfirmed"] or ""), m["id"]
    names = {m["name"] for m in MODELS}
    for want in ("BitNet b1.58 2B4T", "Bonsai 1.7B", "Bonsai 4B", "Bonsai 8B", "Ternary Bonsai 1.7B",
                 "Falcon3 1B Instruct 1.58-bit", "Falcon3 3B Instruct 1.58-bit"):
        assert want in names


FACTS = ("size", "sha256", "revision", "shape")


@pytest.mark.parametrize("m", MODELS, ids=lambda m: m["id"])
def test_url_names_the_revision_or_says_why_not(m):
    """A URL of a branch (resolve/main) serves whatever is uploaded next: the file is pinned by its
    commit. Without a published commit the reason is stated and the SHA-256 refuses other bytes."""
    if m["revision"] is not None:
        assert re.fullmatch(r"[0-9a-f]{40}", m["revision"]), m["id"]
        assert m["url"] == f"https://huggingface.co/{m['repo']}/resolve/{m['revision']}/{m['file']}", m["id"]
    else:
        assert m["url"] == f"https://huggingface.co/{m['repo']}/resolve/main/{m['file']}", m["id"]
        assert m["sources"]["revision"]["agree"] == 0 and len(m["sources"]["revision"]["from"]) > 30, m["id"]
        assert m["sha256"] is not None, f"{m['id']}: neither a revision nor a SHA-256 pins the file"


@pytest.mark.parametrize("m", MODELS, ids=lambda m: m["id"])
def test_every_fact_says_where_it_comes_from(m):
    """sources: per fact, how many independent public sources agree and where; a fact no source
    publishes is null (sha256, revision) or flagged (sizeExact) with the reason in `from`."""
    assert set(m["sources"]) == set(FACTS), m["id"]
    for fact, s in m["sources"].items():
        assert isinstance(s["agree"], int) and s["agree"] >= 0 and len(s["from"]) > 15, (m["id"], fact, s)
    if m["sha256"] is None:
        assert m["sources"]["sha256"]["agree"] == 0, m["id"]
    else:
        assert m["sources"]["sha256"]["agree"] >= 1, m["id"]
    assert (m["revision"] is None) == (m["sources"]["revision"]["agree"] == 0), m["id"]
    assert m["sizeExact"] == (m["sources"]["size"]["agree"] >= 1), m["id"]


def test_published_values_are_the_catalogues():
    """Values public sources pin (the catalogue's `sources`): a typo here would make a download fail."""
    by = {m["id"]: m for m in MODELS}
    want = {
        "bonsai-1.7b": (248_302_272, "3d7c6c90dd98717a203adb22d5eacd2581850e40aa5327e144b97766cae5f7e3", "210a9e99f79cb184909d49595906526eb2b3dd9a"),
        "bonsai-4b": (572_270_624, "4524b3f997f0f06444e568d1f26e2efd69effa3218c7ad3047432fb171e42168", "78f2c2bacd0904ffaba24b4873ed975e5818354a"),
        "bonsai-8b": (1_158_654_496, "284a335aa3fb2ced3b1b01fcb40b08aa783e3b70832767f0dd2e3fdfa134bd54", "48516770dd04643643e9f9019a2a349cf26c5dbd"),
        "ternary-bonsai-1.7b": (463_290_464, "d97d94eb564590c9f0300e54d3f87bbbb25a78693d0ade9f6e177973dcb8228a", "cd31c84cdd826a33dd297ceac6e66e08dcd8f253"),
        "qwen2.5-0.5b-instruct": (675_710_816, "ca59ca7f13d0e15a8cfa77bd17e65d24f6844b554a7b6c12e07a5f89ff76844e", "9217f5db79a29953eb74d5343926648285ec7e67"),
        "smollm2-135m-instruct": (144_811_072, "c4a3dd037301b6ecea31d6da37f5cd793ead920dd5ddfe6d589294628d6ce66a", "9e6855bc4be717fca1ef21360a1db4b29d5c559a"),
    }
    for i, (size, sha, rev) in want.items():
        assert (by[i]["fileSize"], by[i]["sha256"], by[i]["revision"]) == (size, sha, rev), i
    # Bonsai's table has Qwen3's 151,669 rows: the 1.7B file's published tensor payload is exactly the layout's
    assert by["bonsai-1.7b"]["gpu"]["weightBytes"] == 242_357_152
    for i in ("bonsai-1.7b", "bonsai-4b", "bonsai-8b", "ternary-bonsai-1.7b"):
        assert by[i]["shape"]["n_vocab"] == 151_669, i
    assert by["smollm2-135m-instruct"]["repo"] == "unsloth/SmolLM2-135M-Instruct-GGUF"


@pytest.mark.parametrize("m", [m for m in MODELS if m["sizeExact"]], ids=lambda m: m["id"])
def test_published_size_is_the_shapes_tensors_plus_a_header(m):
    """The tensor table laid out from the shapes and types holds all but the file's header
    (metadata and vocabulary: 1-9 MB here): a wrong shape or type would be off by far more."""
    header = m["fileSize"] - m["gpu"]["weightBytes"]
    assert 1 * MiB < header < 12 * MiB, (m["id"], header)


def runnable(m) -> str | None:
    """Why this bitweb does not run the entry (None: it does), from bitweb's own registries."""
    from bitweb import formats, model, tokenizer

    def fmt(name):                      # the entry's type name -> its Format (None: bitweb has none)
        try:
            return formats.by_name(name)
        except formats.FormatError:
            return None
    if m["architecture"] not in model.ARCHS:
        return f"architecture ({m['architecture']})"
    if fmt(m["weights"]) not in model.LINEAR_TYPES:
        return f"weights ({m['weights']})"
    for t in (m["table"], m["output"]):
        if t is not None and fmt(t) not in model.EMBD_TYPES:
            return f"table ({t})"
    pre = m["shape"]["pre_tokenizer"]
    if pre is not None and pre not in tokenizer.PRE_TOKENIZERS:
        return f"pre-tokenizer ({pre})"
    return None


@pytest.mark.parametrize("m", MODELS, ids=lambda m: m["id"])
def test_runs_says_what_bitweb_runs(m):
    why = runnable(m)
    if why is None:
        assert m["runs"] is True, f"{m['id']}: bitweb runs it now: set runs to true"
    else:
        assert isinstance(m["runs"], str) and why in m["runs"], (m["id"], why, m["runs"])


# ---------------------------------------------------------------- fit(): JavaScript against the engine

def engine_verdict(m, limits: dict, gpu_memory: int | None) -> dict:
    """What loading the model with these limits does, by the engine's own functions (the steps of
    webapp.WebApp._load up to the buffers): {verdict, context} or {verdict: 'no', limit}."""
    from bitweb import generation, gpu, upload
    cfg, tensors = CAT.config(m), CAT.plan(m)
    gf = SimpleNamespace(tensors={t.name: t for t in tensors})
    model = SimpleNamespace(cfg=cfg, gguf=gf)
    binding, buffer = limits["maxStorageBufferBindingSize"], limits["maxBufferSize"]
    budget = generation.KV_BUDGET
    if gpu_memory:
        budget = max(0, min(budget, gpu_memory - upload.estimate_bytes(model, 0)))
    try:
        n_ctx, _ = generation.fit_context(cfg, None, min(binding, buffer), budget)
    except generation.ContextError as e:
        return {"verdict": "no", "limit": "maxStorageBufferBindingSize" if "maxStorageBufferBindingSize" in str(e) else "GPU memory"}
    if gpu_memory and upload.estimate_bytes(model, n_ctx) > gpu_memory:
        return {"verdict": "no", "limit": "GPU memory"}
    by = {t.name: t for t in tensors}
    embd = by["token_embd.weight"]
    dev = SimpleNamespace(max_binding=binding, max_buffer=buffer, limits=dict(limits),
                          max_storage_buffers=limits["maxStorageBuffersPerShaderStage"])
    h = SimpleNamespace(dev=dev, cfg=cfg, n_ctx=n_ctx, kv_cache="f16",
                        model=SimpleNamespace(tensors=lambda: tensors, token_embd=embd, gguf=gf,
                                              lm_head=by.get("output.weight", embd)))
    try:
        upload.check_limits(h)
    except gpu.LimitsError as e:
        return {"verdict": "no", "limit": re.search(r"maxStorageBuffersPerShaderStage|maxStorageBufferBindingSize|maxBufferSize",
                                                    str(e)).group(0)}
    return {"verdict": "fits" if n_ctx >= m["gpu"]["defaultContext"] else "smaller", "context": n_ctx}


CASES = {   # name: (limits, gpuMemory) — the adapter's limits as ?cap= leaves them
    "swiftshader": (dict(maxBufferSize=GiB, maxStorageBufferBindingSize=GiB, maxStorageBuffersPerShaderStage=8), None),
    "webgpu-defaults": (dict(maxBufferSize=256 * MiB, maxStorageBufferBindingSize=128 * MiB, maxStorageBuffersPerShaderStage=8), None),
    "binding-4MiB": (dict(maxBufferSize=GiB, maxStorageBufferBindingSize=4 * MiB, maxStorageBuffersPerShaderStage=8), None),
    "binding-1MiB": (dict(maxBufferSize=GiB, maxStorageBufferBindingSize=1 * MiB, maxStorageBuffersPerShaderStage=8), None),
    "binding-64KiB": (dict(maxBufferSize=GiB, maxStorageBufferBindingSize=64 << 10, maxStorageBuffersPerShaderStage=8), None),
    "buffer-32MiB": (dict(maxBufferSize=32 * MiB, maxStorageBufferBindingSize=128 * MiB, maxStorageBuffersPerShaderStage=8), None),
    "storage-buffers-4": (dict(maxBufferSize=GiB, maxStorageBufferBindingSize=GiB, maxStorageBuffersPerShaderStage=4), None),
    "memory-1.5GiB": (dict(maxBufferSize=GiB, maxStorageBufferBindingSize=GiB, maxStorageBuffersPerShaderStage=8), 1536 * MiB),
    "memory-400MiB": (dict(maxBufferSize=GiB, maxStorageBufferBindingSize=GiB, maxStorageBuffersPerShaderStage=8), 400 * MiB),
}

FIT_JS = """
const c = await import('./web/catalogue.mjs');
const cases = JSON.parse(process.argv[1]);
const out = {};
for (const [name, [limits, gpuMemory]] of Object.entries(cases)) {
  out[name] = Object.fromEntries(c.models.map((m) => [m.id, c.fit(m, { limits, gpuMemory })]));
}
console.log(JSON.stringify(out));
"""


def test_fit_gives_the_engines_verdict_for_each_cap():
    got = node(FIT_JS, CASES)
    seen = set()
    for name, (limits, gpu_memory) in CASES.items():
        for m in MODELS:
            want, js = engine_verdict(m, limits, gpu_memory), got[name][m["id"]]
            where = (name, m["id"], want, js)
            assert js["verdict"] == want["verdict"], where
            if want["verdict"] == "no":
                assert js["limit"] == want["limit"] and js["short"] > 0, where
                assert js["text"].startswith(f"will not fit: {want['limit']}, ") and "short by" in js["text"], where
            else:
                assert js["context"] == want["context"], where
                from bitweb import upload
                assert js["memory"] == upload.estimate_bytes(SimpleNamespace(cfg=CAT.config(m), gguf=CAT.gguf_of(m)), want["context"]), where
                if want["verdict"] == "smaller":
                    assert f"fits with a smaller context ({want['context']} of " in js["text"], where
            seen.add(want["verdict"] if want["verdict"] != "no" else want["limit"])
    # the cases reach every verdict and every limit fit() can name but storage (tests/e2e/test_downloads.py)
    assert seen >= {"fits", "smaller", "maxStorageBufferBindingSize", "maxBufferSize", "maxStorageBuffersPerShaderStage",
                    "GPU memory"}, seen


STORAGE_JS = """
const c = await import('./web/catalogue.mjs');
const m = c.models.find((e) => e.id === 'bonsai-1.7b');
const L = { maxBufferSize: 2 ** 30, maxStorageBufferBindingSize: 2 ** 30 };
const q = JSON.parse(process.argv[1]);
console.log(JSON.stringify(q.map((s) => c.fit(m, { limits: L, storage: s.storage, have: s.have, cached: s.cached }))));
"""


def test_storage_quota_is_part_of_the_verdict():
    size = next(m["fileSize"] for m in MODELS if m["id"] == "bonsai-1.7b")
    cases = [dict(storage=dict(usage=0, quota=size - 1)), dict(storage=dict(usage=10, quota=size + 10)),
             dict(storage=dict(usage=0, quota=size // 2), have=size // 2), dict(storage=dict(usage=0, quota=1), cached=True),
             dict(storage=dict(usage=5 * MiB, quota=size))]
    got = node(STORAGE_JS, cases)
    assert [g["verdict"] for g in got] == ["no", "fits", "fits", "fits", "no"], got
    assert got[0]["limit"] == "browser storage" and got[0]["short"] == 1
    assert got[4]["short"] == 5 * MiB and "short by 5.0 MiB" in got[4]["text"]


URL_JS = """
const c = await import('./web/catalogue.mjs');
console.log(JSON.stringify(JSON.parse(process.argv[1]).map((u) => c.resolveUrl(u, 'http://127.0.0.1:8080/'))));
"""


def test_pasted_addresses_become_resolve_urls():
    cases = {
        "hf:owner/repo/file.gguf": "https://huggingface.co/owner/repo/resolve/main/file.gguf",
        "hf:owner/repo/sub dir/file.gguf": "https://huggingface.co/owner/repo/resolve/main/sub%20dir/file.gguf",
        "hf:owner/repo@v1.0/file.gguf": "https://huggingface.co/owner/repo/resolve/v1.0/file.gguf",
        "https://huggingface.co/owner/repo/blob/main/file.gguf": "https://huggingface.co/owner/repo/resolve/main/file.gguf",
        "https://huggingface.co/owner/repo/blob/abc123/d/file.gguf?download=true": "https://huggingface.co/owner/repo/resolve/abc123/d/file.gguf",
        "https://huggingface.co/owner/repo/resolve/main/file.gguf": "https://huggingface.co/owner/repo/resolve/main/file.gguf",
        "https://example.com/blob/main/file.gguf": "https://example.com/blob/main/file.gguf",
        "models/x.gguf": "http://127.0.0.1:8080/models/x.gguf",
    }
    assert node(URL_JS, list(cases)) == list(cases.values())


def test_readme_model_list_is_the_catalogue():
    """README's table under "Models to download" has one row per entry, with its repository,
    revision, file, size and SHA-256 as the catalogue has them."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Models to download\n"):]
    section = section[:section.index("\n## ", 5)]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| Model |")]
    got = [[c.strip() for c in r.strip("|").split("|")] for r in rows]
    want = []
    for m in MODELS:
        rev = f"`{m['revision'][:12]}`" if m["revision"] else "`main` (none published)"
        want.append([m["name"], f"`{m['repo']}` @ {rev}", f"`{m['file']}`", f"{m['fileSize']:,}", f"`{m['sha256']}`"])
    assert got == want


NOTE_JS = """
const c = await import('./web/catalogue.mjs');
console.log(JSON.stringify(c.models.map((m) => [m.id, c.sourceNote(m)])));
"""


def test_the_app_says_what_rests_on_one_source_or_none():
    """web/catalogue.mjs sourceNote (shown beside the download button): every fact with fewer than two
    sources is named with its count, and nothing else."""
    got = dict(node(NOTE_JS, None))
    names = {"size": "its size", "sha256": "its SHA-256", "revision": "its revision", "shape": "its shapes"}
    seen = set()
    for m in MODELS:
        weak = [f for f in FACTS if m["sources"][f]["agree"] < 2]
        note = got[m["id"]]
        if not weak:
            assert note is None, (m["id"], note)
            continue
        for f in FACTS:
            n = m["sources"][f]["agree"]
            said = f"{names[f]} rests on {['no', 'one'][n]} public source" if n < 2 else None
            assert (said is not None and said in note) or (said is None and names[f] + " rests" not in note), (m["id"], f, note)
            if said:
                seen.add(n)
    assert seen == {0, 1}, seen                # the catalogue has facts on one source and on none (Falcon3)


DIFF_JS = """
const c = await import('./web/catalogue.mjs');
const m = c.models.find((e) => e.id === 'bonsai-1.7b');
const infos = JSON.parse(process.argv[1]);
console.log(JSON.stringify(infos.map((i) => c.headerDiff(m, i))));
"""


def test_header_diff_names_each_fact_the_header_decides():
    m = next(e for e in MODELS if e["id"] == "bonsai-1.7b")
    s = m["shape"]
    same = dict(arch="qwen3", n_ctx=32768, linear_type="Q1_0", n_layer=s["n_layer"], n_embd=s["n_embd"], n_head=s["n_head"],
                n_head_kv=s["n_head_kv"], n_ff=s["n_ff"], n_vocab=s["n_vocab"], tied=True, name="x.gguf")
    other = {**same, "n_vocab": 151936, "n_ctx": 40960, "linear_type": "Q2_0", "tied": False}
    got = node(DIFF_JS, [same, other, {}])
    assert got[0] == [] and got[2] == []
    assert got[1] == [{"fact": "context", "catalogue": 32768, "header": 40960},
                      {"fact": "weights", "catalogue": "Q1_0", "header": "Q2_0"},
                      {"fact": "n_vocab", "catalogue": 151669, "header": 151936},
                      {"fact": "tied", "catalogue": True, "header": False}]
