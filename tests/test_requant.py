"""shaders/requant.wgsl on random weights vs gguf-py's Q8_0 quantizer (the exact-by-construction
cases are in bitweb/ref/requant.py and run with every other kernel case).

Random F16 rows: the scale d (f16 bits) must equal gguf-py's in every block, and every q must
equal gguf-py's except where x / d lies within 1e-5 (relative) of a .5 tie, where a GPU's f32
division (WGSL allows 2.5 ULP) may round the other way: there |q - q_ref| <= 1.
"""
import numpy as np
from gguf import GGMLQuantizationType, quants

from bitweb import formats
from bitweb.kernels import requant
from tests.conftest import run


def test_random_f16_rows_match_gguf_py(gpu):
    rng = np.random.default_rng(5)
    rows, n_in = 301, 2560
    x = (rng.standard_normal((rows, n_in)) * rng.uniform(0.01, 3, (rows, 1))).astype(np.float16)
    x[7, :64] = 0                                              # two all-zero blocks: d = 0, q = 0
    ref = np.frombuffer(quants.quantize(x.astype(np.float32), GGMLQuantizationType.Q8_0), np.uint8).reshape(-1, 34)

    src = gpu.create_buffer(x.nbytes)
    gpu.write_buffer(src, 0, x.tobytes())
    dst = gpu.create_buffer(requant.q8_0_bytes(n_in, rows))
    step = requant.q8_0(formats.F16, n_in, rows)
    gpu.run([run(step.instantiate(gpu, {"src": src, "dst": dst}))])
    got = np.frombuffer(run(gpu.read(dst, 0, ref.size)), np.uint8).reshape(-1, 34)

    assert np.array_equal(got[:, :2], ref[:, :2]), "f16 scales differ"
    q, qr = got[:, 2:].view(np.int8).astype(int), ref[:, 2:].view(np.int8).astype(int)
    blocks = x.astype(np.float32).reshape(-1, 32)
    d = np.abs(blocks).max(1, keepdims=True) / np.float32(127)
    v = np.abs(blocks / np.where(d == 0, 1, d))
    near_tie = np.abs(v - np.floor(v) - 0.5) <= 1e-5 * np.maximum(v, 1)
    diff = q != qr
    assert not (diff & ~near_tie).any(), f"{int((diff & ~near_tie).sum())} q values differ away from a tie"
    assert (np.abs(q - qr) <= 1).all()
    assert diff.sum() <= near_tie.sum()


# ---------------------------------------------------------------- the engine's lm_head="q8_0" option
import pytest  # noqa: E402

from bitweb.authoring import gguf_writer as gw  # noqa: E402
from bitweb.engine import Engine, EngineError  # noqa: E402
from bitweb.gguf import FileSource, open_gguf  # noqa: E402


def rewrite(src, dst, tensors):
    """Copy GGUF src to dst with tensors {name: (type, shape, bytes)} replaced or added."""
    gf = open_gguf(src)
    md = []
    for k, v in gf.metadata.items():
        t, sub = gf.metadata_types[k]
        md.append((k, gw.array(sub, v) if t == gw.ARRAY else gw.Value(t, v)))
    out = [(n, ti.shape, ti.format, gf.tensor_data(n)) for n, ti in gf.tensors.items() if n not in tensors]
    out += [(n, shape, t, data) for n, (t, shape, data) in tensors.items()]
    gw.write_gguf(dst, md, out)


def q8(ti_bytes, fmt, n):
    return formats.Q8_0.quantize(fmt.dequantize(ti_bytes, n))


def load(dev, path, **kw):
    with FileSource(path) as src:
        return run(Engine.load(dev, open_gguf(path), src, **kw))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, tiny_model):
    return tmp_path_factory.mktemp("lmhead"), tiny_model(seed=11)


@pytest.mark.parametrize("tied", [True, False])
def test_engine_q8_0_head_equals_a_file_with_a_q8_0_head(gpu, tiny, tied):
    """lm_head="q8_0" converts on the GPU; the engine then runs exactly as on a file whose head
    is stored as Q8_0 (quantized by bitweb.formats = gguf-py): same table bytes, same logits."""
    d, path = tiny
    gf = open_gguf(path)
    emb = gf.tensors["token_embd.weight"]
    n_embd, n_vocab = emb.shape
    if tied:
        name, src_path = "token_embd.weight", path
        ref_tensors = {name: (formats.Q8_0, emb.shape, q8(gf.tensor_data(name), emb.format, n_embd * n_vocab))}
    else:   # add an untied F16 output.weight (a different table)
        rng = np.random.default_rng(2)
        out = (rng.standard_normal((n_vocab, n_embd)) * 0.2).astype(np.float16).tobytes()
        name, src_path = "output.weight", str(d / "untied.gguf")
        rewrite(path, src_path, {name: (formats.F16, emb.shape, out)})
        ref_tensors = {name: (formats.Q8_0, emb.shape, q8(out, formats.F16, n_embd * n_vocab))}
    ref_path = str(d / f"q8-{tied}.gguf")
    rewrite(src_path, ref_path, ref_tensors)

    eng = load(gpu, src_path, lm_head="q8_0")
    ref = load(gpu, ref_path)
    try:
        m = eng.model
        assert eng.table_type(m.lm_head) is formats.Q8_0
        assert eng.table_type(m.token_embd) is (formats.Q8_0 if tied else formats.F16)
        got = b"".join(run(gpu.read(b, 0, b.size)) for *_, b in eng.shards[name])
        want = ref_tensors[name][2]
        assert got[:len(want)] == want            # random F16 rows: no near-ties in this table
        ids = [1, 40, 77, 3, 200, 9]
        la, lb = run(eng.forward_logits(ids)), run(ref.forward_logits(ids))
        assert la == lb
    finally:
        eng.close()
        ref.close()


def test_engine_lm_head_option_errors(gpu, tiny):
    with pytest.raises(EngineError, match="lm_head 'q4'"):
        load(gpu, tiny[1], lm_head="q4")
