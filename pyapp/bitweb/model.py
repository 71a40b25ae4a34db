"""A BitNet model as a GGUF file describes it: Config + tensors bound by their GGUF names (stdlib only).

    gf = gguf.open_gguf(path)            # or read_gguf(source) in the browser
    m = Model.from_gguf(gf)              # checks architecture, hyperparameters, every tensor
    m.cfg.n_layer, m.token_embd, m.blk[3].attn_q, m.blk[3].attn_q_scale, m.output

What a block has is one row of ARCHS, keyed by general.architecture, copied into Config as flags
(ffn, sub_norms, qk_norm, rope, scales, qkv_bias); the engine and the numpy model branch only on
those flags, never on the architecture's name. A new architecture is one row here, plus the code that
honours a flag it is the first to set (one place per forward pass: see ARCHITECTURE.md).

    arch             ffn                         sub-norms  QK-norm  RoPE   .scale tensors  Q/K/V biases
    bitnet-b1.58     relu(gate(f))^2 * up(f)     yes        no       NEOX   no        no    (2B4T; "bitnet-25": its older name)
    bitnet           silu(gate(f)) * up(f)       yes        no       NEOX   optional  no    (llama.cpp's 1bitLLM b1.58 models)
    qwen3            silu(gate(f)) * up(f)       no         yes      NEOX   no        no    (Bonsai, Ternary Bonsai)
    llama            silu(gate(f)) * up(f)       no         no       NORM   no        no    (Falcon3 1.58-bit)
    qwen2            silu(gate(f)) * up(f)       no         no       NEOX   no        yes   (Qwen2, Qwen2.5)

Hyperparameters are read under the architecture prefix (`{arch}.block_count` ...).
Tensor names are GGUF names with the dots turned into attributes:

    token_embd.weight          -> m.token_embd          [n_embd, n_vocab]   (ne0 first)
    output_norm.weight         -> m.output_norm         [n_embd]
    output.weight              -> m.output              [n_embd, n_vocab] or None (tied: LM head = token_embd)
    blk.N.<name>.weight        -> m.blk[N].<name>       e.g. attn_q [n_embd, n_head * head_dim]
    blk.N.<linear>.scale       -> m.blk[N].<linear>_scale   [1] F32 or None: multiplies the linear's output
    blk.N.attn_q.bias          -> m.blk[N].attn_q_bias  [n_head * head_dim] F32 (attn_k / attn_v: [n_head_kv * head_dim])
A tensor the architecture does not have (attn_sub_norm without sub-norms, attn_q_norm without
QK-norm, attn_q_bias without Q/K/V biases) is bound as None; Block attribute n is the GGUF tensor
tensor_name(i, n).

Every value is a gguf.TensorInfo (name, shape, type, abs_offset, nbytes): the engine uploads
the bytes unchanged, the numpy model dequantizes them.

Any file this module accepts can be run by both the engine and the numpy model; anything else
is a ModelError naming the architecture, key or tensor (and its type / shape).

Features on the GPU: the QK-norm is folded into the attention kernel (decode) and the RoPE kernel
(prefill), and so are the Q / K / V biases (`qkv_at` in shaders/common_sincos.wgsl, one f32 row per
block: upload.PACKED), so every architecture decodes in 5 dispatches per block
(dev/archs/bench_qknorm.py, dev/archs/bench_qkvbias.py: folded within noise of plain attention, a
separate dispatch 1.06-1.6x). Biases are added first, then QK-norm, RoPE, the cache. The llama
converter permutes Q / K rows so that NORM pairs equal transformers' rotate_half
(tests/test_transformers_oracle_archs.py un-permutes them). `rope_freqs` tensors, experts and a
non-default `attention.scale` are refused by name; a tensor a row lacks is None, and one the file
has anyway an "unexpected tensor" ModelError.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from bitweb import formats


@dataclass(frozen=True)
class Arch:
    """The features a block of one architecture has (one row of ARCHS; Config copies them)."""
    ffn: str                  # FFN act(gate) * up: "relu2" = relu(.)^2 | "silu"
    sub_norms: bool           # attn_sub_norm before Wo, ffn_sub_norm before Wd
    qk_norm: bool = False     # attn_q_norm / attn_k_norm [head_dim]: RMSNorm of each q / k head before RoPE
    rope: str = "neox"        # "neox": rotate pairs (i, i + head_dim/2); "norm": adjacent pairs (2i, 2i + 1)
    scales: bool = False      # blk.N.<linear>.scale tensors (F32 [1], multiply the output) allowed
    qkv_bias: bool = False    # blk.N.attn_q / attn_k / attn_v.bias (F32 [out]) added to q, k, v (before QK-norm, RoPE)


# general.architecture -> what its blocks have: one line per architecture
ARCHS = {
    "bitnet-b1.58": Arch(ffn="relu2", sub_norms=True),
    "bitnet-25": Arch(ffn="relu2", sub_norms=True),
    "bitnet": Arch(ffn="silu", sub_norms=True, scales=True),
    "qwen3": Arch(ffn="silu", sub_norms=False, qk_norm=True),
    "llama": Arch(ffn="silu", sub_norms=False, rope="norm"),
    "qwen2": Arch(ffn="silu", sub_norms=False, qkv_bias=True),
}

NORMS = ("attn_norm", "attn_sub_norm", "ffn_norm", "ffn_sub_norm", "attn_q_norm", "attn_k_norm")
LINEARS = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")
BIASES = ("attn_q_bias", "attn_k_bias", "attn_v_bias")    # Arch.qkv_bias: blk.N.<linear>.bias, F32


def tensor_name(i: int, n: str) -> str:
    """The GGUF name of block i's tensor n (a Block attribute, a key of Config.tensor_shapes):
    blk.i.<linear>.bias for n = <linear>_bias, else blk.i.<n>.weight."""
    return f"blk.{i}.{n[:-5]}.bias" if n.endswith("_bias") else f"blk.{i}.{n}.weight"

# Tensor types each role may have (what the GPU kernels and the reference both implement): the
# roles of bitweb.formats, as Format objects. A packed linear type runs in the bitlinear kernels.
LINEAR_TYPES = formats.select("linear")
EMBD_TYPES = formats.select("table")
NORM_TYPES = formats.select("norm")


def a8_linears(cfg, activations: str) -> bool:
    """Whether the block linears (and a packed LM head of such a format) quantize their inputs to int8:
    the "a8" and "q8" modes on linears of a format trained that way (Format.a8: the ternary and
    binary kinds, W1.58A8, per token), and "q8" on ggml's types of a Format.vec_dot (Q4_0, Q4_1,
    Q5_0, Q5_1, Q8_0) as llama.cpp does (q8_0 / q8_1 blocks of 32: bitlinear.wgsl Q8B). Other
    formats (the K-quants, floats) run f32 activations in every mode, the exact one; the engine and
    the numpy model both ask this. ggml's types are f32 in the default "a8" (measured on SmolLM2
    Q4_1: q8 costs accuracy, and its greedy chat reply to the capital question loses Paris; on
    lavapipe it is no faster: README "Activations").

    Why ggml's types take no per-token int8: per-token int8 activations on a model not trained W1.58A8 are
    chaotic. On SmolLM2's Q4_1 file with a8 forced, numpy's attention in float64 instead of float32
    moved its a8 logits by up to 3.4 on a 21-token prompt (f32 mode: 8e-3; logit std 7); GPU and
    numpy a8 parted at greedy token 5 of 64 and perplexity rose from 6.59 to 6.91. f32 gives the
    same 64 tokens on both (logits within 1.2e-2). llama.cpp quantizes such activations per 32
    values (Q8_1), not per token."""
    lt = cfg.linear_type
    if lt is None or activations not in ("a8", "q8"):
        return False
    return lt.a8 or (activations == "q8" and bool(lt.vec_dot))


class ModelError(ValueError):
    """The file is not a model this engine runs: names the architecture, key or tensor."""


@dataclass(frozen=True)
class Config:
    arch: str
    ffn: str                  # block features, from ARCHS[arch] (see Arch)
    sub_norms: bool
    qk_norm: bool
    rope: str
    scales: bool
    qkv_bias: bool
    n_vocab: int
    n_ctx: int                # context length the model was trained for
    n_embd: int
    n_layer: int
    n_ff: int
    n_head: int
    n_head_kv: int
    head_dim: int
    eps: float                # RMS norm epsilon
    rope_base: float          # RoPE: theta_i = pos * rope_base^(-2i / head_dim) rotates pair i (see Arch.rope)
    tied: bool                # LM head = token_embd (no output.weight)
    linear_type: formats.Format | None   # GGML type of the block linears (all the same), e.g. formats.I2_S

    @property
    def q_dim(self) -> int:
        return self.n_head * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.n_head_kv * self.head_dim

    @classmethod
    def from_gguf(cls, gf) -> "Config":
        md = gf.metadata
        arch = md.get("general.architecture")
        if arch not in ARCHS:
            raise ModelError(f"unsupported architecture {arch!r} (general.architecture); "
                             f"supported: {', '.join(ARCHS)}")

        def key(suffix, kind=int, default=None):
            k = f"{arch}.{suffix}"
            v = md.get(k, default)
            if v is None:
                raise ModelError(f"missing metadata key {k!r}")
            if isinstance(v, bool) or not isinstance(v, (int, float)) or (kind is int and v != int(v)):
                raise ModelError(f"metadata key {k!r} = {v!r} is not a number of kind {kind.__name__}")
            if kind is int and v <= 0:
                raise ModelError(f"metadata key {k!r} = {v} must be > 0")
            return kind(v)

        n_embd = key("embedding_length")
        n_head = key("attention.head_count")
        n_head_kv = key("attention.head_count_kv", default=n_head)
        if n_embd % n_head or n_head % n_head_kv:
            raise ModelError(f"{arch}.embedding_length {n_embd}, attention.head_count {n_head}, "
                             f"head_count_kv {n_head_kv}: heads must divide evenly")
        head_dim = key("attention.key_length", default=n_embd // n_head)
        if key("attention.value_length", default=head_dim) != head_dim:
            raise ModelError(f"{arch}.attention.value_length differs from key_length {head_dim}: not supported")
        rope_dim = key("rope.dimension_count", default=head_dim)
        if rope_dim != head_dim or head_dim % 2:
            raise ModelError(f"{arch}.rope.dimension_count {rope_dim}: only full, even-width RoPE over "
                             f"head_dim {head_dim} is supported")
        scaling = md.get(f"{arch}.rope.scaling.type", "none")
        factor = md.get(f"{arch}.rope.scaling.factor", 1.0)
        if scaling not in ("none", "linear") or (scaling == "linear" and factor not in (0.0, 1.0)):
            raise ModelError(f"{arch}.rope.scaling.type {scaling!r} factor {factor}: RoPE scaling is not supported")
        if "rope_freqs.weight" in gf.tensors:
            raise ModelError("tensor 'rope_freqs.weight' (RoPE frequency factors, Llama 3.1-style scaling): "
                             "not supported")
        if md.get(f"{arch}.expert_count", 0):
            raise ModelError(f"{arch}.expert_count {md[f'{arch}.expert_count']}: mixture-of-experts models are "
                             f"not supported")
        if md.get(f"{arch}.attention.scale", 0.0) not in (0.0, None):
            raise ModelError(f"{arch}.attention.scale {md[f'{arch}.attention.scale']}: only the 1/sqrt(head_dim) "
                             f"attention scale is supported")


        t = gf.tensors
        embd = t.get("token_embd.weight")
        if embd is None:
            raise ModelError("missing tensor 'token_embd.weight'")
        n_vocab = embd.shape[-1] if len(embd.shape) == 2 else 0
        if f"{arch}.vocab_size" in md and key("vocab_size") != n_vocab:
            raise ModelError(f"{arch}.vocab_size {md[f'{arch}.vocab_size']} differs from token_embd.weight "
                             f"shape {list(embd.shape)}")
        lin = t.get("blk.0.attn_q.weight")
        return cls.from_arch(arch, n_vocab=n_vocab, n_ctx=key("context_length"),
                             n_embd=n_embd, n_layer=key("block_count"), n_ff=key("feed_forward_length"),
                             n_head=n_head, n_head_kv=n_head_kv, head_dim=head_dim,
                             eps=key("attention.layer_norm_rms_epsilon", float),
                             rope_base=key("rope.freq_base", float, 10000.0),
                             tied="output.weight" not in t, linear_type=lin.format if lin else None)

    @classmethod
    def from_arch(cls, arch: str, **hyper) -> "Config":
        """The Config of architecture `arch` (its ARCHS row's flags) with these hyperparameters
        (every other field): what from_gguf reads, and what bitweb.authoring.makemodel writes."""
        if arch not in ARCHS:
            raise ModelError(f"unsupported architecture {arch!r}; supported: {', '.join(ARCHS)}")
        return cls(arch=arch, **asdict(ARCHS[arch]), **hyper)

    def tensor_shapes(self) -> dict:
        """GGUF shape (ne0 first) of every per-block tensor this architecture has, by name."""
        e, q, kv, ff, hd = self.n_embd, self.q_dim, self.kv_dim, self.n_ff, self.head_dim
        shapes = {"attn_norm": (e,), "attn_q": (e, q), "attn_k": (e, kv), "attn_v": (e, kv),
                  "attn_output": (q, e), "ffn_norm": (e,), "ffn_gate": (e, ff), "ffn_up": (e, ff),
                  "ffn_down": (ff, e)}
        if self.sub_norms:
            shapes.update(attn_sub_norm=(q,), ffn_sub_norm=(ff,))
        if self.qk_norm:
            shapes.update(attn_q_norm=(hd,), attn_k_norm=(hd,))
        if self.qkv_bias:
            shapes.update(attn_q_bias=(q,), attn_k_bias=(kv,), attn_v_bias=(kv,))
        return shapes

    def summary(self) -> str:
        return (f"{self.arch} ({self.ffn} FFN): {self.n_layer} blocks, n_embd {self.n_embd}, n_ff {self.n_ff}, "
                f"heads {self.n_head}/{self.n_head_kv} x {self.head_dim}, vocab {self.n_vocab}, "
                f"context {self.n_ctx}, linears {self.linear_type.name if self.linear_type else '?'}, "
                f"{'tied LM head' if self.tied else 'output.weight LM head'}")


class Block:
    """One transformer block's tensors: attributes named as in GGUF (attn_q, ffn_down ...; None
    where the architecture has no such tensor), plus <linear>_scale and attn_q_bias / attn_k_bias /
    attn_v_bias (TensorInfo or None)."""

    def __init__(self, index: int):
        self.index = index

    def __repr__(self):
        return f"<blk.{self.index}>"


class Model:
    """Config + the file's tensors bound by name (see the module docstring)."""

    def __init__(self, gf, cfg: Config, token_embd, output_norm, output, blk: list):
        self.gguf = gf
        self.cfg = cfg
        self.token_embd = token_embd
        self.output_norm = output_norm
        self.output = output                # None: tied (LM head = token_embd)
        self.blk = blk
        self._tokenizer = None

    @property
    def tokenizer(self):
        """The file's tokenizer (bitweb.tokenizer.Tokenizer), built on first use."""
        if self._tokenizer is None:
            from bitweb.tokenizer import Tokenizer
            self._tokenizer = Tokenizer.from_metadata(self.gguf.metadata)
        return self._tokenizer

    @property
    def lm_head(self):
        return self.token_embd if self.output is None else self.output

    def tensors(self):
        """Every bound tensor, file-independent order: token_embd, blocks, output_norm, output."""
        out = [self.token_embd]
        for b in self.blk:
            out += [getattr(b, n) for n in NORMS + LINEARS + BIASES if getattr(b, n) is not None]
            out += [getattr(b, n + "_scale") for n in LINEARS if getattr(b, n + "_scale") is not None]
        out.append(self.output_norm)
        if self.output is not None:
            out.append(self.output)
        return out

    @classmethod
    def from_gguf(cls, gf) -> "Model":
        cfg = Config.from_gguf(gf)
        t = gf.tensors
        used = set()

        def bind(name, shape, types):
            ti = t.get(name)
            if ti is None:
                raise ModelError(f"missing tensor {name!r} ({cfg.arch}, {cfg.n_layer} blocks)")
            if tuple(ti.shape) != tuple(shape):
                raise ModelError(f"tensor {name!r} has shape {list(ti.shape)}, expected {list(shape)} "
                                 f"(GGUF order, ne0 first) for this config")
            if ti.format not in types:
                raise ModelError(f"tensor {name!r} has type {ti.format.name}, which this engine does not run "
                                 f"there (supported: {', '.join(f.name for f in types)})")
            used.add(name)
            return ti

        shapes = cfg.tensor_shapes()
        blk = []
        for i in range(cfg.n_layer):
            b = Block(i)
            for n in NORMS:
                setattr(b, n, bind(f"blk.{i}.{n}.weight", shapes[n], NORM_TYPES) if n in shapes else None)
            for n in LINEARS:
                setattr(b, n, bind(f"blk.{i}.{n}.weight", shapes[n], LINEAR_TYPES))
                sname = f"blk.{i}.{n}.scale"
                if sname in t and not cfg.scales:
                    raise ModelError(f"tensor {sname!r}: .scale tensors belong to architecture "
                                     f"{' / '.join(repr(a) for a, r in ARCHS.items() if r.scales)}, not {cfg.arch!r}")
                setattr(b, n + "_scale", bind(sname, (1,), (formats.F32,)) if sname in t else None)
                if getattr(b, n).format is not cfg.linear_type:
                    raise ModelError(f"tensor 'blk.{i}.{n}.weight' has type {getattr(b, n).format.name}, but "
                                     f"blk.0.attn_q.weight is {cfg.linear_type.name}: mixed linear types are not supported")
            for n in BIASES:                      # Q / K / V biases (F32, as llama.cpp's converter keeps 1-D tensors)
                bname = tensor_name(i, n)
                if bname in t and not cfg.qkv_bias:
                    raise ModelError(f"unexpected tensor {bname!r}: {cfg.arch} blocks have no Q / K / V biases "
                                     f"(Arch.qkv_bias); refusing to run a model this engine does not fully understand")
                setattr(b, n, bind(bname, shapes[n], (formats.F32,)) if n in shapes else None)
            blk.append(b)
        embd = bind("token_embd.weight", (cfg.n_embd, cfg.n_vocab), EMBD_TYPES)
        onorm = bind("output_norm.weight", (cfg.n_embd,), NORM_TYPES)
        out = bind("output.weight", (cfg.n_embd, cfg.n_vocab), EMBD_TYPES) if "output.weight" in t else None
        extra = [n for n in t if n not in used and not n.startswith("rope_")]
        if extra:
            raise ModelError(f"unexpected tensor {extra[0]!r} ({len(extra)} not used by {cfg.arch}); "
                             f"refusing to run a model this engine does not fully understand")
        return cls(gf, cfg, embd, onorm, out, blk)

    def weight_bytes(self) -> int:
        return sum(ti.nbytes for ti in self.tensors())
