"""`bitweb make-model`: GGUF files with random ternary / binary weights, laid out like published files.

Architecture `bitnet-b1.58` (default) reproduces microsoft/bitnet-b1.58-2B-4T-gguf
`ggml-model-i2_s.gguf` (GGUF v3): the same 24 metadata keys in the same order and with the
same value types (see PUBLISHED_KEYS), the same tensor names, types and GGUF shapes:

    token_embd.weight            EMB  [n_embd, n_vocab]      (tied LM head: no output.weight)
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
zero bytes), EMB the --embd-format type (published: F16; Bonsai: Q1_0). The published tensor
*order* could not be checked (no dump found); this file uses token_embd, then the blocks in
data-flow order, then output_norm (then output.weight, of --output-format, when the head is untied).

Architecture `bitnet` is llama.cpp's (1bitLLM b1.58 models, SiLU-gated FFN): same tensors,
keys under `bitnet.`, plus rope.scaling keys and tokenizer.ggml.pre as llama.cpp's converter
writes them, and the vocabulary's chat template (the 2B4T tokenizer_config.json one). The
bitnet-b1.58 files carry the published file's placeholder template (PUBLISHED_CHAT_TEMPLATE)
and, like it, no tokenizer.ggml.pre / eot_token_id.

Architectures `qwen3` (Bonsai), `llama` (Falcon3 1.58-bit) and `qwen2` (Qwen2 / Qwen2.5) have no
sub-norms; qwen3 has `blk.N.attn_q_norm` / `attn_k_norm` F32 [head_dim] after attn_v, qwen2 the
biases `blk.N.attn_q.bias` / `attn_k.bias` / `attn_v.bias` (F32 [n_head * head_dim] / [n_head_kv *
head_dim] / the same) each after its weight. Which block tensors a file has
comes from the architecture's row of bitweb.model.ARCHS (the file's Config: ModelSpec.config,
Config.tensor_shapes); how it is written (keys, RoPE base, RMS epsilon) from its ARCH_FILES row,
keyed by the same name. Their keys are what llama.cpp's
convert_hf_to_gguf.py writes (QWEN3_KEYS / LLAMA_KEYS: head_dim as attention.key_length /
value_length, so Qwen3-4B's 128 != n_embd / n_head works), then every tokenizer key of the
vocabulary. The bonsai-* presets are Qwen3-1.7B / 4B / 8B's shapes (PRESETS) and by default
qwen3, Q1_0 linears and token_embd (8B: an untied Q1_0 output.weight) and the qwen vocabulary,
padded with [PADi] UNUSED tokens to 151936 rows as llama.cpp's converter pads Qwen3's. The
qwen2.5-0.5b / qwen2.5-1.5b presets are Qwen2.5-0.5B / 1.5B's shapes (config.json: 24 / 28 blocks,
896 / 1536 wide, 14 / 12 heads of 64 / 128 with 2 KV heads, FFN 4864 / 8960, context 32768, RoPE
base 1e6, RMS epsilon 1e-6, tied embeddings), by default qwen2 with Q8_0 linears, an F16 token_embd
and the qwen vocabulary (the Q8_0 file Qwen publishes; its table type is not confirmed). QWEN2_KEYS
are the keys a published Qwen2.5 GGUF has (no vocab_size, key_length or value_length: Qwen2's
config.json has no head_dim). The
GGUF stores llama's Q/K rows in the order NORM (adjacent-pair) RoPE needs: random weights need
no permutation, but a transformers oracle built from such a file un-permutes them (the inverse of
convert_hf_to_gguf.py's LlamaModel.permute).

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
    TQ2_0/TQ1_0 one d per 256, Q1_0 / Q2_0_G128 one d per 128 and Q2_0 per 64, each s times
    uniform [0.9, 1.1];
    f32/f16/bf16/q8_0 store the dequantized values s * t (q8_0: quantized again).
  - Q / K / V biases: N(0, 0.5^2) for q and k (a third of the rms of the projection they are added
    to, so a model that drops them is far off), N(0, 0.1^2) for v (a v bias passes the softmax
    unchanged: o gains bv, and Wo bv is the same push on the residual stream at every position;
    0.5 makes greedy text repeat one token);
  - norms: 1 + 0.05 * N(0, 1) (QK-norms: 2 + 0.05 N(0, 1): a normalised q . k / sqrt(head_dim)
    is ~N(0, 1) for unit weights, too flat an attention; 2 sharpens it and greedy text varies);
    token_embd / output: N(0, (3 / sqrt(n_embd))^2), so logits have std ~ 3 (varied, not
    degenerate, sampling), stored as --embd-format / --output-format (quantized as ggml does).
Tensors are generated and written one at a time (the 657 MB embedding in row chunks), so
peak memory is one linear weight, not the model.
"""
from __future__ import annotations

import math
import zlib
from dataclasses import dataclass

from bitweb import formats, model
from bitweb.authoring.gguf_writer import ARRAY, BOOL, FLOAT32, INT32, STRING, UINT32, GGUFWriter, Value

PRESETS = {
    # n_in of every linear (n_embd, n_head*head_dim, n_ff) is a multiple of 256 (TQ blocks)
    "tiny": dict(n_embd=256, n_layer=2, n_head=4, n_head_kv=2, n_ff=512, n_ctx=1024),
    "small": dict(n_embd=1024, n_layer=4, n_head=8, n_head_kv=2, n_ff=2816, n_ctx=2048),
    "2b4t": dict(n_embd=2560, n_layer=30, n_head=20, n_head_kv=5, n_ff=6912, n_ctx=4096),
    # PrismML Bonsai = Qwen3-1.7B / 4B / 8B shapes (their config.json): head_dim 128 (4B: not
    # n_embd / n_head), vocabulary padded to 151936 rows, tied head but on 8B
    "bonsai-1.7b": dict(n_embd=2048, n_layer=28, n_head=16, n_head_kv=8, head_dim=128, n_ff=6144, n_ctx=32768,
                        n_vocab=151936),
    "bonsai-4b": dict(n_embd=2560, n_layer=36, n_head=32, n_head_kv=8, head_dim=128, n_ff=9728, n_ctx=32768,
                      n_vocab=151936),
    "bonsai-8b": dict(n_embd=4096, n_layer=36, n_head=32, n_head_kv=8, head_dim=128, n_ff=12288, n_ctx=65536,
                      n_vocab=151936, tied=False),
    # Qwen2.5-0.5B / 1.5B (Instruct) config.json: head_dim n_embd / n_head (64 / 128), tied heads
    "qwen2.5-0.5b": dict(n_embd=896, n_layer=24, n_head=14, n_head_kv=2, n_ff=4864, n_ctx=32768, n_vocab=151936),
    "qwen2.5-1.5b": dict(n_embd=1536, n_layer=28, n_head=12, n_head_kv=2, n_ff=8960, n_ctx=32768, n_vocab=151936),
}
# what a preset means when --arch / --format / --embd-format / --output-format / --vocab are not given
PRESET_DEFAULTS = {"bonsai-1.7b": dict(arch="qwen3", format="q1_0", embd_format="q1_0", vocab="qwen"),
                   "bonsai-4b": dict(arch="qwen3", format="q1_0", embd_format="q1_0", vocab="qwen"),
                   "bonsai-8b": dict(arch="qwen3", format="q1_0", embd_format="q1_0", output_format="q1_0",
                                     vocab="qwen"),
                   "qwen2.5-0.5b": dict(arch="qwen2", format="q8_0", embd_format="f16", vocab="qwen"),
                   "qwen2.5-1.5b": dict(arch="qwen2", format="q8_0", embd_format="f16", vocab="qwen")}
DEFAULTS = dict(arch="bitnet-b1.58", format="i2_s", embd_format="f16", output_format=None, vocab="bytes")

LINEAR_TYPE = {f.name.lower(): f for f in formats.select("linear")}     # --format -> its Format
EMBD_TYPE = {f.name.lower(): f for f in formats.select("table")}        # --embd-format / --output-format
# (general.file_type is the linear type's Format.file_type)
# --scale-tensors auto: llama.cpp's `bitnet` files come in its TQ types
SCALE_TENSOR_TYPES = (formats.TQ1_0, formats.TQ2_0)

# a block's tensors in file order (those its architecture has: Config.tensor_shapes)
# (model.tensor_name: attn_q_bias is blk.N.attn_q.bias)
BLOCK_TENSORS = ["attn_norm", "attn_q", "attn_q_bias", "attn_k", "attn_k_bias", "attn_v", "attn_v_bias",
                 "attn_q_norm", "attn_k_norm", "attn_sub_norm", "attn_output", "ffn_norm", "ffn_gate", "ffn_up",
                 "ffn_sub_norm", "ffn_down"]

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
# llama.cpp's convert_hf_to_gguf.py for Qwen3 (Qwen2Model / TextModel: key_length and value_length
# from config.head_dim) and for llama (LlamaModel: vocab_size, rope.dimension_count); then every
# tokenizer key the vocabulary has, in VOCAB_ORDER
QWEN3_KEYS = [
    ("general.architecture", STRING), ("general.name", STRING),
    ("{a}.vocab_size", UINT32), ("{a}.context_length", UINT32), ("{a}.embedding_length", UINT32),
    ("{a}.block_count", UINT32), ("{a}.feed_forward_length", UINT32),
    ("{a}.attention.head_count", UINT32), ("{a}.attention.head_count_kv", UINT32),
    ("{a}.rope.freq_base", FLOAT32), ("{a}.attention.layer_norm_rms_epsilon", FLOAT32),
    ("{a}.attention.key_length", UINT32), ("{a}.attention.value_length", UINT32),
    ("general.file_type", UINT32), ("general.quantization_version", UINT32),
]
LLAMA_KEYS = [
    ("general.architecture", STRING), ("general.name", STRING),
    ("{a}.vocab_size", UINT32), ("{a}.context_length", UINT32), ("{a}.embedding_length", UINT32),
    ("{a}.block_count", UINT32), ("{a}.feed_forward_length", UINT32),
    ("{a}.rope.dimension_count", UINT32), ("{a}.attention.head_count", UINT32),
    ("{a}.attention.head_count_kv", UINT32), ("{a}.rope.freq_base", FLOAT32),
    ("{a}.attention.layer_norm_rms_epsilon", FLOAT32), ("{a}.attention.key_length", UINT32),
    ("{a}.attention.value_length", UINT32), ("general.file_type", UINT32),
    ("general.quantization_version", UINT32),
]
# a published Qwen2.5 GGUF (llama.cpp's convert_hf_to_gguf.py Qwen2Model: the TextModel keys, no
# head_dim in config.json, so no key_length / value_length; no vocab_size)
QWEN2_KEYS = [
    ("general.architecture", STRING), ("general.name", STRING),
    ("{a}.block_count", UINT32), ("{a}.context_length", UINT32), ("{a}.embedding_length", UINT32),
    ("{a}.feed_forward_length", UINT32), ("{a}.attention.head_count", UINT32),
    ("{a}.attention.head_count_kv", UINT32), ("{a}.rope.freq_base", FLOAT32),
    ("{a}.attention.layer_norm_rms_epsilon", FLOAT32), ("general.file_type", UINT32),
    ("general.quantization_version", UINT32),
]
VOCAB_ORDER = [
    ("tokenizer.ggml.model", STRING), ("tokenizer.ggml.pre", STRING),
    ("tokenizer.ggml.tokens", (ARRAY, STRING)), ("tokenizer.ggml.scores", (ARRAY, FLOAT32)),
    ("tokenizer.ggml.token_type", (ARRAY, INT32)), ("tokenizer.ggml.merges", (ARRAY, STRING)),
    ("tokenizer.ggml.bos_token_id", UINT32), ("tokenizer.ggml.eos_token_id", UINT32),
    ("tokenizer.ggml.eot_token_id", UINT32), ("tokenizer.ggml.padding_token_id", UINT32),
    ("tokenizer.ggml.add_bos_token", BOOL), ("tokenizer.chat_template", STRING),
]


@dataclass(frozen=True)
class ArchFile:
    """How make-model writes one architecture (what its blocks have is its row of model.ARCHS)."""
    keys: list                  # (key, GGUF value type) in file order; "{a}" = the architecture
    rope_base: float            # {a}.rope.freq_base
    eps: float                  # {a}.attention.layer_norm_rms_epsilon
    vocab_keys: bool = False    # the keys are followed by every tokenizer key the vocabulary has (VOCAB_ORDER)
    chat_template: str | None = None    # written instead of the vocabulary's template
    pre: str | None = None      # tokenizer.ggml.pre when the vocabulary has none


# general.architecture -> how make-model writes it: one line per architecture it makes, each a key
# of model.ARCHS. RoPE base and RMS epsilon: the 2B4T file's; Qwen3's config; Falcon3-1B's; Qwen2.5's.
ARCH_FILES = {
    "bitnet-b1.58": ArchFile(PUBLISHED_KEYS, 500000.0, 1e-5, chat_template=PUBLISHED_CHAT_TEMPLATE),
    "bitnet": ArchFile(BITNET_KEYS, 500000.0, 1e-5, pre="llama-bpe"),
    "qwen3": ArchFile(QWEN3_KEYS, 1000000.0, 1e-6, vocab_keys=True),
    "llama": ArchFile(LLAMA_KEYS, 1000042.0, 1e-6, vocab_keys=True),
    "qwen2": ArchFile(QWEN2_KEYS, 1000000.0, 1e-6, vocab_keys=True),
}
ARCHS = tuple(ARCH_FILES)
TOKEN_TYPE_CONTROL = 3
TOKEN_TYPE_UNUSED = 5


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
    embd_fmt: str = "f16"     # --embd-format value: token_embd's type
    output_fmt: str = "f16"   # --output-format value: output.weight's type (untied heads)
    head_dim: int = 0         # 0: n_embd // n_head
    n_vocab: int = 0          # pad the vocabulary with [PADi] tokens to this many rows (0: as it is)
    tied: bool = True         # LM head = token_embd (no output.weight)

    def __post_init__(self):
        if not self.head_dim:
            object.__setattr__(self, "head_dim", self.n_embd // self.n_head)

    @property
    def linear_type(self) -> formats.Format:
        return LINEAR_TYPE[self.fmt]

    def config(self, n_vocab: int) -> model.Config:
        """The Config a reader makes of this file (bitweb.model.Config.from_gguf), n_vocab rows."""
        af = ARCH_FILES[self.arch]
        return model.Config.from_arch(
            self.arch, n_vocab=n_vocab, n_ctx=self.n_ctx, n_embd=self.n_embd, n_layer=self.n_layer, n_ff=self.n_ff,
            n_head=self.n_head, n_head_kv=self.n_head_kv, head_dim=self.head_dim, eps=af.eps,
            rope_base=af.rope_base, tied=self.tied, linear_type=self.linear_type)


def spec_from_args(args) -> ModelSpec:
    """A ModelSpec from make-model's options (an argparse namespace; options left None take the
    preset's defaults, PRESET_DEFAULTS, then DEFAULTS)."""
    if args.preset not in PRESETS:
        raise MakeModelError(f"--preset {args.preset!r}: known presets are {', '.join(PRESETS)}")
    opt = dict(DEFAULTS, **PRESET_DEFAULTS.get(args.preset, {}))
    for k in opt:
        v = getattr(args, k, None)
        if v is not None:
            opt[k] = v
    arch, fmt, embd = opt["arch"], opt["format"], opt["embd_format"]
    if fmt not in LINEAR_TYPE:
        raise MakeModelError(f"--format {fmt!r}: known formats are {', '.join(LINEAR_TYPE)}")
    for what, f in (("--embd-format", embd), ("--output-format", opt["output_format"])):
        if f is not None and f not in EMBD_TYPE:
            raise MakeModelError(f"{what} {f!r}: known formats are {', '.join(EMBD_TYPE)}")
    if arch not in ARCHS:
        raise MakeModelError(f"--arch {arch!r}: must be one of {', '.join(ARCHS)}")
    p = dict(PRESETS[args.preset])
    if args.layers is not None:
        if args.layers < 1:
            raise MakeModelError(f"--layers must be >= 1, got {args.layers}")
        p["n_layer"] = args.layers
    if args.seed < 0:
        raise MakeModelError(f"--seed must be >= 0, got {args.seed}")
    mode = getattr(args, "scale_tensors", "auto") or "auto"
    if mode == "auto":
        scale = model.ARCHS[arch].scales and LINEAR_TYPE[fmt] in SCALE_TENSOR_TYPES
    elif mode in ("on", "off"):
        scale = mode == "on"
        if scale and not model.ARCHS[arch].scales:
            raise MakeModelError(f"--scale-tensors on: .scale tensors exist only in --arch "
                                 f"{' / '.join(a for a in ARCHS if model.ARCHS[a].scales)}")
    else:
        raise MakeModelError(f"--scale-tensors {mode!r}: must be auto, on or off")
    if opt["output_format"] is not None:
        p["tied"] = False
    for what, f in (("--embd-format", embd), ("--output-format", opt["output_format"] or embd)):
        blk = EMBD_TYPE[f].block_size
        if p["n_embd"] % blk:
            raise MakeModelError(f"{what} {f}: n_embd {p['n_embd']} is not a multiple of its block ({blk})")
    return ModelSpec(arch=arch, fmt=fmt, preset=args.preset, seed=args.seed, scale_tensors=scale, embd_fmt=embd,
                     output_fmt=opt["output_format"] or embd, **p)


# ------------------------------------------------------------------ vocabulary + metadata

VOCABS = ("bytes", "llama3", "qwen")


def load_vocab(which: str) -> dict:
    """tokenizer.* metadata: "bytes" (tiny byte BPE) or "llama3" (bitweb.authoring.vocab), "qwen"
    (a small Qwen-style BPE with pre-tokenizer qwen2, ChatML tokens and the Qwen3 template:
    bitweb.authoring.qwen_vocab)."""
    from bitweb.authoring import vocab
    if which == "bytes":
        return vocab.bytes_vocab()
    if which == "llama3":
        return vocab.llama3_vocab()
    if which == "qwen":
        try:
            from bitweb.authoring.qwen_vocab import qwen_vocab
        except ImportError as e:
            raise MakeModelError(f"--vocab qwen: the Qwen-style vocabulary builder is not available ({e})") from e
        return qwen_vocab()
    raise MakeModelError(f"--vocab {which!r}: must be one of {', '.join(VOCABS)}")


def vocab_name(args) -> str:
    """--vocab, or the preset's default (PRESET_DEFAULTS), or bytes."""
    return getattr(args, "vocab", None) or PRESET_DEFAULTS.get(args.preset, {}).get("vocab") or DEFAULTS["vocab"]


def pad_vocab(voc: dict, n_vocab: int) -> dict:
    """The vocabulary with [PADi] tokens (type UNUSED) appended up to n_vocab rows, as llama.cpp's
    converter fills a model's rows that the tokenizer does not use (Qwen3: 151669 -> 151936)."""
    tokens = list(voc["tokenizer.ggml.tokens"])
    if not n_vocab or len(tokens) == n_vocab:
        return voc
    if len(tokens) > n_vocab:
        raise MakeModelError(f"the vocabulary has {len(tokens)} tokens, more than the preset's {n_vocab} rows")
    pad = [f"[PAD{i}]" for i in range(len(tokens), n_vocab)]
    out = dict(voc, **{"tokenizer.ggml.tokens": tokens + pad,
                       "tokenizer.ggml.token_type": list(voc["tokenizer.ggml.token_type"]) + [TOKEN_TYPE_UNUSED] * len(pad)})
    if "tokenizer.ggml.scores" in voc:
        out["tokenizer.ggml.scores"] = list(voc["tokenizer.ggml.scores"]) + [0.0] * len(pad)
    return out


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


def vocab_size(voc: dict) -> int:
    """Tokens in a vocabulary (tokenizer.ggml.tokens, a list or a Value): the table's rows."""
    tokens = voc["tokenizer.ggml.tokens"]
    return len(tokens.value if isinstance(tokens, Value) else tokens)


def build_metadata(spec: ModelSpec, voc: dict) -> list[tuple[str, Value]]:
    """The metadata pairs, in file order, for a completed vocabulary."""
    a, af = spec.arch, ARCH_FILES[spec.arch]
    cfg = spec.config(vocab_size(voc))
    values = {
        "general.architecture": a,
        "general.name": f"bitweb-random-{spec.preset}-{spec.fmt}-seed{spec.seed}",
        "{a}.vocab_size": cfg.n_vocab, "{a}.context_length": cfg.n_ctx,
        "{a}.embedding_length": cfg.n_embd, "{a}.block_count": cfg.n_layer,
        "{a}.feed_forward_length": cfg.n_ff, "{a}.rope.dimension_count": cfg.head_dim,
        "{a}.attention.head_count": cfg.n_head, "{a}.attention.head_count_kv": cfg.n_head_kv,
        "{a}.attention.layer_norm_rms_epsilon": cfg.eps, "{a}.rope.freq_base": cfg.rope_base,
        "{a}.rope.scaling.type": "linear", "{a}.rope.scaling.factor": 1.0,
        "{a}.attention.key_length": cfg.head_dim, "{a}.attention.value_length": cfg.head_dim,
        "general.file_type": cfg.linear_type.file_type, "general.quantization_version": 2,
    }
    if af.chat_template is not None:
        values["tokenizer.chat_template"] = af.chat_template
    if af.pre is not None:
        values["tokenizer.ggml.pre"] = voc.get("tokenizer.ggml.pre", af.pre)
    keys = af.keys + ([(k, t) for k, t in VOCAB_ORDER if k in voc] if af.vocab_keys else [])
    out = []
    for key, vtype in keys:
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
    format: formats.Format
    kind: str             # "embd", "norm", "linear", "scale", "bias"
    linear: str = ""      # for "scale": the weight it scales

    @property
    def nbytes(self) -> int:
        return self.format.nbytes(math.prod(self.shape))


def plan_tensors(spec: ModelSpec, n_vocab: int) -> list[TensorPlan]:
    e = spec.n_embd
    shapes = spec.config(n_vocab).tensor_shapes()     # the block tensors its architecture has
    out = [TensorPlan("token_embd.weight", (e, n_vocab), EMBD_TYPE[spec.embd_fmt], "embd")]
    for i in range(spec.n_layer):
        for t in (t for t in BLOCK_TENSORS if t in shapes):
            name = model.tensor_name(i, t)
            if t in model.LINEARS:
                out.append(TensorPlan(name, shapes[t], spec.linear_type, "linear"))
                if spec.scale_tensors:
                    out.append(TensorPlan(f"blk.{i}.{t}.scale", (1,), formats.F32, "scale", linear=name))
            else:
                out.append(TensorPlan(name, shapes[t], formats.F32, "bias" if t in model.BIASES else "norm"))
    out.append(TensorPlan("output_norm.weight", (e,), formats.F32, "norm"))
    if not spec.tied:
        out.append(TensorPlan("output.weight", (e, n_vocab), EMBD_TYPE[spec.output_fmt], "embd"))
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
QK_NORM_CENTER = 2.0
BIAS_SIGMA = {"attn_q": 0.5, "attn_k": 0.5, "attn_v": 0.1}


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
            rows_f32 = rng.standard_normal((r, n_embd), dtype=np.float32) * np.float32(sigma)
            yield tp.format.quantize(rows_f32)
    elif tp.kind == "norm":
        center = QK_NORM_CENTER if tp.name.endswith(("attn_q_norm.weight", "attn_k_norm.weight")) else 1.0
        yield (center + 0.05 * rng.standard_normal(tp.shape[0], dtype=np.float32)).astype("<f4")
    elif tp.kind == "bias":
        sigma = BIAS_SIGMA[tp.name.split(".")[-2]]
        yield (sigma * rng.standard_normal(tp.shape[0], dtype=np.float32)).astype("<f4")
    elif tp.kind == "scale":
        yield np.array([_scale_factor(spec, tp.linear)], dtype="<f4")
    else:
        yield linear_bytes(spec, tp, rng)


def linear_bytes(spec: ModelSpec, tp: TensorPlan, rng) -> bytes:
    """Random weight, numpy shape (n_out, n_in): the format's random values (ternary; signs for a
    binary format) times the scale s of the module docstring, stored as tp.format does
    (Format.random_values, Format.random_bytes)."""
    n_in, n_out = tp.shape
    fmt = tp.format
    t = fmt.random_values(rng, (n_out, n_in))
    p = 1.0 if fmt.kind == "binary" else 2.0 / 3.0             # the fraction of nonzero values
    gain = GAIN.get(tp.name.split(".")[-2], 1.0)
    s = gain * rng.uniform(0.8, 1.25) / math.sqrt(p * n_in) / _scale_factor(spec, tp.name)
    return fmt.random_bytes(rng, t, s)


# ------------------------------------------------------------------ write

def write_model(spec: ModelSpec, voc: dict, out, progress=None) -> list[TensorPlan]:
    """Write the GGUF file; returns the tensor plan. progress(i, n, name) is called per tensor."""
    voc = complete_vocab(pad_vocab(voc, spec.n_vocab))
    meta = build_metadata(spec, voc)

    plan = plan_tensors(spec, vocab_size(voc))
    with GGUFWriter(out) as w:
        w.add_many(meta)
        for tp in plan:
            w.add_tensor(tp.name, tp.shape, tp.format)
        for i, tp in enumerate(plan):
            if progress:
                progress(i, len(plan), tp.name)
            for chunk in tensor_chunks(spec, tp):
                w.write_tensor(tp.name, chunk)
    return plan
