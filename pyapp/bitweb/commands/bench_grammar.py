"""`bitweb bench grammar [VOCAB.gguf ...] [--json]`: the grammar engine's costs (bitweb.grammar.bench)
over real vocabularies: by default the SmolLM2 file (49,152 tokens) and llama.cpp's Qwen2
vocabulary (151,936) that `tools/setup.sh --test` fetches into build/assets."""
from __future__ import annotations

import pathlib

from bitweb.tokenizer import PRE_TOKENIZERS, Tokenizer

ASSETS = pathlib.Path(__file__).resolve().parents[3] / "build" / "assets"
DEFAULT_VOCABS = (ASSETS / "SmolLM2-135M-Instruct.Q4_1.gguf", ASSETS / "llama.cpp" / "models" / "ggml-vocab-qwen2.gguf")


def gguf_metadata(path) -> dict:
    """A GGUF file's metadata alone (its tensor list is not read, so files whose weight formats
    bitweb cannot run yet still give their vocabulary)."""
    from bitweb.gguf import T_ARRAY, FileSource, GGUFError, _Parser
    with FileSource(path) as src:
        p = _Parser(src)
        p.take(4, "header.magic")
        if p.buf[:4] != b"GGUF":
            raise GGUFError(f"{path}: not a GGUF file", "header.magic", 0)
        p.unpack("I", "header.version")
        p.unpack("Q", "header.tensor_count")
        md = {}
        for _ in range(p.unpack("Q", "header.kv_count")):
            key = p.text("kv.key")
            vt = p.vtype(f"kv[{key!r}].type", "value type")
            md[key] = p.array(key, 0)[0] if vt == T_ARRAY else p.value(vt, key)
        return md


def gguf_tokenizer(path) -> Tokenizer:
    """The Tokenizer of a GGUF file's vocabulary. A pre-tokenizer bitweb lacks is read as llama-bpe:
    the grammar engine needs only each token's bytes, which do not depend on it."""
    md = gguf_metadata(path)
    if md.get("tokenizer.ggml.model") == "gpt2" and md.get("tokenizer.ggml.pre", "llama-bpe") not in PRE_TOKENIZERS:
        md["tokenizer.ggml.pre"] = "llama-bpe"
    return Tokenizer.from_metadata(md)


def run(args) -> list:
    """The CLI's run (commands/bench.py report prints it): one result per vocabulary."""
    from bitweb.grammar.bench import SCHEMAS, bench_grammar
    paths = [pathlib.Path(args.model)] if args.model else list(DEFAULT_VOCABS)
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise SystemExit(f"bench grammar: {', '.join(missing)} not found (tools/setup.sh --test fetches them)")
    out = []
    for p in paths:
        tokens = args.tokens if args.tokens != 32 else 200           # 32: bench's decode default
        r = bench_grammar(gguf_tokenizer(p), SCHEMAS, tokens=tokens, seed=args.seed)
        r["vocab_file"] = p.name
        out.append(r)
    return out


def describe(out: list) -> str:
    from bitweb.grammar.bench import describe as one
    return "\n".join(one(r) for r in out)
