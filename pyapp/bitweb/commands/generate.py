"""`python -m bitweb generate MODEL.gguf --prompt TEXT ...`: stream generated text to stdout.

--backend native: the GPU engine (wgpu-py); numpy: the numpy forward pass (bitweb.numpy_model).
--chat wraps the prompt (and --system) in the model's chat format (bitweb.chat.ChatFormat:
the file's template, or the built-in 2B4T format) and stops on its stop tokens (EOS, EOT,
the template's end of turn); --thinking on|off sets the template's thinking switch (implies
--chat). Without --chat the prompt is encoded as plain text (BOS per the file).
--json prints one object at the end instead of streaming:
  {"prompt_ids", "ids", "text", "stop_reason", "prefill_ms", "decode_ms_per_token",
   "dispatches_per_token", "host_calls_per_token"}, and natively "load": {"ms", "pipelines" (distinct,
   the model's plans), "stages_ms" (Engine.stage_ms: upload, compile, compile_prefill, plans)}
--lm-head q8_0 converts the LM head to Q8_0 on the GPU after upload (Engine.load(lm_head=)).
--kv-cache f16 (default) | f32: the KV cache's values (Engine.load(kv_cache=); numpy rounds as the GPU).
--stats prints timing and GPU counters to stderr (replayed plan dispatches = the fast path,
re-encoded dispatches = the slow path).
--speculative lookup / --draft FILE.gguf: speculative decoding (bitweb.speculative): prompt-lookup
drafts, or a draft model of the same vocabulary, verified in one multi-row pass; greedy output is
the same, token for token; --json adds "speculative", "drafted" and "accepted" (decode_ms_per_token
stays the decode time per generated token).
--json-schema FILE / --grammar FILE.gbnf: every token is sampled among those the grammar allows
(bitweb.grammar; on the GPU the mask is applied before sampling), told how many tokens are left,
so the output is complete by --max-tokens: JSON that validates against the schema, or text the
grammar accepts. A template's thinking switch is turned off (the grammar starts at once). When
--max-tokens is too small for any complete output, stderr says so and the exit status is 1.
Streamed to a terminal, the text's control characters (escape sequences, bidi overrides) are
shown escaped (commands/terminal.py); piped output and --json are exact.
"""
from __future__ import annotations

import asyncio
import json
import sys

from bitweb.options import SAMPLER
from bitweb.sampling import SamplingParams


def params_from_args(args) -> SamplingParams:
    """The sampler's parameters (bitweb.options SAMPLER) the command line has flags for."""
    return SamplingParams(**{k: getattr(args, k) for k in SAMPLER if hasattr(args, k)})


def prompt_ids(tokenizer, args) -> tuple:
    """(prompt ids, stop ids or None for the tokenizer's)."""
    thinking = {"on": True, "off": False, None: None}[getattr(args, "thinking", None)]
    constrained = getattr(args, "json_schema", None) or getattr(args, "grammar", None)
    if constrained and thinking:
        raise ValueError("--thinking on: a grammar or schema starts at the reply's first token (thinking off)")
    if args.chat or args.system is not None or thinking is not None:
        from bitweb import completions         # (the library's chat semantics: messages, thinking, prompt)
        from bitweb.chat import ChatFormat
        fmt = ChatFormat.from_tokenizer(tokenizer)
        if thinking is not None and not fmt.has_thinking:
            raise ValueError("--thinking: this model's chat template has no thinking switch")
        msgs = ([{"role": "system", "content": args.system}] if args.system is not None else [])
        msgs = completions.checked_messages(msgs + [{"role": "user", "content": args.prompt}])
        return completions.prompt_ids(fmt, msgs, completions.thinking_for(fmt, thinking, bool(constrained))), fmt.stop_ids
    return tokenizer.encode(args.prompt), None


def _stats(res, extra=""):
    out = sys.stderr
    n = len(res.ids)
    tps = 1000.0 / res.decode_ms_per_token if res.decode_ms_per_token else 0.0
    c = res.counters
    print(f"\n[{extra}prompt {len(res.prompt_ids)} tokens, prefill {res.prefill_ms:.1f} ms; {n} generated, "
          f"decode {res.decode_ms_per_token:.2f} ms/token ({tps:.1f} tokens/s); stop: {res.stop_reason}]", file=out)
    if res.speculative:
        rate = f"{100 * res.accepted / res.drafted:.0f} %" if res.drafted else "-"
        print(f"[speculative {res.speculative}: {res.drafted} drafted, {res.accepted} accepted ({rate})]", file=out)
    if c:
        print(f"[per decoded token: {res.dispatches_per_token:g} dispatches, {res.host_calls_per_token:g} host calls; "
              f"decode totals: replayed (plan) dispatches {c.get('plan_dispatches', 0)}, re-encoded dispatches "
              f"{c.get('direct_dispatches', 0)}, plan runs {c.get('plan_runs', 0)}, reads {c.get('reads', 0)}, "
              f"writes {c.get('writes', 0)}, full-logit fallbacks {c.get('full_fallbacks', 0)}]", file=out)


def load_grammar(args):
    """The Grammar of --json-schema / --grammar (None without either); errors name the file."""
    path = getattr(args, "json_schema", None) or getattr(args, "grammar", None)
    if not path:
        return None
    if getattr(args, "ignore_eos", False):
        raise ValueError("--ignore-eos cannot go with --json-schema / --grammar: the output ends where the grammar does")
    import json as _json
    from bitweb.grammar import Grammar, GrammarError
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        if args.grammar:
            return Grammar(text)
        try:
            schema = _json.loads(text)
        except ValueError as e:
            raise ValueError(f"{path}: not JSON ({e})") from None
        return Grammar.from_json_schema(schema)
    except GrammarError as e:
        raise ValueError(f"{path}: {e}") from None


def constraint_for(grammar, tokenizer, stops):
    """A fresh Constraint of grammar over the tokenizer's vocabulary, ending on the run's stop ids."""
    if grammar is None:
        return None
    from bitweb.grammar import Vocabulary
    return grammar.constraint(Vocabulary(tokenizer), stop_ids=stops if stops is not None else tokenizer.stop_ids)


def check_complete(c, res) -> int:
    """Exit status: 1 (with a line on stderr) when a constrained output is not complete."""
    if c is None or c.accepts():
        return 0
    print(f"bitweb generate: the output is not complete ({res.stop_reason} after {len(res.ids)} tokens): "
          "raise --max-tokens (or --ctx) for the grammar to finish", file=sys.stderr)
    return 1


def _on_token(args):
    if args.json:
        return None
    from bitweb.commands.terminal import writer
    write = writer(sys.stdout)         # a terminal gets escape sequences shown, not run

    def show(_id, piece):
        if piece:
            write(piece)
            sys.stdout.flush()
    return show


def main(args) -> int:
    from bitweb.gguf import open_gguf
    params = params_from_args(args)
    grammar = load_grammar(args)
    gf = open_gguf(args.model)
    max_ctx = getattr(args, "max_context", None)
    if args.backend == "numpy":
        if getattr(args, "lm_head", None):
            raise ValueError("--lm-head re-quantizes on the GPU: use --backend native")
        if getattr(args, "speculative", None) or getattr(args, "draft", None):
            raise ValueError("--speculative / --draft: speculative decoding runs on the GPU engine (--backend native)")
        from bitweb.numpy_model import NumpyModel
        ref = NumpyModel.from_gguf(gf, activations=args.activations, max_context=max_ctx, kv_cache=args.kv_cache)
        if ref.context_note:
            print(f"bitweb generate: {ref.context_note} (--ctx)", file=sys.stderr)
        ids, stops = prompt_ids(ref.tokenizer, args)
        c = constraint_for(grammar, ref.tokenizer, stops)
        res = ref.generate(ids, params, args.max_tokens, on_token=_on_token(args),
                           ignore_eos=getattr(args, "ignore_eos", False), stop_ids=stops, constraint=c)
        extra = f"numpy {args.activations}: "
    else:
        res, extra, c = asyncio.run(_native(gf, args, params, max_ctx, grammar))
    if args.json:
        print(json.dumps(dict(res.to_json(), **({"load": res.load} if hasattr(res, "load") else {}))))
    else:
        print()
    if args.stats:
        _stats(res, extra=extra)
    return check_complete(c, res)


async def _native(gf, args, params, max_ctx, grammar=None):
    from bitweb import gpu
    from bitweb.engine import Engine
    from bitweb.gguf import FileSource, open_gguf
    log = (lambda m: print(m, file=sys.stderr)) if args.stats else None
    dev = await gpu.request_device("native", log=log)
    with FileSource(args.model) as src:
        eng = await Engine.load(dev, gf, src, activations=args.activations, max_context=max_ctx, log=log,
                                lm_head=getattr(args, "lm_head", None), kv_cache=args.kv_cache)
    if eng.context_note:
        print(f"bitweb generate: {eng.context_note} (--ctx)", file=sys.stderr)
    load = {"ms": round(eng.load_ms, 1), "pipelines": eng.n_pipelines, "stages_ms": eng.stage_ms}
    speculative = getattr(args, "speculative", None)
    if getattr(args, "draft", None):
        with FileSource(args.draft) as src:
            speculative = await Engine.load(dev, open_gguf(args.draft), src, activations=args.activations,
                                            max_context=eng.n_ctx, log=log, kv_cache=args.kv_cache)
    ids, stops = prompt_ids(eng.tokenizer, args)
    c = constraint_for(grammar, eng.tokenizer, stops)
    res = await eng.generate(ids, params, args.max_tokens, on_token=_on_token(args),
                             ignore_eos=getattr(args, "ignore_eos", False), stop_ids=stops, constraint=c,
                             speculative=speculative)
    res.load = load
    return res, f"{dev.backend} {args.activations}: ", c
