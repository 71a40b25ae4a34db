"""llama.cpp's tokenizer test set in the browser: Pyodide (Python 3.14, headless Chromium, booted from
build/web/bitweb.zip as the app boots it: the session's shared `py_page`) fetches each vocabulary
GGUF over HTTP, parses its header with bitweb.gguf, builds the Tokenizer and encodes every case of
its vectors; the ids must be the .out files' (tests/test_tokenizer_vocabs.py runs them in CPython).
The page reports how long each vocabulary took to fetch, parse, build and encode."""
from __future__ import annotations

import json
import os
import shutil

import pytest

from tests.conftest import ROOT
from tests.test_tokenizer_vocabs import MODELS, RUNS, have_models, read_cases

SERVED = ROOT / "build" / "web" / "vocab-tests"        # the app server serves build/web/


@pytest.fixture(scope="module")
def vocab_url(server):
    """URL of a folder of the app's server holding the vocabulary files (hard links into
    build/assets, a copy where links cannot be made). Same origin as the page: Chromium's local
    network access rules block a page's fetch to another loopback server, and Playwright's route
    interception moves the 70 MB through the DevTools protocol, several times slower."""
    have_models()
    SERVED.mkdir(parents=True, exist_ok=True)
    for name in RUNS:
        src, dst = MODELS / f"ggml-vocab-{name}.gguf", SERVED / f"ggml-vocab-{name}.gguf"
        if dst.exists() and dst.stat().st_size == src.stat().st_size and os.path.samefile(src, dst):
            continue
        dst.unlink(missing_ok=True)
        try:
            os.link(src, dst)
        except OSError:
            shutil.copyfile(src, dst)
    return server + "build/web/vocab-tests/"


CODE = """
import json, time, gc
from pyodide.http import pyfetch
from bitweb.gguf import BytesSource, read_gguf
from bitweb.tokenizer import Tokenizer
a = json.loads(args_json)
out = {}
for name, texts in a["cases"].items():
    t0 = time.perf_counter()
    data = await (await pyfetch(a["base"] + name)).bytes()
    t1 = time.perf_counter()
    md = read_gguf(BytesSource(data)).metadata
    t2 = time.perf_counter()
    tok = Tokenizer.from_metadata(md)
    t3 = time.perf_counter()
    ids = [tok.encode(s, add_bos=False) for s in texts]
    t4 = time.perf_counter()
    out[name] = {"ids": ids, "n_vocab": tok.n_vocab, "s": [round(x, 3) for x in (t1 - t0, t2 - t1, t3 - t2, t4 - t3)]}
    del data, md, tok
    gc.collect()
json.dumps(out)
"""


def test_llama_cpp_vectors_in_the_browser(py_page, vocab_url):
    cases = {name: read_cases(name) for name in RUNS}
    got = json.loads(py_page.run(CODE, base=vocab_url,
                                 cases={f"ggml-vocab-{name}.gguf": [t for t, _ in c] for name, c in cases.items()}))
    got = {name: got[f"ggml-vocab-{name}.gguf"] for name in RUNS}
    print("\nvocabulary: fetch, parse, build, encode (s) in Pyodide")
    for name in RUNS:
        print(f"  {name:15} {got[name]['n_vocab']:7} tokens  {got[name]['s']}")
    for name, c in cases.items():
        bad = [(t, want, ids) for (t, want), ids in zip(c, got[name]["ids"]) if ids != want]
        assert not bad, f"{name}: {len(bad)} of {len(c)} cases differ in Pyodide, e.g. {bad[:2]!r}"
    assert not py_page.errors, py_page.errors
