"""bitweb.gguf against gguf-py: files written by GGUFWriter read back field for field
as GGUFReader reads them; `inspect --json` and `dequant` through bitweb.commands.main."""
import json
import subprocess
import sys

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q, GGUFReader, GGUFValueType as V, GGUFWriter
from gguf import quants as gq

from bitweb import formats
from bitweb.commands import main as cli_main
from bitweb.gguf import (BytesSource, FileSource, GGUFError, NeedMoreBytes, PrefixSource, open_gguf,
                         read_gguf)

QUANT = ["Q8_0", "TQ1_0", "TQ2_0", "BF16"]
TOKENS = [f"tok{i}\u00e9" if i % 7 else "" for i in range(3000)]     # a large string array, with empties

# (key, value, type, sub_type): every scalar type, strings, arrays of each kind, nested arrays
KVS = [
    ("t.u8", 250, V.UINT8, None), ("t.i8", -100, V.INT8, None),
    ("t.u16", 65535, V.UINT16, None), ("t.i16", -32768, V.INT16, None),
    ("t.u32", 4294967295, V.UINT32, None), ("t.i32", -2147483648, V.INT32, None),
    ("t.f32", 0.1, V.FLOAT32, None), ("t.u64", 2**64 - 1, V.UINT64, None),
    ("t.i64", -2**63, V.INT64, None), ("t.f64", -1.0e-300, V.FLOAT64, None),
    ("t.bool_t", True, V.BOOL, None), ("t.bool_f", False, V.BOOL, None),
    ("t.str", "h\u00e9llo \u2603 \U0001F600", V.STRING, None), ("t.str_empty", "", V.STRING, None),
    ("t.arr_u8", [0, 1, 255], V.ARRAY, V.UINT8), ("t.arr_i8", [-128, 127], V.ARRAY, V.INT8),
    ("t.arr_u16", [1, 65535], V.ARRAY, V.UINT16), ("t.arr_i16", [-1, 2], V.ARRAY, V.INT16),
    ("t.arr_u32", [7, 4294967295], V.ARRAY, V.UINT32), ("t.arr_i32", [-5, 6, 7], V.ARRAY, V.INT32),
    ("t.arr_f32", [0.5, -1.25, 3.0e38], V.ARRAY, V.FLOAT32), ("t.arr_u64", [2**64 - 1, 0], V.ARRAY, V.UINT64),
    ("t.arr_i64", [-2**63, 2**63 - 1], V.ARRAY, V.INT64), ("t.arr_f64", [1e300, -0.0], V.ARRAY, V.FLOAT64),
    ("t.arr_bool", [True, False, True], V.ARRAY, V.BOOL),
    ("tokenizer.ggml.tokens", TOKENS, V.ARRAY, V.STRING),
    ("t.nested_i32", [[1, 2, 3], [4], [5, 6]], V.ARRAY, V.ARRAY),
    ("t.nested_f32", [[0.5], [1.5, 2.5]], V.ARRAY, V.ARRAY),
    ("t.nested_str", [["a", "bc"], ["", "\u00fc"]], V.ARRAY, V.ARRAY),
    ("t.nested_deep", [[[1, 2], [3]], [[4]]], V.ARRAY, V.ARRAY),
]


def write_gguf_py(path, alignment=None, tensor_count=None):
    """A file written by gguf-py's own writer: every metadata type, and one tensor per format."""
    w = GGUFWriter(str(path), "bitnet-b1.58")
    w.add_architecture()
    if alignment:
        w.add_custom_alignment(alignment)
    w.add_uint32("bitnet-b1.58.block_count", 3)
    for key, val, vt, sub in KVS:
        w.add_key_value(key, val, vt, sub_type=sub)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 2, 512)).astype(np.float32)
    x[0, 0, :256] = 0                                           # an all-zero block
    for name in QUANT:
        q = getattr(Q, name)
        w.add_tensor(f"blk.0.{name.lower()}.weight", gq.quantize(x, q), raw_dtype=q)
    w.add_tensor("output_norm.weight", x[0, 0])                 # F32, 1-D
    w.add_tensor("token_embd.weight", x[0].astype(np.float16))  # F16, 2-D
    w.add_tensor("blk.0.f32_3d.weight", x[:, :, :64].copy())    # 3-D
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return write_gguf_py(tmp_path_factory.mktemp("gguf") / "all.gguf")


def flatten(v):
    """gguf-py's ReaderField.contents() flattens nested arrays; flatten ours the same way to compare."""
    if isinstance(v, list):
        return [y for x in v for y in flatten(x)]
    return [v]


def compare_with_gguf_py(gf, path):
    ref = GGUFReader(str(path))
    assert gf.version == ref.fields["GGUF.version"].contents()
    assert gf.alignment == ref.alignment
    assert gf.data_offset == ref.data_offset
    fields = {k: f for k, f in ref.fields.items() if not k.startswith("GGUF.")}
    assert list(gf.metadata) == list(fields)                         # same keys, same order
    for key, f in fields.items():
        ours = gf.metadata[key]
        vt, sub = gf.metadata_types[key]
        assert vt == f.types[0], key
        if vt == V.ARRAY:
            assert sub == f.types[1], key
            assert flatten(ours) == f.contents(), key
        else:
            assert sub is None
            assert ours == f.contents() and type(ours) is type(f.contents()), key
    assert list(gf.tensors) == [t.name for t in ref.tensors]
    for t in ref.tensors:
        ti = gf.tensors[t.name]
        assert ti.shape == tuple(int(d) for d in t.shape)
        assert ti.type_id == int(t.tensor_type) and ti.format.name == t.tensor_type.name
        assert ti.n_elements == t.n_elements and ti.nbytes == t.n_bytes
        assert ti.abs_offset == t.data_offset and ti.offset == t.data_offset - ref.data_offset
        assert gf.tensor_data(t.name) == t.data.tobytes()


def test_reads_gguf_py_file_field_for_field(model):
    gf = open_gguf(model)
    compare_with_gguf_py(gf, model)
    # nesting is kept (gguf-py flattens it), values exactly as written
    for key, val, vt, sub in KVS:
        if vt in (V.FLOAT32,):
            assert gf.metadata[key] == float(np.float32(val))
        elif sub == V.FLOAT32:
            assert gf.metadata[key] == [float(np.float32(v)) for v in val]
        elif key == "t.nested_f32":
            assert gf.metadata[key] == [[float(np.float32(v)) for v in r] for r in val]
        else:
            assert gf.metadata[key] == val, key
    assert gf.metadata_types["t.nested_str"] == (V.ARRAY, V.ARRAY)
    assert gf.metadata_types["tokenizer.ggml.tokens"] == (V.ARRAY, V.STRING)
    assert gf.arch == "bitnet-b1.58" and gf.get("block_count") == 3 and gf.get("missing", 7) == 7
    with pytest.raises(GGUFError, match="bitnet-b1.58.missing"):
        gf.get("missing")
    assert gf.file_size == model.stat().st_size
    gf.close()


def test_custom_alignment(tmp_path):
    path = write_gguf_py(tmp_path / "a64.gguf", alignment=64)
    with open_gguf(path) as gf:
        assert gf.alignment == 64 and gf.data_offset % 64 == 0
        compare_with_gguf_py(gf, path)


def test_version_2_reads_like_version_3(model, tmp_path):
    data = bytearray(model.read_bytes())
    assert data[4:8] == (3).to_bytes(4, "little")
    data[4:8] = (2).to_bytes(4, "little")
    path = tmp_path / "v2.gguf"
    path.write_bytes(data)
    with open_gguf(path) as gf:
        assert gf.version == 2
        compare_with_gguf_py(gf, path)


def test_sources_agree(model):
    data = model.read_bytes()
    a, b = open_gguf(model), read_gguf(BytesSource(data))
    assert (a.metadata, a.metadata_types, a.tensors, a.data_offset) == (b.metadata, b.metadata_types, b.tensors,
                                                                        b.data_offset)
    for name in a.tensors:
        assert a.tensor_data(name) == b.tensor_data(name)
    a.close()


class CountingFileSource(FileSource):
    def __init__(self, path):
        super().__init__(path)
        self.bytes_read = 0

    def read(self, offset, n):
        self.bytes_read += n
        return super().read(offset, n)


def test_file_source_reads_only_the_header(tmp_path):
    path = tmp_path / "big.gguf"
    w = GGUFWriter(str(path), "x")
    w.add_string("general.name", "big")
    w.add_tensor("big.weight", np.zeros((1024, 4096), np.float32))     # 16 MiB of data
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    src = CountingFileSource(path)
    gf = read_gguf(src)
    assert src.bytes_read <= gf.data_offset + (1 << 20) < src.size // 4   # header + at most one read chunk
    assert gf.tensors["big.weight"].nbytes == 16 << 20
    src.close()


def test_prefix_source_asks_for_what_it_needs(model):
    data = model.read_bytes()
    full = read_gguf(BytesSource(data))
    assert read_gguf(PrefixSource(data[:full.data_offset], len(data))).tensors == full.tensors  # header suffices
    have, asks = 16, []
    while True:
        try:
            gf = read_gguf(PrefixSource(data[:have], len(data)))
            break
        except NeedMoreBytes as e:
            assert have < e.needed <= full.data_offset          # never asks for tensor data
            asks.append(e.needed)
            # grow exactly to what was asked for a while, then double (as the browser does)
            have = e.needed if len(asks) < 50 else min(len(data), max(e.needed, 2 * have))
    assert len(asks) >= 50
    assert (gf.metadata, gf.tensors) == (full.metadata, full.tensors)
    with pytest.raises(NeedMoreBytes) as e:
        read_gguf(PrefixSource(data[:full.data_offset], len(data))).tensor_data("token_embd.weight")
    t = full.tensors["token_embd.weight"]
    assert e.value.needed == t.abs_offset + t.nbytes


def test_inspect_json_matches_gguf_py(model, capsys):
    assert cli_main(["inspect", str(model), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    ref = GGUFReader(str(model))
    assert set(out) == {"version", "alignment", "data_offset", "metadata", "tensors"}
    assert out["version"] == ref.fields["GGUF.version"].contents() == 3
    assert out["alignment"] == ref.alignment
    assert out["data_offset"] == ref.data_offset
    fields = {k: f for k, f in ref.fields.items() if not k.startswith("GGUF.")}
    assert list(out["metadata"]) == list(fields)
    for key, f in fields.items():
        v = out["metadata"][key]
        assert (flatten(v) if isinstance(v, list) else v) == f.contents(), key
    assert out["metadata"]["tokenizer.ggml.tokens"] == TOKENS                 # big list kept in full
    assert out["metadata"]["t.nested_str"] == [["a", "bc"], ["", "\u00fc"]]
    assert out["tensors"] == [{"name": t.name, "type": t.tensor_type.name, "shape": [int(d) for d in t.shape],
                               "offset": int(t.data_offset - ref.data_offset), "nbytes": int(t.n_bytes)}
                              for t in ref.tensors]


def test_inspect_human_table(model, capsys):
    assert cli_main(["inspect", str(model)]) == 0
    out = capsys.readouterr().out
    assert "GGUF v3" in out and "tokenizer.ggml.tokens" in out and "(3000 items)" in out
    assert any(line.split()[:2] == ["blk.0.tq2_0.weight", "TQ2_0"] for line in out.splitlines())


@pytest.mark.parametrize("name", QUANT + ["F32", "F16"])
def test_dequant_cli_equals_gguf_py(model, tmp_path, name):
    ref = GGUFReader(str(model))
    t = next(t for t in ref.tensors if t.tensor_type.name == name)
    out = tmp_path / "x.npy"
    assert cli_main(["dequant", str(model), t.name, "--out", str(out)]) == 0
    got = np.load(out)
    expect = gq.dequantize(t.data, t.tensor_type)
    assert got.dtype == np.float32 and got.shape == tuple(reversed([int(d) for d in t.shape]))
    assert np.array_equal(got.view(np.uint32), expect.astype(np.float32).view(np.uint32))


def test_dequant_cli_unknown_tensor(model, tmp_path, capsys):
    assert cli_main(["dequant", str(model), "nope", "--out", str(tmp_path / "x.npy")]) == 1
    assert "no tensor 'nope'" in capsys.readouterr().err


def test_inspect_cli_reports_bad_file(tmp_path, capsys):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + (1).to_bytes(4, "little") + bytes(16))
    assert cli_main(["inspect", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "GGUFError" in err and "version 1" in err and "header.version" in err


def test_i2_s_tensor_round_trip(tmp_path):
    """An I2_S tensor (gguf-py cannot write one) in a file built here byte by byte: table, nbytes, dequant."""
    rng = np.random.default_rng(3)
    t = rng.integers(-1, 2, (4, 256), dtype=np.int8)
    packed = formats.I2_S.pack(t, 0.25)
    u32, u64 = (lambda v: v.to_bytes(4, "little")), (lambda v: v.to_bytes(8, "little"))
    header = (b"GGUF" + u32(3) + u64(1) + u64(0)
              + u64(1) + b"w" + u32(2) + u64(256) + u64(4) + u32(36) + u64(0))
    data = header + bytes(-len(header) % 32) + packed
    gf = read_gguf(BytesSource(data))
    ti = gf.tensors["w"]
    assert (ti.format.name, ti.shape, ti.nbytes, ti.np_shape) == ("I2_S", (256, 4), 256 * 4 // 4 + 32, (4, 256))
    assert ti.abs_offset == gf.data_offset == 96      # 65 header bytes padded to 32
    (tmp_path / "i2s.gguf").write_bytes(data)
    assert cli_main(["dequant", str(tmp_path / "i2s.gguf"), "w", "--out", str(tmp_path / "w.npy")]) == 0
    assert np.array_equal(np.load(tmp_path / "w.npy"), t.astype(np.float32) * np.float32(0.25))


def test_reader_runs_without_numpy(model):
    """The reader is stdlib only: parse the gguf-py file in a process where numpy cannot be imported."""
    code = ("import sys, json; sys.modules['numpy'] = None\n"
            "from bitweb.gguf import open_gguf\n"
            f"gf = open_gguf({str(model)!r})\n"
            "print(json.dumps([len(gf.metadata), len(gf.tensors), gf.metadata['t.nested_deep'],"
            " len(gf.tensor_data('blk.0.tq1_0.weight'))]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == [len(KVS) + 2, 7, [[[1, 2], [3]], [[4]]], formats.nbytes("TQ1_0", 3 * 2 * 512)]


def _q2_file(tensors, alignment=32):
    """A GGUF file of (name, n_out, n_in, data, stored type id) tensors, built byte by byte."""
    u32, u64 = (lambda v: v.to_bytes(4, "little")), (lambda v: v.to_bytes(8, "little"))
    table, blob = b"", b""
    for name, n_out, n_in, data, type_id in tensors:
        table += u64(len(name)) + name.encode() + u32(2) + u64(n_in) + u64(n_out) + u32(type_id) + u64(len(blob))
        blob += data + bytes(-len(data) % alignment)
    header = b"GGUF" + u32(3) + u64(len(tensors)) + u64(0) + table
    return header + bytes(-len(header) % alignment) + blob


def _ternary(rng, fmt, n_out, n_in):
    f = formats.by_name(fmt)
    t = rng.integers(-1, 2, (n_out, n_in), dtype=np.int8)
    return f.pack(t, rng.integers(1, 32, t.size // f.block_size) / 64.0), t


def test_type_42_layout_told_from_the_byte_span():
    """Type 42 in 64-value blocks (upstream Q2_0) and in PrismML's 128-value blocks (read as
    Q2_0_G128), each before another tensor and as the last tensor; type 142 is Q2_0_G128."""
    rng = np.random.default_rng(42)
    q64, t64 = _ternary(rng, "Q2_0", 16, 256)             # 4096 values: 1152 vs 1088 bytes
    q128, t128 = _ternary(rng, "Q2_0_G128", 16, 256)
    for order in ((("a", q64, 42), ("b", q128, 42), ("c", q128, 142)), (("c", q128, 142), ("b", q128, 42), ("a", q64, 42))):
        gf = read_gguf(BytesSource(_q2_file([(n, 16, 256, d, i) for n, d, i in order])))
        a, b, c = gf.tensors["a"], gf.tensors["b"], gf.tensors["c"]
        assert (a.format.name, a.type_id, a.nbytes, a.stored_type_id) == ("Q2_0", 42, 1152, None)
        assert (b.format.name, b.type_id, b.nbytes, b.stored_type_id) == ("Q2_0_G128", 142, 1088, 42)
        assert (c.format.name, c.type_id, c.nbytes, c.stored_type_id) == ("Q2_0_G128", 142, 1088, None)
        assert gf.tensor_data("a") == q64 and gf.tensor_data("b") == q128
        assert np.array_equal(b.format.unpack(gf.tensor_data("b"), b.n_elements)[0], t128.reshape(-1))
        assert np.array_equal(a.format.unpack(gf.tensor_data("a"), a.n_elements)[0], t64.reshape(-1))


def test_small_type_42_tensor_takes_the_layout_the_file_shows():
    """A tensor too small to tell (both layouts pad to its span) takes the layout of the file's
    other type-42 tensors."""
    rng = np.random.default_rng(44)
    for fmt in ("Q2_0", "Q2_0_G128"):
        small, ts = _ternary(rng, fmt, 2, 256)
        big, _ = _ternary(rng, fmt, 16, 256)
        gf = read_gguf(BytesSource(_q2_file([("small", 2, 256, small, 42), ("big", 16, 256, big, 42)])))
        ti = gf.tensors["small"]
        assert ti.format.name == gf.tensors["big"].format.name == fmt and gf.tensor_data("small") == small
        assert np.array_equal(ti.format.unpack(gf.tensor_data("small"), ti.n_elements)[0], ts.reshape(-1))


def test_type_42_ambiguous_or_unmatched_size_is_an_error():
    rng = np.random.default_rng(43)
    small, _ = _ternary(rng, "Q2_0", 2, 256)              # 512 values: 144 vs 136 bytes, both pad to 160
    with pytest.raises(GGUFError, match=r"tensor 'w'.*type 42.*both fit and no other type-42 tensor decides"):
        read_gguf(BytesSource(_q2_file([("w", 2, 256, small, 42), ("x", 2, 256, small, 42)])))
    f16 = formats.by_name("F16").quantize(np.ones((16, 256), np.float32))          # 8192 bytes
    with pytest.raises(GGUFError, match=r"tensor 'w'.*spans 8192 bytes.*Q2_0 1152, Q2_0_G128 1088.*neither fits"):
        read_gguf(BytesSource(_q2_file([("w", 16, 256, f16, 42)])))
    g128, _ = _ternary(rng, "Q2_0_G128", 16, 192)          # ne0 192: only the 64-value layout divides the rows
    with pytest.raises(GGUFError, match=r"tensor 'w'.*neither fits"):
        read_gguf(BytesSource(_q2_file([("w", 16, 128 + 64, g128[:-2], 42)])))
