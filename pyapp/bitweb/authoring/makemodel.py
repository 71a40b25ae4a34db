"""`bitweb make-model`: BitNet GGUF files with random ternary weights, laid out like the published file.

Architecture `bitnet-b1.58` (default) reproduces microsoft/bitnet-b1.58-2B-4T-gguf
`ggml-model-i2_s.gguf` (GGUF v3): the same 24 metadata keys in the same order and with the
same value types (see PUBLISHED_KEYS), the same tensor names, types and GGUF shapes:

    token_embd.weight            F16  [n_embd, n_vocab]      (tied LM head: no output.weight)
    blk.N.attn_norm.weight       F32  [n_embd]
    blk.N.attn_q.weight          LIN  [n_embd, n_head * head_dim]
    blk.N.attn_k.weight          LIN  [n_embd, n_head_kv * head_dim]
    blk.N.attn_v.weight          LIN  [n_embd, n_head_kv * head_dim]
    blk.N.attn_sub_norm.weight   F32  [n_head * head_dim]
    blk.N.attn_output.weight     LIN  [n_head * head_dim, n_embd]
    blk.N.ffn_norm.weight        F32  [n_embd]
    blk.N.ffn_gate.weight        LIN  [n_embd, n_ff]
    blk.N.ffn_up.weight          LIN  [n_embd, n_ff]
    blk.N.ffn_sub_norm.weight    F32  [n_ff]
    blk.N.ffn_down.weight        LIN  [n_ff, n_embd]
    output_norm.weight           F32  [n_embd]

LIN is the --format type (published: I2_S, whose data is n/4 packed bytes + f32 scale + 28
zero bytes). The published tensor *order* could not be checked (no dump found); this file
uses token_embd, then the blocks in data-flow order, then output_norm.

Architecture `bitnet` is llama.cpp's (1bitLLM b1.58 models, SiLU-gated FFN): same tensors,
keys under `bitnet.`, plus rope.scaling keys and tokenizer.ggml.pre as llama.cpp's converter
writes them, and the vocabulary's chat template (the 2B4T tokenizer_config.json one). The
bitnet-b1.58 files carry the published file's placeholder template (PUBLISHED_CHAT_TEMPLATE)
and, like it, no tokenizer.ggml.pre / eot_token_id.

llama.cpp also loads optional `blk.N.<linear>.scale` tensors (F32, shape [1]) that multiply
each linear's output. Its current converter (convert_hf_to_gguf.py BitnetModel) does
not write them (the scale is folded into the TQ block scales); we write them for tq1_0/tq2_0
(`--scale-tensors auto`) so engines exercise that path: the weight then holds s/f and the
.scale tensor f, f uniform in [0.5, 2].

Random weights (numpy default_rng, one generator per tensor seeded by (seed, crc32(name)),
so a tensor does not depend on the preset's other tensors or on --layers):
  - linear: t uniform in {-1, 0, +1} (signs in {-1, +1} for q1_0), numpy shape (n_out, n_in);
    absmean-style scale s = G * g / sqrt(p * n_in), p = fraction of nonzeros (2/3 or 1),
    g uniform in [0.8, 1.25], so y = W x keeps rms ~ G for rms-1 inputs. G (GAIN) is 1, but
    1.5 for attn_q/k (sharper attention) and 3 for attn_output/ffn_down (the residual stream
    outgrows the input embedding, else the tied head keeps predicting the input token and
    greedy decoding repeats it). I2_S stores s once;
    TQ2_0/TQ1_0 one d per 256 and Q1_0 one d per 128, each s times uniform [0.9, 1.1];
    f32/f16/bf16 store the dequantized values s * t.
  - norms: 1 + 0.05 * N(0, 1);  token_embd: N(0, (3 / sqrt(n_embd))^2), so tied logits have
    std ~ 3 (varied, not degenerate, sampling).
Tensors are generated and written one at a time (the 657 MB embedding in row chunks), so
peak memory is one linear weight, not the model.
"""
from __future__ import annotations

import math
import zlib
from dataclasses import dataclass

from bitweb import formats
from bitweb.authoring.gguf_writer import ARRAY, BOOL, FLOAT32, INT32, STRING, UINT32, GGUFWriter, Value

PRESETS = {
    # n_in of every linear (n_embd, n_head*head_dim, n_ff) is a multiple of 256 (TQ blocks)
    "tiny": dict(n_embd=256, n_layer=2, n_head=4, n_head_kv=2, n_ff=512, n_ctx=1024),
    "small": dict(n_embd=1024, n_layer=4, n_head=8, n_head_kv=2, n_ff=2816, n_ctx=2048),
    "2b4t": dict(n_embd=2560, n_layer=30, n_head=20, n_head_kv=5, n_ff=6912, n_ctx=4096),
}
ROPE_FREQ_BASE = 500000.0
RMS_EPS = 1e-5

LINEAR_TYPE = {"i2_s": "I2_S", "tq2_0": "TQ2_0", "tq1_0": "TQ1_0", "q1_0": "Q1_0",
               "f16": "F16", "bf16": "BF16", "f32": "F32"}
# general.file_type (llama_ftype): 40 = LLAMA_FTYPE_MOSTLY_I2_S in bitnet.cpp (the published
# value); upstream llama.cpp uses 36/37 for TQ1_0/TQ2_0 and 40 for Q1_0.
FILE_TYPE = {"i2_s": 40, "f32": 0, "f16": 1, "bf16": 32, "tq1_0": 36, "tq2_0": 37, "q1_0": 40}

BLOCK_TENSORS = ["attn_norm", "attn_q", "attn_k", "attn_v", "attn_sub_norm", "attn_output",
                 "ffn_norm", "ffn_gate", "ffn_up", "ffn_sub_norm", "ffn_down"]
LINEARS = ["attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"]

# The chat template of the published file: hard-coded by bitnet.cpp's
# utils/convert-ms-to-gguf-bitnet.py (a placeholder that does not match training).
PUBLISHED_CHAT_TEMPLATE = (
    "{% for message in messages %}{% if loop.first %}{{ bos_token }}{% endif %}"
    "{% if message['role'] == 'user' %}{{ 'Human: ' + message['content'] + '\\n\\nBITNETAssistant: ' + eos_token }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token }}{% endif %}{% endfor %}")
# Metadata of the published file, in its order: (key, GGUF value type). "{a}" = architecture.
PUBLISHED_KEYS = [
    ("general.architecture", STRING), ("general.name", STRING),
    ("{a}.vocab_size", UINT32), ("{a}.context_length", UINT32), ("{a}.embedding_length", UINT32),
    ("{a}.block_count", UINT32), ("{a}.feed_forward_length", UINT32),
    ("{a}.rope.dimension_count", UINT32), ("{a}.attention.head_count", UINT32),
    ("{a}.attention.head_count_kv", UINT32), ("tokenizer.ggml.add_bos_token", BOOL),
    ("{a}.attention.layer_norm_rms_epsilon", FLOAT32), ("{a}.rope.freq_base", FLOAT32),
    ("general.file_type", UINT32), ("tokenizer.ggml.model", STRING),
    ("tokenizer.ggml.tokens", (ARRAY, STRING)), ("tokenizer.ggml.scores", (ARRAY, FLOAT32)),
    ("tokenizer.ggml.token_type", (ARRAY, INT32)), ("tokenizer.ggml.merges", (ARRAY, STRING)),
    ("tokenizer.ggml.bos_token_id", UINT32), ("tokenizer.ggml.eos_token_id", UINT32),
    ("tokenizer.ggml.padding_token_id", UINT32), ("tokenizer.chat_template", STRING),
    ("general.quantization_version", UINT32),
]
# llama.cpp's `bitnet` (convert_hf_to_gguf.py TextModel + BitnetModel + gpt2 vocab)
BITNET_KEYS = [
    ("general.architecture", STRING), ("general.name", STRING),
    ("{a}.vocab_size", UINT32), ("{a}.context_length", UINT32), ("{a}.embedding_length", UINT32),
    ("{a}.block_count", UINT32), ("{a}.feed_forward_length", UINT32),
    ("{a}.rope.dimension_count", UINT32), ("{a}.attention.head_count", UINT32),
    ("{a}.attention.head_count_kv", UINT32), ("{a}.rope.freq_base", FLOAT32),
    ("{a}.attention.layer_norm_rms_epsilon", FLOAT32), ("{a}.rope.scaling.type", STRING),
    ("{a}.rope.scaling.factor", FLOAT32), ("general.file_type", UINT32),
    ("general.quantization_version", UINT32),
    ("tokenizer.ggml.model", STRING), ("tokenizer.ggml.pre", STRING),
    ("tokenizer.ggml.tokens", (ARRAY, STRING)), ("tokenizer.ggml.scores", (ARRAY, FLOAT32)),
    ("tokenizer.ggml.token_type", (ARRAY, INT32)), ("tokenizer.ggml.merges", (ARRAY, STRING)),
    ("tokenizer.ggml.bos_token_id", UINT32), ("tokenizer.ggml.eos_token_id", UINT32),
    ("tokenizer.ggml.padding_token_id", UINT32), ("tokenizer.ggml.add_bos_token", BOOL),
    ("tokenizer.chat_template", STRING),
]
TOKEN_TYPE_CONTROL = 3


class MakeModelError(ValueError):
    """Bad make-model options or vocabulary: names the option / key."""


@dataclass(frozen=True)
class ModelSpec:
    arch: str
    fmt: str              # --format value, e.g. "i2_s"
    preset: str
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    n_ff: int
    n_ctx: int
    seed: int
    scale_tensors: bool   # write blk.N.<linear>.scale tensors (arch bitnet only)

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    @property
    def linear_type(self) -> str:
        return LINEAR_TYPE[self.fmt]


def spec_from_args(args) -> ModelSpec:
    if args.preset not in PRESETS:
        raise MakeModelError(f"--preset {args.preset!r}: known presets are {', '.join(PRESETS)}")
    if args.format not in LINEAR_TYPE:
        raise MakeModelError(f"--format {args.format!r}: known formats are {', '.join(LINEAR_TYPE)}")
    if args.arch not in ("bitnet-b1.58", "bitnet"):
        raise MakeModelError(f"--arch {args.arch!r}: must be bitnet-b1.58 or bitnet")
    p = dict(PRESETS[args.preset])
    if args.layers is not None:
        if args.layers < 1:
            raise MakeModelError(f"--layers must be >= 1, got {args.layers}")
        p["n_layer"] = args.layers
    if args.seed < 0:
        raise MakeModelError(f"--seed must be >= 0, got {args.seed}")
    mode = getattr(args, "scale_tensors", "auto") or "auto"
    if mode == "auto":
        scale = args.arch == "bitnet" and args.format in ("tq1_0", "tq2_0")
    elif mode in ("on", "off"):
        scale = mode == "on"
        if scale and args.arch != "bitnet":
            raise MakeModelError("--scale-tensors on: .scale tensors exist only in --arch bitnet")
    else:
        raise MakeModelError(f"--scale-tensors {mode!r}: must be auto, on or off")
    return ModelSpec(arch=args.arch, fmt=args.format, preset=args.preset, seed=args.seed,
                     scale_tensors=scale, **p)


# ------------------------------------------------------------------ vocabulary + metadata

def load_vocab(which: str) -> dict:
    """tokenizer.* metadata from bitweb.authoring.vocab: "bytes" (tiny byte BPE) or "llama3"."""
    from bitweb.authoring import vocab
    if which == "bytes":
        return vocab.bytes_vocab()
    if which == "llama3":
        return vocab.llama3_vocab()
    raise MakeModelError(f"--vocab {which!r}: must be llama3 or bytes")


def _typed(key: str, vtype, value) -> Value:
    """Give a plain value the type the key has in the published file."""
    if isinstance(value, Value):
        got = (value.vtype, value.subtype) if value.vtype == ARRAY else value.vtype
        if got != vtype:
            raise MakeModelError(f"metadata {key!r}: vocabulary gives type {got}, the published file has {vtype}")
        return value
    if isinstance(vtype, tuple):
        return Value(ARRAY, value, vtype[1])
    return Value(vtype, value)


def complete_vocab(voc: dict) -> dict:
    """Fill tokenizer keys a vocabulary may leave out, as bitnet.cpp's converter writes them:
    scores 0.0 (-1000.0 for CONTROL tokens), padding = eos, add_bos_token = True."""
    v = dict(voc)
    for key in ("tokenizer.ggml.model", "tokenizer.ggml.tokens", "tokenizer.ggml.token_type",
                "tokenizer.ggml.merges", "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"):
        if key not in v:
            raise MakeModelError(f"vocabulary has no {key!r}")

    def plain(x):
        return x.value if isinstance(x, Value) else x
    n = len(plain(v["tokenizer.ggml.tokens"]))
    types = plain(v["tokenizer.ggml.token_type"])
    if len(types) != n:
        raise MakeModelError(f"vocabulary: {len(types)} token types for {n} tokens")
    if "tokenizer.ggml.scores" not in v:
        v["tokenizer.ggml.scores"] = [-1000.0 if t == TOKEN_TYPE_CONTROL else 0.0 for t in types]
    v.setdefault("tokenizer.ggml.padding_token_id", plain(v["tokenizer.ggml.eos_token_id"]))
    v.setdefault("tokenizer.ggml.add_bos_token", True)
    for key in ("tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.padding_token_id"):
        if not 0 <= plain(v[key]) < n:
            raise MakeModelError(f"vocabulary: {key} = {plain(v[key])} is not a token id (< {n})")
    return v


def build_metadata(spec: ModelSpec, voc: dict) -> list[tuple[str, Value]]:
    """The metadata pairs, in file order, for a completed vocabulary."""
    a = spec.arch
    n_vocab = len(voc["tokenizer.ggml.tokens"].value if isinstance(voc["tokenizer.ggml.tokens"], Value)
                  else voc["tokenizer.ggml.tokens"])
    values = {
        "general.architecture": a,
        "general.name": f"bitweb-random-{spec.preset}-{spec.fmt}-seed{spec.seed}",
        "{a}.vocab_size": n_vocab, "{a}.context_length": spec.n_ctx,
        "{a}.embedding_length": spec.n_embd, "{a}.block_count": spec.n_layer,
        "{a}.feed_forward_length": spec.n_ff, "{a}.rope.dimension_count": spec.head_dim,
        "{a}.attention.head_count": spec.n_head, "{a}.attention.head_count_kv": spec.n_head_kv,
        "{a}.attention.layer_norm_rms_epsilon": RMS_EPS, "{a}.rope.freq_base": ROPE_FREQ_BASE,
        "{a}.rope.scaling.type": "linear", "{a}.rope.scaling.factor": 1.0,
        "general.file_type": FILE_TYPE[spec.fmt], "general.quantization_version": 2,
    }
    if a == "bitnet-b1.58":
        values["tokenizer.chat_template"] = PUBLISHED_CHAT_TEMPLATE
    if a == "bitnet":
        values["tokenizer.ggml.pre"] = voc.get("tokenizer.ggml.pre", "llama-bpe")
    out = []
    for key, vtype in (PUBLISHED_KEYS if a == "bitnet-b1.58" else BITNET_KEYS):
        if key in values:
            val = values[key]
        elif key in voc:
            val = voc[key]
        else:
            raise MakeModelError(f"vocabulary has no {key!r}")
        out.append((key.replace("{a}", a), _typed(key, vtype, val)))
    return out


# ------------------------------------------------------------------ tensor plan + data

@dataclass(frozen=True)
class TensorPlan:
    name: str
    shape: tuple          # GGUF order
    type_name: str
    kind: str             # "embd", "norm", "linear", "scale"
    linear: str = ""      # for "scale": the weight it scales

    @property
    def nbytes(self) -> int:
        return formats.by_name(self.type_name).nbytes(math.prod(self.shape))


def plan_tensors(spec: ModelSpec, n_vocab: int) -> list[TensorPlan]:
    e, qd, kvd, ff = spec.n_embd, spec.n_head * spec.head_dim, spec.n_head_kv * spec.head_dim, spec.n_ff
    shapes = {"attn_norm": (e,), "attn_q": (e, qd), "attn_k": (e, kvd), "attn_v": (e, kvd),
              "attn_sub_norm": (qd,), "attn_output": (qd, e), "ffn_norm": (e,), "ffn_gate": (e, ff),
              "ffn_up": (e, ff), "ffn_sub_norm": (ff,), "ffn_down": (ff, e)}
    out = [TensorPlan("token_embd.weight", (e, n_vocab), "F16", "embd")]
    for i in range(spec.n_layer):
        for t in BLOCK_TENSORS:
            name = f"blk.{i}.{t}.weight"
            if t in LINEARS:
                out.append(TensorPlan(name, shapes[t], spec.linear_type, "linear"))
                if spec.scale_tensors:
                    out.append(TensorPlan(f"blk.{i}.{t}.scale", (1,), "F32", "scale", linear=name))
            else:
                out.append(TensorPlan(name, shapes[t], "F32", "norm"))
    out.append(TensorPlan("output_norm.weight", (e,), "F32", "norm"))
    return out


def _rng(seed: int, name: str):
    import numpy as np
    return np.random.default_rng([seed, zlib.crc32(name.encode())])


def _scale_factor(spec: ModelSpec, linear_name: str) -> float:
    """f of a linear with a .scale tensor (1.0 without): weight holds s / f, .scale holds f."""
    if not spec.scale_tensors:
        return 1.0
    return float(_rng(spec.seed, linear_name + "#scale").uniform(0.5, 2.0))


EMBD_CHUNK_VALUES = 1 << 22
GAIN = {"attn_q": 1.5, "attn_k": 1.5, "attn_output": 3.0, "ffn_down": 3.0}


def tensor_chunks(spec: ModelSpec, tp: TensorPlan):
    """Yield the tensor's bytes (in chunks for the embedding)."""
    import numpy as np
    rng = _rng(spec.seed, tp.name)
    if tp.kind == "embd":
        n_embd, n_vocab = tp.shape
        sigma = 3.0 / math.sqrt(n_embd)
        rows = max(1, EMBD_CHUNK_VALUES // n_embd)
        for r0 in range(0, n_vocab, rows):
            r = min(rows, n_vocab - r0)
            yield (rng.standard_normal((r, n_embd), dtype=np.float32) * np.float32(sigma)).astype("<f2")
    elif tp.kind == "norm":
        yield (1.0 + 0.05 * rng.standard_normal(tp.shape[0], dtype=np.float32)).astype("<f4")
    elif tp.kind == "scale":
        yield np.array([_scale_factor(spec, tp.linear)], dtype="<f4")
    else:
        yield linear_bytes(spec, tp, rng)


def linear_bytes(spec: ModelSpec, tp: TensorPlan, rng) -> bytes:
    """Random ternary (binary for Q1_0) weight, numpy shape (n_out, n_in), packed as tp.type_name."""
    import numpy as np
    n_in, n_out = tp.shape
    fmt = formats.by_name(tp.type_name)
    binary = fmt.name == "Q1_0"
    if binary:
        t = (rng.integers(0, 2, size=(n_out, n_in), dtype=np.int8) * np.int8(2) - np.int8(1))
    else:
        t = rng.integers(-1, 2, size=(n_out, n_in), dtype=np.int8)
    p = 1.0 if binary else 2.0 / 3.0
    gain = GAIN.get(tp.name.split(".")[-2], 1.0)
    s = gain * rng.uniform(0.8, 1.25) / math.sqrt(p * n_in) / _scale_factor(spec, tp.name)
    if fmt.name == "I2_S":
        return fmt.pack_ternary(t, np.float32(s))
    if fmt.name in ("TQ2_0", "TQ1_0", "Q1_0"):
        d = s * rng.uniform(0.9, 1.1, size=t.size // fmt.block_size)
        return fmt.pack_signs(t, d) if binary else fmt.pack_ternary(t, d)
    return fmt.quantize(t.astype(np.float32) * np.float32(s))   # F32 / F16 / BF16: s * t as floats


# ------------------------------------------------------------------ write

def write_model(spec: ModelSpec, voc: dict, out, progress=None) -> list[TensorPlan]:
    """Write the GGUF file; returns the tensor plan. progress(i, n, name) is called per tensor."""
    voc = complete_vocab(voc)
    meta = build_metadata(spec, voc)
    n_vocab = dict(meta)[f"{spec.arch}.vocab_size"].value
    plan = plan_tensors(spec, n_vocab)
    with GGUFWriter(out) as w:
        w.add_many(meta)
        for tp in plan:
            w.add_tensor(tp.name, tp.shape, tp.type_name)
        for i, tp in enumerate(plan):
            if progress:
                progress(i, len(plan), tp.name)
            for chunk in tensor_chunks(spec, tp):
                w.write_tensor(tp.name, chunk)
    return plan
