"""bitweb's logits against llama.cpp's on the same GGUF files: generated ones (issue 12's oracle)
and real ones (--file, e.g. the SmolLM2-135M-Instruct Q4_1 file of tools/setup.sh --test).

    .venv/bin/python dev/archs/llamacpp_logits.py [--case qwen3:q1_0:q1_0 ...] [--n 32] [--json F]
    .venv/bin/python dev/archs/llamacpp_logits.py --file build/assets/SmolLM2-135M-Instruct.Q4_1.gguf [--text T]

Needs llama-cpp-python (`pip install llama-cpp-python`: a source build of llama.cpp, ~15 min on 2
cores; CI does not build it; one built in another venv works when its site-packages directory is
appended to sys.path, e.g. `LLAMA_SITE=/path/to/site-packages`, read below). For each case ARCH:FORMAT:EMBD_FORMAT the script writes a small model
with `bitweb make-model` (the `tiny` preset's shapes, the arch's default vocabulary), checks that
llama.cpp loads it, and takes the logits of one teacher-forced sequence of random token ids from:
  llama.cpp   Llama(logits_all=True), f32 KV cache, 2 threads
  emul        bitweb's numpy model with llama.cpp's activation quantization: before each product
              the normed input is quantized the way ggml's CPU backend does for that weight type
              (Q8_0 blocks of 32 with an fp16 scale for Q1_0 / Q2_0 / Q8_0, Q8_K blocks of 256 for
              TQ1_0 / TQ2_0, f16 for F16, bf16 for BF16, none for F32)
  numpy       bitweb's numpy model, f32 activations (the exact mode)
  gpu         bitweb's native GPU engine (wgpu-py), f32 activations (`bitweb perplexity --logits-out`)
and prints max |a - b| / max |b| and the argmax agreement for each pair. A --file is taken as it
is, and the sequence is --text encoded by the file's tokenizer (llama.cpp's own tokenize must give
the same ids; the script checks). Q4_1 weights take Q8_1 activations in ggml (blocks of 32, fp16
d, and the block's sum as fp16 s = d * sum q for the min term): emul does that, with the reference
quantizer's rounding (half away from zero). llama-cpp-python need not be in bitweb's venv:
PYTHONPATH=<its site-packages> works when both are the same Python version. On the generated files
emul vs llama.cpp is the check that both compute the same function (only float summation order
differs); numpy vs llama.cpp shows what llama.cpp's activation quantization costs. On a real
trained model those roundings are chaotic (a float-order change moves emul's logits as much as
emul differs from llama.cpp: dev/archs/README.md), so argmax agreement and nll are what compare.
"""
import argparse, json, os, subprocess, sys, tempfile

import numpy as np

if os.environ.get("LLAMA_SITE"):                 # llama-cpp-python from another venv, after this one's packages
    sys.path.append(os.environ["LLAMA_SITE"])

from bitweb import formats, gguf
from bitweb.commands.perplexity import score
from bitweb.numpy_model import Linear, NumpyModel

CASES = ("qwen3:q1_0:q1_0", "qwen3:q2_0:q2_0", "qwen3:tq2_0:f16", "qwen3:tq1_0:q8_0", "qwen3:bf16:f32",
         "llama:q1_0:q1_0", "llama:q2_0:f16", "llama:tq2_0:f16", "llama:tq1_0:bf16", "llama:f16:f16",
         "bitnet:tq2_0:f16", "bitnet:tq1_0:q8_0",
         "qwen2:q8_0:f16", "qwen2:q8_0:q8_0", "qwen2:tq2_0:f16", "qwen2:q1_0:q1_0",
         # ggml's integer types as linears and as tables (issue 26 item 1: generated files load in llama.cpp)
         "llama:q4_0:q8_0", "llama:q4_1:q8_0", "llama:q5_0:q4_0", "llama:q5_1:q5_1", "llama:q8_0:q4_1",
         "llama:q2_k:q4_k", "llama:q3_k:q6_k", "llama:q4_k:q5_k", "llama:q5_k:q2_k", "llama:q6_k:q3_k")
F32 = np.float32
TEXT = ("The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris, France. "
        "It is named after the engineer Gustave Eiffel, whose company designed and built the tower "
        "from 1887 to 1889 as the centerpiece of the World's Fair.")


def q8_0(x):
    """ggml quantize_row_q8_0 then back to float: blocks of 32, d = fp16(amax / 127), q = roundf(x / d)."""
    b = x.reshape(-1, 32).astype(F32)
    d = np.abs(b).max(axis=1, keepdims=True) / F32(127)
    inv = np.where(d > 0, F32(1) / np.where(d > 0, d, 1), 0).astype(F32)
    q = np.trunc(b * inv + np.copysign(F32(0.5), b * inv))           # roundf: half away from zero
    return (q * d.astype(np.float16).astype(F32)).reshape(x.shape)


def q8_k(x):
    """ggml quantize_row_q8_K then back to float: blocks of 256, iscale = -127 / (the value of
    largest |x|), q = min(127, nearest_int(iscale x)), d = 1 / iscale."""
    b = x.reshape(-1, 256).astype(F32)
    mx = np.take_along_axis(b, np.abs(b).argmax(axis=1)[:, None], axis=1)
    iscale = np.where(mx != 0, F32(-127) / np.where(mx != 0, mx, 1), 0).astype(F32)
    q = np.minimum(127, np.rint(iscale * b))
    d = np.where(iscale != 0, F32(1) / np.where(iscale != 0, iscale, 1), 0).astype(F32)
    return (q * d).reshape(x.shape)


def bf16(x):
    u = x.astype(F32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16 << 16                    # round to nearest even
    return u.astype(np.uint32).view(F32)


def q8_1(x):
    """ggml quantize_row_q8_1_ref, kept in parts: q [n, blocks, 32], fp16 d and fp16 s = d * sum q
    per block (vec_dot_q4_1_q8_1: d4 d8 (t . q) + m4 s)."""
    b = x.reshape(x.shape[0], -1, 32).astype(F32)
    d = np.abs(b).max(axis=2) / F32(127)
    inv = np.where(d > 0, F32(1) / np.where(d > 0, d, 1), 0).astype(F32)
    bi = b * inv[..., None]
    q = np.trunc(bi + np.copysign(F32(0.5), bi))
    half = lambda v: v.astype(np.float16).astype(np.float64)
    return q, half(d), half(q.sum(axis=2) * d)


ACT = {formats.Q1_0: q8_0, formats.Q2_0: q8_0, formats.Q8_0: q8_0, formats.TQ1_0: q8_k, formats.TQ2_0: q8_k,
       formats.F16: lambda x: x.astype(np.float16).astype(F32), formats.BF16: bf16, formats.F32: lambda x: x,
       # ggml's vec_dot_type: Q8_0 for Q4_0 / Q5_0, Q8_1 (the same values, plus a block sum) for Q4_1 /
       # Q5_1, Q8_K for the K-quants
       formats.Q4_0: q8_0, formats.Q5_0: q8_0, formats.Q4_1: q8_0, formats.Q5_1: q8_0,
       formats.Q2_K: q8_k, formats.Q3_K: q8_k, formats.Q4_K: q8_k, formats.Q5_K: q8_k, formats.Q6_K: q8_k}


class GgmlLinear(Linear):
    """A linear as llama.cpp's CPU backend computes it: rms_norm, times the norm weight, the
    activations quantized for the weight type (ACT), then the product with the exact weights."""

    def __init__(self, gf, ti, scale_ti=None):
        super().__init__(gf, ti, scale_ti)
        self.format = ti.format

    def __call__(self, x, nw, eps, a8):
        x = x.astype(F32)
        if nw is not None:
            x = x / np.sqrt((x * x).mean(axis=1, keepdims=True) + F32(eps)) * nw
        if self.format is formats.Q4_1:                         # Q8_1 activations, min term from s
            q, d8, s8 = q8_1(x)
            n_out, nb = self.d.shape
            dots = np.einsum("nbk,obk->nob", q, self.t.reshape(n_out, nb, -1).astype(F32), dtype=np.float64)
            y = np.einsum("nob,ob,nb->no", dots, self.d.astype(np.float64), d8) + s8 @ self.o.T.astype(np.float64)
        else:
            y = ACT[self.format](x).astype(np.float64) @ self.w.T.astype(np.float64)
        return (y if self.scale is None else y * self.scale).astype(F32)


def make(arch, fmt, embd, out):
    cmd = [sys.executable, "-m", "bitweb", "make-model", "--arch", arch, "--format", fmt,
           "--embd-format", embd, "--preset", "tiny", "--out", out]
    if arch in ("qwen3", "qwen2"):
        cmd += ["--vocab", "qwen"]
    subprocess.run(cmd, check=True, capture_output=True)


def llamacpp(path, ids):
    from llama_cpp import Llama
    llm = Llama(model_path=path, n_ctx=len(ids), n_batch=len(ids), n_ubatch=len(ids), logits_all=True,
                n_threads=2, type_k=0, type_v=0, verbose=False)       # type 0: GGML_TYPE_F32 KV cache
    llm.eval(ids)
    return np.array(llm.scores[:len(ids)], F32)


def check_tokens(path, text, ids):
    from llama_cpp import Llama
    llm = Llama(model_path=path, n_ctx=8, vocab_only=True, verbose=False)
    theirs = llm.tokenize(text.encode(), add_bos=False, special=False)
    assert list(theirs) == list(ids), ("llama.cpp tokenizes the text otherwise", theirs, ids)


def numpy_logits(path, ids, emulate):
    gf = gguf.open_gguf(path)
    nm = NumpyModel.from_gguf(gf, activations="f32", kv_cache="f32",     # llama.cpp runs with an F32 cache here
                              linear=GgmlLinear if emulate else None)
    if emulate:
        nm.head = GgmlLinear(gf, nm.model.lm_head)
    return nm.logits(ids).astype(F32)


def gpu_logits(path, ids, tmp):
    out = os.path.join(tmp, "gpu.npy")
    subprocess.run([sys.executable, "-m", "bitweb", "perplexity", path, "--backend", "native",
                    "--activations", "f32", "--kv-cache", "f32", "--ids", " ".join(map(str, ids)), "--logits-out", out],
                   check=True, capture_output=True)
    return np.load(out)


def compare(a, b):
    return {"rel_max": float(np.abs(a - b).max() / np.abs(b).max()), "abs_max": float(np.abs(a - b).max()),
            "argmax_agree": float((a.argmax(1) == b.argmax(1)).mean())}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", action="append", help="ARCH:FORMAT:EMBD_FORMAT (default: %s)" % ", ".join(CASES))
    ap.add_argument("--n", type=int, default=32, help="tokens in the sequence (generated files)")
    ap.add_argument("--file", action="append", help="a real GGUF file, as it is (instead of --case)")
    ap.add_argument("--text", default=TEXT, help="--file: the text whose ids are compared")
    ap.add_argument("--no-gpu", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args()
    import llama_cpp
    print(f"llama-cpp-python {llama_cpp.__version__}")
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for case in args.file or args.case or CASES:
            if args.file:
                path = case
                gf = gguf.open_gguf(path)
                ids = NumpyModel.from_gguf(gf, max_context=2).tokenizer.encode(args.text)
                n_vocab = len(gf.metadata["tokenizer.ggml.tokens"])
                check_tokens(path, args.text, ids)
            else:
                arch, fmt, embd = case.split(":")
                path = os.path.join(tmp, case.replace(":", "-") + ".gguf")
                make(arch, fmt, embd, path)
                gf = gguf.open_gguf(path)
                n_vocab = len(gf.metadata["tokenizer.ggml.tokens"])
                ids = np.random.default_rng(0).integers(0, n_vocab, args.n).tolist()
            L = {"llama.cpp": llamacpp(path, ids), "emul": numpy_logits(path, ids, True),
                 "numpy": numpy_logits(path, ids, False)}
            if not args.no_gpu:
                L["gpu"] = gpu_logits(path, ids, tmp)
            r = {"case": case, "n": len(ids), "n_vocab": n_vocab, "logit_absmax": float(np.abs(L["llama.cpp"]).max())}
            for a, b in (("emul", "llama.cpp"), ("numpy", "llama.cpp"), ("gpu", "llama.cpp"), ("gpu", "numpy")):
                if a in L:
                    r[f"{a}~{b}"] = compare(L[a], L[b])
            if args.file:                          # real text: each one's mean -log p of the next id
                r["nll"] = {k: score(v, ids, [(0, len(ids))])[1] / (len(ids) - 1) for k, v in L.items()}
                print("nll", "  ".join(f"{k}: {v:.5f}" for k, v in r["nll"].items()))
            results.append(r)
            print(case, "  ".join(f"{k}: {v['rel_max']:.1e} ({v['argmax_agree']:.0%})"
                                  for k, v in r.items() if "~" in k), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
