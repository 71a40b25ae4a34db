"""Hostile GGUF input: every malformed file raises GGUFError naming the field; nothing
else escapes, nothing allocates more than the file could justify, nothing hangs.

The files are built here byte by byte (the builder records where every field
sits) so each case patches exactly one field of an otherwise valid file.
Set GGUF_FUZZ_EXAMPLES to run the property test longer than the CI default.
"""
import json
import os
import struct
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from bitweb import formats
from bitweb.gguf import (MAX_HEADER_BYTES, MAX_HEADER_ITEMS, BytesSource, GGUFError, NeedMoreBytes, PrefixSource,
                         _jsonable, open_gguf, read_gguf, to_json_dict)

U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
PACK = {U8: "B", I8: "b", U16: "H", I16: "h", U32: "I", I32: "i", F32: "f", BOOL: "?", U64: "Q", I64: "q", F64: "d"}


def u32(v):
    return struct.pack("<I", v)


def u64(v):
    return struct.pack("<Q", v)


def gstr(s):
    b = s.encode() if isinstance(s, str) else s
    return u64(len(b)) + b


class Builder:
    """Appends GGUF pieces and records the byte offset of every field by name."""

    def __init__(self):
        self.data = bytearray()
        self.at = {}

    def put(self, name, b):
        self.at[name] = len(self.data)
        self.data += b

    def value(self, name, vt, v):
        if vt == STR:
            self.put(name, gstr(v))
        elif vt == ARR:                       # v = (item type, items)
            it, items = v
            self.put(name + ".array_type", u32(it))
            self.put(name + ".array_length", u64(len(items)))
            self.at[name] = len(self.data)
            for i, x in enumerate(items):
                self.value(f"{name}[{i}]", it, x)
        else:
            self.put(name, struct.pack("<" + PACK[vt], v))


KVS = [
    ("general.architecture", STR, "bitnet-b1.58"),
    ("general.alignment", U32, 32),
    ("a.u8", U8, 7), ("a.i8", I8, -7), ("a.i16", I16, -300), ("a.f32", F32, 0.5), ("a.bool", BOOL, True),
    ("a.u64", U64, 2**40), ("a.f64", F64, 1.25),
    ("a.arr_i32", ARR, (I32, [1, -2, 3])),
    ("a.arr_str", ARR, (STR, ["x", "", "yz"])),
    ("a.nested", ARR, (ARR, [(U8, [1, 2]), (U8, [3])])),
]
# (name, dims in GGUF order, type name); data follows in this order, each padded to 32
TENSORS = [("blk.0.attn_q.weight", [128, 2], "I2_S"), ("t.a", [32, 2], "Q8_0"), ("t.b", [4], "F32")]


def build(kvs=KVS, tensors=TENSORS, version=3, alignment=32):
    b = Builder()
    b.put("header.magic", b"GGUF")
    b.put("header.version", u32(version))
    b.put("header.tensor_count", u64(len(tensors)))
    b.put("header.kv_count", u64(len(kvs)))
    for key, vt, v in kvs:
        b.put(f"kv:{key}", gstr(key))
        b.put(f"kv:{key}.type", u32(vt))
        b.value(f"kv:{key}.value", vt, v)
    offset, blobs = 0, []
    for name, dims, tname in tensors:
        f = formats.by_name(tname)
        n = 1
        for d in dims:
            n *= d
        blob = bytes((i * 37 + 11) % 256 for i in range(f.nbytes(n)))
        b.put(f"ti:{name}", gstr(name))
        b.put(f"ti:{name}.n_dims", u32(len(dims)))
        b.put(f"ti:{name}.dims", b"".join(u64(d) for d in dims))
        b.put(f"ti:{name}.type", u32(f.type_id))
        b.put(f"ti:{name}.offset", u64(offset))
        blobs.append(blob + bytes(-len(blob) % alignment if name != tensors[-1][0] else 0))  # last: unpadded
        offset += len(blobs[-1])
    b.at["tensor_table_end"] = len(b.data)
    b.data += bytes(-len(b.data) % alignment)
    b.at["data"] = len(b.data)
    for blob in blobs:
        b.data += blob
    return b


BASE = build()


def parse(data):
    return read_gguf(BytesSource(bytes(data)))


def patched(name, new, b=BASE, delta=0):
    d = bytearray(b.data)
    at = b.at[name] + delta
    d[at:at + len(new)] = new
    return bytes(d)


def check_rejected(data, field, match):
    with pytest.raises(GGUFError, match=match) as e:
        parse(data)
    assert e.value.field == field, str(e.value)
    assert f"[field {field}" in str(e.value)
    if e.value.offset is not None:
        assert 0 <= e.value.offset <= len(data)
    return e.value


def test_base_file_is_valid_and_gguf_py_agrees(tmp_path):
    gf = parse(BASE.data)
    assert gf.metadata["a.nested"] == [[1, 2], [3]] and gf.metadata["a.arr_str"] == ["x", "", "yz"]
    assert [t.format.name for t in gf.tensors.values()] == ["I2_S", "Q8_0", "F32"]
    assert gf.data_offset == BASE.at["data"]
    assert len(BASE.data) == list(gf.tensors.values())[-1].abs_offset + 16        # last tensor unpadded
    from gguf import GGUFReader                # the builder writes what gguf-py reads (it has no I2_S)
    b = build(tensors=TENSORS[1:])
    p = tmp_path / "base.gguf"
    p.write_bytes(b.data)
    ref, gf = GGUFReader(str(p), "r"), parse(b.data)
    assert ref.data_offset == gf.data_offset
    assert [(t.name, int(t.data_offset), t.data.tobytes()) for t in ref.tensors] == [
        (t.name, t.abs_offset, gf.tensor_data(t.name)) for t in gf.tensors.values()]
    assert {k: f.contents() for k, f in ref.fields.items() if not k.startswith("GGUF.")} == {
        k: [x for r in v for x in r] if k == "a.nested" else v for k, v in gf.metadata.items()}


def section_fields(cut):
    """The fields an error may name when the file is cut to `cut` bytes, by the section the cut falls in."""
    if cut < 24:
        return {"header.magic", "header.version", "header.tensor_count", "header.kv_count"}
    if cut < BASE.at[f"ti:{TENSORS[0][0]}"]:     # metadata: a count can no longer fit, or a kv read ran out
        kv = {"kv.key"}
        for key, _, _ in KVS:
            kv |= {f"kv[{key!r}]" + s for s in ("", ".type", ".array_type", ".array_length")}
        return {"header.kv_count", "header.tensor_count"} | kv
    if cut < BASE.at["tensor_table_end"]:
        return {"header.tensor_count", "tensor_info.name", "tensor_info.n_dims", "tensor_info.dims",
                "tensor_info.type", "tensor_info.offset"}
    return {"tensor_info.offset"}               # padding or tensor data: a data range now runs past the end


def test_truncated_at_every_byte():
    for cut in range(len(BASE.data)):
        with pytest.raises(GGUFError) as e:
            parse(BASE.data[:cut])
        assert e.value.field in section_fields(cut), (cut, str(e.value))
        if cut >= BASE.at["tensor_table_end"]:
            assert "past end of file" in str(e.value), (cut, str(e.value))


def test_prefix_at_every_header_byte_asks_for_more():
    for cut in range(0, BASE.at["tensor_table_end"]):
        with pytest.raises(NeedMoreBytes) as e:
            read_gguf(PrefixSource(bytes(BASE.data[:cut]), len(BASE.data)))
        assert cut < e.value.needed <= BASE.at["tensor_table_end"]


T0, TA, TB = (f"ti:{t[0]}" for t in TENSORS)
TB_OFFSET = struct.unpack_from("<Q", BASE.data, BASE.at[f"{TB}.offset"])[0]
ONE_TENSOR = build(tensors=TENSORS[:1])
BIG = [2**63, 2**64 - 1, 2**32, len(BASE.data)]

CASES = [
    # header
    ("bad magic", patched("header.magic", b"GGUG"), "header.magic", "bad magic"),
    ("magic lower case", patched("header.magic", b"gguf"), "header.magic", "bad magic"),
    ("version 1", patched("header.version", u32(1)), "header.version", "version 1"),
    ("version 0", patched("header.version", u32(0)), "header.version", "unsupported GGUF version 0"),
    ("version 4", patched("header.version", u32(4)), "header.version", "unsupported GGUF version 4"),
    ("big endian", patched("header.version", struct.pack(">I", 3)), "header.version", "big-endian"),
    *[(f"kv_count {v}", patched("header.kv_count", u64(v)), "header.kv_count", "cannot fit") for v in BIG],
    *[(f"tensor_count {v}", patched("header.tensor_count", u64(v)), "header.tensor_count", "cannot fit")
      for v in BIG],
    # metadata
    *[(f"key length {v}", patched("kv:a.u8", u64(v)), "kv.key", "string length") for v in BIG],
    *[(f"string value length {v}", patched("kv:general.architecture.value", u64(v)),
       "kv['general.architecture']", "string length") for v in BIG],
    *[(f"array length {v}", patched("kv:a.arr_i32.value.array_length", u64(v)),
       "kv['a.arr_i32'].array_length", "needs at least") for v in BIG],
    ("string array length 2^62", patched("kv:a.arr_str.value.array_length", u64(2**62)),
     "kv['a.arr_str'].array_length", "array of 4611686018427387904 str"),
    ("inner string length", patched("kv:a.arr_str.value[1]", u64(2**63)), "kv['a.arr_str']", "string length"),
    ("nested inner length", patched("kv:a.nested.value[0].array_length", u64(2**63)),
     "kv['a.nested'].array_length", "needs at least"),
    *[(f"value type {v}", patched("kv:a.u8.type", u32(v)), "kv['a.u8'].type", "unknown value type")
      for v in (13, 255, 2**32 - 1)],
    ("array item type 13", patched("kv:a.arr_i32.value.array_type", u32(13)), "kv['a.arr_i32'].array_type",
     "unknown array item type 13"),
    ("nested item type", patched("kv:a.nested.value[0].array_type", u32(99)), "kv['a.nested'].array_type",
     "unknown array item type 99"),
    ("bool 2", patched("kv:a.bool.value", b"\x02"), "kv['a.bool']", "bool value 2"),
    ("duplicate key", patched("kv:a.i8", gstr("a.u8")), "kv.key", "duplicate metadata key 'a.u8'"),
    ("key not UTF-8", patched("kv:a.u8", b"\xff", delta=8), "kv.key", "not valid UTF-8"),
    # alignment
    *[(f"alignment {v}", patched("kv:general.alignment.value", u32(v)), "general.alignment",
       "not a nonzero power of two") for v in (0, 3, 48, 2**32 - 1)],
    ("alignment type i32", patched("kv:general.alignment.type", u32(I32)), "general.alignment", "must be u32"),
    ("alignment type f32", patched("kv:general.alignment.type", u32(F32)), "general.alignment", "must be u32"),
    ("alignment 2^31 misaligns", patched("kv:general.alignment.value", u32(2**31)), "tensor_info.offset",
     "not a multiple of the alignment 2147483648"),
    ("alignment 2^31: data past end", patched("kv:general.alignment.value", u32(2**31), ONE_TENSOR),
     "tensor_info.offset", "data range 2147483648\\.\\.\\d+ past end of file"),
    ("alignment 64 misaligns", patched("kv:general.alignment.value", u32(64)), "tensor_info.offset",
     "not a multiple of the alignment 64"),
    # tensor table
    *[(f"n_dims {v}", patched(f"{T0}.n_dims", u32(v)), "tensor_info.n_dims", f"n_dims {v} ")
      for v in (0, 5, 2**32 - 1)],
    ("dim 0", patched(f"{TA}.dims", u64(0), delta=8), "tensor_info.dims", "dim 1 is 0 "),
    ("ne0 0", patched(f"{TA}.dims", u64(0)), "tensor_info.dims", "dim 0 is 0 "),
    *[(f"dim {v}", patched(f"{T0}.dims", u64(v), delta=8), "tensor_info.dims", f"dim 1 is {v} ")
      for v in (2**63, 2**64 - 1)],
    ("dims overflow", patched(f"{T0}.dims", u64(2**62), delta=8), "tensor_info.dims", "overflows int64"),
    ("ne0 not a block multiple", patched(f"{TA}.dims", u64(33)), "tensor_info.dims",
     "ne0 = 33 is not a multiple of the Q8_0 block size 32"),
    ("I2_S ne0 not 128-multiple", patched(f"{T0}.dims", u64(64)), "tensor_info.dims", "I2_S block size 128"),
    *[(f"type id {v}", patched(f"{TB}.type", u32(v)), "tensor_info.type", f"unknown GGML type id {v} ")
      for v in (4, 16, 23, 37, 40, 99, 2**32 - 1)],
    ("offset misaligned", patched(f"{TB}.offset", u64(TB_OFFSET + 1)), "tensor_info.offset",
     "not a multiple of the alignment 32"),
    *[(f"offset {v}", patched(f"{TB}.offset", u64(v)), "tensor_info.offset", "past end of file")
      for v in (2**64 - 32, 2**63, len(BASE.data) // 32 * 32)],
    ("data range just past end", BASE.data[:-1], "tensor_info.offset", "past end of file"),
    ("bigger dims push data past end", patched(f"{TB}.dims", u64(1000)), "tensor_info.offset",
     "data range \\d+\\.\\.\\d+ past end of file"),
    ("duplicate tensor name", patched(TB, gstr("t.a")), "tensor_info.name", "duplicate tensor name 't.a'"),
    ("tensor name not UTF-8", patched(TB, b"\xc3\x28", delta=8), "tensor_info.name", "not valid UTF-8"),
    # whole-file oddities
    ("empty file", b"", "header.magic", "unexpected end of file"),
    ("3 bytes", b"GGU", "header.magic", "unexpected end of file"),
    ("header only", BASE.data[:24], "header.kv_count", "cannot fit"),
]


@pytest.mark.parametrize("data,field,match", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_malformed_file_rejected(data, field, match):
    check_rejected(data, field, match)


def test_message_names_tensor_range_and_offset():
    e = check_rejected(patched(f"{TB}.offset", u64(2**64 - 32)), "tensor_info.offset", "past end")
    assert e.offset == BASE.at[f"{TB}.offset"]
    assert str(e).startswith("tensor 't.b': data range ")
    assert f"(size {len(BASE.data)}) [field tensor_info.offset at byte {e.offset}]" in str(e)


def nested(depth):
    """A file whose one key holds `depth` nested single-element arrays around a u8."""
    body = (u32(ARR) + u64(1)) * (depth - 1) + u32(U8) + u64(1) + b"\x05"
    return b"GGUF" + u32(3) + u64(0) + u64(1) + gstr("k") + u32(ARR) + body


def test_nesting_depth_is_bounded():
    assert parse(nested(8)).metadata["k"] == [[[[[[[[5]]]]]]]]
    check_rejected(nested(9), "kv['k']", "nested more than 8 deep")
    check_rejected(nested(100_000), "kv['k']", "nested more than 8 deep")     # no RecursionError


def test_huge_counts_allocate_nothing():
    cases = [patched("header.kv_count", u64(2**63)), patched("kv:a.arr_i32.value.array_length", u64(2**63)),
             patched("kv:a.u8", u64(2**64 - 1)), patched("header.tensor_count", u64(2**63))]
    tracemalloc.start()
    try:
        for data in cases:
            with pytest.raises(GGUFError):
                parse(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 256 * 1024, peak


def test_invalid_utf8_string_value_kept_as_bytes_and_json_safe():
    gf = parse(build(kvs=[("general.architecture", STR, b"bitnet\xff\xfe-b1.58")] + KVS[1:]).data)
    assert gf.metadata["general.architecture"] == b"bitnet\xff\xfe-b1.58"
    js = json.loads(json.dumps(to_json_dict(gf), default=_jsonable))
    assert js["metadata"]["general.architecture"] == "bitnet\\xff\\xfe-b1.58"


# ------------------------------------------------------------ property test

FIELD_OFFSETS = sorted(v for v in set(BASE.at.values()) if v >= 8)    # magic/version are covered above
INTERESTING = [0, 1, 2, 3, 4, 5, 9, 12, 13, 31, 32, 33, 36, 41, 63, 64, 128, 255, 2**31, 2**32 - 1, 2**32,
               2**62, 2**63 - 1, 2**63, 2**64 - 1, len(BASE.data), len(BASE.data) - 32]


@st.composite
def mutated(draw):
    data = bytearray(BASE.data)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["byte", "u32", "u64", "truncate", "delete", "insert"]))
        if not data:
            break
        lo = min(8, len(data) - 1)                  # header.magic/version damage is covered by CASES
        pos = draw(st.one_of(st.sampled_from(FIELD_OFFSETS), st.integers(lo, len(data) - 1))) % len(data)
        if kind == "byte":
            data[pos] = draw(st.integers(0, 255))
        elif kind in ("u32", "u64"):
            v = draw(st.one_of(st.sampled_from(INTERESTING), st.integers(0, 2**64 - 1)))
            data[pos:pos + (4 if kind == "u32" else 8)] = struct.pack("<" + ("I" if kind == "u32" else "Q"),
                                                                       v % (2**32 if kind == "u32" else 2**64))
        elif kind == "truncate":
            del data[pos:]
        elif kind == "delete":
            del data[pos:pos + draw(st.integers(1, 16))]
        else:
            data[pos:pos] = draw(st.binary(min_size=1, max_size=16))
    return bytes(data)


@settings(max_examples=int(os.environ.get("GGUF_FUZZ_EXAMPLES", 300)), deadline=None, derandomize=True,
          database=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_fuzz_parses_or_raises_gguf_error(data):
    try:
        gf = parse(data)
    except GGUFError as e:
        assert e.field and "[field " in str(e)
        return
    # parsed: the result is self-consistent and every tensor lies inside the file
    assert gf.version in (2, 3) and gf.alignment > 0 and gf.alignment & (gf.alignment - 1) == 0
    assert gf.data_offset % gf.alignment == 0
    for t in gf.tensors.values():
        assert 1 <= len(t.shape) <= 4 and all(d >= 1 for d in t.shape)
        n = 1
        for d in t.shape:
            n *= d
        assert n == t.n_elements and t.nbytes == formats.TYPES[t.type_id].nbytes(n)
        assert t.offset % gf.alignment == 0 and t.abs_offset == gf.data_offset + t.offset
        assert gf.data_offset <= t.abs_offset and t.abs_offset + t.nbytes <= len(data)
        assert len(gf.tensor_data(t.name)) == t.nbytes
    json.dumps(to_json_dict(gf), default=_jsonable)


# ------------------------------------------------------------ header bounds
# A valid file can still be hostile: a 192 MiB metadata string, a 20-million-item array. The header
# may take MAX_HEADER_BYTES (64 MiB) and hold MAX_HEADER_ITEMS (2^22) array items; a file that
# claims more fails at the length / count field, before those bytes are read or anything is
# allocated for them. The files here are sparse: a real header, then a claimed size.

MiB = 1 << 20


class SparseSource:
    """A file of `size` bytes whose first bytes are `head` and the rest zeros (a valid string of
    NULs, valid array items), built on demand; it records the furthest byte read."""

    def __init__(self, head, size):
        self.head, self.size, self.read_to = bytes(head), size, 0

    def read(self, offset, n):
        assert 0 <= offset and offset + n <= self.size
        self.read_to = max(self.read_to, offset + n)
        part = self.head[offset:offset + n]
        return part + bytes(n - len(part))


def head_with(key_value: bytes) -> bytes:
    """GGUF v3, no tensors, general.architecture and one more kv (its key, type and value start)."""
    return (b"GGUF" + u32(3) + u64(0) + u64(2) + gstr("general.architecture") + u32(STR) + gstr("bitnet-b1.58")
            + key_value)


def sparse(key_value: bytes, body: int):
    head = head_with(key_value)
    return SparseSource(head, len(head) + body)


def check_bounded(src, field, match):
    tracemalloc.start()
    try:
        with pytest.raises(GGUFError, match=match) as e:
            read_gguf(src)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert e.value.field == field, str(e.value)
    assert src.read_to <= 2 * MiB, src.read_to                  # failed at the field, read nothing big
    assert peak < 4 * MiB, peak
    return e.value


def test_192_mib_metadata_string_is_refused_at_its_length():
    n = 192 * MiB
    e = check_bounded(sparse(gstr("x.big") + u32(STR) + u64(n), n), "kv['x.big']", f"string length {n} ")
    assert "64 MiB" in str(e) and str(MAX_HEADER_BYTES) in str(e)


def test_strings_arrays_and_counts_over_the_bound():
    over = MAX_HEADER_BYTES                                  # bytes that cannot fit after what precedes
    check_bounded(sparse(gstr("x.arr") + u32(ARR) + u32(U32) + u64(over // 4), over), "kv['x.arr'].array_length",
                  r"array of \d+ u32 .* past 64 MiB")
    check_bounded(sparse(gstr("x.strs") + u32(ARR) + u32(STR) + u64(over // 8), over), "kv['x.strs'].array_length",
                  r"array of \d+ str .* past 64 MiB")
    check_bounded(sparse(u64(over), over), "kv.key", "string length .* past 64 MiB")          # a key
    inner = gstr("x.n") + u32(ARR) + u32(ARR) + u64(1) + u32(STR) + u64(1) + u64(over)       # [["<64 MiB>"]]
    check_bounded(sparse(inner, over), "kv['x.n']", "string length .* past 64 MiB")
    # the counts in the first 24 bytes, against a file big enough to hold them
    for field, at, count in (("header.kv_count", 16, 6 * MiB), ("header.tensor_count", 8, 3 * MiB)):
        head = bytearray(b"GGUF" + u32(3) + u64(0) + u64(0))
        head[at:at + 8] = u64(count)                         # records of >= 13 / 32 bytes: 78 / 96 MiB
        check_bounded(SparseSource(head, 2 * MAX_HEADER_BYTES), field, "past 64 MiB")


def test_array_items_are_bounded_in_all():
    n = MAX_HEADER_ITEMS + 1                                 # 4 MiB of u8: under the byte bound
    e = check_bounded(sparse(gstr("x.u8") + u32(ARR) + u32(U8) + u64(n), n), "kv['x.u8'].array_length",
                      f"over {MAX_HEADER_ITEMS} array items")
    assert str(n) in str(e)
    half = MAX_HEADER_ITEMS // 2 + 1                         # two arrays: the second one crosses
    two = gstr("x.a") + u32(ARR) + u32(U8) + u64(half) + bytes(half)
    head = (b"GGUF" + u32(3) + u64(0) + u64(3) + gstr("general.architecture") + u32(STR) + gstr("bitnet-b1.58")
            + two + gstr("x.b") + u32(ARR) + u32(U8) + u64(half))
    with pytest.raises(GGUFError, match=f"brings the header's array items to {2 * half}") as e:
        read_gguf(SparseSource(head, len(head) + half))
    assert e.value.field == "kv['x.b'].array_length"


def test_bound_is_exact(monkeypatch):
    """A header ending exactly at the bound parses; one byte more is refused (bound made small)."""
    import bitweb.gguf as g
    monkeypatch.setattr(g, "MAX_HEADER_BYTES", 4096)
    base = head_with(gstr("x.s") + u32(STR))
    fits = base + gstr("a" * (4096 - len(base) - 8))
    assert len(fits) == 4096
    assert read_gguf(BytesSource(fits)).metadata["x.s"] == "a" * (4096 - len(base) - 8)
    over = base + gstr("a" * (4096 - len(base) - 7))
    with pytest.raises(GGUFError, match="would end at byte 4097"):
        read_gguf(BytesSource(over))


def test_bound_holds_for_a_real_file_on_disk(tmp_path):
    """Natively (the CLI's FileSource): a sparse 192 MiB string file, `bitweb inspect` says why."""
    import subprocess
    import sys
    head = head_with(gstr("x.big") + u32(STR) + u64(192 * MiB))
    path = tmp_path / "big-string.gguf"
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(len(head) + 192 * MiB)                   # sparse: no disk used
    with pytest.raises(GGUFError, match="64 MiB"):
        open_gguf(path)
    p = subprocess.run([sys.executable, "-m", "bitweb", "inspect", str(path)], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode != 0 and "64 MiB" in p.stderr and "kv['x.big']" in p.stderr, p.stderr[-2000:]


def test_browser_header_reader_stops_at_the_bound():
    """webapp.parse_header (growing prefixes of a Blob): a hostile file is refused after the first
    256 KiB prefix; a header that needs more than 64 MiB is never read past 64 MiB."""
    from bitweb import webapp
    from tests.test_webapp import drive

    class LazyBlob:                                       # a Blob of a SparseSource
        def __init__(self, src):
            self.src, self.size, self.reads = src, src.size, []

        def slice(self, a, b):
            blob = self

            class Part:
                async def arrayBuffer(self):
                    blob.reads.append(b - a)

                    class AB:
                        def to_bytes(self):
                            return blob.src.read(a, b - a)
                    return AB()
            return Part()

    n = 192 * MiB
    blob = LazyBlob(sparse(gstr("x.big") + u32(STR) + u64(n), n))
    with pytest.raises(GGUFError, match="64 MiB"):
        drive(webapp.parse_header(blob))
    assert blob.reads == [webapp.HEADER_FIRST]
    # 70000 strings of 1000 bytes: each string fits, the 67th MiB does not: prefixes up to 64 MiB
    count = 70000
    blob = LazyBlob(sparse(gstr("x.strs") + u32(ARR) + u32(STR) + u64(count) + (u64(1000) + bytes(1000)) * count,
                           0))
    with pytest.raises(GGUFError, match="past 64 MiB") as e:
        drive(webapp.parse_header(blob))
    assert e.value.field == "kv['x.strs']"
    assert max(blob.reads) <= MAX_HEADER_BYTES and blob.reads[-1] == MAX_HEADER_BYTES, blob.reads
