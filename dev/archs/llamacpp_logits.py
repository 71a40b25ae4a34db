"""bitweb's logits against llama.cpp's on the same generated GGUF files (issue 12's oracle).

    .venv/bin/python dev/archs/llamacpp_logits.py [--case qwen3:q1_0:q1_0 ...] [--n 32] [--json F]

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
and prints max |a - b| / max |b| and the argmax agreement for each pair. emul vs llama.cpp is the
check that both compute the same function (only float summation order differs); numpy vs
llama.cpp shows what llama.cpp's activation quantization costs.
"""
import argparse, json, os, subprocess, sys, tempfile

import numpy as np

if os.environ.get("LLAMA_SITE"):                 # llama-cpp-python from another venv, after this one's packages
    sys.path.append(os.environ["LLAMA_SITE"])

from bitweb import formats, gguf
from bitweb.numpy_model import Linear, NumpyModel

CASES = ("qwen3:q1_0:q1_0", "qwen3:q2_0:q2_0", "qwen3:tq2_0:f16", "qwen3:tq1_0:q8_0", "qwen3:bf16:f32",
         "llama:q1_0:q1_0", "llama:q2_0:f16", "llama:tq2_0:f16", "llama:tq1_0:bf16", "llama:f16:f16",
         "bitnet:tq2_0:f16", "bitnet:tq1_0:q8_0",
         "qwen2:q8_0:f16", "qwen2:q8_0:q8_0", "qwen2:tq2_0:f16", "qwen2:q1_0:q1_0",
         # ggml's integer types as linears and as tables (issue 26 item 1: generated files load in llama.cpp)
         "llama:q4_0:q8_0", "llama:q4_1:q8_0", "llama:q5_0:q4_0", "llama:q5_1:q5_1", "llama:q8_0:q4_1",
         "llama:q2_k:q4_k", "llama:q3_k:q6_k", "llama:q4_k:q5_k", "llama:q5_k:q2_k", "llama:q6_k:q3_k")
F32 = np.float32


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
    return {"rel_max": float(np.abs(a - b).max() / np.abs(b).max()),
            "argmax_agree": float((a.argmax(1) == b.argmax(1)).mean())}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", action="append", help="ARCH:FORMAT:EMBD_FORMAT (default: %s)" % ", ".join(CASES))
    ap.add_argument("--n", type=int, default=32, help="tokens in the sequence")
    ap.add_argument("--no-gpu", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args()
    import llama_cpp
    print(f"llama-cpp-python {llama_cpp.__version__}")
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for case in args.case or CASES:
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
            r = {"case": case, "n": args.n, "n_vocab": n_vocab, "logit_absmax": float(np.abs(L["llama.cpp"]).max())}
            for a, b in (("emul", "llama.cpp"), ("numpy", "llama.cpp"), ("gpu", "llama.cpp"), ("gpu", "numpy")):
                if a in L:
                    r[f"{a}~{b}"] = compare(L[a], L[b])
            results.append(r)
            print(case, "  ".join(f"{k}: {v['rel_max']:.1e} ({v['argmax_agree']:.0%})"
                                  for k, v in r.items() if "~" in k), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
