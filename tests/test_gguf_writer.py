"""bitweb.authoring.gguf_writer: every metadata type, every tensor type, alignment, streaming, errors.

Oracles: gguf-py's GGUFReader (every field and every non-I2_S tensor) and gguf-py's own
GGUFWriter (byte-identical files where it can express the content); bitweb.gguf's reader
for I2_S, which gguf-py cannot read (type id 36).
"""
from __future__ import annotations

import os
import struct

import gguf as ggufpy
import numpy as np
import pytest

from bitweb import formats
from bitweb.authoring import gguf_writer as gw
from bitweb.gguf import open_gguf

VT = ggufpy.GGUFValueType

# key -> (value to write, expected gguf-py types list, expected python value after reading)
SCALARS = {
    "t.u8": (gw.u8(255), [VT.UINT8], 255),
    "t.i8": (gw.i8(-128), [VT.INT8], -128),
    "t.u16": (gw.u16(65535), [VT.UINT16], 65535),
    "t.i16": (gw.i16(-32768), [VT.INT16], -32768),
    "t.u32": (gw.u32(2**32 - 1), [VT.UINT32], 2**32 - 1),
    "t.i32": (gw.i32(-2**31), [VT.INT32], -2**31),
    "t.u64": (gw.u64(2**64 - 1), [VT.UINT64], 2**64 - 1),
    "t.i64": (gw.i64(-2**63), [VT.INT64], -2**63),
    "t.f32": (gw.f32(0.1), [VT.FLOAT32], float(np.float32(0.1))),
    "t.f64": (gw.f64(0.1), [VT.FLOAT64], 0.1),
    "t.bool_true": (gw.boolean(True), [VT.BOOL], True),
    "t.bool_false": (False, [VT.BOOL], False),
    "t.str": (gw.string("héllo ✓ 🚀"), [VT.STRING], "héllo ✓ 🚀"),
    "t.str_empty": ("", [VT.STRING], ""),
    "t.int_inferred": (7, [VT.INT32], 7),
    "t.bigint_inferred": (2**40, [VT.INT64], 2**40),
    "t.float_inferred": (1e-5, [VT.FLOAT32], float(np.float32(1e-5))),
}
ARRAYS = {
    "a.u8": (gw.array(gw.UINT8, [0, 1, 255]), [VT.ARRAY, VT.UINT8], [0, 1, 255]),
    "a.u8_bytes": (gw.array(gw.UINT8, b"\x00\x7f\xff"), [VT.ARRAY, VT.UINT8], [0, 127, 255]),
    "a.i8": (gw.array(gw.INT8, [-128, 0, 127]), [VT.ARRAY, VT.INT8], [-128, 0, 127]),
    "a.u16": (gw.array(gw.UINT16, [1, 65535]), [VT.ARRAY, VT.UINT16], [1, 65535]),
    "a.i16": (gw.array(gw.INT16, [-32768, 32767]), [VT.ARRAY, VT.INT16], [-32768, 32767]),
    "a.u32": (gw.array(gw.UINT32, np.array([5, 2**32 - 1], dtype=np.uint64)), [VT.ARRAY, VT.UINT32], [5, 2**32 - 1]),
    "a.i32": (gw.array(gw.INT32, [-1, 2, -3]), [VT.ARRAY, VT.INT32], [-1, 2, -3]),
    "a.u64": (gw.array(gw.UINT64, [0, 2**64 - 1]), [VT.ARRAY, VT.UINT64], [0, 2**64 - 1]),
    "a.i64": (gw.array(gw.INT64, [-2**63, 2**63 - 1]), [VT.ARRAY, VT.INT64], [-2**63, 2**63 - 1]),
    "a.f32": (gw.array(gw.FLOAT32, [0.5, -1e-3, 3e38]), [VT.ARRAY, VT.FLOAT32],
              np.array([0.5, -1e-3, 3e38], dtype=np.float32).tolist()),
    "a.f64": (gw.array(gw.FLOAT64, [0.1, -2.5e300]), [VT.ARRAY, VT.FLOAT64], [0.1, -2.5e300]),
    "a.bool": (gw.array(gw.BOOL, [True, False, True]), [VT.ARRAY, VT.BOOL], [True, False, True]),
    "a.str": (["Ġthe", "", "ü 你好"], [VT.ARRAY, VT.STRING], ["Ġthe", "", "ü 你好"]),
    "a.empty_i32": (gw.array(gw.INT32, []), [VT.ARRAY, VT.INT32], []),
    "a.empty_str": (gw.array(gw.STRING, []), [VT.ARRAY, VT.STRING], []),
    "a.ints_inferred": ([1, -2, 3], [VT.ARRAY, VT.INT32], [1, -2, 3]),
}
# nested: (value, gguf-py types, flattened contents (gguf-py flattens), nested value (bitweb reader),
#          bitweb metadata_types entry)
NESTED = {
    "n.u16": (gw.array(gw.ARRAY, [gw.array(gw.UINT16, [1, 2]), gw.array(gw.UINT16, [3])]),
              [VT.ARRAY, VT.ARRAY, VT.UINT16], [1, 2, 3], [[1, 2], [3]]),
    "n.str": ([["a", "bc"], ["d"]], [VT.ARRAY, VT.ARRAY, VT.STRING], ["a", "bc", "d"], [["a", "bc"], ["d"]]),
    "n.deep": (gw.array(gw.ARRAY, [gw.array(gw.ARRAY, [gw.array(gw.FLOAT64, [1.5, 2.5])])]),
               [VT.ARRAY, VT.ARRAY, VT.ARRAY, VT.FLOAT64], [1.5, 2.5], [[[1.5, 2.5]]]),
}


def write_all_types(path, alignment=None):
    with gw.GGUFWriter(path, alignment=alignment) as w:
        w.add("general.architecture", "test")
        for table in (SCALARS, ARRAYS, NESTED):
            for k, v in table.items():
                w.add(k, v[0])
        w.add_tensor("x", (32,), "F32")
        w.write_tensor("x", np.arange(32, dtype="<f4"))


def test_every_metadata_type_reads_back_with_gguf_py(tmp_path):
    p = tmp_path / "m.gguf"
    write_all_types(p)
    r = ggufpy.GGUFReader(p)
    for key, (_, types, want) in {**SCALARS, **ARRAYS}.items():
        f = r.fields[key]
        if types[0] == VT.ARRAY and not want:      # gguf-py takes element types from element 0
            assert f.types == [VT.ARRAY] and int(f.parts[3][0]) == types[1], key
            assert int(f.parts[4][0]) == 0, key     # element count
            continue
        assert f.types == types, key
        assert f.contents() == want, key
    for key, (_, types, flat, _) in NESTED.items():
        f = r.fields[key]
        assert f.types == types, key
        assert f.contents() == flat, key
    # bytes of the data section
    assert r.tensors[0].data.tolist() == list(range(32))


def test_every_metadata_type_reads_back_with_bitweb_reader(tmp_path):
    p = tmp_path / "m.gguf"
    write_all_types(p)
    g = open_gguf(p)
    assert list(g.metadata) == ["general.architecture", *SCALARS, *ARRAYS, *NESTED]
    for key, (_, types, want) in {**SCALARS, **ARRAYS}.items():
        assert g.metadata[key] == want, key
        vt, sub = g.metadata_types[key]
        assert vt == types[0] and (sub == (types[1] if len(types) > 1 else None)), key
    for key, (_, types, _, nested) in NESTED.items():
        assert g.metadata[key] == nested, key
        assert g.metadata_types[key][0] == gw.ARRAY and g.metadata_types[key][1] == gw.ARRAY


def test_identical_bytes_to_gguf_py_writer(tmp_path):
    """Where gguf-py's writer can express the content, both writers produce the same file."""
    rng = np.random.default_rng(0)
    f32 = rng.standard_normal((3, 64), dtype=np.float32)
    q8 = formats.quantize("Q8_0", rng.standard_normal(64 * 2, dtype=np.float32))
    tq2 = formats.quantize("TQ2_0", rng.standard_normal(256 * 2, dtype=np.float32))
    ours, theirs = tmp_path / "ours.gguf", tmp_path / "theirs.gguf"

    w = ggufpy.GGUFWriter(theirs, "llama")
    w.add_uint32("llama.block_count", 3)
    w.add_int64("x.i64", -5)
    w.add_float64("x.f64", 0.25)
    w.add_bool("x.b", True)
    w.add_string("x.s", "ça va")
    w.add_array("x.strs", ["a", "b"])
    w.add_key_value("x.u16s", [1, 2, 3], VT.ARRAY, VT.UINT16)
    w.add_key_value("x.nested", [["p", "q"], ["r"]], VT.ARRAY, VT.ARRAY)
    w.add_tensor("f32", f32)
    w.add_tensor("f16", f32.astype(np.float16))
    w.add_tensor("q8", np.frombuffer(q8, dtype=np.uint8).reshape(2, 68), raw_dtype=ggufpy.GGMLQuantizationType.Q8_0)
    w.add_tensor("tq2", np.frombuffer(tq2, dtype=np.uint8).reshape(2, 66), raw_dtype=ggufpy.GGMLQuantizationType.TQ2_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    with gw.GGUFWriter(ours) as o:
        o.add("general.architecture", "llama")
        o.add("llama.block_count", gw.u32(3))
        o.add("x.i64", gw.i64(-5))
        o.add("x.f64", gw.f64(0.25))
        o.add("x.b", True)
        o.add("x.s", "ça va")
        o.add("x.strs", ["a", "b"])
        o.add("x.u16s", gw.array(gw.UINT16, [1, 2, 3]))
        o.add("x.nested", [["p", "q"], ["r"]])
        o.add_tensor("f32", (64, 3), "F32")
        o.add_tensor("f16", (64, 3), "F16")
        o.add_tensor("q8", (64, 2), "Q8_0")
        o.add_tensor("tq2", (256, 2), "TQ2_0")
        o.write_tensor("f32", f32)
        o.write_tensor("f16", f32.astype(np.float16))
        o.write_tensor("q8", q8)
        o.write_tensor("tq2", tq2)
    assert ours.read_bytes() == theirs.read_bytes()


SHAPES = [(256,), (256, 3), (256, 2, 2), (256, 1, 2, 1)]


@pytest.mark.parametrize("name", ["F32", "F16", "BF16", "Q8_0", "TQ1_0", "TQ2_0", "Q1_0", "I2_S", "Q2_0_G128"])
@pytest.mark.parametrize("alignment", [None, 64, 256])
def test_tensors_of_every_type(tmp_path, name, alignment):
    """add_tensor by GGML name (as a user gives it); the reader gives the Format back."""
    fmt = formats.by_name(name)
    rng = np.random.default_rng(fmt.type_id)
    datas = []
    p = tmp_path / "t.gguf"
    with gw.GGUFWriter(p, alignment=alignment) as w:
        w.add("general.architecture", "test")
        for i, shape in enumerate(SHAPES):
            w.add_tensor(f"t{i}", shape, name)
        for i, shape in enumerate(SHAPES):
            x = rng.standard_normal(int(np.prod(shape)), dtype=np.float32)
            data = fmt.quantize(x)
            datas.append(data)
            w.write_tensor(f"t{i}", data)
    align = alignment or 32
    raw = p.read_bytes()
    assert len(raw) % align == 0

    g = open_gguf(p)                                   # bitweb reader: every type incl. I2_S
    assert g.alignment == align and g.data_offset % align == 0
    for i, shape in enumerate(SHAPES):
        t = g.tensors[f"t{i}"]
        assert (t.shape, t.format, t.nbytes) == (shape, fmt, len(datas[i]))
        assert t.abs_offset % align == 0
        assert g.tensor_data(t.name) == datas[i]
    if alignment not in (None, 32):
        assert g.metadata_types["general.alignment"] == (gw.UINT32, None)

    if fmt in (formats.I2_S, formats.Q2_0_G128):       # gguf-py does not know type ids 36 and 142
        with pytest.raises(ValueError):
            ggufpy.GGUFReader(p)
        return
    r = ggufpy.GGUFReader(p)
    assert r.alignment == align
    for i, shape in enumerate(SHAPES):
        t = r.tensors[i]
        assert t.name == f"t{i}"
        assert t.tensor_type == ggufpy.GGMLQuantizationType(fmt.type_id)
        assert t.shape.tolist() == list(shape)
        assert t.n_bytes == len(datas[i]) and t.data_offset % align == 0
        assert t.data.tobytes() == datas[i]


def test_alignment_from_metadata_key(tmp_path):
    p = tmp_path / "a.gguf"
    with gw.GGUFWriter(p) as w:
        w.add("general.alignment", gw.u32(128))
        w.add_tensor("a", (3,), "F32")
        w.add_tensor("b", (5,), "F16")
        w.write_tensor("a", np.ones(3, dtype="<f4"))
        w.write_tensor("b", np.ones(5, dtype="<f2"))
    r = ggufpy.GGUFReader(p)
    assert r.alignment == 128
    assert [t.data_offset % 128 for t in r.tensors] == [0, 0]
    assert r.tensors[1].data_offset - r.tensors[0].data_offset == 128
    assert os.path.getsize(p) % 128 == 0


def test_header_layout_by_hand(tmp_path):
    """The exact bytes of a minimal file, written out from the GGUF spec."""
    p = tmp_path / "h.gguf"
    with gw.GGUFWriter(p) as w:
        w.add("k", gw.u16(513))
        w.add_tensor("w", (2, 3), "F32")
        w.write_tensor("w", np.arange(6, dtype="<f4"))
    want = (b"GGUF" + struct.pack("<IQQ", 3, 1, 1)
            + struct.pack("<Q", 1) + b"k" + struct.pack("<IH", gw.UINT16, 513)
            + struct.pack("<Q", 1) + b"w" + struct.pack("<IQQIQ", 2, 2, 3, 0, 0))
    want += bytes(-len(want) % 32)
    data = np.arange(6, dtype="<f4").tobytes()
    want += data + bytes(-len(data) % 32)
    assert p.read_bytes() == want


def test_version_2(tmp_path):
    p = tmp_path / "v2.gguf"
    with gw.GGUFWriter(p, version=2) as w:
        w.add("k", "v")
    assert ggufpy.GGUFReader(p).fields["GGUF.version"].contents() == 2
    assert open_gguf(p).version == 2


def test_streams_chunks_to_a_partial_file(tmp_path):
    """Chunks go to disk as they come; the file appears under its name only when complete."""
    p = tmp_path / "s.gguf"
    a = np.arange(1000, dtype="<f4")
    b = np.arange(64, dtype="<f2")
    w = gw.GGUFWriter(p)
    w.add_tensor("a", (1000,), "F32")
    w.add_tensor("b", (64,), "F16")
    w.write_tensor("a", a[:300])
    partial = tmp_path / "s.gguf.partial"
    w._file.flush()
    assert partial.stat().st_size == w.data_offset + 300 * 4
    w.write_tensor("a", a[300:].tobytes())
    w.write_tensor("b", memoryview(b.tobytes()))
    assert not p.exists()
    w.close()
    assert not partial.exists()
    g = open_gguf(p)
    assert g.tensor_data("a") == a.tobytes() and g.tensor_data("b") == b.tobytes()


def test_error_inside_with_removes_partial_file(tmp_path):
    p = tmp_path / "e.gguf"
    with pytest.raises(RuntimeError):
        with gw.GGUFWriter(p) as w:
            w.add_tensor("a", (4,), "F32")
            w.write_tensor("a", np.zeros(2, dtype="<f4"))
            raise RuntimeError("boom")
    assert not p.exists() and not (tmp_path / "e.gguf.partial").exists()


def test_stored_type_id_writes_prismml_legacy_q2_0(tmp_path):
    """Q2_0_G128 data labelled type 42 (PrismML's first Ternary Bonsai files): the reader tells the
    layout from the span and reports the stored id."""
    p = tmp_path / "legacy.gguf"
    f = formats.by_name("Q2_0_G128")
    data = f.quantize(np.random.default_rng(5).standard_normal(256 * 16, dtype=np.float32))
    with gw.GGUFWriter(p) as w:
        w.add_tensor("w", (256, 16), "Q2_0_G128", stored_type_id=42)
        w.write_tensor("w", data)
    raw = p.read_bytes()
    t = open_gguf(p).tensors["w"]
    assert (t.format.name, t.type_id, t.stored_type_id, t.nbytes) == ("Q2_0_G128", 142, 42, len(data))
    assert int.from_bytes(raw[t.info_offset + 8 + 1 + 4 + 16:][:4], "little") == 42     # the record says 42


def test_unknown_type_id_with_explicit_nbytes(tmp_path):
    """A type formats does not know can still be written when the caller gives nbytes."""
    p = tmp_path / "u.gguf"
    with gw.GGUFWriter(p) as w:
        w.add_tensor("q4", (32, 2), 2, nbytes=36)       # Q4_0: 18 bytes per 32
        w.write_tensor("q4", bytes(range(36)))
    t = ggufpy.GGUFReader(p).tensors[0]
    assert t.tensor_type == ggufpy.GGMLQuantizationType.Q4_0 and t.data.tobytes() == bytes(range(36))


def _writer(tmp_path):
    return gw.GGUFWriter(tmp_path / "x.gguf")


BAD_METADATA = [
    (lambda w: (w.add("k", 1), w.add("k", 2)), "duplicate metadata key 'k'"),
    (lambda w: w.add("k", gw.u8(256)), "256 is out of range for UINT8"),
    (lambda w: w.add("k", gw.i8(-129)), "-129 is out of range for INT8"),
    (lambda w: w.add("k", gw.u32(-1)), "-1 is out of range for UINT32"),
    (lambda w: w.add("k", gw.u64(2**64)), "out of range for UINT64"),
    (lambda w: w.add("k", gw.u32(1.5)), "UINT32 needs an integer"),
    (lambda w: w.add("k", gw.u32(True)), "UINT32 needs an integer"),
    (lambda w: w.add("k", gw.boolean(1)), "BOOL needs True/False"),
    (lambda w: w.add("k", gw.f32("x")), "FLOAT32 needs a number"),
    (lambda w: w.add("k", gw.string(5)), "expected a string"),
    (lambda w: w.add("k", gw.array(gw.UINT8, [1, 300])), "element 300 is out of range for UINT8"),
    (lambda w: w.add("k", gw.array(gw.INT32, [1, "a"])), "INT32 array elements must be integers"),
    (lambda w: w.add("k", gw.array(gw.BOOL, [1, 0])), "BOOL array elements must be True/False"),
    (lambda w: w.add("k", gw.array(gw.ARRAY, [1])), "k[0]: element of an ARRAY array must be an array"),
    (lambda w: w.add("k", gw.array(99, [1])), "unknown array element type 99"),
    (lambda w: w.add("k", gw.Value(42, 1)), "unknown GGUF value type 42"),
    (lambda w: w.add("k", []), "empty array"),
    (lambda w: w.add("k", [1, "a"]), "mixed types"),
    (lambda w: w.add("k", {"a": 1}), "cannot store a dict"),
    (lambda w: w.add("", 1), "non-empty string"),
    (lambda w: w.add("general.alignment", 64), "general.alignment must be UINT32"),
    (lambda w: w.add("general.alignment", gw.u32(48)), "power of two"),
]


@pytest.mark.parametrize("bad,msg", BAD_METADATA)
def test_bad_metadata_is_a_clear_error(tmp_path, bad, msg):
    with pytest.raises(gw.GGUFWriteError, match=msg.replace("[", r"\[").replace("(", r"\(")):
        bad(_writer(tmp_path))


BAD_TENSORS = [
    (lambda w: (w.add_tensor("a", (4,), "F32"), w.add_tensor("a", (4,), "F32")), "duplicate tensor name 'a'"),
    (lambda w: w.add_tensor("a" * 64, (4,), "F32"), "limit is 63"),
    (lambda w: w.add_tensor("a", (), "F32"), "0 dims"),
    (lambda w: w.add_tensor("a", (1, 1, 1, 1, 1), "F32"), "5 dims"),
    (lambda w: w.add_tensor("a", (4, 0), "F32"), "dim 1 is 0"),
    (lambda w: w.add_tensor("a", (2**32, 2**32), "F32"), "overflow"),
    (lambda w: w.add_tensor("a", (100,), "TQ2_0"), "ne0 = 100 is not a multiple of the TQ2_0 block size 256"),
    (lambda w: w.add_tensor("a", (64,), "Q9_9"), "unknown GGML type"),
    (lambda w: w.add_tensor("a", (64,), 77), "type id 77 is unknown"),
    (lambda w: w.add_tensor("a", (64,), "F32", nbytes=10), "nbytes 10 != 256"),
    (lambda w: (w.add_tensor("a", (4,), "F32"), w.write_tensor("b", b"")), "'b' was not declared"),
    (lambda w: (w.add_tensor("a", (4,), "F32"), w.add_tensor("b", (4,), "F32"), w.write_tensor("b", b"")),
     "'b' is out of order: the next tensor to write is 'a'"),
    (lambda w: (w.add_tensor("a", (4,), "F32"), w.write_tensor("a", bytes(20))), "20 bytes given, its F32 data is 16"),
    (lambda w: (w.add_tensor("a", (4,), "F32"), w.write_tensor("a", bytes(16)), w.write_tensor("a", b"x")),
     "already complete"),
    (lambda w: (w.add_tensor("a", (4,), "F32"), w.write_tensor("a", "text")), "bytes-like or a numpy array"),
    (lambda w: (w.add_tensor("a", (4,), "F32"), w.write_header(), w.add("k", 1)), "header is already written"),
    (lambda w: (w.add_tensor("a", (4,), "F32"), w.write_header(), w.add_tensor("b", (4,), "F32")),
     "header is already written"),
    (lambda w: (w.add_tensor("a", (4,), "F32"), w.write_tensor("a", bytes(8)), w.close()),
     r"not fully written: a \(8/16 bytes\)"),
]


@pytest.mark.parametrize("bad,msg", BAD_TENSORS)
def test_bad_tensors_are_a_clear_error(tmp_path, bad, msg):
    w = _writer(tmp_path)
    with pytest.raises(gw.GGUFWriteError, match=msg):
        bad(w)
    w.abort()
    assert not (tmp_path / "x.gguf").exists()


def test_bad_writer_arguments(tmp_path):
    with pytest.raises(gw.GGUFWriteError, match="power of two"):
        gw.GGUFWriter(tmp_path / "x", alignment=24)
    with pytest.raises(gw.GGUFWriteError, match="version must be 2 or 3"):
        gw.GGUFWriter(tmp_path / "x", version=1)
    w = gw.GGUFWriter(tmp_path / "x", alignment=64)
    with pytest.raises(gw.GGUFWriteError, match="disagrees"):
        w.add("general.alignment", gw.u32(32))
    w.close()
    with pytest.raises(gw.GGUFWriteError, match="writer is closed"):
        w.write_tensor("a", b"")
