"""The real file in the browser: SmolLM2-135M-Instruct as shipped (build/assets/, fetched by
tools/setup.sh --test; llama, 30 blocks, n_embd 576, vocabulary 49152 with the gpt2 BPE and the
smollm pre-tokenizer, a ChatML template, Q4_1 linears and a tied Q8_0 embedding / LM head), in
headless Chromium on SwiftShader:

- the GPU engine through Pyodide against the numpy model (bitweb.numpy_model, run here in CPython):
  64 greedy tokens, f32 activations, equal token for token;
- the app, the file opened through "Open file" (#file-input): "What is the capital of France?"
  gets the reply the CLI (`python -m bitweb generate ... --chat`, same settings, run here) prints,
  token for token, and it names Paris;
- a soak (issue 25): turns across conversations in a small context, overflowing it and going on
  "without the oldest turns" on the way: no growth in the wasm heap, the live GPU buffers, the
  worker's or the page's JS heap, and the answers after it equal a fresh page's. The default run
  is SOAK_TURNS turns; `npm run soak` runs the full 200 turns in 20 conversations and prints its
  figures (PERFORMANCE.md keeps them).
"""
from __future__ import annotations

import json
import os
import shutil

import pytest

from tests.conftest import ROOT, need

SMOLLM2 = ROOT / "build" / "assets" / "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="module")
def smollm2():
    need(SMOLLM2.exists(), f"{SMOLLM2.relative_to(ROOT)} is missing: run tools/setup.sh --test")
    return SMOLLM2


@pytest.fixture(scope="module")
def smollm2_url(server, smollm2):
    """The file's address on the app's own server (under build/web/, a hard link). Not a Playwright
    route: a route sends its body to the browser over the DevTools pipe, base64-encoded, and a 98 MB
    file is over the pipe's 100 MiB buffer (Chromium then closes the connection: "Too large read
    data is pending", and every page of the browser is gone)."""
    served = ROOT / "build" / "web" / f"real-{os.getpid()}"
    served.mkdir(parents=True, exist_ok=True)
    try:
        os.link(smollm2, served / smollm2.name)
    except OSError:
        shutil.copyfile(smollm2, served / smollm2.name)
    yield f"{server}build/web/{served.name}/{smollm2.name}"
    shutil.rmtree(served)


# ---------------------------------------------------------------- the engine against numpy

N = 64
PROMPT = "The capital of France is"

ENGINE = """
import js, json
from bitweb import engine, gpu, sampling, webapp
a = json.loads(args_json)
if "_engine_dev" not in globals():
    _engine_dev = await gpu.request_device()
blob = await (await js.fetch(a["url"])).blob()
eng = await engine.Engine.load(_engine_dev, await webapp.parse_header(blob), blob, activations="f32")
try:
    ids = eng.tokenizer.encode(a["prompt"])
    res = await eng.generate(ids, sampling.SamplingParams(), a["n"], ignore_eos=True)
    out = {"device": _engine_dev.describe(), "prompt_ids": ids, "ids": res.ids, "text": res.text,
           "tables": [eng.table_type(eng.model.token_embd).name, eng.table_type(eng.model.lm_head).name],
           "arch": eng.cfg.arch, "linear": eng.cfg.linear_type.name, "layers": eng.cfg.n_layer}
finally:
    eng.close()
json.dumps(out)
"""


def test_engine_in_the_browser_equals_numpy_on_smollm2(py_page, smollm2, smollm2_url):
    from bitweb.gguf import open_gguf
    from bitweb.numpy_model import NumpyModel
    from bitweb.sampling import SamplingParams
    ref = NumpyModel.from_gguf(open_gguf(smollm2), "f32")
    ids = ref.tokenizer.encode(PROMPT)
    want = ref.generate(ids, SamplingParams(), N, ignore_eos=True)
    got = json.loads(py_page.run(ENGINE, url=smollm2_url, prompt=PROMPT, n=N))
    assert got["device"].startswith("browser"), got["device"]
    assert (got["arch"], got["linear"], got["tables"], got["layers"]) == ("llama", "Q4_1", ["Q8_0", "Q8_0"], 30)
    assert got["prompt_ids"] == ids
    assert got["ids"] == want.ids and got["text"] == want.text
    assert not py_page.errors, py_page.errors
