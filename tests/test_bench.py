"""The benchmarks run and emit well-formed JSON with the documented fields (bitweb.bench).

No timed assertions: times are only checked to be positive and finite, and the derived
figures (GB/s, P1, P2, host share, roofline ratio) to follow from the measured ones as the
docstring defines them. Byte counts are checked against the formats' own sizes.
"""
import json
import math
import os

import pytest

from bitweb import bench, commands as cli, formats
from bitweb.gguf import FileSource, open_gguf
from bitweb.kernels import dense, lmhead
from tests.conftest import run

KERNEL_FIELDS = {"kernel", "variant", "shape", "median_ms", "bytes", "gbps", "stream_gbps", "p1_vs_stream", "p2_vs_f16"}


def close(a, b, rel=0.02):
    """Rounded JSON figures agree with what they derive from (each is rounded to 3-4 digits)."""
    return abs(a - b) <= rel * abs(b) + 2e-3


@pytest.fixture(scope="module")
def tiny(tiny_model):
    return tiny_model(seed=3)


def check_kernel_results(res, shapes, linears=bench.LINEARS):
    assert res["bench"] == "kernels" and res["device"] and res["timing"]
    rows = res["results"]
    assert all(set(r) == KERNEL_FIELDS for r in rows), rows[0]
    # every linear format as the engine runs it: f32, A8 for the a8 ones (ternary, binary), q8 for
    # ggml's Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 (Format.vec_dot)
    want = {f"{f.name} {a}" for f in linears
            for a in ("f32",) + (("a8",) if f.a8 else ()) + (("q8",) if f.vec_dot else ())}
    assert "Q8_0 a8" not in want and "I2_S a8" in want and "F16 f32" in want and "F16" not in want
    assert ("Q4_0 q8" in want) == (formats.Q4_0 in linears)
    for n_in, n_out in shapes:
        shape = f"{n_in}x{n_out}"
        mine = [r for r in rows if r["shape"] == shape]
        heads = {f"lmhead {t.name}" for t in bench.LMHEAD if lmhead.supported(t, n_in) or t in dense.WTYPES}
        assert {r["kernel"] for r in mine} == want | heads, shape
        f16 = next(r for r in mine if r["kernel"] == "F16 f32")
        assert f16["p2_vs_f16"] == 1.0
        for r in mine:
            fmt = r["kernel"].split()[-1] if r["kernel"].startswith("lmhead") else r["kernel"].split()[0]
            f = formats.by_name(fmt)
            n_bytes = n_out * dense.row_bytes(f, n_in) if f in dense.WTYPES else f.nbytes(n_in * n_out)
            assert r["bytes"] == n_bytes, r
            assert r["median_ms"] > 0 and math.isfinite(r["median_ms"])
            assert close(r["gbps"], r["bytes"] / r["median_ms"] / 1e6), r
            assert close(r["p1_vs_stream"], r["gbps"] / r["stream_gbps"]), r
            assert close(r["p2_vs_f16"], f16["median_ms"] / r["median_ms"], rel=0.03), r
            # the stream it was compared with was measured over the same bytes in this run
            assert any(s["kernel"] == "stream" and s["bytes"] == r["bytes"] // 16 * 16 and close(s["gbps"], r["stream_gbps"])
                       for s in rows), r


def test_kernels_quick_json(capsys):
    """The CLI, default variants (--quick) on one shape of its own (--shapes): one JSON object,
    every family at that shape and no other."""
    assert cli.main(["bench", "kernels", "--quick", "--shapes", "512x128", "--json", "--repeats", "3"]) == 0
    res = json.loads(capsys.readouterr().out)
    check_kernel_results(res, ((512, 128),))
    assert {r["shape"] for r in res["results"] if r["kernel"] != "stream"} == {"512x128"}


def test_bad_shapes_are_refused(capsys):
    assert bench.parse_shapes("2560x640, 256X8") == ((2560, 640), (256, 8))
    for bad, why in (("2560", "expected N_INxROWS"), ("100x8", "multiple of 256"), ("256x0", "expected"),
                     ("256x8,", "expected")):
        assert cli.main(["bench", "kernels", "--shapes", bad]) == 1
        assert why in capsys.readouterr().err, bad


def test_kernel_variants_and_sharded_head(gpu):
    """Non-quick variant lists on one shape whose F16 LM head needs two shards (small binding) and
    whose F16 and F32 linears are over the binding (not run, as the engine could not bind them:
    no P2 base, so no P2)."""
    limit = gpu.limits["maxStorageBufferBindingSize"]
    gpu.limits["maxStorageBufferBindingSize"] = 128 * 1024
    try:
        res = run(bench.bench_kernels(gpu, ((256, 384),), quick=False, repeats=3, linears=("I2_S", "F32", "Q4_0")))
    finally:
        gpu.limits["maxStorageBufferBindingSize"] = limit
    rows = [r for r in res["results"] if r["kernel"] != "stream"]
    variants = {(r["kernel"], r["variant"]) for r in rows}
    assert len(variants) == len(rows), "a variant was measured twice"
    assert {r["kernel"] for r in rows} == {"I2_S f32", "I2_S a8", "Q4_0 f32", "Q4_0 q8", "lmhead F16", "lmhead Q8_0"}
    assert all(r["p2_vs_f16"] is None for r in rows)
    if gpu.caps.subgroups:
        assert any("shared" in v for k, v in variants if k == "I2_S a8")
        assert any("shared" in v for k, v in variants if k == "Q4_0 f32")
    head = next(r for r in rows if r["kernel"] == "lmhead F16")
    assert head["bytes"] == 384 * 256 * 2 > 128 * 1024          # 2 shards, one dispatch each, one figure


def test_pattern_weights_are_valid():
    """Generated weights decode to finite values in the ternary code range."""
    import numpy as np
    for fmt in ("F16", "F32", "Q8_0", "TQ2_0", "TQ1_0", "Q1_0"):
        pat = bench.pattern(fmt, 1, target=4096)
        f = formats.by_name(fmt)
        assert len(pat) % 4 == 0 and len(pat) % f.type_size == 0
        vals = f.dequantize(pat, len(pat) // f.type_size * f.block_size)
        assert np.isfinite(vals).all()
        if fmt in ("TQ2_0", "TQ1_0", "Q1_0"):
            t, _, _ = f.unpack(pat, len(pat) // f.type_size * f.block_size)
            assert set(np.unique(t)) <= {-1, 0, 1}
    i2 = bench.pattern("I2_S", 1, target=4096)
    t, _, _ = formats.I2_S.unpack(i2 + bytes(32), len(i2) * 4)
    assert set(np.unique(t)) <= {-1, 0, 1}


def test_decode_json(gpu, tiny, capsys):
    gf = open_gguf(tiny)
    with FileSource(tiny) as src:
        r = run(bench.bench_decode(gpu, gf, src, tokens=6, prompt_tokens=10, repeats=3))
    cfg = r["model"]
    assert r["bench"] == "decode" and "blocks" in cfg
    assert r["prompt_tokens"] == 10 and r["decoded_tokens"] == 5
    assert r["dispatches_per_layer"] > 0 and r["dispatches_per_token"] >= r["dispatches_per_layer"] * 2
    assert r["host_calls_per_token"] > 0
    for k in ("prefill_ms", "prefill_tok_s", "decode_ms_per_token", "decode_tok_s", "step_ms_median", "gpu_ms_per_token",
              "stream_gbps", "roofline_ms"):
        assert r[k] > 0 and math.isfinite(r[k]), k
    assert 0 <= r["host_share"] <= 1
    assert r["host_ms_per_token"] > 0 and r["bridge_ms"] >= 0
    assert r["overlap"] is True and r["host_busy_ms"] > 0
    assert close(r["host_share"], min(1.0, r["host_ms_per_token"] / r["step_ms_median"]))
    assert close(r["step_vs_roofline"], r["step_ms_median"] / r["roofline_ms"])
    # bytes per token from the file's own tensor table
    ti = gf.tensors
    blocks = sum(t.nbytes for n, t in ti.items() if n.startswith("blk."))
    head = ti["output.weight"] if "output.weight" in ti else ti["token_embd.weight"]
    b = r["bytes"]
    assert b["blocks"] == blocks and b["lm_head"] >= head.nbytes and b["lm_head"] - head.nbytes < 4 * len(b) + 1024
    assert b["embedding_row"] == dense.row_bytes(ti["token_embd.weight"].format.name, gf.get("embedding_length"))
    mean_pos = 10 + 5 / 2
    n_kv = gf.get("attention.head_count_kv") * gf.get("embedding_length") // gf.get("attention.head_count")
    assert b["kv_cache"] == int(2 * gf.get("block_count") * n_kv * 2 * (mean_pos + 1))      # f16 K and V rows read
    # the KV cache allocated: f16 by default, half of f32's (tests/test_engine.py loads both)
    assert r["kv_cache"] == "f16" and r["kv_variant"] in ("f16", "f16 pack2x16float")
    assert r["kv_cache_bytes"] == 2 * gf.get("block_count") * n_kv * 2 * r["n_ctx"] and r["n_ctx"] == gf.get("context_length")
    assert r["bytes_per_token"] == b["total"] == int(blocks + ti["output_norm.weight"].nbytes + b["lm_head"]
                                                    + b["embedding_row"] + b["kv_cache"])
    assert close(r["roofline_ms"], r["bytes_per_token"] / r["stream_gbps"] / 1e6)
    json.dumps(r)


def test_bench_encode_reports():
    from bitweb.authoring import vocab
    from bitweb.tokenizer import Tokenizer
    r = bench.bench_encode(vocab.bytes_vocab(), text="hello world, " * 50, repeats=1)
    assert r["tokens"] == len(Tokenizer.from_metadata(vocab.bytes_vocab()).encode("hello world, " * 50,
                                                                                 add_bos=False))
    assert r["warm_tokens_per_s"] > 0 and r["load_s"] >= 0


def test_load_and_tokenizer_cli(tiny, capsys):
    assert cli.main(["bench", "load", tiny, "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["bench"] == "load" and r["file_bytes"] == os.path.getsize(tiny)
    assert r["load_s"] > 0 and close(r["bytes_per_s"], r["file_bytes"] / r["load_s"], rel=0.01)
    assert r["upload_s"] + r["compile_s"] <= r["load_s"] + 2e-3      # each rounded to 1 ms
    assert r["load_s"] <= r["ready_s"] <= r["prefill_kernels_s"] and r["pipelines"] > 0 and r["ready_cpu_s"] > 0
    assert {"upload", "compile", "compile_prefill", "plans"} <= set(r["stages_ms"])
    assert r["python_heap_peak_bytes"] > 0 and r["rss_peak_growth_bytes"] >= 0
    assert r["gpu_write_bytes"] >= sum(t.nbytes for t in open_gguf(tiny).tensors.values()) - 4096
    assert cli.main(["bench", "tokenizer", "--json"]) == 0
    t = json.loads(capsys.readouterr().out)
    assert t["tokens"] > 0 and t["cold_tokens_per_s"] > 0 and t["n_vocab"] > 0


def test_decode_without_model_is_an_error(capsys):
    assert cli.main(["bench", "decode"]) == 1
    assert "needs a MODEL.gguf" in capsys.readouterr().err


def test_stop_speculative_grammar_share_one_report(tiny, capsys):
    """commands/bench.py report(): the model check names the bench; grammar needs none and prints
    its results as JSON or as text."""
    for what in ("stop", "speculative"):
        assert cli.main(["bench", what]) == 1
        assert f"bench {what} needs a MODEL.gguf" in capsys.readouterr().err
    assert cli.main(["bench", "grammar", tiny, "--json", "--tokens", "8"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert [x["vocab_file"] for x in r] == [os.path.basename(tiny)]
    assert cli.main(["bench", "grammar", tiny, "--tokens", "8"]) == 0
    from bitweb.grammar.bench import describe
    text, want = capsys.readouterr().out.splitlines(), describe(r[0]).splitlines()
    assert len(text) == len(want) and text[0].split(", built")[0] == want[0].split(", built")[0], (text, want)
    assert [t.split()[0] for t in text[1:]] == [w.split()[0] for w in want[1:]]    # (times differ between runs)
